#!/bin/bash
# Accept storms against the C reference server (sluice-ref, one thread on
# core 0; the engine, one thread, on core 1), ROUNDS rounds of:
#
#   storm      --scenario storm --conns CONNS: wave 1 at the engine's
#              --connect-concurrency (256), hold 1 s, all closed by the
#              client, wave 2 all at once; each connection back when its
#              Ping got a Pong
#   sequential wave 1 as the issue's client: one connect at a time
#              (--connect-concurrency 1), no ping (--probe none: a connect
#              is done at the SYN-ACK, as a blocking connect() is), four
#              source addresses, connections held: the held-connection
#              accept rate; the kernel's overflow counters show whether
#              the server kept up
#
# Prints the engine's storm summary of each run.
# usage: bench/c-storm.sh [ROUNDS]   (env: CONNS=15000)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
priv=$root/apps/sluice_load/priv
rounds=${1:-3}
conns=${CONNS:-15000}
[ -x "$priv/sluice-ref" ] || { echo "run make first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

start_ref() {
    taskset -c 0 "$priv/sluice-ref" --port 0 --threads 1 --protocol ping \
        >"$tmp/ref.out" 2>/dev/null &
    pid=$!
    for _ in $(seq 200); do grep -qs listening "$tmp/ref.out" && break; sleep 0.05; done
    port=$(sed -n 's/.*://p' "$tmp/ref.out")
}

for i in $(seq "$rounds"); do
    start_ref
    echo "== round $i: storm of $conns"
    taskset -c 1 "$priv/sluice-load" --scenario storm --conns "$conns" \
        --threads 1 --port "$port" | sed -n '/^storm:/,/^kernel during/p' || true
    kill $pid; wait $pid 2>/dev/null || true
    start_ref
    echo "== round $i: sequential client, $conns held"
    taskset -c 1 "$priv/sluice-load" --scenario storm --conns "$conns" \
        --threads 1 --port "$port" --connect-concurrency 1 --probe none \
        --source-ips 127.0.0.2-5 --duration 0 |
        awk '/^wave 1/ { p = 1 } /^closed/ { p = 0 } p; /^kernel over/' || true
    kill $pid; wait $pid 2>/dev/null || true
done
