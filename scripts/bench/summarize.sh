#!/usr/bin/env bash
# Markdown tables from the results of scripts/bench/run.sh:
#   scripts/bench/summarize.sh RESULTS_DIR > summary.md
# One table per comparison (medians over the runs, ratio of each target to the first, every
# run's receive rate), plus the load-generator comparison (paho vs hayate bench).
set -euo pipefail
dir="${1:?usage: summarize.sh RESULTS_DIR}"
python3 - "$dir" <<'EOF'
import glob, json, os, re, statistics, sys

d = sys.argv[1]

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def fmt(v, unit=""):
    if v is None:
        return "–"
    if unit == "bytes":
        for u, s in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if abs(v) >= s:
                return f"{v / s:.1f} {u}"
        return f"{v:.0f} B"
    if unit == "us":
        return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if float(v).is_integer():
        return str(int(v))
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"

def lat(r, k):
    return (r.get("latency") or {}).get(k)

METRICS = [
    ("connect rate (conn/s)", "", lambda r: r["connections"]["connect_rate_per_s"]),
    ("connections established", "", lambda r: r["connections"]["established"]),
    ("send rate (msg/s)", "", lambda r: (r.get("messages") or {}).get("send_rate_per_s")),
    ("receive rate (msg/s)", "", lambda r: (r.get("messages") or {}).get("receive_rate_per_s")),
    ("success %", "", lambda r: (r.get("messages") or {}).get("success_percent")),
    ("lost", "", lambda r: (r.get("messages") or {}).get("lost")),
    ("duplicates", "", lambda r: (r.get("messages") or {}).get("duplicates")),
    ("reordered", "", lambda r: (r.get("messages") or {}).get("reordered")),
    ("latency p50", "us", lambda r: lat(r, "p50_us")),
    ("latency p99", "us", lambda r: lat(r, "p99_us")),
    ("latency p99.9", "us", lambda r: lat(r, "p999_us")),
    ("latency max", "us", lambda r: lat(r, "max_us")),
    ("broker CPU-s per 1M msgs", "", lambda r: (r.get("broker") or {}).get("cpu_seconds_per_million_messages")),
    ("broker CPU % (avg)", "", lambda r: (r.get("broker") or {}).get("cpu_percent_avg")),
    ("broker peak RSS", "bytes", lambda r: (r.get("broker") or {}).get("rss_peak_bytes")),
    ("broker RSS per connection", "bytes", lambda r: (r.get("broker") or {}).get("rss_per_connection_bytes")),
    ("bench CPU % (avg, of 1 thread = 100)", "", lambda r: r["bench"]["cpu_percent_avg"]),
    ("bench CPU-s per 1M msgs", "", lambda r: (r["bench"]["cpu_seconds"] / r["messages"]["received"] * 1e6)
        if (r.get("messages") or {}).get("received") else None),
    ("machine CPU busy %", "", lambda r: r["bench"]["machine_cpu_busy_percent"]),
]

for path in sorted(glob.glob(os.path.join(d, "*.json"))):
    try:
        c = json.load(open(path))
    except Exception:
        continue
    if c.get("kind") != "compare":
        continue
    name = os.path.basename(path)[:-5]
    targets = c["targets"]
    runs = c["runs"]
    first = runs[0]
    print(f"### {name}\n")
    cmd = [a for a in c["command_line"]]
    print("`" + " ".join(cmd[cmd.index("compare") + 1:] if "compare" in cmd else cmd) + "`\n")
    print("| metric | " + " | ".join(f"{t} (median of {sum(1 for r in runs if r['target']['name'] == t)})" for t in targets)
          + "".join(f" | {t} ÷ {targets[0]}" for t in targets[1:]) + " |")
    print("|---" * (1 + 2 * len(targets) - 1) + "|")
    for label, unit, get in METRICS:
        meds = []
        for t in targets:
            vals = []
            for r in runs:
                if r["target"]["name"] != t:
                    continue
                try:
                    vals.append(get(r))
                except (KeyError, TypeError, ZeroDivisionError):
                    vals.append(None)
            meds.append(med(vals))
        if all(m is None for m in meds):
            continue
        ratios = []
        for m in meds[1:]:
            ratios.append(f"×{m / meds[0]:.2f}" if m is not None and meds[0] else "–")
        print(f"| {label} | " + " | ".join(fmt(m, unit) for m in meds) + "".join(f" | {x}" for x in ratios) + " |")
    # every run's receive rate / key figure, and warnings
    per = []
    for r in runs:
        m = r.get("messages") or {}
        v = m.get("receive_rate_per_s")
        txt = f"{r['target']['name']} {fmt(v)} msg/s" if v is not None else \
            f"{r['target']['name']} {fmt(r['connections']['connect_rate_per_s'])} conn/s"
        if m and m.get("success_percent", 100) < 100:
            txt += f" ({m['success_percent']:.1f}%)"
        if r["bench"]["saturated"]:
            txt += " [bench saturated]"
        per.append(txt)
    print("\nRuns in order: " + "; ".join(per) + "\n")
    warns = sorted({w for r in runs for w in r.get("warnings", [])})
    if warns:
        print("Warnings: " + " / ".join(warns) + "\n")
    for r in runs:
        fails = r["connections"].get("failures_by_reason") or {}
        drops = r["connections"].get("drops_by_reason") or {}
        if fails or drops:
            print(f"Connection failures ({r['target']['name']}): {fails} drops: {drops}\n")

lg = os.path.join(d, "loadgen-paho-vs-hayate-bench")
if os.path.isdir(lg):
    rows = {"paho": [], "hayate-bench": []}
    for f in sorted(glob.glob(os.path.join(lg, "*.txt"))):
        tool = "paho" if os.path.basename(f).startswith("paho") else "hayate-bench"
        text = open(f).read()
        kv = dict(re.findall(r"^(client_cpu_s|wall_s|broker_cpu_s) ([\d.]+)", text, re.M))
        if tool == "paho":
            m = re.search(r"received (\d+) in [\d.]+ s: (\d+) msg/s, success ([\d.]+)%", text)
            if not m:
                continue
            recv, rate, ok = int(m.group(1)), float(m.group(2)), float(m.group(3))
        else:
            j = json.load(open(f[:-4] + ".json"))
            recv = j["messages"]["received"]
            rate = j["messages"]["receive_rate_per_s"]
            ok = j["messages"]["success_percent"]
        rows[tool].append(dict(rate=rate, ok=ok, recv=recv,
                               cpu_us=float(kv["client_cpu_s"]) / max(recv, 1) * 1e6,
                               bcpu=float(kv["broker_cpu_s"]) / max(recv, 1) * 1e6))
    print("### loadgen-paho-vs-hayate-bench\n")
    print("| load generator | runs | receive rate (msg/s, median) | success % | client CPU µs/msg | broker CPU-s per 1M | every run (msg/s) |")
    print("|---|---|---|---|---|---|---|")
    for tool, rs in rows.items():
        if not rs:
            continue
        print(f"| {tool} | {len(rs)} | {fmt(med([r['rate'] for r in rs]))} | {fmt(med([r['ok'] for r in rs]))} | "
              f"{fmt(med([r['cpu_us'] for r in rs]))} | {fmt(med([r['bcpu'] for r in rs]))} | "
              + ", ".join(fmt(r['rate']) for r in rs) + " |")
    print()
EOF
