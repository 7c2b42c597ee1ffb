#!/bin/bash
# What a connection costs the server from accept to close, connrate's
# pattern (`make bench`'s connection rate cell): CONNS connects as fast
# as the engine goes (one thread, core 1), each done when its Ping got a
# Pong, all held HOLD seconds, then closed by the client. The server
# (core 0, a fresh one every run) is charged user and system CPU from just
# before the engine starts to SETTLE seconds after it exits, so its
# closes are in; divided by CONNS. Servers, in an order that rotates every
# round so that the machine's drift falls on all alike:
#
#   sluice        bin/sluice serve --protocol ping, its defaults
#   sluice-nohib  the same with --hibernate-after 100000: what hibernating
#                 the connections held longer than 1 s adds
#   handwritten   sluice_peer_gen_tcp (make bench's peer; no sweep, no
#                 hibernation, no supervisor, no counters)
#   c             sluice-ref --threads 1
#
# Each run uses source addresses of its own (127.0.220.x and up), since
# the client's ports stay in TIME_WAIT for a minute.
# Prints every run, then per server the medians over the rounds.
# usage: bench/conn_cost.sh [ROUNDS]   (env: CONNS=15000 HOLD=0.5 SETTLE=2)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
priv=$root/apps/sluice_load/priv
lib=$root/_build/default/lib
rounds=${1:-5}
conns=${CONNS:-15000}
hold=${HOLD:-0.5}
settle=${SETTLE:-2}
case $rounds in ''|*[!0-9]*|0) echo "usage: bench/conn_cost.sh [ROUNDS]" >&2; exit 2;; esac
[ -x "$priv/sluice-ref" ] && [ -f "$lib/sluice_load/ebin/sluice_load.app" ] \
    || { echo "run make first" >&2; exit 1; }
# shellcheck source=bench/cpu_lib.sh
. "$root/bench/cpu_lib.sh"
tmp=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || stop_group "$pid"; rm -rf "$tmp"' EXIT
tck=$(getconf CLK_TCK)

start() {
    local out=$tmp/server.out
    : >"$out"
    case $1 in
        sluice) setsid taskset -c 0 "$root/bin/sluice" serve --ip 127.0.0.1 --port 0 \
                    --protocol ping >"$out" 2>&1 & ;;
        sluice-nohib) setsid taskset -c 0 "$root/bin/sluice" serve --ip 127.0.0.1 --port 0 \
                    --protocol ping --hibernate-after 100000 >"$out" 2>&1 & ;;
        handwritten) setsid taskset -c 0 erl +Bi -noshell -noinput -pa "$lib/sluice_load/ebin" \
                    -pa "$lib/sluice/ebin" -run sluice_peer_gen_tcp main inet ping none \
                    >"$out" 2>&1 & ;;
        c) setsid taskset -c 0 "$priv/sluice-ref" --threads 1 --ip 127.0.0.1 --port 0 \
                    --protocol ping >"$out" 2>&1 & ;;
    esac
    pid=$!
    port=$(listening_port "$1" "$out")
}

servers=(sluice sluice-nohib handwritten c)
n=0
for r in $(seq "$rounds"); do
    for sv in "${servers[@]}"; do
        n=$((n + 1))
        start "$sv"
        sleep 0.5
        read -r u0 s0 < <(group_ticks "$pid")
        taskset -c 1 "$priv/sluice-load" --scenario connect --conns "$conns" \
            --source-ips "127.0.$((219 + n / 250)).$((n % 250 + 1))-127.0.$((219 + n / 250)).$((n % 250 + 4))" \
            --probe ping --rate 0 --threads 1 --duration "$hold" --port "$port" \
            --quiet --json "$tmp/engine.json" || true
        sleep "$settle"
        read -r u1 s1 < <(group_ticks "$pid")
        stop_group "$pid"
        rate=$(sed -n 's/.*"rate": *\([0-9.]*\).*/\1/p' "$tmp/engine.json" | head -1)
        up=$(sed -n 's/.*"conns_up_at_end": *\([0-9]*\).*/\1/p' "$tmp/engine.json" | head -1)
        awk -v r="$r" -v sv="$sv" -v rate="${rate:-0}" -v up="${up:-0}" -v n="$conns" \
            -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v tck="$tck" 'BEGIN {
                us = 1e6 / tck / n
                printf "round %d  %-12s %6.0f conn/s  %5d up  user %5.1f  sys %5.1f  total %5.1f us/conn\n",
                       r, sv, rate, up, u * us, s * us, (u + s) * us }' | tee -a "$tmp/runs"
    done
    servers=("${servers[@]:1}" "${servers[0]}")
done
echo
echo "medians over $rounds rounds (CPU per connection, accept to close):"
medians "$tmp/runs" 3 4 9 11 13 |
    awk '{ printf "  %-12s %6.0f conn/s  user %5.1f  sys %5.1f  total %5.1f us/conn\n", $1, $2, $3, $4, $5 }'
