#!/usr/bin/env bash
# FlashMQ for side-by-side runs (see ../shared/design/peer-brokers.md, "Running the peers here").
#
#   scripts/bench/flashmq.sh build SRC_DIR              # cmake Release + make -j2, installs $FLASHMQ
#   scripts/bench/flashmq.sh config PORT DIR [LEVEL]    # writes DIR/flashmq.conf, prints its path
#
# SRC_DIR is a checkout of the public halfgaar/FlashMQ repository at the tag to compare with
# (v1.26.2 for issues 9 and 10). `build` installs cmake, g++ and libssl-dev with apt-get when they
# are missing and builds in SRC_DIR/build (about 3 minutes on 2 cores).
# `config` writes the load-test configuration: anonymous access, log file in DIR, a 1 GiB write
# buffer per client (the 1 MB default silently drops QoS 0 messages to a subscriber whose buffer
# is full), and one listener on 127.0.0.1:PORT with tcp_nodelay (as Mosquitto's set_tcp_nodelay).
# LEVEL, if given, adds `log_level LEVEL` (debug, info, notice, warning, none).
# Run the broker with `$FLASHMQ -c DIR/flashmq.conf`.
#
# Environment: FLASHMQ  installed binary (default: /opt/flashmq/flashmq)
set -euo pipefail

FLASHMQ="${FLASHMQ:-/opt/flashmq/flashmq}"

build() { # SRC_DIR
    local src="$1" sudo=""
    [ -f "$src/CMakeLists.txt" ] || { echo "no CMakeLists.txt in $src" >&2; exit 1; }
    [ "$(id -u)" = 0 ] || sudo=sudo
    if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null || ! dpkg -s libssl-dev >/dev/null 2>&1; then
        $sudo apt-get update
        $sudo apt-get install -y cmake g++ make libssl-dev
    fi
    mkdir -p "$src/build"
    (cd "$src/build" && cmake -DCMAKE_BUILD_TYPE=Release .. && make -j2)
    $sudo install -D -m 755 "$src/build/flashmq" "$FLASHMQ"
    "$FLASHMQ" --version | head -1
}

config() { # PORT DIR [LEVEL]
    local port="$1" dir="$2" level="${3:-}"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    {
        echo "allow_anonymous true"
        echo "log_file $dir/flashmq.log"
        [ -z "$level" ] || echo "log_level $level"
        echo "client_max_write_buffer_size 1073741824"
        echo "listen {"
        echo "    protocol mqtt"
        echo "    inet_protocol ip4"
        echo "    inet4_bind_address 127.0.0.1"
        echo "    port $port"
        echo "    tcp_nodelay true"
        echo "}"
    } >"$dir/flashmq.conf"
    echo "$dir/flashmq.conf"
}

case "${1:-}" in
    build) [ $# = 2 ] || { echo "usage: $0 build SRC_DIR" >&2; exit 2; }; build "$2" ;;
    config) [ $# = 3 ] || [ $# = 4 ] || { echo "usage: $0 config PORT DIR [LEVEL]" >&2; exit 2; }; config "$2" "$3" "${4:-}" ;;
    *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
