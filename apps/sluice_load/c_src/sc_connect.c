/* connect: open --conns connections at --rate per second and hold them for
 * --duration.  The engine does the connecting and the failure accounting;
 * this file only decides when a connection counts as established.  With
 * --probe ping that is when "Ping\n" got "Pong\n" back, proof that the server
 * accepted and serves it (a completed handshake only proves the kernel put
 * it in a backlog).  Any close by the server, before or after, is a
 * closed_by_peer failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "load.h"
#include "util.h"

static const unsigned char PING[5] = {'P', 'i', 'n', 'g', '\n'};
static const unsigned char PONG[5] = {'P', 'o', 'n', 'g', '\n'};

static void connect_connected(struct worker *w, struct conn *c, uint64_t now)
{
    conn_want(w, c, EPOLLIN | EPOLLRDHUP);
    if (c->state == CS_PROBING) {
        c->match = 0;
        ssize_t r = conn_write(c, PING, sizeof PING);
        if (r != (ssize_t)sizeof PING)
            conn_lost(w, c, r < 0 ? errno : EIO, now);
    } else {
        w->raw_msgs = w->st.established;
    }
}

static void connect_readable(struct worker *w, struct conn *c, uint64_t now)
{
    long n = conn_read(w, c, now);
    if (n <= 0 || c->state != CS_PROBING)
        return; /* data while holding is ignored; EOF was accounted */
    for (long i = 0; i < n; i++) {
        if (w->rbuf[i] != PONG[c->match]) {
            protocol_error(w, c, "probe: unexpected byte 0x%02x from the "
                           "server (expected \"Pong\\n\")", w->rbuf[i]);
            return;
        }
        if (++c->match == 5) {
            conn_established(w, c, now_ns());
            w->raw_msgs = w->st.established;
            return;
        }
    }
}

static void connect_json(struct run *r, struct json *j)
{
    uint64_t held = 0;
    for (int i = 0; i < r->nw; i++)
        held += r->w[i].up;
    json_str(j, "probe", r->cfg->probe == PROBE_PING ? "ping" : "none");
    json_u64(j, "held_at_end", held);
}

static void connect_text(struct run *r, FILE *f)
{
    uint64_t held = 0;
    for (int i = 0; i < r->nw; i++)
        held += r->w[i].up;
    fprintf(f, "held at end: %llu of %ld (established = %s)\n",
            (unsigned long long)held, r->cfg->conns,
            r->cfg->probe == PROBE_PING ? "Ping answered with Pong"
            : r->cfg->tls ? "TLS handshake completed"
                          : "TCP handshake completed");
}

const struct scenario sc_connect = {
    .connected = connect_connected,
    .readable = connect_readable,
    .json = connect_json,
    .text = connect_text,
};

/* The same scenario, established only after a ping probe. */
const struct scenario sc_connect_probe = {
    .probe = 1,
    .connected = connect_connected,
    .readable = connect_readable,
    .json = connect_json,
    .text = connect_text,
};
