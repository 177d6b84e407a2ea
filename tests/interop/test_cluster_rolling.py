"""A rolling restart of a 3-node cluster under load loses no QoS 1/2 message (issue 13).

Runs `scripts/cluster/soak.py --rolling` for one minute: three `hayate serve` nodes with data
directories, paho clients (clean session off) publishing and subscribing at QoS 1 and 2 and
moving between nodes, each node in turn stopped with SIGTERM and restarted. The script exits
non-zero when an acknowledged message was lost or reordered, or a QoS 2 message duplicated;
this test also checks the counts it reports and that the restarts happened.
"""

import json
import subprocess
import sys

from conftest import REPO_ROOT, broker_binary


def test_a_rolling_restart_under_load_loses_no_qos1_or_qos2_message(tmp_path):
    report = tmp_path / "rolling.json"
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts/cluster/soak.py"), "--rolling",
         "--minutes", "1", "--kill-every", "12", "15", "--down", "1", "2", "--drain", "25",
         "--seed", "7", "--hayate", str(broker_binary()), "--workdir", str(tmp_path / "nodes"),
         "--json", str(report)],
        capture_output=True, text=True, timeout=110,
    )
    output = run.stdout[-3000:] + run.stderr[-3000:]
    assert report.exists(), output
    result = json.loads(report.read_text())
    assert len(result["kills"]) >= 3, output
    assert all(kill["how"] == "SIGTERM" for kill in result["kills"])
    for qos in ("qos1", "qos2"):
        totals = result["totals"][qos]
        assert totals["acknowledged"] > 0, output
        assert totals["lost"] == 0, f"{qos}: {totals}\n{output}"
        assert totals["reordered"] == 0, f"{qos}: {totals}\n{output}"
    assert result["totals"]["qos2"]["duplicates"] == 0, output
    assert run.returncode == 0, output
