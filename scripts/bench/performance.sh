#!/usr/bin/env bash
# The measurements behind docs/PERFORMANCE.md: issue 4's targets P1–P12, Hayate (default
# configuration, all cores) beside Mosquitto (Debian defaults + max_connections -1 +
# set_tcp_nodelay true), alternating runs, $REPEAT runs each (see scripts/bench/lib.sh).
#
#   scripts/bench/performance.sh                # every section (~75 min on 2 cores)
#   scripts/bench/performance.sh p1 p3          # only these
#   RESULTS=/tmp/perf scripts/bench/performance.sh p9
#   scripts/bench/summarize.sh "$RESULTS"       # markdown tables from the JSON
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# P1 / P2: S1 fan-in, QoS 0, 24 B (the bench header; the write-up's 6 B is sent as 24 B), 1M
# messages, one `hb/#` subscriber, senders at most 100k messages ahead.
p1() { compare p1-s1-q0-c10k fan-in -c 10000 -w 100 -n 1000000 -q 0 --sub-qos 0; }
p2() {
    compare p2-s1-q0-c1k fan-in -c 1000 -w 100 -n 1000000 -q 0 --sub-qos 0
    # 19,000 publishers: the bench spreads them over 2 processes (a process holds ~19k sockets).
    compare p2-s1-q0-c19k fan-in -c 19000 -w 100 -n 1000000 -q 0 --sub-qos 0 --processes 2
}
# P3: publishers at QoS 1 and 2, subscriber at QoS 0.
p3() {
    compare p3-s1-q1-c10k fan-in -c 10000 -w 100 -n 500000 -q 1 --sub-qos 0
    compare p3-s1-q2-c10k fan-in -c 10000 -w 100 -n 300000 -q 2 --sub-qos 0
}
# P4: the subscriber at QoS 1 and 2 (publishers at the same QoS: delivery is the minimum).
p4() {
    compare p4-s1-q1-sub1-c10k fan-in -c 10000 -w 100 -n 500000 -q 1 --sub-qos 1
    compare p4-s1-q2-sub2-c10k fan-in -c 10000 -w 100 -n 300000 -q 2 --sub-qos 2
}
# P5: S4-style fan-out, each subscriber on its own topic, 1 KB: at the write-up's ratio (0.1
# msg/s per subscriber) and loaded (2 msg/s per subscriber).
p5() {
    compare p5-s4-10k-r1k-q0 fan-out -S 10000 --rate 1000 -d 15 --warmup 5 -q 0 -s 1000
    compare p5-s4-10k-r1k-q1 fan-out -S 10000 --rate 1000 -d 15 --warmup 5 -q 1 -s 1000
    compare p5-s4-10k-r20k-q0 fan-out -S 10000 --rate 20000 -d 15 --warmup 5 -q 0 -s 1000
    compare p5-s4-10k-r20k-q1 fan-out -S 10000 --rate 20000 -d 15 --warmup 5 -q 1 -s 1000
}
# P6 / P7: 18,000 idle connections held 5 s; RSS growth per connection and connect rate. Fresh
# brokers each round (an allocator keeps memory from earlier runs).
p6() { compare_conn_rounds p6-conn-18k 18000; }
# P7: out of file descriptors. Hayate under `ulimit -n 256` is offered 1,000 connections: it
# must refuse the excess without spinning (CPU stays low), log once per interval, and serve
# new clients again once connections close.
p7() {
    log p7-emfile
    local out="$RESULTS/p7-emfile.txt" port pid
    port=$(free_port)
    (ulimit -n 256; exec "$HAYATE" serve -l "127.0.0.1:$port" ) \
        >"$RESULTS/p7-emfile.hayate.log" 2>&1 &
    pid=$!
    BROKER_PIDS+=("$pid")
    wait_port "$port"
    "$HAYATE" bench conn --port "$port" -c 1000 --hold 10 --connect-timeout 3 --broker-pid "$pid" \
        --progress 0 --json "$RESULTS/p7-emfile.json" 2>&1 | tee "$out" || true
    echo "accept_failed log lines: $(grep -c accept_failed "$RESULTS/p7-emfile.hayate.log")" | tee -a "$out"
    "$HAYATE" bench conn --port "$port" -c 200 --hold 1 --progress 0 2>&1 | grep -E "^connections" \
        | sed 's/^/after recovery: /' | tee -a "$out"
    grep -E "fd_limit|open files" "$RESULTS/p7-emfile.hayate.log" | head -2 | tee -a "$out"
    stop_brokers
}
# P8: S2 latency, one publisher every 1 ms (open loop, coordinated-omission corrected), and
# fan-in at a fixed 400k msg/s (about half of Hayate's maximum here).
p8() {
    compare p8-s2-1ms-q0 latency --interval-ms 1 -d 10 -q 0 --sub-qos 0
    compare p8-s2-1ms-q1 latency --interval-ms 1 -d 10 -q 1 --sub-qos 1
    compare p8-fanin-400k-q0 fan-in -c 1000 -w 100 -d 10 --rate 400000 -q 0 --sub-qos 0
}
# P9: S4 at the write-up's ratio: 18,000 subscribers, 1,800 msg/s, 1 KB, QoS 1, 5 minutes.
p9() {
    REPEAT=1 compare p9-s4-18k-q1-5min fan-out -S 18000 --rate 1800 -d 300 --warmup 10 -q 1 -s 1000 \
        --processes 2
}
# P10: payload sweep at 10k publishers, senders at most 100k messages ahead (the default).
p10() {
    compare p10-p100-c10k fan-in -c 10000 -w 100 -n 500000 -s 100
    compare p10-p1k-c10k fan-in -c 10000 -w 100 -n 300000 -s 1000
    compare p10-p10k-c10k fan-in -c 10000 -w 100 -n 100000 -s 10000
    compare p10-p100k-c10k fan-in -c 10000 -w 100 -n 10000 -s 100000
}
# P11: overload. Capacity R from a closed-loop run on 1,000 publishers, then 60 s at 3R and
# 30 s at R/2 (open loop), one run per broker.
p11() {
    log p11-overload
    start_hayate p11-capacity
    "$HAYATE" bench fan-in --port "$HAYATE_PORT" -c 1000 -w 100 -n 2000000 -q 0 \
        --broker-pid "$HAYATE_PID" --json "$RESULTS/p11-capacity.json" --progress 0 --quiet
    stop_brokers
    local r
    r=$(jq -r ".messages.receive_rate_per_s | floor" "$RESULTS/p11-capacity.json")
    echo "capacity R = $r msg/s" | tee -a "$RESULTS/log.txt"
    REPEAT=1 compare p11-overload fan-in -c 1000 -w 100 -q 0 \
        --rate-schedule "60@$((3 * r)),30@$((r / 2))" --recovery-p99-ms 50
}
# P12: `--threads 1` against `--threads 2`, both Hayate.
p12() {
    compare_threads p12-threads-q0-c1k fan-in -c 1000 -w 100 -n 1000000 -q 0
    compare_threads p12-threads-q1-c1k fan-in -c 1000 -w 100 -n 500000 -q 1
}

sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(p1 p2 p3 p4 p5 p6 p7 p8 p10 p12 p9 p11)
{
    echo "started $(date -Is)"
    echo "hayate: $("$HAYATE" --version)  mosquitto: $("$MOSQUITTO" -h 2>/dev/null | head -1)"
    echo "nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo); kernel $(uname -r); ulimit -n $(ulimit -n)"
    echo "somaxconn $(cat /proc/sys/net/core/somaxconn); ip_local_port_range $(cat /proc/sys/net/ipv4/ip_local_port_range)"
    echo "tcp_rmem $(cat /proc/sys/net/ipv4/tcp_rmem); tcp_wmem $(cat /proc/sys/net/ipv4/tcp_wmem)"
} | tee -a "$RESULTS/log.txt"
for s in "${sections[@]}"; do
    "$s"
done
log "done; results in $RESULTS"
