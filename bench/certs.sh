#!/bin/sh
# Throwaway TLS certificates for tests and benchmarks (never commit keys):
# a self-signed CA and two server certificates it signs, for "localhost",
# 127.0.0.1 and ::1:
#
#   DIR/ca.pem, DIR/ca.key             the CA (trust ca.pem to verify)
#   DIR/server.pem, DIR/server.key     ECDSA P-256 (the default to use)
#   DIR/server-rsa.pem, .key           RSA 2048 (the usual web server's)
#
# usage: bench/certs.sh [DIR]   (default: _build/certs of the repository)
# Existing files are kept while they are valid for another day; --force
# makes new ones.  Needs the openssl command (Debian: openssl).
set -eu

force=0
if [ "${1:-}" = "--force" ]; then force=1; shift; fi
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/_build/certs}
mkdir -p "$dir"
cd "$dir"

fresh() {
    [ "$force" = 0 ] && [ -s "$1" ] && [ -s "$2" ] &&
        openssl x509 -in "$1" -noout -checkend 86400 >/dev/null 2>&1
}

umask 077
if ! fresh ca.pem ca.key; then
    force=1 # a new CA: its servers' certificates must follow
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout ca.key -out ca.pem -days 3650 -subj "/CN=sluice test CA" \
        -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
fi

server() { # name, key algorithm options...
    name=$1; shift
    fresh "$name.pem" "$name.key" && return 0
    openssl req -newkey "$@" -nodes -keyout "$name.key" -out "$name.csr" \
        -subj "/CN=localhost" 2>/dev/null
    printf '%s\n' "basicConstraints=CA:FALSE" \
        "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth" \
        "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" > "$name.ext"
    openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key \
        -CAcreateserial -days 825 -extfile "$name.ext" -out "$name.pem" \
        2>/dev/null
    rm -f "$name.csr" "$name.ext"
}

server server ec -pkeyopt ec_paramgen_curve:P-256
server server-rsa rsa:2048
chmod 644 ca.pem server.pem server-rsa.pem
echo "$dir: ca.pem server.pem server.key server-rsa.pem server-rsa.key"
