#!/usr/bin/env bash
# Runs the side-by-side measurements of docs/BENCHMARKS.md: Hayate (`hayate serve`, default
# configuration, all cores) against Mosquitto (Debian defaults + max_connections -1 +
# set_tcp_nodelay true), each comparison alternating the targets, $REPEAT runs each.
#
#   scripts/bench/run.sh                 # every section (~30 min on 2 cores)
#   scripts/bench/run.sh s1 s2           # only these sections
#   RESULTS=/tmp/b REPEAT=5 scripts/bench/run.sh s4
#   scripts/bench/summarize.sh "$RESULTS"   # markdown tables from the JSON
#
# Sections: s1 s1-payload s1-window drops s2 s3 s3-psk s4 s5 conn paho (see docs/BENCHMARKS.md).
# Outputs in $RESULTS (default target/bench-results/DATE): NAME.json (compare JSON, every run),
# NAME.html (report with charts), NAME.txt (printed tables), log.txt, broker logs and configs.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# S1 fan-in (the write-up's test at this machine's scale). Payload 24 B: the bench header is the
# minimum (the write-up's 6 B payload is sent as 24 B). One `hb/#` subscriber, 100 workers,
# senders at most 100,000 messages ahead of the subscriber (closed loop).
s1() {
    compare s1-q0-c1k fan-in -c 1000 -w 100 -n 1000000 -q 0 --sub-qos 0
    compare s1-q0-c10k fan-in -c 10000 -w 100 -n 1000000 -q 0 --sub-qos 0
    compare s1-q1-c10k fan-in -c 10000 -w 100 -n 500000 -q 1 --sub-qos 0
    compare s1-q2-c10k fan-in -c 10000 -w 100 -n 300000 -q 2 --sub-qos 0
    # Subscriber at QoS 1 (with QoS 0 publishers the delivery would be QoS 0: min of the two).
    compare s1-q1-sub1-c10k fan-in -c 10000 -w 100 -n 500000 -q 1 --sub-qos 1
}

# S1 payload sweep at 1k publisher connections, QoS 0, default sender window (100k messages).
s1_payload() {
    compare s1-p100-c1k fan-in -c 1000 -w 100 -n 500000 -s 100
    compare s1-p1k-c1k fan-in -c 1000 -w 100 -n 300000 -s 1000
    compare s1-p10k-c1k fan-in -c 1000 -w 100 -n 100000 -s 10000
    compare s1-p100k-c1k fan-in -c 1000 -w 100 -n 10000 -s 100000
}

# S2 latency: one publisher at a fixed interval (open loop, coordinated-omission corrected).
s2() {
    compare s2-10ms-q0 latency --interval-ms 10 -d 10 -q 0 --sub-qos 0
    compare s2-10ms-q1 latency --interval-ms 10 -d 10 -q 1 --sub-qos 1
    compare s2-1ms-q0 latency --interval-ms 1 -d 10 -q 0 --sub-qos 0
    compare s2-1ms-q1 latency --interval-ms 1 -d 10 -q 1 --sub-qos 1
}

# S3 swarm: 3,000 clients, one 500 B QoS 1 message every 6 s each (~500 msg/s), QoS 1
# subscriber; 30 s with the first 6 s (one full cycle) excluded.
s3() {
    compare s3-swarm-3k swarm -c 3000 --every 6 -d 30 --warmup 6 -q 1 --sub-qos 1 -s 500
}

# S3 over TLS-PSK, Mosquitto only (Hayate has no TLS listener yet). Mosquitto gets a second
# listener with psk_hint/psk_file; every client uses the identity `bench`. The bench offers
# PSK-AES128-GCM-SHA256 only: with the default offer Mosquitto picks DHE-PSK-AES256-GCM-SHA384,
# whose DH costs ~10 ms of CPU per handshake on each side (~30 s for 3,000 clients).
s3_psk() {
    local name=s3-swarm-3k-psk-mosquitto key=00112233445566778899aabbccddeeff
    log "$name"
    local dir="$RESULTS/$name.mosquitto"
    mkdir -p "$dir"
    echo "bench:$key" >"$dir/psk.txt"
    local psk_port
    psk_port=$(free_port)
    start_mosquitto "$name" "listener $psk_port 127.0.0.1" "psk_hint hayate-bench" "psk_file $dir/psk.txt"
    wait_port "$psk_port"
    "$HAYATE" bench compare --target "mosquitto-psk=127.0.0.1:$psk_port,pid=$MOSQ_PID" \
        --repeat 1 --compare-json "$RESULTS/$name.json" --report "$RESULTS/$name.html" \
        swarm -c 3000 --every 6 -d 30 --warmup 6 -q 1 --sub-qos 1 -s 500 \
        --psk-identity bench --psk "$key" --psk-ciphers PSK-AES128-GCM-SHA256 --progress 0 \
        2>&1 | tee "$RESULTS/$name.txt" || echo "FAILED: $name" | tee -a "$RESULTS/log.txt" >&2
    stop_brokers
}

# S4 fan-out: subscribers on their own topics, 4 publishers at subscribers/10 msg/s, 1 KB,
# 15 s with 5 s warm-up excluded.
s4() {
    compare s4-5k-q0 fan-out -S 5000 --rate 500 -d 15 --warmup 5 -q 0 -s 1000
    compare s4-5k-q1 fan-out -S 5000 --rate 500 -d 15 --warmup 5 -q 1 -s 1000
    compare s4-10k-q0 fan-out -S 10000 --rate 1000 -d 15 --warmup 5 -q 0 -s 1000
    compare s4-10k-q1 fan-out -S 10000 --rate 1000 -d 15 --warmup 5 -q 1 -s 1000
}

# S5 threads: `hayate serve --threads 1` against `--threads 2` (both Hayate, side by side).
s5() {
    compare_threads s5-threads-q0-c1k fan-in -c 1000 -w 100 -n 1000000 -q 0
    compare_threads s5-threads-q1-c1k fan-in -c 1000 -w 100 -n 500000 -q 1
}

# The 10 KB point of the sweep again with the senders at most 5,000 messages (50 MB) ahead
# instead of 100,000 (1 GB): how much of the loss above is the window outrunning the brokers'
# per-subscriber queues.
s1_window() {
    compare s1-p10k-c1k-w5k fan-in -c 1000 -w 100 -n 100000 -s 10000 --window 5000
}

# Where Hayate's losses go: one run each of the lossy S1 cases against a fresh Hayate, reading
# its `$SYS/broker/publish/messages/dropped` counter (published every 10 s) before and after.
drops() {
    log drops
    start_hayate drops
    local out="$RESULTS/drops.txt"
    sys_dropped() {
        # retained: the first copy is the last published value, the second a fresh one
        mosquitto_sub -p "$HAYATE_PORT" -t '$SYS/broker/publish/messages/dropped' -C 2 -W 15 \
            | tail -n 1 || echo "?"
    }
    echo "dropped at start: $(sys_dropped)" | tee "$out"
    "$HAYATE" bench fan-in --port "$HAYATE_PORT" -c 1000 -w 100 -n 100000 -s 10000 \
        --broker-pid "$HAYATE_PID" --json "$RESULTS/drops-p10k.json" --progress 0 --quiet
    echo "after 100k x 10 KB QoS 0 (lost per bench: $(jq .messages.lost "$RESULTS/drops-p10k.json")): $(sys_dropped)" | tee -a "$out"
    "$HAYATE" bench fan-in --port "$HAYATE_PORT" -c 10000 -w 100 -n 500000 -q 1 --sub-qos 1 \
        --broker-pid "$HAYATE_PID" --json "$RESULTS/drops-q1-sub1.json" --progress 0 --quiet
    echo "after 500k QoS 1 -> QoS 1 subscriber (lost per bench: $(jq .messages.lost "$RESULTS/drops-q1-sub1.json")): $(sys_dropped)" | tee -a "$out"
    stop_brokers
}

# Idle connections: 10,000 held for 5 s; connect rate and broker RSS per connection. Fresh
# brokers for every round: an allocator keeps the memory of a previous run, so the RSS growth
# per connection is only meaningful on a broker that has not held the connections before.
# The rounds are merged into conn-10k.json (each round also has its own JSON and HTML).
conn() { compare_conn_rounds conn-10k 10000; }

# Load generators compared: the same S1 run (1000 connections, 100 workers, 200k QoS 0
# messages) against Mosquitto from tools/paho-fanin (Go, Eclipse Paho) and from
# `hayate bench fan-in`, alternating, $REPEAT runs each. Client CPU is the whole process
# (user + system, connect phase included) from wait4(); broker CPU from /proc/PID/stat.
PAHO="${PAHO:-/tmp/paho-fanin}"
cpu_of() { # pid -> utime+stime seconds
    awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}
timed() { # out-file cmd... : runs cmd, appends "client_cpu_s wall_s" to out-file
    local out="$1"; shift
    /usr/bin/time -o "$out.time" -f '%U %S %e' "$@" >"$out" 2>&1 || true
    awk '{ printf "client_cpu_s %.2f wall_s %.2f\n", $1 + $2, $3 }' "$out.time" >>"$out"
}
paho() {
    if [ ! -x "$PAHO" ]; then
        (cd "$BENCH_ROOT/tools/paho-fanin" && go build -o "$PAHO" .)
    fi
    local name=loadgen-paho-vs-hayate-bench
    log "$name"
    start_mosquitto "$name"
    local out="$RESULTS/$name" round tool b0 b1
    mkdir -p "$out"
    for round in $(seq "$REPEAT"); do
        for tool in paho hayate-bench; do
            if [ $((round % 2)) = 0 ]; then
                tool=$([ "$tool" = paho ] && echo hayate-bench || echo paho)
            fi
            b0=$(cpu_of "$MOSQ_PID")
            if [ "$tool" = paho ]; then
                timed "$out/paho-$round.txt" "$PAHO" -broker "tcp://127.0.0.1:$MOSQ_PORT" \
                    -c 1000 -w 100 -n 200000 -q 0 -prefix "pf$round"
            else
                timed "$out/hayate-bench-$round.txt" "$HAYATE" bench fan-in \
                    --port "$MOSQ_PORT" -c 1000 -w 100 -n 200000 -q 0 \
                    --broker-pid "$MOSQ_PID" --json "$out/hayate-bench-$round.json" --progress 0
            fi
            b1=$(cpu_of "$MOSQ_PID")
            echo "broker_cpu_s $(awk -v a="$b0" -v b="$b1" 'BEGIN { printf "%.2f", b - a }')" >>"$out/$tool-$round.txt"
            tail -n 3 "$out/$tool-$round.txt"
        done
    done
    stop_brokers
}

sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(s1 s1-payload s1-window drops s2 s3 s3-psk s4 s5 conn paho)
{
    echo "started $(date -Is)"
    echo "hayate: $("$HAYATE" --version)  mosquitto: $("$MOSQUITTO" -h 2>/dev/null | head -1)"
    echo "nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo); kernel $(uname -r); ulimit -n $(ulimit -n)"
} | tee -a "$RESULTS/log.txt"
for s in "${sections[@]}"; do
    "${s//-/_}"
done
log "done; results in $RESULTS"
