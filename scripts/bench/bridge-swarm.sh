#!/usr/bin/env bash
# Bridge swarm (issue 12; not run in CI): EDGES Hayate edge brokers, each a `hayate serve`
# process whose bridge forwards `swarm/#` out at QoS 1 over TLS-PSK into one central broker;
# the central broker is Hayate, Mosquitto and FlashMQ in turn. A publisher per edge sends RATE
# QoS 1 messages per second for SECONDS; a subscriber on the central broker counts them.
#
#   scripts/bench/bridge-swarm.sh [EDGES [SECONDS [RATE]]]     # defaults: 20 30 2
#
# Reported per central broker (results/bridge-swarm.txt, one line each): messages sent and
# delivered (%, duplicates, edges whose every message arrived), their latency from the edge's
# publisher to the central subscriber (p50/p99/max ms, measured in the load generator, whose
# own scheduling is included), the central broker's CPU time
# (seconds and % of one core over the run), its RSS (peak VmHWM and at the end), and connection
# churn: TCP connections to its bridge port seen (sampled every second by source port) minus
# EDGES, i.e. reconnections.
#
# FlashMQ has no TLS-PSK listener: its edges bridge over certificate TLS (bridge_cafile, a CA
# and server certificate made here with openssl). Hayate and Mosquitto get the PSK listener.
#
# Bounds: EDGES at most 500 (every edge is a process: about 10 MB and 2 threads each; the
# load generator holds EDGES+1 sockets, far below the ~19k descriptors a process may hold),
# SECONDS at most 600, RATE at most 100. Each central broker's run takes about SECONDS + 30 s.
#
# EXTRA_LINKS=N adds N emulated links: `hayate bench swarm` clients connected to the same
# bridge port over TLS-PSK (certificate TLS for FlashMQ), one QoS 1 message every 6 s each, for
# the run's duration; their own figures go to results/bridge-swarm/extra-KIND.json. Edge
# processes plus emulated links make the issue's thousands of links on one machine (at most
# 15,000 emulated links: one bench process holds them).
#
# Environment: HAYATE (default target/release/hayate), MOSQUITTO, FLASHMQ
# (/opt/flashmq/flashmq), RESULTS, CENTRALS (default "hayate mosquitto flashmq"), EXTRA_LINKS
# (default 0).
source "$(dirname "$0")/lib.sh"

EDGES="${1:-20}"
SECONDS_RUN="${2:-30}"
RATE="${3:-2}"
CENTRALS="${CENTRALS:-hayate mosquitto flashmq}"
EXTRA_LINKS="${EXTRA_LINKS:-0}"
PSK_KEY="00112233445566778899aabbccddeeff"
[ "$EDGES" -ge 1 ] && [ "$EDGES" -le 500 ] || { echo "EDGES must be 1..500" >&2; exit 2; }
[ "$SECONDS_RUN" -ge 1 ] && [ "$SECONDS_RUN" -le 600 ] || { echo "SECONDS must be 1..600" >&2; exit 2; }
[ "$EXTRA_LINKS" -ge 0 ] && [ "$EXTRA_LINKS" -le 15000 ] || { echo "EXTRA_LINKS must be 0..15000" >&2; exit 2; }
python3 -c "import sys; r=float(sys.argv[1]); sys.exit(0 if 0 < r <= 100 else 1)" "$RATE" \
    || { echo "RATE must be in (0, 100]" >&2; exit 2; }
command -v ss >/dev/null || { echo "needs ss (iproute2)" >&2; exit 1; }
[ "$(ulimit -n)" -ge $((EDGES + 64)) ] || ulimit -n $((EDGES + 64))

DIR="$RESULTS/bridge-swarm"
mkdir -p "$DIR"
OUT="$RESULTS/bridge-swarm.txt"

# The PSK file of the central broker: one identity per edge.
{ for i in $(seq "$EDGES"); do echo "edge-$i:$PSK_KEY"; done; echo "swarm-extra:$PSK_KEY"; } >"$DIR/psk"

# A CA and a server certificate for 127.0.0.1 (FlashMQ's TLS listener).
make_certs() {
    [ -f "$DIR/server.pem" ] && return 0
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=bridge-swarm CA" \
        -keyout "$DIR/ca.key" -out "$DIR/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
        -keyout "$DIR/server.key" -out "$DIR/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\n' >"$DIR/san.ext"
    openssl x509 -req -in "$DIR/server.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca.key" \
        -CAcreateserial -days 2 -extfile "$DIR/san.ext" -out "$DIR/server.pem" 2>/dev/null
    chmod 644 "$DIR"/*.pem "$DIR"/*.key
}

# start_central KIND: sets CENTRAL_PID, BRIDGE_PORT (edges' port) and SUB_PORT (plain).
start_central() {
    local kind="$1" conf
    BRIDGE_PORT=$(free_port)
    SUB_PORT=$(free_port)
    case "$kind" in
        hayate | mosquitto)
            conf="$DIR/central-$kind.conf"
            {
                echo "listener $BRIDGE_PORT 127.0.0.1"
                echo "psk_hint bridge-swarm"
                echo "psk_file $DIR/psk"
                echo "listener $SUB_PORT 127.0.0.1"
                echo "allow_anonymous true"
                echo "max_connections -1"
                echo "max_queued_messages 100000"
            } >"$conf"
            chmod 777 "$DIR"; chmod 644 "$DIR/psk" "$conf"
            if [ "$kind" = hayate ]; then
                "$HAYATE" serve -c "$conf" >"$DIR/central-hayate.log" 2>&1 &
            else
                echo "log_dest file $DIR/central-mosquitto.log" >>"$conf"
                "$MOSQUITTO" -c "$conf" >"$DIR/central-mosquitto.out" 2>&1 &
            fi
            ;;
        flashmq)
            local bin="${FLASHMQ:-/opt/flashmq/flashmq}"
            [ -x "$bin" ] || { echo "no flashmq at $bin" >&2; return 1; }
            make_certs
            conf="$DIR/central-flashmq.conf"
            {
                echo "allow_anonymous true"
                echo "log_file $DIR/central-flashmq.log"
                echo "client_max_write_buffer_size 1073741824"
                for port in "$BRIDGE_PORT" "$SUB_PORT"; do
                    echo "listen {"
                    echo "    protocol mqtt"
                    echo "    inet_protocol ip4"
                    echo "    inet4_bind_address 127.0.0.1"
                    echo "    port $port"
                    if [ "$port" = "$BRIDGE_PORT" ]; then
                        echo "    fullchain $DIR/server.pem"
                        echo "    privkey $DIR/server.key"
                    fi
                    echo "}"
                done
            } >"$conf"
            "$bin" -c "$conf" >"$DIR/central-flashmq.out" 2>&1 &
            ;;
    esac
    CENTRAL_PID=$!
    BROKER_PIDS+=("$CENTRAL_PID")
    wait_port "$SUB_PORT"
}

# start_edges KIND: EDGES `hayate serve` processes (one worker thread each); their ports go to
# $DIR/edge-ports.
start_edges() {
    local kind="$1" i port conf
    : >"$DIR/edge-ports"
    for i in $(seq "$EDGES"); do
        port=$(free_port)
        conf="$DIR/edge-$i.conf"
        {
            echo "listener $port 127.0.0.1"
            echo "allow_anonymous true"
            echo "max_queued_messages 100000"
            echo
            echo "connection central"
            echo "address 127.0.0.1:$BRIDGE_PORT"
            echo "remote_clientid edge-$i"
            echo "cleansession false"
            echo "restart_timeout 1 10"
            echo "notifications false"
            echo "topic swarm/# out 1"
            if [ "$kind" = flashmq ]; then
                echo "bridge_cafile $DIR/ca.pem"
            else
                echo "bridge_identity edge-$i"
                echo "bridge_psk $PSK_KEY"
            fi
        } >"$conf"
        "$HAYATE" serve --threads 1 -c "$conf" >"$DIR/edge-$i.log" 2>&1 &
        BROKER_PIDS+=("$!")
        echo "$port" >>"$DIR/edge-ports"
    done
    while read -r port; do wait_port "$port"; done <"$DIR/edge-ports"
}

established() { # the peers' source ports of the connections to BRIDGE_PORT, one a line
    ss -Htn state established "( sport = :$BRIDGE_PORT )" | awk '{print $4}' | sed 's/.*://'
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

run_one() {
    local kind="$1"
    log "bridge swarm: central $kind, $EDGES edges, ${SECONDS_RUN}s at $RATE msg/s each"
    start_central "$kind"
    start_edges "$kind"
    # Every bridge connected (at most 60 s).
    local deadline=$((SECONDS + 60))
    while [ "$(established | wc -l)" -lt "$EDGES" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
    local up
    up=$(established | wc -l)
    [ "$up" -ge "$EDGES" ] || log "only $up of $EDGES bridges connected to $kind"
    established >"$DIR/ports-$kind"
    (while kill -0 "$CENTRAL_PID" 2>/dev/null; do established >>"$DIR/ports-$kind"; sleep 1; done) &
    local sampler=$!
    local hz ticks0 ticks1 t0 t1 load
    hz=$(getconf CLK_TCK)
    ticks0=$(cpu_ticks "$CENTRAL_PID")
    t0=$(date +%s.%N)
    local extra=""
    if [ "$EXTRA_LINKS" -gt 0 ]; then
        local security=(--psk-identity swarm-extra --psk "$PSK_KEY")
        [ "$kind" != flashmq ] || security=(--tls --cafile "$DIR/ca.pem")
        "$HAYATE" bench swarm --port "$BRIDGE_PORT" "${security[@]}" -c "$EXTRA_LINKS" \
            --every 6 -d "$SECONDS_RUN" --quiet --json "$DIR/extra-$kind.json" \
            >"$DIR/extra-$kind.log" 2>&1 &
        extra=$!
    fi
    load=$(python3 "$BENCH_ROOT/scripts/bench/bridge_swarm_load.py" "$SUB_PORT" "$DIR/edge-ports" \
        "$RATE" "$SECONDS_RUN" 20)
    [ -z "$extra" ] || wait "$extra" || log "hayate bench swarm (extra links) failed: $DIR/extra-$kind.log"
    t1=$(date +%s.%N)
    ticks1=$(cpu_ticks "$CENTRAL_PID")
    local hwm rss
    hwm=$(status_kb "$CENTRAL_PID" VmHWM)
    rss=$(status_kb "$CENTRAL_PID" VmRSS)
    kill "$sampler" 2>/dev/null || true
    local seen churn
    seen=$(sort -u "$DIR/ports-$kind" | grep -c . || true)
    churn=$((seen > EDGES + EXTRA_LINKS ? seen - EDGES - EXTRA_LINKS : 0))
    python3 - "$kind" "$load" "$hz" "$ticks0" "$ticks1" "$t0" "$t1" "$hwm" "$rss" "$churn" "$up" "$EXTRA_LINKS" <<'EOF' | tee -a "$OUT"
import json, sys
kind, load, hz, c0, c1, t0, t1, hwm, rss, churn, up, extra_links = sys.argv[1:]
load = json.loads(load)
cpu = (int(c1) - int(c0)) / int(hz)
wall = float(t1) - float(t0)
print(f"central={kind} edges={load['edges']} extra_links={extra_links} connected={up} sent={load['sent']} "
      f"delivered={load['received']} ({load['delivered_pct']}%) duplicates={load['duplicates']} "
      f"edges_complete={load['edges_complete']} latency_ms_p50/p99/max={load['latency_p50_ms']}/{load['latency_p99_ms']}/{load['latency_max_ms']} "
      f"central_cpu={cpu:.1f}s ({100 * cpu / wall:.1f}% of a core) "
      f"rss_peak={int(hwm) // 1024}MB rss_end={int(rss) // 1024}MB reconnections={churn}")
EOF
    stop_brokers
}

for kind in $CENTRALS; do
    run_one "$kind"
done
log "results: $OUT"
