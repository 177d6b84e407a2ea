#!/usr/bin/env bash
# Cluster measurements of issue 13 on this machine (NOT run in CI; about 25 minutes with the
# defaults). Every run starts fresh `hayate serve` processes on loopback (warnings-only
# logging, `--threads $THREADS`, default 1 per node, the same for the single node and for
# every cluster node), runs one `hayate bench` (or paho-fanin) load, and appends one JSON
# line to OUT/runs.jsonl; `summary` prints the medians per (experiment, cell, configuration)
# to OUT/summary.md. Configurations alternate run by run (A B B A A B ...) so drift hits both.
#
#   scripts/bench/cluster.sh [-o DIR] [-r RUNS] [EXPERIMENT ...]
#   scripts/bench/cluster.sh -o DIR summary
#
# EXPERIMENT (default: forward writeup nodes paho):
#   forward  forwarding cost: fan-in (--shape open, 1,000 publishers, one `hb/#` subscriber,
#            20,000 msg/s for $FWD_SECS s), QoS 0 and QoS 1; publishers on n1 and the
#            subscriber on n2 of a 2-node cluster, against both on one plain node. Per node:
#            CPU-seconds (utime+stime from /proc/PID/stat, the whole bench run, connections
#            included) per million messages received; on n1, `perf stat` of the write
#            syscalls (writev, write, sendmsg, sendto) over a 4 s window in the middle of the
#            run, divided into the messages offered in that window: messages per write of the
#            sending node (with QoS 0 its only TCP writes are the link's).
#   writeup  the four-node write-up (S4) at this machine's scale: fan-out, 9,000 subscribers on
#            their own topics spread round robin over 3 nodes (--targets), 4 publishers spread
#            the same way, 0.1 msg/s per subscriber (900 msg/s) and 5x that (4,500 msg/s), 1 KB,
#            QoS 1; against the same load on one plain node. Latency p50/p99 (from the intended
#            send time, warm-up excluded) and loss.
#   nodes    throughput vs nodes: fan-out, 300 subscribers on own topics, 25 publishers (25 is
#            1 mod 2 and 1 mod 3, so 1/2 resp. 2/3 of the messages cross nodes, as with a random
#            placement), 20,000 msg/s, 24 B, QoS 0, clients round robin over 1, 2 and 3 nodes:
#            CPU per message per node and in total.
#   paho     the forwarding headline with a client we did not write: tools/paho-fanin, 100
#            publishers, QoS 1 publishers and subscriber, 200,000 messages, closed loop; broker
#            `tcp://n1`, subscriber `-sub-broker tcp://n2`, against one plain node.
#
# Environment: HAYATE (binary, default /work/target-clbench/release/hayate or
# target/release/hayate), PAHO (paho-fanin binary, built from tools/paho-fanin if missing),
# THREADS (worker threads per node, default 1), FWD_SECS (20), WRITEUP_SECS (40).
# Run it under scripts/bench/freeze-while.sh when other work shares the machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$ROOT/docs/bench/raw/cluster-$(date +%F)"
RUNS=3
while getopts "o:r:h" opt; do
    case $opt in
        o) OUT="$OPTARG" ;;
        r) RUNS="$OPTARG" ;;
        *) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
HAYATE="${HAYATE:-}"
if [ -z "$HAYATE" ]; then
    for b in /work/target-clbench/release/hayate "$ROOT/target/release/hayate"; do
        [ -x "$b" ] && { HAYATE="$b"; break; }
    done
fi
PAHO="${PAHO:-/tmp/paho-fanin}"
THREADS="${THREADS:-1}"
FWD_SECS="${FWD_SECS:-20}"
WRITEUP_SECS="${WRITEUP_SECS:-40}"
SCRATCH="$(mktemp -d /tmp/cluster-bench.XXXXXX)"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
DIRTY="$(git -C "$ROOT" status --porcelain -- crates Cargo.lock | grep -q . && echo true || echo false)"
PIDS=()
BASE_MQTT=31880
BASE_CLUSTER=31900

cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
    PIDS=()
}
trap 'cleanup' EXIT

cpu_ticks() { awk '{ s = $0; sub(/.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }

wait_port() {
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "port $1 never opened" >&2
    return 1
}

# start_nodes N: N=1 is a plain node (no cluster); otherwise n1..nN joining n1. Sets PIDS.
start_nodes() {
    local n=$1 i args
    cleanup
    for i in $(seq 1 "$n"); do
        args=(serve --log-level warn --threads "$THREADS" -l "127.0.0.1:$((BASE_MQTT + i))")
        if [ "$n" -gt 1 ]; then
            args+=(--node-name "n$i" --cluster-listen "127.0.0.1:$((BASE_CLUSTER + i))")
            [ "$i" -gt 1 ] && args+=(--join "127.0.0.1:$((BASE_CLUSTER + 1))")
        fi
        "$HAYATE" "${args[@]}" >>"$SCRATCH/n$i.log" 2>&1 &
        PIDS+=($!)
    done
    for i in $(seq 1 "$n"); do wait_port $((BASE_MQTT + i)); done
    if [ "$n" -gt 1 ]; then
        # every node sees every other with its link up
        for _ in $(seq 100); do
            local ok=1
            for i in $(seq 1 "$n"); do
                local up
                up=$("$HAYATE" cluster status --json --mqtt "127.0.0.1:$((BASE_MQTT + i))" 2>/dev/null |
                    python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for v in d["nodes"].values() if v["live"] and v["link_up"]))' 2>/dev/null || echo 0)
                [ "$up" -eq $((n - 1)) ] || ok=0
            done
            [ "$ok" = 1 ] && break
            sleep 0.2
        done
        [ "$ok" = 1 ] || { echo "cluster of $n did not converge" >&2; return 1; }
    fi
}

addr() { echo "127.0.0.1:$((BASE_MQTT + $1))"; }
targets() { local i out=""; for i in $(seq 1 "$1"); do out+="${out:+,}$(addr "$i")"; done; echo "$out"; }

# run_one EXP CELL CONFIG NODES ROUND PERF_SECS_AT -- COMMAND...: runs the command with the
# nodes' CPU read before and after, optional perf stat on n1, and appends a line to runs.jsonl.
run_one() {
    local exp=$1 cell=$2 config=$3 nodes=$4 round=$5 perf_at=$6
    shift 7
    local json="$SCRATCH/$exp-$cell-$config-$round.json" out="$SCRATCH/$exp-$cell-$config-$round.out"
    local before=() after=() i perf_file="$SCRATCH/perf-$exp-$cell-$config-$round.txt"
    for i in $(seq 1 "$nodes"); do before+=("$(cpu_ticks "${PIDS[$((i - 1))]}")"); done
    local t0 t1
    t0=$(date +%s.%N)
    "${@//@JSON@/$json}" >"$out" 2>&1 &
    local bench=$!
    if [ "$perf_at" != "-" ]; then
        sleep "$perf_at"
        perf stat -x, -e 'syscalls:sys_enter_writev,syscalls:sys_enter_write,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendto' \
            -p "${PIDS[0]}" -o "$perf_file" -- sleep 4 || true
        if [ "${STRACE_ATTRIBUTION:-}" = "$config-$round" ]; then
            # Which socket the writes go to, and their bytes, for 1 s (strace slows the node)
            timeout -s INT 1 strace -f -yy -e trace=writev,write,sendmsg,sendto \
                -p "${PIDS[0]}" -o "$SCRATCH/strace-$exp-$cell-$config-$round.txt" 2>/dev/null || true
        fi
    fi
    wait "$bench" || echo "run failed: $*" >&2
    t1=$(date +%s.%N)
    for i in $(seq 1 "$nodes"); do after+=("$(cpu_ticks "${PIDS[$((i - 1))]}")"); done
    local status_json="$SCRATCH/status-$exp-$cell-$config-$round.json"
    : >"$status_json"
    if [ "$nodes" -gt 1 ]; then
        for i in $(seq 1 "$nodes"); do
            "$HAYATE" cluster status --json --mqtt "$(addr "$i")" 2>/dev/null | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' >>"$status_json" || true
        done
    fi
    python3 - "$exp" "$cell" "$config" "$nodes" "$round" "$json" "$out" "$perf_file" "$status_json" \
        "${before[*]}" "${after[*]}" "$t0" "$t1" "$COMMIT" "$DIRTY" "$THREADS" "$*" <<'EOF' >>"$OUT/runs.jsonl"
import json, os, re, sys
(exp, cell, config, nodes, rnd, jpath, opath, ppath, spath, before, after, t0, t1, commit, dirty,
 threads, cmd) = sys.argv[1:]
nodes = int(nodes)
cpu = [(int(b) - int(a)) / 100 for a, b in zip(before.split(), after.split())]
r = {"experiment": exp, "cell": cell, "config": config, "nodes": nodes, "round": int(rnd),
     "commit": commit, "dirty": dirty == "true", "threads_per_node": int(threads),
     "wall_s": round(float(t1) - float(t0), 2), "node_cpu_s": cpu,
     "command": cmd.replace(os.path.dirname(jpath) + "/", "")}
text = open(opath, errors="replace").read()
if os.path.exists(jpath) and os.path.getsize(jpath):
    b = json.load(open(jpath))
    m, lat = b["messages"], b.get("latency") or {}
    r.update(sent=m["sent"], received=m["received"], lost=m["lost"], duplicates=m["duplicates"],
             reordered=m["reordered"], expected=m["expected"],
             receive_rate=m["receive_rate_per_s"], p50_ms=lat.get("p50_us", 0) / 1e3,
             p99_ms=lat.get("p99_us", 0) / 1e3, max_ms=lat.get("max_us", 0) / 1e3,
             cross_fraction=b["config"].get("cross_target_fraction"),
             rate=b["config"].get("rate_per_s"), bench_saturated=b["bench"]["saturated"],
             machine=f'{b["machine"]["cores"]} cores, {b["machine"]["kernel"]}')
else:  # paho-fanin's text
    g = lambda pat: (lambda mm: float(mm.group(1)) if mm else None)(re.search(pat, text))
    r.update(sent=g(r"sent (\d+)"), received=g(r"received (\d+)"),
             receive_rate=g(r"received \d+ in [0-9.]+ s: (\d+) msg/s"),
             success_percent=g(r"success ([0-9.]+)%"), p50_ms=g(r"p50 ([0-9.]+)"),
             p99_ms=g(r"p99 ([0-9.]+)"))
    r["lost"] = (r["sent"] or 0) - (r["received"] or 0)
    r["paho_broker_cpu_s"] = [float(x) for x in re.findall(r"broker \d+ cpu ([0-9.]+) s", text)] or \
        [float(x) for x in re.findall(r"broker cpu ([0-9.]+) s", text)]
if r.get("received"):
    r["cpu_s_per_1M"] = [round(c / r["received"] * 1e6, 2) for c in cpu]
    r["cpu_s_per_1M_total"] = round(sum(cpu) / r["received"] * 1e6, 2)
    if r.get("paho_broker_cpu_s"):
        r["paho_cpu_s_per_1M"] = [round(c / r["received"] * 1e6, 2) for c in r["paho_broker_cpu_s"]]
if os.path.exists(ppath):
    counts = {}
    for line in open(ppath):
        f = line.strip().split(",")
        if len(f) > 3 and f[2].startswith("syscalls:"):
            counts[f[2].split(":")[1].replace("sys_enter_", "")] = int(f[0]) if f[0].isdigit() else None
    r["n1_writes_4s"] = counts
    if r.get("rate") and counts:
        w = sum(v for v in counts.values() if v)
        r["n1_messages_per_write"] = round(r["rate"] * 4 / w, 2) if w else None
st = ppath.replace("/perf-", "/strace-")
if os.path.exists(st):
    link_port = ":%d->" % (31900 + 1)
    per = {}
    for line in open(st):
        mm = re.search(r"(writev|write|sendmsg|sendto)\(\d+<(\w+):\[([^\]]*)\]>.*= (\d+)$", line.strip())
        if not mm:
            continue
        kind = "link" if link_port in mm.group(3) else mm.group(2).lower()
        c = per.setdefault(kind, {"writes": 0, "bytes": 0})
        c["writes"] += 1
        c["bytes"] += int(mm.group(4))
    # a forwarded PUBLISH of the fan-in: 2 + 2 + 9 (topic hb/NNNNNN) + 3 (v5 subscription
    # identifier) + 24 (payload) bytes, + 2 (packet id) at QoS 1
    size = 40 if cell == "qos0" else 42
    if "link" in per:
        per["link"]["messages_per_write"] = round(per["link"]["bytes"] / size / per["link"]["writes"], 2)
    r["n1_strace_1s"] = per
links = []
for line in open(spath):
    if line.strip():
        s = json.loads(line)
        links.append({"node": s["node"], "messages_in": {k: v["messages_in"] for k, v in s["nodes"].items()}})
if links:
    r["links_messages_in"] = links
print(json.dumps(r))
EOF
    tail -1 "$OUT/runs.jsonl" | python3 -c '
import json, sys
r = json.load(sys.stdin)
keys = ("received", "lost", "cpu_s_per_1M", "p50_ms", "p99_ms", "n1_messages_per_write")
print("  %s %s %s #%d:" % (r["experiment"], r["cell"], r["config"], r["round"]),
      " ".join("%s=%s" % (k, r.get(k)) for k in keys))' >&2
    cleanup
}

order() { # alternating order of two or more configurations for round $1
    local round=$1; shift
    if [ $((round % 2)) -eq 1 ]; then echo "$@"; else echo "$@" | tr ' ' '\n' | tac | tr '\n' ' '; fi
}

B() { echo "$HAYATE bench"; }
COMMON=(--progress 0 --quiet --version-wait-ms 0 --json @JSON@)

exp_forward() {
    local q round config
    export STRACE_ATTRIBUTION=2node-1
    for q in 0 1; do
        for round in $(seq 1 "$RUNS"); do
            for config in $(order "$round" 1node 2node); do
                if [ "$config" = 1node ]; then
                    start_nodes 1
                    run_one forward "qos$q" "$config" 1 "$round" $((FWD_SECS / 2)) -- \
                        $(B) fan-in --shape open -c 1000 --rate 20000 -d "$FWD_SECS" -q "$q" --sub-qos "$q" \
                        --port $((BASE_MQTT + 1)) "${COMMON[@]}"
                else
                    start_nodes 2
                    run_one forward "qos$q" "$config" 2 "$round" $((FWD_SECS / 2)) -- \
                        $(B) fan-in --shape open -c 1000 --rate 20000 -d "$FWD_SECS" -q "$q" --sub-qos "$q" \
                        --pub-targets "$(addr 1)" --sub-targets "$(addr 2)" "${COMMON[@]}"
                fi
            done
        done
    done
}

exp_writeup() {
    local rate round config
    for rate in 900 4500; do
        for round in $(seq 1 "$RUNS"); do
            for config in $(order "$round" 1node 3node); do
                local n=1 where=(--port $((BASE_MQTT + 1)))
                if [ "$config" = 3node ]; then n=3; where=(--targets "$(targets 3)"); fi
                start_nodes "$n"
                run_one writeup "r$rate" "$config" "$n" "$round" - -- \
                    $(B) fan-out -S 9000 --publishers 4 --rate "$rate" -s 1024 -q 1 \
                    -d "$WRITEUP_SECS" --warmup 10 --connect-concurrency 200 "${where[@]}" "${COMMON[@]}"
            done
        done
    done
}

exp_nodes() {
    local round n
    for round in $(seq 1 "$RUNS"); do
        for n in $(order "$round" 1 2 3); do
            local where=(--port $((BASE_MQTT + 1)))
            [ "$n" -gt 1 ] && where=(--targets "$(targets "$n")")
            start_nodes "$n"
            run_one nodes rate20k "${n}node" "$n" "$round" - -- \
                $(B) fan-out -S 300 --publishers 25 --rate 20000 -s 24 -q 0 -d 20 --warmup 5 \
                "${where[@]}" "${COMMON[@]}"
        done
    done
}

exp_paho() {
    if [ ! -x "$PAHO" ]; then
        (cd "$ROOT/tools/paho-fanin" && go build -o "$PAHO" .)
    fi
    local round config
    for round in $(seq 1 "$RUNS"); do
        for config in $(order "$round" 1node 2node); do
            if [ "$config" = 1node ]; then
                start_nodes 1
                run_one paho q1 "$config" 1 "$round" - -- "$PAHO" -c 100 -w 100 -n 200000 -q 1 -sub-qos 1 \
                    -broker "tcp://$(addr 1)" -broker-pid "${PIDS[0]}"
            else
                start_nodes 2
                run_one paho q1 "$config" 2 "$round" - -- "$PAHO" -c 100 -w 100 -n 200000 -q 1 -sub-qos 1 \
                    -broker "tcp://$(addr 1)" -sub-broker "tcp://$(addr 2)" -broker-pid "${PIDS[0]},${PIDS[1]}"
            fi
        done
    done
}

summary() {
    python3 - "$OUT/runs.jsonl" <<'EOF' | tee "$OUT/summary.md"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = {}
for r in runs:
    groups.setdefault((r["experiment"], r["cell"], r["config"]), []).append(r)
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def f(v, d=2):
    return "–" if v is None else f"{v:,.{d}f}"
commits = sorted({r["commit"] + ("-dirty" if r["dirty"] else "") for r in runs})
print(f"Medians of {len(runs)} runs (commit {', '.join(commits)}; "
      f"{runs[0].get('machine', '')}; {runs[0]['threads_per_node']} worker thread(s) per node). "
      "CPU-s/1M: node CPU-seconds (utime+stime over the whole bench run) per million messages received.\n")
print("| experiment | cell | config | runs | received | lost | msg/s | CPU-s/1M per node | CPU-s/1M total | p50 ms | p99 ms | n1 msg/write | crossing |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for (e, c, cfg), rs in groups.items():
    n = rs[0]["nodes"]
    per_node = " / ".join(f(med([r["cpu_s_per_1M"][i] for r in rs if r.get("cpu_s_per_1M")])) for i in range(n))
    print(f"| {e} | {c} | {cfg} | {len(rs)} | {f(med([r.get('received') for r in rs]), 0)} | "
          f"{f(med([r.get('lost') for r in rs]), 0)} | {f(med([r.get('receive_rate') for r in rs]), 0)} | "
          f"{per_node} | {f(med([r.get('cpu_s_per_1M_total') for r in rs]))} | "
          f"{f(med([r.get('p50_ms') for r in rs]), 3)} | {f(med([r.get('p99_ms') for r in rs]), 3)} | "
          f"{f(med([r.get('n1_messages_per_write') for r in rs]))} | "
          f"{f(med([r.get('cross_fraction') for r in rs]))} |")
EOF
}

if [ $# -eq 0 ]; then set -- forward writeup nodes paho; fi
for what in "$@"; do
    case $what in
        forward | writeup | nodes | paho)
            echo "== $what ($(date -u +%H:%M:%S))" >&2
            "exp_$what" ;;
        summary) ;;
        *) echo "unknown experiment $what" >&2; exit 2 ;;
    esac
done
summary
echo "raw: $OUT/runs.jsonl; node logs: $SCRATCH" >&2
