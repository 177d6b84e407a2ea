#!/usr/bin/env bash
# The cost of the HTTP edge (docs/OPERATIONS.md, "Cost"; issue 14's benchmarks):
#  1. fan-in CPU per message with the HTTP listener off, and on with a scraper every second,
#     alternating, REPEAT runs each (broker CPU from /proc via --broker-pid);
#  2. the admin API at CLIENTS connected clients: one page of 1000, the whole listing page by
#     page, and one /metrics scrape, each timed with curl.
# Usage: scripts/bench/metrics-cost.sh   (HAYATE=path/to/release/hayate REPEAT=3 CLIENTS=18000
#        QOS=0 (the fan-in's publish and subscription QoS), ADMIN=0 to skip part 2)
# Two builds side by side (the cost of a change to the counters): run it once with each
# binary as HAYATE, e.g. HAYATE=/tmp/before/hayate ADMIN=0 QOS=1 scripts/bench/metrics-cost.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HAYATE="${HAYATE:-$ROOT/target/release/hayate}"
REPEAT="${REPEAT:-3}"
CLIENTS="${CLIENTS:-18000}"
MESSAGES="${MESSAGES:-5000000}"
QOS="${QOS:-0}"
ADMIN="${ADMIN:-1}"
TOKEN=bench-token
OUT="$(mktemp -d)"
MQTT_PORT=21883
HTTP_PORT=21990
ulimit -n 65536 2>/dev/null || true

start_broker() { # $1: on|off
    local args=(serve --listen "127.0.0.1:$MQTT_PORT" --threads 1)
    [ "$1" = on ] && args+=(--http "127.0.0.1:$HTTP_PORT")
    HAYATE_HTTP_TOKEN=$TOKEN "$HAYATE" "${args[@]}" >/dev/null 2>&1 &
    BROKER=$!
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/$MQTT_PORT) 2>/dev/null && return 0
        sleep 0.1
    done
    echo "broker did not start" >&2; exit 1
}
stop_broker() { kill "$BROKER" 2>/dev/null || true; wait "$BROKER" 2>/dev/null || true; }
scrape() { curl -s -o /dev/null -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$HTTP_PORT$1"; }

echo "== fan-in, 1000 publishers, $MESSAGES QoS $QOS messages, broker on one thread"
for run in $(seq "$REPEAT"); do
    for mode in off on; do
        start_broker "$mode"
        SCRAPER=
        if [ "$mode" = on ]; then
            (while true; do scrape /metrics; sleep 1; done) &
            SCRAPER=$!
        fi
        "$HAYATE" bench fan-in --port "$MQTT_PORT" -c 1000 -w 100 -n "$MESSAGES" -q "$QOS" --sub-qos "$QOS" \
            --broker-pid "$BROKER" --quiet --json "$OUT/fanin-$mode-$run.json" >/dev/null
        [ -n "$SCRAPER" ] && kill "$SCRAPER" 2>/dev/null
        stop_broker
        python3 - "$OUT/fanin-$mode-$run.json" "$mode" "$run" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def find(o, key):
    if isinstance(o, dict):
        if key in o: return o[key]
        for v in o.values():
            r = find(v, key)
            if r is not None: return r
    if isinstance(o, list):
        for v in o:
            r = find(v, key)
            if r is not None: return r
cpu = find(d, "cpu_seconds_per_million_messages")
rate = find(d, "receive_rate_per_s")
print(f"http {sys.argv[2]:3} run {sys.argv[3]}: broker CPU {cpu:.3f} s per million messages, {rate:,.0f} messages/s received")
PY
    done
done

if [ "$ADMIN" = 0 ]; then
    echo "raw results: $OUT"
    exit 0
fi
echo "== admin API with $CLIENTS clients connected"
start_broker on
"$HAYATE" bench conn --port "$MQTT_PORT" -c "$CLIENTS" --hold 120 --quiet >/dev/null 2>&1 &
CONN=$!
for _ in $(seq 600); do
    n=$(curl -s -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$HTTP_PORT/metrics" \
        | awk '$1=="hayate_clients_connected"{print $2}')
    [ "${n:-0}" -ge "$CLIENTS" ] && break
    sleep 0.5
done
echo "clients connected: $n"
t() { curl -s -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$HTTP_PORT$1"; }
echo "one page of 1000 (first):   $(t '/api/v1/clients?limit=1000') s"
echo "one page of 100 (first):    $(t '/api/v1/clients?limit=100') s"
echo "/metrics scrape:            $(t /metrics) s"
echo "/api/v1/overview:           $(t /api/v1/overview) s"
pages=0; cursor=""; total=0; seconds=0
while :; do
    curl -s -o "$OUT/page.json" -w '%{time_total}\n' -H "Authorization: Bearer $TOKEN" \
        "http://127.0.0.1:$HTTP_PORT/api/v1/clients?limit=1000${cursor:+&cursor=$cursor}" >> "$OUT/page-times"
    read -r count next < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["clients"]), d["next_cursor"] or "")' "$OUT/page.json")
    total=$((total + count)); pages=$((pages + 1))
    [ -z "$next" ] && break
    cursor=$next
done
seconds=$(awk '{s+=$1} END {printf "%.3f", s}' "$OUT/page-times")
echo "whole listing: $total clients in $pages pages of at most 1000, $seconds s of HTTP time in total"
echo "broker RSS: $(awk '/VmRSS/{print $2, $3}' /proc/$BROKER/status)"
kill "$CONN" 2>/dev/null || true; wait "$CONN" 2>/dev/null || true
stop_broker
echo "raw results: $OUT"
