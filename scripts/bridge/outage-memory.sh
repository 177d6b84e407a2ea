#!/usr/bin/env bash
# Bridge outage memory (issue 12; not run in CI): one `hayate serve` with a bridge whose remote
# broker is down for the whole run (its address is a free port nobody listens on), and a
# publisher sending RATE QoS 1 messages per second of SIZE bytes on the bridged topic for
# SECONDS. Every SAMPLE seconds the broker's RSS (/proc/PID/status VmRSS) and the bridge's
# queue figures (from /metrics: messages and bytes queued, messages dropped oldest) go to a CSV.
# Mosquitto #2455 grew without bound in this situation; Hayate's bridge queue is bounded by
# the bridge's max_queued_messages / max_queued_bytes (docs/BRIDGES.md, "The outgoing queue").
#
#   scripts/bridge/outage-memory.sh [SECONDS [RATE [SIZE]]]     # defaults: 300 5000 200
#
# Environment: HAYATE (default target/release/hayate of this checkout), SAMPLE (seconds between
# samples, default 5), QUEUE_MESSAGES (default 100000), QUEUE_BYTES (default 16777216),
# OUT (the CSV; default target/bench-results/bridge-outage-<date>.csv), STORAGE=1 to run with
# `--data-dir` (the queue is on disk too).
#
# CSV columns: elapsed_s, rss_kib, queued_messages, queued_bytes, queue_dropped, published.
# Bounds: SECONDS 1..86400, RATE 1..50000, SIZE 1..65536. Needs python3 and curl.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HAYATE="${HAYATE:-$ROOT/target/release/hayate}"
SECONDS_RUN="${1:-300}"
RATE="${2:-5000}"
SIZE="${3:-200}"
SAMPLE="${SAMPLE:-5}"
QUEUE_MESSAGES="${QUEUE_MESSAGES:-100000}"
QUEUE_BYTES="${QUEUE_BYTES:-16777216}"
OUT="${OUT:-$ROOT/target/bench-results/bridge-outage-$(date +%Y%m%d-%H%M%S).csv}"
[ -x "$HAYATE" ] || { echo "no hayate binary at $HAYATE (cargo build --release -p hayate)" >&2; exit 1; }
[ "$SECONDS_RUN" -ge 1 ] && [ "$SECONDS_RUN" -le 86400 ] || { echo "SECONDS must be 1..86400" >&2; exit 2; }
[ "$RATE" -ge 1 ] && [ "$RATE" -le 50000 ] || { echo "RATE must be 1..50000" >&2; exit 2; }
[ "$SIZE" -ge 1 ] && [ "$SIZE" -le 65536 ] || { echo "SIZE must be 1..65536" >&2; exit 2; }
command -v curl >/dev/null || { echo "needs curl" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
MQTT_PORT="$(free_port)"
HTTP_PORT="$(free_port)"
DEAD_PORT="$(free_port)"
WORK="$(mktemp -d)"
TOKEN="outage-$$"
HAYATE_PID=""
LOAD_PID=""
cleanup() {
    [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null || true
    [ -n "$HAYATE_PID" ] && kill "$HAYATE_PID" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

cat >"$WORK/hayate.toml" <<TOML
[[listener]]
bind = "127.0.0.1:$MQTT_PORT"

[http]
listen = "127.0.0.1:$HTTP_PORT"
token = "$TOKEN"

[[bridge]]
name = "outage"
addresses = ["127.0.0.1:$DEAD_PORT"]
restart_timeout_secs = 5
restart_timeout_cap_secs = 30
start_type = "lazy"
threshold = 1
max_queued_messages = $QUEUE_MESSAGES
max_queued_bytes = $QUEUE_BYTES

[[bridge.topic]]
pattern = "outage/#"
direction = "out"
qos = 1
TOML
STORE_ARGS=()
[ "${STORAGE:-0}" = 1 ] && STORE_ARGS=(--data-dir "$WORK/data")
"$HAYATE" serve -c "$WORK/hayate.toml" --log-level warn "${STORE_ARGS[@]}" >"$WORK/hayate.log" 2>&1 &
HAYATE_PID=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$MQTT_PORT") 2>/dev/null && break
    sleep 0.1
done

# The publisher: MQTT 3.1.1 over a plain socket, QoS 1, paced in 10 ms slices; it reads the
# PUBACKs as they come and writes how many it published to $WORK/published.
python3 - "$MQTT_PORT" "$RATE" "$SIZE" "$SECONDS_RUN" "$WORK/published" <<'PY' &
import socket, struct, sys, time
port, rate, size, seconds, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
def rl(n):
    b = bytearray()
    while True:
        d, n = n % 128, n // 128
        b.append(d | (0x80 if n else 0))
        if not n:
            return bytes(b)
def packet(kind, body):
    return bytes([kind]) + rl(len(body)) + body
def s(x):
    return struct.pack(">H", len(x)) + x
sock = socket.create_connection(("127.0.0.1", port))
sock.sendall(packet(0x10, s(b"MQTT") + bytes([4, 2]) + struct.pack(">H", 60) + s(b"outage-pub")))
sock.recv(4)
sock.setblocking(False)
topic = s(b"outage/load")
payload = b"x" * size
start, sent, pid = time.monotonic(), 0, 0
while True:
    elapsed = time.monotonic() - start
    if elapsed >= seconds:
        break
    due = min(int(elapsed * rate) + 1, int(seconds * rate))
    burst = []
    while sent < due:
        pid = pid % 65535 + 1
        burst.append(packet(0x32, topic + struct.pack(">H", pid) + payload))
        sent += 1
    if burst:
        sock.setblocking(True)
        sock.sendall(b"".join(burst))
        sock.setblocking(False)
    try:
        while sock.recv(1 << 16):
            pass
    except BlockingIOError:
        pass
    with open(out, "w") as f:
        f.write(str(sent))
    time.sleep(0.01)
PY
LOAD_PID=$!

metric() { # name
    curl -s -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$HTTP_PORT/metrics" \
        | awk -v m="$1" '$1 ~ "^"m"[{ ]" || $1 == m { v = $NF } END { print v + 0 }'
}
echo "elapsed_s,rss_kib,queued_messages,queued_bytes,queue_dropped,published" >"$OUT"
START=$(date +%s)
while :; do
    NOW=$(( $(date +%s) - START ))
    RSS=$(awk '/^VmRSS/ { print $2 }' "/proc/$HAYATE_PID/status")
    echo "$NOW,$RSS,$(metric hayate_bridge_queued_messages),$(metric hayate_bridge_queued_bytes),$(metric hayate_bridge_queue_dropped_messages_total),$(cat "$WORK/published" 2>/dev/null || echo 0)" >>"$OUT"
    kill -0 "$LOAD_PID" 2>/dev/null || break
    sleep "$SAMPLE"
done
wait "$LOAD_PID" || true
LOAD_PID=""
PEAK=$(awk '/^VmHWM/ { print $2 }' "/proc/$HAYATE_PID/status")
echo "wrote $OUT; peak RSS ${PEAK} KiB; last sample: $(tail -1 "$OUT")" >&2
grep -c bridge_queue_full_dropped_oldest "$WORK/hayate.log" | xargs -I{} echo "{} bridge_queue_full_dropped_oldest log lines" >&2
