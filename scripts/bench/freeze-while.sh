#!/usr/bin/env bash
# Runs COMMAND while every process whose working directory or command line contains PATTERN is
# stopped (SIGSTOP, checked every second so that new ones are caught too), then continues them
# (SIGCONT). For benchmarking on this 2-core machine while a helper session builds and tests in
# its own worktree: even at idle priority a compiler beside the broker moves CPU-per-message
# figures by 10-30 %. The frozen processes only see a delay; a test frozen mid-run may time out.
#
#   scripts/bench/freeze-while.sh /work/wt-helper scripts/bench/paho-table.sh issue9
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
pattern="$1"; shift
stop_file=$(mktemp)
frozen_list=$(mktemp)
"$@" &
bench=$!
(
    while [ -e "$stop_file" ]; do
        for proc in /proc/[0-9]*; do
            pid=${proc#/proc/}
            cwd=$(readlink "$proc/cwd" 2>/dev/null) || continue
            cmd=$(tr '\0' ' ' <"$proc/cmdline" 2>/dev/null) || continue
            # Never this script (its command line holds the pattern) or what it runs.
            [[ $cmd == *freeze-while.sh* ]] && continue
            [ "$pid" = "$bench" ] && continue
            if [[ $cwd == *"$pattern"* || $cmd == *"$pattern"* ]]; then
                kill -STOP "$pid" 2>/dev/null && echo "$pid" >>"$frozen_list"
            fi
        done
        sleep 1
    done
) &
freezer=$!
wait "$bench"
status=$?
rm -f "$stop_file"
wait "$freezer"
sort -u "$frozen_list" | while read -r pid; do kill -CONT "$pid" 2>/dev/null; done
echo "freeze-while: continued $(sort -u "$frozen_list" | wc -l) processes" >&2
rm -f "$frozen_list"
exit "$status"
