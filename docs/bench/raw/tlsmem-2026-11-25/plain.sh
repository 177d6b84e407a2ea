# W8 shape over plain TCP (the non-TLS part of the per-connection cost), same brokers and logging.
source /work/wt-tlsmem/scripts/bench/lib.sh
ulimit -n 20000 2>/dev/null || true
name=w8-swarm-3k-plain
start_hayate "$name" --log-level warn
start_mosquitto "$name" "log_type error" "log_type warning"
"$HAYATE" bench compare \
    --target "hayate=127.0.0.1:$HAYATE_PORT,pid=$HAYATE_PID" \
    --target "mosquitto=127.0.0.1:$MOSQ_PORT,pid=$MOSQ_PID" \
    --repeat "$REPEAT" --compare-json "$RESULTS/$name.json" \
    swarm -c 3000 --every 6 -d 60 --warmup 6 -q 1 --sub-qos 1 -s 500 --progress 0 2>&1 | tee "$RESULTS/$name.txt"
stop_brokers
