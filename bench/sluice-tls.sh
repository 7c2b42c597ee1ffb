#!/bin/bash
# sluice's TLS transport beside the C reference in one run: the C load
# engine (--tls) against `bin/sluice serve --tls` and `sluice-ref --tls`,
# alternating (sluice, then the reference, in every round), ROUNDS rounds.
# TLS 1.3 (both sides' default), the ECDSA P-256 certificate of `make
# certs` unless said otherwise, full handshakes.
#
#   lockstep    1 connection, ack each; server and engine on core 0
#   pipeline    1 connection, engine's default window/batch, ack last;
#               server core 0, engine core 1
#   handshakes  connect --probe ping, CONNS connections from 127.0.0.2-9,
#               each established once Ping got Pong; server core 0, engine
#               core 1; RSA 2048 certificate (with ECDSA the engine's own
#               handshake work bounds the rate, bench/README.md)
#
# Prints every run (rate, server CPU per message, how busy the server's
# core was) and the medians. The server CPU per message is the figure that
# holds still when the machine is shared.
# usage: bench/sluice-tls.sh [ROUNDS] [CELLS...]   (env: DURATION=3 CONNS=3000
#        SERVE_ARGS="..." extra options for bin/sluice serve)
# Needs `make` (the binaries) and `make certs` (_build/certs).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
priv=$root/apps/sluice_load/priv
certs=$root/_build/certs
rounds=${1:-3}
shift || true
cells=${*:-lockstep pipeline handshakes}
dur=${DURATION:-3}
conns=${CONNS:-3000}
[ -x "$priv/sluice-ref" ] || { echo "run make first" >&2; exit 1; }
[ -s "$certs/server.pem" ] || "$root/bench/certs.sh" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tck=$(getconf CLK_TCK)

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
num() { grep -o "\"$1\":[0-9.e+-]*" "$2" | head -1 | cut -d: -f2; }

# start SERVER CORE "args": starts it, sets $spid (the process to stop) and
# $cpid (the one whose CPU counts: the VM itself for sluice) and $port.
start() {
    local server=$1 sc=$2 args=$3
    : >"$tmp/s.out"
    if [ "$server" = sluice ]; then
        # shellcheck disable=SC2086
        taskset -c "$sc" "$root/bin/sluice" serve --ip 127.0.0.1 --port 0 $args \
            ${SERVE_ARGS:-} >"$tmp/s.out" 2>"$tmp/s.err" &
    else
        # shellcheck disable=SC2086
        taskset -c "$sc" "$priv/sluice-ref" --ip 127.0.0.1 --port 0 --threads 1 $args \
            >"$tmp/s.out" 2>"$tmp/s.err" &
    fi
    spid=$!
    for _ in $(seq 400); do grep -qs listening "$tmp/s.out" && break; sleep 0.05; done
    port=$(sed -n 's/.*://p' "$tmp/s.out" | head -1)
    cpid=$spid
    if [ "$server" = sluice ]; then
        # bin/sluice runs the VM under sluice-run, which forks it.
        cpid=$(pgrep -P "$spid" | head -1)
    fi
}

stop() {
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
}

# run CELL SERVER SERVER_CORE ENGINE_CORE "server args" "engine args"
run() {
    local cell=$1 server=$2 sc=$3 ec=$4 sargs=$5 eargs=$6
    start "$server" "$sc" "$sargs"
    if [ -z "$port" ] || [ -z "$cpid" ]; then
        echo "$cell $server: did not start: $(cat "$tmp/s.err")" >&2
        stop
        return
    fi
    local c0 c1 t0 t1
    c0=$(cpu "$cpid")
    t0=$(date +%s%N)
    # shellcheck disable=SC2086
    taskset -c "$ec" "$priv/sluice-load" --port "$port" --threads 1 --quiet \
        --json "$tmp/e.json" $eargs || true
    t1=$(date +%s%N)
    c1=$(cpu "$cpid")
    stop
    local rate msgs secs
    rate=$(num rate "$tmp/e.json")
    msgs=$(num messages "$tmp/e.json")
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) / 1e9 }')
    awk -v c="$cell" -v m="$server" -v r="$rate" -v n="$msgs" -v cpu=$((c1 - c0)) \
        -v t="$tck" -v s="$secs" 'BEGIN {
        n = (n > 0 ? n : 1)
        printf "%-11s %-7s %12.0f /s  server us/msg %8.3f  server busy %3.0f%%\n",
               c, m, r, cpu / t * 1e6 / n, 100 * cpu / t / s }' | tee -a "$tmp/all"
}

ec="--certfile $certs/server.pem --keyfile $certs/server.key"
rsa="--certfile $certs/server-rsa.pem --keyfile $certs/server-rsa.key"
src="--source-ips 127.0.0.2-9"
for i in $(seq "$rounds"); do
    for cell in $cells; do
        for server in sluice ref; do
            case $cell in
                lockstep)
                    run lockstep $server 0 0 "--tls $ec --protocol ack --ack each" \
                        "--scenario lockstep --duration $dur --tls" ;;
                pipeline)
                    run pipeline $server 0 1 "--tls $ec --protocol ack --ack last" \
                        "--scenario pipeline --ack last --duration $dur --tls" ;;
                handshakes)
                    run handshakes $server 0 1 "--tls $rsa --protocol ping" \
                        "--scenario connect --probe ping --conns $conns --duration 0 $src --tls" ;;
            esac
        done
    done
done
echo "medians of $rounds rounds (each column on its own):"
awk '{ key = $1 " " $2; n[key]++
       v[key, 3, n[key]] = $3; v[key, 7, n[key]] = $7; v[key, 10, n[key]] = $10
       if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
     function med(key, f,   i, j, t, a, c) {
         c = n[key]; for (i = 1; i <= c; i++) a[i] = v[key, f, i] + 0
         for (i = 2; i <= c; i++) for (j = i; j > 1 && a[j] < a[j-1]; j--) {
             t = a[j]; a[j] = a[j-1]; a[j-1] = t }
         return a[int((c + 1) / 2)] }
     END { for (i = 1; i <= k; i++) { key = order[i]; split(key, kk, " ")
           printf "%-11s %-7s %12.0f /s  server us/msg %8.3f  server busy %3.0f%%\n",
                  kk[1], kk[2], med(key, 3), med(key, 7), med(key, 10) } }' "$tmp/all"
