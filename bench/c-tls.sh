#!/bin/bash
# TLS beside plain TCP in one run: the C load engine against the C
# reference server (sluice-ref), plain and --tls alternating, ROUNDS rounds.
#
#   lockstep    1 connection, ack each; server and engine on core 0
#   pipeline    1 connection, engine's default window/batch, ack last;
#               server core 0, engine core 1
#   handshakes  connect --probe ping, CONNS connections from 127.0.0.2-9,
#               established once Ping got Pong; server core 0, engine
#               core 1; TLS with the ECDSA P-256 and the RSA 2048 server
#               certificate, full handshakes (no resumption)
#
# Prints every run (rate, server CPU per message) and the medians.
# usage: bench/c-tls.sh [ROUNDS]   (env: DURATION=3 CONNS=5000)
# Needs `make` (the binaries) and `make certs` (_build/certs).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
priv=$root/apps/sluice_load/priv
certs=$root/_build/certs
rounds=${1:-3}
dur=${DURATION:-3}
conns=${CONNS:-5000}
[ -x "$priv/sluice-ref" ] || { echo "run make first" >&2; exit 1; }
[ -s "$certs/server.pem" ] || "$root/bench/certs.sh" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tck=$(getconf CLK_TCK)

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
num() { grep -o "\"$1\":[0-9.e+-]*" "$2" | head -1 | cut -d: -f2; }

# run CELL MODE SERVER_CORE ENGINE_CORE "ref args" "engine args"
run() {
    local cell=$1 mode=$2 sc=$3 ec=$4 rargs=$5 eargs=$6
    taskset -c "$sc" "$priv/sluice-ref" --port 0 --threads 1 $rargs \
        >"$tmp/ref.out" 2>"$tmp/ref.err" &
    local pid=$!
    for _ in $(seq 200); do grep -qs listening "$tmp/ref.out" && break; sleep 0.05; done
    local port
    port=$(sed -n 's/.*://p' "$tmp/ref.out")
    if [ -z "$port" ]; then
        echo "$cell $mode: sluice-ref did not start: $(cat "$tmp/ref.err")" >&2
        kill $pid 2>/dev/null || true
        return
    fi
    local c0 c1 t0 t1
    c0=$(cpu $pid)
    t0=$(date +%s%N)
    taskset -c "$ec" "$priv/sluice-load" --port "$port" --threads 1 --quiet \
        --json "$tmp/e.json" $eargs || true
    t1=$(date +%s%N)
    c1=$(cpu $pid)
    kill $pid
    wait $pid 2>/dev/null || true
    local rate msgs eu es secs
    rate=$(num rate "$tmp/e.json")
    msgs=$(num messages "$tmp/e.json")
    eu=$(num user "$tmp/e.json")
    es=$(num sys "$tmp/e.json")
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) / 1e9 }')
    awk -v c="$cell" -v m="$mode" -v r="$rate" -v n="$msgs" -v e="$eu" \
        -v es="$es" -v cpu=$((c1 - c0)) -v t="$tck" -v s="$secs" 'BEGIN {
        n = (n > 0 ? n : 1)
        printf "%-11s %-10s %12.0f /s  us/msg: server %8.3f engine %8.3f" \
               "  server busy %3.0f%%\n", c, m, r, cpu / t * 1e6 / n,
               (e + es) * 1e6 / n, 100 * cpu / t / s }' | tee -a "$tmp/all"
}

tls_ec="--tls --certfile $certs/server.pem --keyfile $certs/server.key"
tls_rsa="--tls --certfile $certs/server-rsa.pem --keyfile $certs/server-rsa.key"
src="--source-ips 127.0.0.2-9"
for i in $(seq "$rounds"); do
    for m in plain tls; do
        t=""; [ $m = tls ] && t="--tls"
        r=""; [ $m = tls ] && r=$tls_ec
        run lockstep $m 0 0 "--protocol ack $r" \
            "--scenario lockstep --duration $dur $t"
        run pipeline $m 0 1 "--protocol ack --ack last $r" \
            "--scenario pipeline --ack last --duration $dur $t"
    done
    for m in plain tls-ecdsa tls-rsa; do
        case $m in
            plain) r=""; t="" ;;
            tls-ecdsa) r=$tls_ec; t="--tls" ;;
            tls-rsa) r=$tls_rsa; t="--tls" ;;
        esac
        run handshakes $m 0 1 "--protocol ping $r" \
            "--scenario connect --probe ping --conns $conns --duration 0 $src $t"
    done
done
echo "medians of $rounds rounds (each column on its own):"
awk '{ key = $1 " " $2; n[key]++
       for (f = 3; f <= NF; f++) if ($f ~ /^[0-9.]+%?$/) v[key, f, n[key]] = $f + 0
       if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
     function med(key, f,   i, j, t, a, c) {
         c = n[key]; for (i = 1; i <= c; i++) a[i] = v[key, f, i]
         for (i = 2; i <= c; i++) for (j = i; j > 1 && a[j] < a[j-1]; j--) {
             t = a[j]; a[j] = a[j-1]; a[j-1] = t }
         return a[int((c + 1) / 2)] }
     END { for (i = 1; i <= k; i++) { key = order[i]; split(key, kk, " ")
           printf "%-11s %-10s %12.0f /s  us/msg: server %8.3f engine %8.3f" \
                  "  server busy %3.0f%%\n", kk[1], kk[2], med(key, 3),
                  med(key, 7), med(key, 9), med(key, 12) } }' "$tmp/all"
