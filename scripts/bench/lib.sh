# shellcheck shell=bash
# Shared helpers for scripts/bench/*.sh: start Hayate and Mosquitto on free loopback ports with
# the configurations stated in docs/BENCHMARKS.md, run `hayate bench compare` against both, and
# keep every JSON / HTML / text output in one results directory.
#
# Source it; do not run it. Environment:
#   HAYATE     the hayate binary (default: target/release/hayate of this checkout)
#   MOSQUITTO  the mosquitto binary (default: /usr/sbin/mosquitto)
#   RESULTS    results directory (default: target/bench-results/YYYYmmdd-HHMMSS)
#   REPEAT     runs per target in each comparison (default: 3)

set -euo pipefail

BENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HAYATE="${HAYATE:-$BENCH_ROOT/target/release/hayate}"
MOSQUITTO="${MOSQUITTO:-/usr/sbin/mosquitto}"
RESULTS="${RESULTS:-$BENCH_ROOT/target/bench-results/$(date +%Y%m%d-%H%M%S)}"
REPEAT="${REPEAT:-3}"
mkdir -p "$RESULTS"

[ -x "$HAYATE" ] || { echo "no hayate binary at $HAYATE (cargo build --release -p hayate)" >&2; exit 1; }
[ -x "$MOSQUITTO" ] || { echo "no mosquitto at $MOSQUITTO (apt-get install mosquitto)" >&2; exit 1; }

log() { printf '\n=== %s  %s\n' "$(date +%T)" "$*" | tee -a "$RESULTS/log.txt" >&2; }

# A free TCP port on 127.0.0.1, below the ephemeral range so client sockets never collide.
free_port() {
    python3 - <<'EOF'
import random, socket
for _ in range(1000):
    p = random.randint(20000, 30000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
EOF
}

wait_port() { # port
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "nothing listening on 127.0.0.1:$1" >&2
    return 1
}

BROKER_PIDS=()
stop_brokers() {
    local pid
    for pid in "${BROKER_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${BROKER_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    BROKER_PIDS=()
}
trap stop_brokers EXIT

# start_hayate NAME [serve options...]: `hayate serve` with the default configuration (no config
# file: every key at its default, one worker thread per core) on a free port.
# Sets HAYATE_PORT and HAYATE_PID.
start_hayate() {
    local name="$1"; shift
    HAYATE_PORT=$(free_port)
    "$HAYATE" serve -l "127.0.0.1:$HAYATE_PORT" "$@" >"$RESULTS/$name.hayate.log" 2>&1 &
    HAYATE_PID=$!
    BROKER_PIDS+=("$HAYATE_PID")
    wait_port "$HAYATE_PORT"
}

# start_mosquitto NAME [extra config lines...]: Mosquitto with the Debian package's default
# configuration (persistence on, log to a file) plus `max_connections -1` and
# `set_tcp_nodelay true`, on a free port (a `listener` line needs `allow_anonymous true` in 2.x).
# Sets MOSQ_PORT and MOSQ_PID.
start_mosquitto() {
    local name="$1"; shift
    MOSQ_PORT=$(free_port)
    local dir="$RESULTS/$name.mosquitto"
    mkdir -p "$dir"
    {
        echo "listener $MOSQ_PORT 127.0.0.1"
        echo "allow_anonymous true"
        echo "persistence true"
        echo "persistence_location $dir/"
        echo "log_dest file $dir/mosquitto.log"
        echo "max_connections -1"
        echo "set_tcp_nodelay true"
        local line
        for line in "$@"; do echo "$line"; done
    } >"$dir/mosquitto.conf"
    "$MOSQUITTO" -c "$dir/mosquitto.conf" >"$dir/stdout.log" 2>&1 &
    MOSQ_PID=$!
    BROKER_PIDS+=("$MOSQ_PID")
    wait_port "$MOSQ_PORT"
}

# start_flashmq NAME [LOG_LEVEL]: FlashMQ ($FLASHMQ, default /opt/flashmq/flashmq, built by
# scripts/bench/flashmq.sh build) with the configuration of `flashmq.sh config` on a free port,
# plus `log_level LOG_LEVEL` if given. Sets FLASHMQ_PORT and FLASHMQ_PID.
start_flashmq() {
    local name="$1" level="${2:-}" conf
    local bin="${FLASHMQ:-/opt/flashmq/flashmq}"
    [ -x "$bin" ] || { echo "no flashmq at $bin (scripts/bench/flashmq.sh build SRC_DIR)" >&2; return 1; }
    FLASHMQ_PORT=$(free_port)
    conf=$("$BENCH_ROOT/scripts/bench/flashmq.sh" config "$FLASHMQ_PORT" "$RESULTS/$name.flashmq" ${level:+"$level"})
    "$bin" -c "$conf" >"$RESULTS/$name.flashmq/stdout.log" 2>&1 &
    FLASHMQ_PID=$!
    BROKER_PIDS+=("$FLASHMQ_PID")
    wait_port "$FLASHMQ_PORT"
}

# compare NAME SCENARIO [scenario options...]: fresh Hayate and Mosquitto, then
# `hayate bench compare` (alternating targets, $REPEAT runs each) with JSON, HTML and the
# printed tables saved as $RESULTS/NAME.{json,html,txt}. The brokers are stopped afterwards,
# so each comparison starts from a freshly started broker (peak RSS is per comparison).
compare() {
    local name="$1"; shift
    log "$name: $*"
    start_hayate "$name"
    start_mosquitto "$name"
    "$HAYATE" bench compare \
        --target "hayate=127.0.0.1:$HAYATE_PORT,pid=$HAYATE_PID" \
        --target "mosquitto=127.0.0.1:$MOSQ_PORT,pid=$MOSQ_PID" \
        --repeat "$REPEAT" --compare-json "$RESULTS/$name.json" --report "$RESULTS/$name.html" \
        "$@" --progress 0 2>&1 | tee "$RESULTS/$name.txt" \
        || echo "FAILED: $name" | tee -a "$RESULTS/log.txt" >&2
    stop_brokers
}

# compare_threads NAME SCENARIO [options...]: Hayate `--threads 1` against Hayate `--threads 2`,
# side by side, $REPEAT alternating runs, outputs as `compare`.
compare_threads() {
    local name="$1"; shift
    log "$name: $*"
    start_hayate "$name.t1" --threads 1
    local p1=$HAYATE_PORT pid1=$HAYATE_PID
    start_hayate "$name.t2" --threads 2
    "$HAYATE" bench compare \
        --target "threads1=127.0.0.1:$p1,pid=$pid1" \
        --target "threads2=127.0.0.1:$HAYATE_PORT,pid=$HAYATE_PID" \
        --repeat "$REPEAT" --compare-json "$RESULTS/$name.json" --report "$RESULTS/$name.html" \
        "$@" --progress 0 2>&1 | tee "$RESULTS/$name.txt" \
        || echo "FAILED: $name" | tee -a "$RESULTS/log.txt" >&2
    stop_brokers
}

# compare_conn_rounds NAME CONNECTIONS: idle connections held 5 s, Hayate against Mosquitto,
# $REPEAT rounds on fresh brokers each (an allocator keeps the memory of a previous run, so RSS
# growth per connection means something only on a broker that has not held connections
# before), alternating which goes first; the rounds are merged into NAME.json.
compare_conn_rounds() {
    local name="$1" connections="$2" round targets
    for round in $(seq "$REPEAT"); do
        log "$name round $round"
        start_hayate "$name-r$round"
        start_mosquitto "$name-r$round"
        targets=(--target "hayate=127.0.0.1:$HAYATE_PORT,pid=$HAYATE_PID"
            --target "mosquitto=127.0.0.1:$MOSQ_PORT,pid=$MOSQ_PID")
        if [ $((round % 2)) = 0 ]; then targets=("${targets[2]}" "${targets[3]}" "${targets[0]}" "${targets[1]}"); fi
        "$HAYATE" bench compare "${targets[@]}" --repeat 1 \
            --compare-json "$RESULTS/$name-r$round.json" --report "$RESULTS/$name-r$round.html" \
            conn -c "$connections" --hold 5 --progress 0 2>&1 | tee "$RESULTS/$name-r$round.txt" \
            || echo "FAILED: $name round $round" | tee -a "$RESULTS/log.txt" >&2
        stop_brokers
    done
    # one comparison holding every round (targets in the order of round 1: hayate first)
    jq -s '.[0] + {repeat: length, runs: [.[].runs[]]}' "$RESULTS/$name"-r*.json >"$RESULTS/$name.json"
}
