#!/usr/bin/env bash
# The Go/paho side-by-side table of issues 9 and 10: Hayate, Mosquitto and FlashMQ under
# tools/paho-fanin (100 publishing goroutines over C connections, one `#` subscriber).
#
#   scripts/bench/paho-table.sh [-o DIR] [-r ROUNDS] [-b BROKERS] [CELL|SET ...]
#   scripts/bench/paho-table.sh -o DIR summary        # only print DIR's table again
#
# CELL is one argument, "c=CONNS q=QOS s=BYTES n=MESSAGES" plus optionally w=WORKERS (100),
# sub=SUBSCRIBER_QOS (0), wait=1 (QoS 0 publishers wait for each publish: paho-fanin -wait) and
# persist=1 (every client keeps its session: paho-fanin -persistent).
# SET is `issue10` (10 KB, 100 KB, 1 KB and 8 B at 10k publishers, QoS 0, publishers not
# waiting, as measured in issue 10) or `issue9` (CPU per message: 8 B, 100, 1k and 10k publishers
# at QoS 0, 10k at QoS 1 and 2, every publish waited for); `issue11` is the persistent-session
# QoS 1 fan-in of the durability issue (1k and 10k publishers, persist=1), meant for
# BROKERS="hayate hayate-batched hayate-sync mosquitto"; the default is issue10 and issue9.
# BROKERS defaults to "hayate mosquitto flashmq" (also: hayate-batched and hayate-sync, Hayate
# with a data directory in that durability mode; hayate-1t, Hayate with one worker thread; and
# floor, tools/epoll-floor's feature-free one-thread broker, QoS 0 cells only); ROUNDS to 2, the broker
# order reversed every other round. DIR defaults to docs/bench/raw/paho-YYYY-MM-DD.
#
# Every run gets a fresh broker on a free loopback port, each with its own defaults apart from
# the listener, anonymous access and logging of warnings and errors only: Hayate `serve
# --log-level warn`; Mosquitto as lib.sh's start_mosquitto (Debian defaults, set_tcp_nodelay)
# with `log_type error/warning` and the queue and memory limits written out at their defaults;
# FlashMQ as `flashmq.sh config` with `log_level warning`. Broker CPU is utime+stime from
# /proc/PID/stat: over the publishing phase (paho-fanin -broker-pid; connections excluded) and
# over the whole run; peak RSS is VmHWM. One JSON line per run is appended to DIR/runs.jsonl and
# the medians per (cell, broker) are printed and written to DIR/summary.md. Broker logs and
# configs go to a scratch directory ($RESULTS, default /tmp/paho-table.*).
#
# Environment: HAYATE, MOSQUITTO, FLASHMQ (binaries), PAHO (paho-fanin binary, built from
# tools/paho-fanin, default /tmp/paho-fanin), RUN_TIMEOUT (seconds per run, default 900).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$ROOT/docs/bench/raw/paho-$(date +%F)"
ROUNDS=2
BROKERS="hayate mosquitto flashmq"
PAHO="${PAHO:-/tmp/paho-fanin}"
RUN_TIMEOUT="${RUN_TIMEOUT:-900}"
while getopts "o:r:b:h" opt; do
    case $opt in
        o) OUT="$OPTARG" ;;
        r) ROUNDS="$OPTARG" ;;
        b) BROKERS="$OPTARG" ;;
        *) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

summary() {
    python3 - "$OUT/runs.jsonl" <<'EOF' | tee "$OUT/summary.md"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = {}
for r in runs:
    groups.setdefault((r["cell"], r["broker"]), []).append(r)
order = {"hayate": 0, "hayate-1t": 1, "hayate-batched": 2, "hayate-sync": 3, "mosquitto": 4,
         "flashmq": 5, "floor": 6}
cells = list(dict.fromkeys(r["cell"] for r in runs))
def med(rs, k):
    xs = [r[k] for r in rs if r.get(k) is not None]
    return statistics.median(xs) if xs else None
def per_msg(rs):
    xs = [r["disk_write_bytes"] / r["received"] for r in rs
          if r.get("disk_write_bytes") is not None and r.get("received")]
    return statistics.median(xs) if xs else None
def f(v, d):
    return "–" if v is None else f"{v:,.{d}f}"
commits = sorted({r["commit"] + ("-dirty" if r["dirty"] else "") for r in runs})
print(f"Medians per cell and broker ({len(runs)} runs; commit {', '.join(commits)}). "
      "msg/s: received / seconds from the first publish to the last message received (or to "
      "30 s after the last publish when messages are lost). CPU-s/1M: broker CPU-seconds per "
      "million received messages over that time (over the whole run, connections included, "
      "in brackets).\n")
print("| cell | broker | runs | success % | msg/s | CPU-s/1M | peak RSS MiB | disk bytes/msg "
      "| latency p50 / p99 ms |")
print("|---|---|---|---|---|---|---|---|---|")
for c in cells:
    for b in sorted({k[1] for k in groups if k[0] == c}, key=lambda b: order.get(b, 9)):
        rs = groups[(c, b)]
        print(f"| {c} | {b} {rs[0]['broker_version']} | {len(rs)} | {f(med(rs, 'success_pct'), 2)} "
              f"| {f(med(rs, 'msg_per_s'), 0)} | {f(med(rs, 'cpu_s_per_1m'), 2)} "
              f"({f(med(rs, 'cpu_s_per_1m_run'), 2)}) | {f(med(rs, 'peak_rss_mb'), 0)} "
              f"| {f(per_msg(rs), 0)} "
              f"| {f(med(rs, 'latency_p50_ms'), 3)} / {f(med(rs, 'latency_p99_ms'), 3)} |")
EOF
}
if [ "${1:-}" = summary ]; then summary; exit; fi

# The cells: issue 10's payload sizes at 10k publishers (publishers not waiting at QoS 0, as
# measured there), and issue 9's CPU table (every publish waited for).
ISSUE10=("c=10000 q=0 s=10240 n=100000" "c=10000 q=0 s=102400 n=20000"
    "c=10000 q=0 s=1024 n=100000" "c=10000 q=0 s=8 n=100000")
ISSUE9=("c=100 q=0 s=8 n=200000 wait=1" "c=1000 q=0 s=8 n=200000 wait=1"
    "c=10000 q=0 s=8 n=200000 wait=1" "c=10000 q=1 s=8 n=100000 wait=1"
    "c=10000 q=2 s=8 n=100000 wait=1")
ISSUE11=("c=1000 q=1 sub=1 s=64 n=100000 wait=1 persist=1"
    "c=10000 q=1 sub=1 s=64 n=100000 wait=1 persist=1")
[ $# -gt 0 ] || set -- issue10 issue9
CELLS=()
for a in "$@"; do
    case $a in
        issue10) CELLS+=("${ISSUE10[@]}") ;;
        issue9) CELLS+=("${ISSUE9[@]}") ;;
        issue11) CELLS+=("${ISSUE11[@]}") ;;
        *) CELLS+=("$a") ;;
    esac
done

parse_cell() { # CELL: sets c q s n w sub wait, exits on a malformed cell
    local kv
    c="" q="" s="" n="" w=100 sub=0 wait=0 persist=0
    for kv in $1; do
        case $kv in
            c=*) c=${kv#c=} ;; q=*) q=${kv#q=} ;; s=*) s=${kv#s=} ;; n=*) n=${kv#n=} ;;
            w=*) w=${kv#w=} ;; sub=*) sub=${kv#sub=} ;; wait=*) wait=${kv#wait=} ;;
            persist=*) persist=${kv#persist=} ;;
            *) echo "unknown key in cell '$1': $kv" >&2; exit 2 ;;
        esac
    done
    [ -n "$c" ] && [ -n "$q" ] && [ -n "$s" ] && [ -n "$n" ] || { echo "cell '$1' needs c, q, s and n" >&2; exit 2; }
}
for cell in "${CELLS[@]}"; do parse_cell "$cell"; done
for b in $BROKERS; do
    case $b in hayate | hayate-1t | hayate-batched | hayate-sync | mosquitto | flashmq | floor) ;;
        *) echo "unknown broker $b" >&2; exit 2 ;; esac
done

ulimit -n 20000 || { echo "cannot raise the open-file limit to 20000 (ulimit -Hn: $(ulimit -Hn))" >&2; exit 1; }
HAYATE="${HAYATE:-$ROOT/target/release/hayate}"
[ -x "$HAYATE" ] || (cd "$ROOT" && cargo build --release -p hayate)
(cd "$ROOT/tools/paho-fanin" && go build -o "$PAHO" .)
RESULTS="${RESULTS:-$(mktemp -d /tmp/paho-table.XXXXXX)}"
chmod 755 "$RESULTS"
export HAYATE RESULTS
source "$ROOT/scripts/bench/lib.sh"
FLASHMQ="${FLASHMQ:-/opt/flashmq/flashmq}"
FLOOR="${FLOOR:-$ROOT/tools/epoll-floor/target/release/epoll-floor}"
if [[ " $BROKERS " == *" floor "* ]]; then
    (cd "$ROOT/tools/epoll-floor" && cargo build --release --quiet)
fi
if [[ " $BROKERS " == *" flashmq "* ]] && [ ! -x "$FLASHMQ" ]; then
    echo "no flashmq at $FLASHMQ (scripts/bench/flashmq.sh build SRC_DIR)" >&2; exit 1
fi

COMMIT=$(git -C "$ROOT" rev-parse --short=12 HEAD)
DIRTY=false
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ]; then DIRTY=true; fi
declare -A VERSION=(
    [hayate]="$("$HAYATE" --version | awk '{print $2}')"
    [hayate-batched]="$("$HAYATE" --version | awk '{print $2}')"
    [hayate-sync]="$("$HAYATE" --version | awk '{print $2}')"
    [hayate-1t]="$("$HAYATE" --version | awk '{print $2}')"
    [floor]="epoll-floor"
    [mosquitto]="$("$MOSQUITTO" -h 2>/dev/null | head -1 | awk '{print $3}')"
    [flashmq]="$("$FLASHMQ" --version 2>/dev/null | head -1 | awk '{print $3}')"
)
{
    echo "started $(date -Is); commit $COMMIT (dirty: $DIRTY); cells: ${CELLS[*]/%/;}"
    echo "hayate ${VERSION[hayate]}, mosquitto ${VERSION[mosquitto]}, flashmq ${VERSION[flashmq]}"
    echo "nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo); kernel $(uname -r); ulimit -n $(ulimit -n)"
} >>"$OUT/env.txt"

cpu_s() { # PID: utime+stime in seconds
    sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($12 + $13) / hz}'
}

run() { # BROKER ROUND POSITION CELL
    local broker="$1" round="$2" pos="$3" cell="$4"
    local c q s n w sub wait persist name pid port
    parse_cell "$cell"
    name="$broker-c$c-q$q-s$s-n$n-r$round"
    log "round $round: $broker, $cell"
    case $broker in
        hayate) start_hayate "$name" --log-level warn; pid=$HAYATE_PID port=$HAYATE_PORT ;;
        hayate-1t) start_hayate "$name" --log-level warn --threads 1; pid=$HAYATE_PID port=$HAYATE_PORT ;;
        floor)
            if [ "$q" != 0 ] || [ "$sub" != 0 ]; then log "floor: QoS 0 only, $cell skipped"; return; fi
            port=$(free_port)
            "$FLOOR" "127.0.0.1:$port" >"$RESULTS/$name.floor.log" 2>&1 &
            pid=$!
            BROKER_PIDS+=("$pid")
            wait_port "$port" ;;
        hayate-batched | hayate-sync)
            start_hayate "$name" --log-level warn --data-dir "$RESULTS/$name.data" \
                --durability "${broker#hayate-}"
            pid=$HAYATE_PID port=$HAYATE_PORT ;;
        mosquitto) # started as root it runs as user mosquitto: let that user write its log there
            mkdir -p "$RESULTS/$name.mosquitto"
            if [ "$(id -u)" = 0 ] && id mosquitto >/dev/null 2>&1; then chown mosquitto: "$RESULTS/$name.mosquitto"; fi
            start_mosquitto "$name" "log_type error" "log_type warning" "max_queued_messages 1000" \
                "max_queued_bytes 0" "max_inflight_messages 20" "max_inflight_bytes 0" "memory_limit 0"
            pid=$MOSQ_PID port=$MOSQ_PORT ;;
        flashmq) start_flashmq "$name" warning; pid=$FLASHMQ_PID port=$FLASHMQ_PORT ;;
        *) echo "unknown broker $broker" >&2; exit 2 ;;
    esac
    local args=(-broker "tcp://127.0.0.1:$port" -broker-pid "$pid" -c "$c" -w "$w" -n "$n" -q "$q"
        -sub-qos "$sub" -s "$s" -prefix pt)
    [ "$wait" = 0 ] || args+=(-wait)
    [ "$persist" = 0 ] || args+=(-persistent)
    local cpu0 cpu1 out rc=0 rss_kb="" alive=true
    cpu0=$(cpu_s "$pid")
    local io0 io1=""
    io0=$(awk '/^write_bytes/{print $2}' "/proc/$pid/io")
    out=$(timeout "$RUN_TIMEOUT" "$PAHO" "${args[@]}" 2>&1) || rc=$?
    if [ -r "/proc/$pid/stat" ]; then
        cpu1=$(cpu_s "$pid")
        io1=$(awk '/^write_bytes/{print $2}' "/proc/$pid/io")
        rss_kb=$(awk '/^VmHWM/{print $2}' "/proc/$pid/status")
    else
        cpu1="" alive=false
    fi
    stop_brokers
    printf '%s\n' "$out" | tee "$RESULTS/$name.paho.txt" >&2
    local re_conn='connections [0-9]+ \(([0-9]+) failed\)'
    local re_sent='sent ([0-9]+) in [0-9.]+ s: ([0-9]+) msg/s'
    local re_recv='received ([0-9]+) in ([0-9.]+) s: ([0-9]+) msg/s, success ([0-9.]+)%'
    local re_bcpu='broker cpu ([0-9.]+) s' re_ccpu='client cpu ([0-9.]+) s'
    local re_lat='latency ms p50 ([0-9.]+) p99 ([0-9.]+) p99.9 ([0-9.]+)'
    local failed="" sent="" send_rate="" received="" secs="" rate="" pct="" bcpu="" ccpu=""
    local p50="" p99="" p999=""
    [[ $out =~ $re_lat ]] && p50=${BASH_REMATCH[1]} p99=${BASH_REMATCH[2]} p999=${BASH_REMATCH[3]}
    [[ $out =~ $re_conn ]] && failed=${BASH_REMATCH[1]}
    [[ $out =~ $re_sent ]] && sent=${BASH_REMATCH[1]} send_rate=${BASH_REMATCH[2]}
    [[ $out =~ $re_recv ]] && received=${BASH_REMATCH[1]} secs=${BASH_REMATCH[2]} rate=${BASH_REMATCH[3]} pct=${BASH_REMATCH[4]}
    [[ $out =~ $re_bcpu ]] && bcpu=${BASH_REMATCH[1]}
    [[ $out =~ $re_ccpu ]] && ccpu=${BASH_REMATCH[1]}
    jq -nc --arg broker "$broker" --arg version "${VERSION[$broker]}" --arg cell "$cell" \
        --arg c "$c" --arg q "$q" --arg sub "$sub" --arg s "$s" --arg n "$n" --arg w "$w" --arg wait "$wait" \
        --arg round "$round" --arg pos "$pos" --arg commit "$COMMIT" --argjson dirty "$DIRTY" \
        --arg rc "$rc" --arg failed "$failed" --arg sent "$sent" --arg send_rate "$send_rate" \
        --arg received "$received" --arg secs "$secs" --arg rate "$rate" --arg pct "$pct" \
        --arg bcpu "$bcpu" --arg cpu0 "$cpu0" --arg cpu1 "$cpu1" --arg ccpu "$ccpu" \
        --arg rss_kb "$rss_kb" --argjson alive "$alive" --arg io0 "$io0" --arg io1 "$io1" \
        --arg p50 "$p50" --arg p99 "$p99" --arg p999 "$p999" '
        def num: if . == "" then null else tonumber end;
        def per_1m($cpu): if $cpu == null or ($received | num) == null or ($received | num) == 0
            then null else $cpu / ($received | num) * 1e6 end;
        ($bcpu | num) as $phase
        | (if $cpu1 == "" then null else ($cpu1 | tonumber) - ($cpu0 | tonumber) end) as $run
        | {time: (now | todate), broker: $broker, broker_version: $version, cell: $cell,
           connections: ($c | num), qos: ($q | num), sub_qos: ($sub | num), payload: ($s | num),
           messages: ($n | num), workers: ($w | num), wait: ($wait != "0"), round: ($round | num),
           position: ($pos | num), commit: $commit, dirty: $dirty, exit: ($rc | num),
           connect_failed: ($failed | num), sent: ($sent | num), send_msg_per_s: ($send_rate | num),
           received: ($received | num), receive_secs: ($secs | num), msg_per_s: ($rate | num),
           success_pct: ($pct | num), broker_cpu_s: $phase, broker_cpu_run_s: $run,
           cpu_s_per_1m: per_1m($phase), cpu_s_per_1m_run: per_1m($run),
           client_cpu_s: ($ccpu | num), peak_rss_kb: ($rss_kb | num),
           peak_rss_mb: (if $rss_kb == "" then null else ($rss_kb | tonumber) / 1024 end),
           broker_alive: $alive, latency_p50_ms: ($p50 | num), latency_p99_ms: ($p99 | num),
           latency_p999_ms: ($p999 | num),
           disk_write_bytes: (if $io1 == "" then null else ($io1 | tonumber) - ($io0 | tonumber) end)}' >>"$OUT/runs.jsonl"
    [ "$rc" = 0 ] || echo "FAILED ($rc): $broker $cell round $round" | tee -a "$RESULTS/log.txt" >&2
    sleep 1
}

read -r -a order <<<"$BROKERS"
for cell in "${CELLS[@]}"; do
    for round in $(seq "$ROUNDS"); do
        if [ $((round % 2)) = 0 ]; then
            list=(); for ((i = ${#order[@]} - 1; i >= 0; i--)); do list+=("${order[i]}"); done
        else
            list=("${order[@]}")
        fi
        pos=0
        for broker in "${list[@]}"; do
            pos=$((pos + 1))
            run "$broker" "$round" "$pos" "$cell"
        done
    done
done
log "done; runs in $OUT/runs.jsonl, broker logs in $RESULTS"
summary
