#!/usr/bin/env bash
# Issue 9's W5, W7 and W8 with `hayate bench compare`, each broker freshly started with its own
# defaults and warnings-only logging, alternating runs ($REPEAT each, default 2):
#
#   w5: fan-out, 10,000 subscribers on their own topics at 0.1 msg/s each (1,000 msg/s in all,
#       1 KB, QoS 1: the clustered write-up's ratio), and a broadcast: 10,000 subscribers on one
#       topic, 10 msg/s (100,000 deliveries/s), 1 KB, QoS 0. Hayate, Mosquitto, FlashMQ.
#   w7: latency, one publisher every 1 ms (1,000 msg/s), QoS 0 and QoS 1, 10 s. Hayate,
#       Mosquitto, FlashMQ.
#   w8: the bridge-swarm write-up's shape over TLS-PSK: 3,000 clients, one 500 B QoS 1 message
#       every 6 s each, QoS 1 subscriber, 60 s (6 s warm-up), PSK-AES128-GCM-SHA256. Hayate
#       (OpenSSL PSK listener) and Mosquitto (FlashMQ has no TLS-PSK).
#   w8tls: the same shape over certificate TLS (a self-signed P-256 certificate made here, the
#       clients do not verify it): Hayate's rustls listener and Mosquitto's OpenSSL one.
#
#   RESULTS=/tmp/w scripts/bench/issue9-extra.sh [w5] [w7] [w8] [w8tls]
#   scripts/bench/summarize.sh "$RESULTS"    # markdown tables from the JSON
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
REPEAT="${REPEAT:-2}"
ulimit -n 20000 2>/dev/null || true

# compare3 NAME SCENARIO [options...]: fresh Hayate, Mosquitto and FlashMQ, then `hayate bench
# compare` over the three (ratios relative to Hayate).
compare3() {
    local name="$1"; shift
    log "$name: $*"
    start_hayate "$name" --log-level warn
    start_mosquitto "$name" "log_type error" "log_type warning"
    start_flashmq "$name" warning
    "$HAYATE" bench compare \
        --target "hayate=127.0.0.1:$HAYATE_PORT,pid=$HAYATE_PID" \
        --target "mosquitto=127.0.0.1:$MOSQ_PORT,pid=$MOSQ_PID" \
        --target "flashmq=127.0.0.1:$FLASHMQ_PORT,pid=$FLASHMQ_PID" \
        --repeat "$REPEAT" --compare-json "$RESULTS/$name.json" --report "$RESULTS/$name.html" \
        "$@" --progress 0 2>&1 | tee "$RESULTS/$name.txt" \
        || echo "FAILED: $name" | tee -a "$RESULTS/log.txt" >&2
    stop_brokers
}

w5() {
    compare3 w5-fanout-10k-own-q1 fan-out -S 10000 --rate 1000 -d 15 --warmup 5 -q 1 -s 1000
    compare3 w5-broadcast-10k-q0 fan-out -S 10000 --topic-mode shared --rate 10 -d 15 \
        --warmup 5 -q 0 -s 1000
}

w7() {
    compare3 w7-latency-1ms-q0 latency --interval-ms 1 -d 10 -q 0 --sub-qos 0
    compare3 w7-latency-1ms-q1 latency --interval-ms 1 -d 10 -q 1 --sub-qos 1
}

w8() {
    local name=w8-swarm-3k-psk key=00112233445566778899aabbccddeeff
    log "$name"
    local dir="$RESULTS/$name"
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ] && id mosquitto >/dev/null 2>&1; then chown mosquitto: "$dir"; fi
    echo "bench:$key" >"$dir/psk.txt"
    chmod 644 "$dir/psk.txt"
    local hayate_psk mosq_psk
    hayate_psk=$(free_port)
    cat >"$dir/hayate.toml" <<EOF
[[listener]]
bind = "127.0.0.1:$hayate_psk"
transport = "psk"
psk_file = "$dir/psk.txt"
psk_hint = "hayate-bench"
EOF
    start_hayate "$name" --log-level warn -c "$dir/hayate.toml"
    wait_port "$hayate_psk"
    mosq_psk=$(free_port)
    start_mosquitto "$name" "log_type error" "log_type warning" "listener $mosq_psk 127.0.0.1" \
        "psk_hint hayate-bench" "psk_file $dir/psk.txt"
    wait_port "$mosq_psk"
    "$HAYATE" bench compare \
        --target "hayate-psk=127.0.0.1:$hayate_psk,pid=$HAYATE_PID" \
        --target "mosquitto-psk=127.0.0.1:$mosq_psk,pid=$MOSQ_PID" \
        --repeat "$REPEAT" --compare-json "$RESULTS/$name.json" --report "$RESULTS/$name.html" \
        swarm -c 3000 --every 6 -d 60 --warmup 6 -q 1 --sub-qos 1 -s 500 \
        --psk-identity bench --psk "$key" --psk-ciphers PSK-AES128-GCM-SHA256 --progress 0 \
        2>&1 | tee "$RESULTS/$name.txt" || echo "FAILED: $name" | tee -a "$RESULTS/log.txt" >&2
    stop_brokers
}

w8tls() {
    local name=w8-swarm-3k-tls
    log "$name"
    local dir="$RESULTS/$name"
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=localhost -addext subjectAltName=DNS:localhost \
        -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
    chmod 644 "$dir/key.pem"
    if [ "$(id -u)" = 0 ] && id mosquitto >/dev/null 2>&1; then chown -R mosquitto: "$dir"; fi
    local hayate_tls mosq_tls
    hayate_tls=$(free_port)
    cat >"$dir/hayate.toml" <<EOF
[[listener]]
bind = "127.0.0.1:$hayate_tls"
transport = "mqtts"
cert_file = "$dir/cert.pem"
key_file = "$dir/key.pem"
EOF
    start_hayate "$name" --log-level warn -c "$dir/hayate.toml"
    wait_port "$hayate_tls"
    mosq_tls=$(free_port)
    start_mosquitto "$name" "log_type error" "log_type warning" "listener $mosq_tls 127.0.0.1" \
        "certfile $dir/cert.pem" "keyfile $dir/key.pem"
    wait_port "$mosq_tls"
    "$HAYATE" bench compare \
        --target "hayate-tls=127.0.0.1:$hayate_tls,pid=$HAYATE_PID" \
        --target "mosquitto-tls=127.0.0.1:$mosq_tls,pid=$MOSQ_PID" \
        --repeat "$REPEAT" --compare-json "$RESULTS/$name.json" --report "$RESULTS/$name.html" \
        swarm -c 3000 --every 6 -d 60 --warmup 6 -q 1 --sub-qos 1 -s 500 --insecure \
        --progress 0 2>&1 | tee "$RESULTS/$name.txt" || echo "FAILED: $name" | tee -a "$RESULTS/log.txt" >&2
    stop_brokers
}

sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(w5 w7 w8)
{
    echo "started $(date -Is); commit $(git -C "$BENCH_ROOT" rev-parse --short=12 HEAD)"
    echo "hayate: $("$HAYATE" --version)  mosquitto: $("$MOSQUITTO" -h 2>/dev/null | head -1)"
    echo "nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo); kernel $(uname -r); ulimit -n $(ulimit -n)"
} | tee -a "$RESULTS/log.txt"
for s in "${sections[@]}"; do
    "$s"
done
