/* storm: the reconnect storm after a deploy or a network blip.
 *
 * Wave 1 ("open"): --conns connections at --rate (0: as fast as
 * --connect-concurrency allows), each pinged once; with --probe ping (the
 * default) a connection is back when its Ping got a Pong, i.e. when the
 * server accepted and served it, not when the kernel queued it.  Its rate
 * is the held-connection accept rate (--connect-concurrency 1: a
 * sequential client's).  Then "hold" for --duration, "close" every
 * connection from this side, and wave 2 ("reopen"): all of them at once,
 * with no concurrency cap and no rate.  Per wave: the time until all were
 * back, the connect latency (a dropped SYN costs a >= 1 s retransmit), the
 * latency until back, failures by reason; around wave 2 the kernel's
 * ListenOverflows/ListenDrops.  The main thread drives the phases
 * (storm_control); each worker acts on them in storm_phase. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "load.h"
#include "sc_storm.h"
#include "util.h"

static const unsigned char PING[5] = {'P', 'i', 'n', 'g', '\n'};
static const unsigned char PONG[5] = {'P', 'o', 'n', 'g', '\n'};

struct storm_state storm_st;

static struct wave *wave(struct worker *w)
{
    return &((struct storm_worker *)w->sw)->wv[w->phase >= ST_REOPEN];
}

static void storm_worker_init(struct worker *w)
{
    struct storm_worker *s = calloc(1, sizeof *s);
    for (int i = 0; i < 2; i++) {
        hist_init(&s->wv[i].up);
        hist_init(&s->wv[i].back);
    }
    w->sw = s;
}

static void back(struct worker *w, struct conn *c, uint64_t now)
{
    struct wave *v = wave(w);
    v->nback++;
    hist_record(&v->back, now - c->t_connect);
    if (now > v->last_back)
        v->last_back = now;
    w->raw_msgs++;
}

static void storm_connected(struct worker *w, struct conn *c, uint64_t now)
{
    struct wave *v = wave(w);
    v->nup++;
    hist_record(&v->up, now - c->t_connect);
    conn_want(w, c, EPOLLIN | EPOLLRDHUP);
    if (c->state != CS_PROBING) {
        back(w, c, now);
        return;
    }
    c->match = 0;
    long r = conn_write(c, PING, sizeof PING);
    if (r != (long)sizeof PING)
        conn_lost(w, c, r < 0 ? errno : EIO, now);
}

static void storm_readable(struct worker *w, struct conn *c, uint64_t now)
{
    long n = conn_read(w, c, now);
    if (n <= 0 || c->state != CS_PROBING)
        return; /* data while holding is ignored; EOF was accounted */
    for (long i = 0; i < n; i++) {
        if (w->rbuf[i] != PONG[c->match]) {
            protocol_error(w, c, "unexpected byte 0x%02x from the server "
                           "(expected \"Pong\\n\")", w->rbuf[i]);
            return;
        }
        if (++c->match == 5) {
            now = now_ns();
            conn_established(w, c, now);
            back(w, c, now);
            return;
        }
    }
}

static void storm_phase(struct worker *w, int phase, uint64_t now)
{
    struct storm_worker *s = w->sw;
    if (phase == ST_CLOSE) {
        uint64_t one = 1;
        engine_close_all(w);
        worker_publish(w); /* then tell main at once: it times the close */
        if (write(w->run->main_wake, &one, sizeof one) < 0)
            (void)0;
    } else if (phase == ST_REOPEN) {
        /* what wave 1 (and the hold) failed, and what is wave 2's */
        memcpy(s->wv[0].failures, w->st.failures, sizeof w->st.failures);
        s->wv[0].attempts = w->st.attempts;
        engine_reopen(w, now);
    }
}

static void storm_finish(struct worker *w, uint64_t now)
{
    struct storm_worker *s = w->sw;
    (void)now;
    struct wave *v0 = &s->wv[0], *v1 = &s->wv[1];
    if (w->phase < ST_REOPEN) { /* ended early: all of it is wave 1's */
        memcpy(v0->failures, w->st.failures, sizeof w->st.failures);
        v0->attempts = w->st.attempts;
        return;
    }
    for (int k = 0; k < F_NREASONS; k++)
        v1->failures[k] = w->st.failures[k] - v0->failures[k];
    v1->attempts = w->st.attempts - v0->attempts;
    for (uint32_t k = 0; k < w->n; k++)
        if (w->conns[k].t_connect > v1->last_connect)
            v1->last_connect = w->conns[k].t_connect;
}

static uint64_t sum_pub(struct run *r, int resolved)
{
    uint64_t n = 0;
    for (int i = 0; i < r->nw; i++)
        n += atomic_load_explicit(resolved ? &r->w[i].pub_resolved
                                           : &r->w[i].pub_established,
                                  memory_order_relaxed);
    return n;
}

static int all_at(struct run *r, int phase)
{
    for (int i = 0; i < r->nw; i++)
        if (atomic_load(&r->w[i].pub_phase) != phase)
            return 0;
    return 1;
}

static void go_phase(struct run *r, int phase)
{
    uint64_t one = 1;
    storm_st.phase = phase;
    atomic_store(&r->phase, phase);
    for (int i = 0; i < r->nw; i++) /* act now, not at the next timeout */
        if (write(r->w[i].wake, &one, sizeof one) < 0)
            (void)0;
}

static int storm_control(struct run *r, uint64_t now, const char **phase)
{
    static const char *const names[] = {"open", "hold", "close", "reopen",
                                        "done"};
    uint64_t conns = (uint64_t)r->cfg->conns;
    if (!atomic_load(&r->mstart)) { /* the report's time: the whole run */
        atomic_store(&r->mend, UINT64_MAX);
        atomic_store(&r->mstart, r->t0);
    }
    *phase = names[storm_st.phase];
    switch (storm_st.phase) {
    case ST_OPEN:
        if (sum_pub(r, 1) < conns)
            return 0;
        if (!storm_st.t_open_done)
            storm_st.t_open_done = now;
        if (sum_pub(r, 0) == 0)
            return 1; /* nothing came up: no storm to make */
        if (!r->go) {
            /* --go-stdin: engines of one run hold, close and reopen
             * together, on the coordinator's go */
            *phase = "ready";
            return 0;
        }
        storm_st.t_hold_end = now + (uint64_t)(r->cfg->duration * 1e9);
        go_phase(r, ST_HOLD);
        *phase = names[ST_HOLD];
        return 0;
    case ST_HOLD:
        if (now < storm_st.t_hold_end)
            return 0;
        storm_st.t_close = now;
        go_phase(r, ST_CLOSE);
        return 0;
    case ST_CLOSE:
        if (!all_at(r, ST_CLOSE))
            return 0;
        listen_counters_read(&storm_st.k0);
        storm_st.t_reopen = now_ns();
        go_phase(r, ST_REOPEN);
        return 0;
    case ST_REOPEN:
        if (!all_at(r, ST_REOPEN) || sum_pub(r, 1) < conns)
            return 0;
        listen_counters_read(&storm_st.k1);
        storm_st.t_done = now;
        storm_st.phase = ST_DONE;
        *phase = names[ST_DONE];
        return 1;
    default:
        return 1;
    }
}

void storm_sources(struct cfg *cfg)
{
    long lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &lo, &hi) != 2)
            lo = 32768, hi = 60999;
        fclose(f);
    }
    /* Wave 2 needs fresh ports: wave 1's sit in TIME_WAIT (closed by this
     * side), and even tcp_tw_reuse waits a second.  And connect() searches
     * one half of the range first and crawls once that half is used up on
     * an address (docs/load.md; the coordinator's 12,000 a source address
     * on the default range): stay at 85% of half the range. */
    long per = (hi - lo + 1) / 2 * 85 / 100;
    long need = 2 * cfg->conns;
    if (per < 1 || need <= per)
        return;
    long k = (need + per - 1) / per;
    /* IPv6 has one loopback address, ::1: nothing to choose from */
    if (cfg->dst.sa.sa_family != AF_INET ||
        (ntohl(cfg->dst.in4.sin_addr.s_addr) >> 24) != 127 || k > 250) {
        fprintf(stderr, PROG ": storm: 2 x %ld connects need more ephemeral "
                "ports than one source address has (%ld); pass --source-ips\n",
                cfg->conns, hi - lo + 1);
        return;
    }
    cfg->src = malloc((size_t)k * sizeof *cfg->src);
    for (long i = 0; i < k; i++)
        cfg->src[i] = (union sockaddr_any){.in4 = {
            .sin_family = AF_INET,
            .sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)i)}}; /* 127.0.0.2.. */
    cfg->nsrc = (int)k;
    cfg->src_auto = 1;
}

const struct scenario sc_storm = {
    .worker_init = storm_worker_init,
    .connected = storm_connected,
    .readable = storm_readable,
    .finish = storm_finish,
    .json = storm_json,
    .text = storm_text,
    .control = storm_control,
    .phase = storm_phase,
};

/* The same scenario, back only once Ping got Pong (the default). */
const struct scenario sc_storm_probe = {
    .probe = 1,
    .worker_init = storm_worker_init,
    .connected = storm_connected,
    .readable = storm_readable,
    .finish = storm_finish,
    .json = storm_json,
    .text = storm_text,
    .control = storm_control,
    .phase = storm_phase,
};
