#!/bin/bash
# What a message costs the server when it wakes a hibernated connection:
# CONNS connections (one engine thread, core 1) each send a Ping every
# INTERVAL ms and wait for its Pong; the server (core 0, a fresh one a
# run) is charged user and system CPU over 8 s once every connection is
# up, divided by the Pings of those 8 s. With INTERVAL above the
# listener's `hibernate_after' (1000 ms by default) every Ping finds its
# connection hibernated; below it, none does. Servers, the order turning
# every round:
#
#   sluice        bin/sluice serve --protocol ping, its defaults
#   sluice-nohib  the same with --hibernate-after 100000 (which also makes
#                 the sweep tick every 5 s instead of every second)
#   sluice-tick1  the same with --hibernate-after 100000 --idle-timeout 4000:
#                 no hibernation, the sweep ticking every second as with
#                 the defaults; so sluice-tick1 minus sluice-nohib is the
#                 faster tick's share, sluice minus sluice-tick1 the
#                 hibernation round's
#
# usage: bench/wake_cost.sh [ROUNDS]   (env: CONNS=5000 INTERVAL=2000)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
priv=$root/apps/sluice_load/priv
rounds=${1:-3}
conns=${CONNS:-5000}
interval=${INTERVAL:-2000}
case $rounds in ''|*[!0-9]*|0) echo "usage: bench/wake_cost.sh [ROUNDS]" >&2; exit 2;; esac
[ -x "$priv/sluice-load" ] || { echo "run make first" >&2; exit 1; }
# shellcheck source=bench/cpu_lib.sh
. "$root/bench/cpu_lib.sh"
tmp=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || stop_group "$pid"; rm -rf "$tmp"' EXIT
tck=$(getconf CLK_TCK)

servers=(sluice sluice-nohib sluice-tick1)
n=0
for r in $(seq "$rounds"); do
    for sv in "${servers[@]}"; do
        n=$((n + 1))
        extra=()
        [ "$sv" = sluice-nohib ] && extra=(--hibernate-after 100000)
        [ "$sv" = sluice-tick1 ] && extra=(--hibernate-after 100000 --idle-timeout 4000)
        setsid taskset -c 0 "$root/bin/sluice" serve --ip 127.0.0.1 --port 0 --protocol ping \
            "${extra[@]}" >"$tmp/server.out" 2>&1 &
        pid=$!
        port=$(listening_port "$sv" "$tmp/server.out")
        taskset -c 1 "$priv/sluice-load" --scenario ping --conns "$conns" --interval "$interval" \
            --duration 14 --port "$port" --threads 1 --quiet --json "$tmp/engine.json" \
            --source-ips "127.0.$((230 + n / 120)).$((2 * (n % 120) + 2))-127.0.$((230 + n / 120)).$((2 * (n % 120) + 3))" &
        engine=$!
        sleep 5
        read -r u0 s0 < <(group_ticks "$pid")
        sleep 8
        read -r u1 s1 < <(group_ticks "$pid")
        wait "$engine" || true
        stop_group "$pid"
        timeouts=$(sed -n 's/.*"timeouts": *\([0-9]*\).*/\1/p' "$tmp/engine.json" | head -1)
        awk -v r="$r" -v sv="$sv" -v n="$conns" -v iv="$interval" -v to="${timeouts:-?}" \
            -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v tck="$tck" 'BEGIN {
                us = 1e6 / tck / (n * 8000 / iv)
                printf "round %d  %-12s user %5.1f  sys %5.1f  total %5.1f us/Ping  (%s timeouts)\n",
                       r, sv, u * us, s * us, (u + s) * us, to }' | tee -a "$tmp/runs"
    done
    servers=("${servers[@]:1}" "${servers[0]}")
done
echo
echo "medians over $rounds rounds (server CPU per Ping, $conns connections, a Ping every $interval ms each):"
medians "$tmp/runs" 3 5 7 9 |
    awk '{ printf "  %-12s user %5.1f  sys %5.1f  total %5.1f us/Ping\n", $1, $2, $3, $4 }'
