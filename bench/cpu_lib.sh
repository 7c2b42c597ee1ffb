# Sourced by bench/conn_cost.sh and bench/wake_cost.sh: a server's port
# once it listens, its CPU from /proc, stopping it, and medians over rounds.

# group_ticks PGID: user and system clock ticks of every process in the
# process group (a server started with setsid: the VM under sluice-run and
# erl's wrappers), as "USER SYS".
group_ticks() {
    local u=0 s=0 p f
    for p in $(pgrep -g "$1"); do
        f=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null) || continue
        set -- $f
        u=$((u + ${12})); s=$((s + ${13}))
    done
    echo "$u $s"
}

# listening_port NAME OUT: the port a server just started (writing to OUT)
# prints in its `listening on 127.0.0.1:PORT' line, waiting up to 30 s for
# it; if none comes, says so with what the server printed and exits 1.
listening_port() {
    local i port
    for i in $(seq 600); do grep -qs "listening on" "$2" && break; sleep 0.05; done
    port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$2" | head -1)
    [ -n "$port" ] || { echo "$1 did not start within 30 s:" >&2; cat "$2" >&2; exit 1; }
    echo "$port"
}

# stop_group PGID: stop a server started with setsid (SIGTERM to its whole
# process group, so the VM drains and exits) and return once no process of
# the group is left, killing what is left after 30 s: the next server is
# pinned to the same core, and one that drains behind it slows its start.
stop_group() {
    kill -TERM -- -"$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    local i
    for i in $(seq 300); do
        pgrep -g "$1" >/dev/null || return 0
        sleep 0.1
    done
    kill -KILL -- -"$1" 2>/dev/null || true
}

# medians FILE KEYCOL COL...: for each value of column KEYCOL, one line
# "KEY M1 M2 ..." with the median of each COL over the lines of FILE that
# have that key; sorted by key.
medians() {
    local file=$1 key=$2
    shift 2
    awk -v key="$key" -v cols="$*" '
        BEGIN { nc = split(cols, c, " ") }
        { k = $key; keys[k] = 1; for (i = 1; i <= nc; i++) v[k, i] = v[k, i] " " $(c[i]) }
        function med(l,   a, m, i, j, t) {
            m = split(l, a, " ")
            for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
        END { for (k in keys) { line = k; for (i = 1; i <= nc; i++) line = line " " med(v[k, i]); print line } }' \
        "$file" | sort
}
