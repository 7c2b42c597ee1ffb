/* The load engine core: one epoll loop per worker thread, non-blocking
 * connects from round-robin source addresses, a timer heap per worker.
 * A connection's life cycle, I/O and failure accounting are in conn.c;
 * what flows on an established connection belongs to the scenario
 * (struct scenario). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "load.h"
#include "tls.h"
#include "util.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define MAX_EVENTS 512
#define OPENS_PER_ROUND 16
#define OPENS_PER_ROUND_BURST 64 /* storm: reopen as fast as we can */
#define RBUF_LEN (256 * 1024)

/* ---- timer heap (min-heap on conn->deadline, conns know their slot) ---- */

static void heap_swap(struct worker *w, uint32_t a, uint32_t b)
{
    struct conn *t = w->heap[a];
    w->heap[a] = w->heap[b];
    w->heap[b] = t;
    w->heap[a]->heap_pos = a;
    w->heap[b]->heap_pos = b;
}

static void heap_up(struct worker *w, uint32_t i)
{
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (w->heap[p]->deadline <= w->heap[i]->deadline)
            break;
        heap_swap(w, i, p);
        i = p;
    }
}

static void heap_down(struct worker *w, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->heap_n && w->heap[l]->deadline < w->heap[m]->deadline)
            m = l;
        if (r < w->heap_n && w->heap[r]->deadline < w->heap[m]->deadline)
            m = r;
        if (m == i)
            break;
        heap_swap(w, i, m);
        i = m;
    }
}

void timer_set(struct worker *w, struct conn *c, uint64_t deadline)
{
    if (c->heap_pos == HEAP_NONE) {
        c->deadline = deadline;
        c->heap_pos = w->heap_n;
        w->heap[w->heap_n++] = c;
        heap_up(w, c->heap_pos);
    } else {
        uint64_t old = c->deadline;
        c->deadline = deadline;
        if (deadline < old)
            heap_up(w, c->heap_pos);
        else
            heap_down(w, c->heap_pos);
    }
}

void timer_clear(struct worker *w, struct conn *c)
{
    uint32_t i = c->heap_pos;
    if (i == HEAP_NONE)
        return;
    c->heap_pos = HEAP_NONE;
    w->heap_n--;
    if (i == w->heap_n)
        return;
    w->heap[i] = w->heap[w->heap_n];
    w->heap[i]->heap_pos = i;
    heap_up(w, i);
    heap_down(w, w->heap[i]->heap_pos);
}

static void conn_open(struct worker *w, struct conn *c, uint64_t now)
{
    struct cfg *cfg = w->run->cfg;
    c->t_connect = now;
    w->st.attempts++;
    if (!w->st.first_connect)
        w->st.first_connect = now;
    int fd = socket(cfg->dst.sa.sa_family,
                    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        c->state = CS_NEW;
        conn_fail(w, c, fail_reason_of_errno(errno), now);
        return;
    }
    c->fd = fd;
    c->state = CS_CONNECTING;
    w->pending++;
    set_nodelay(fd);
    if (cfg->nsrc > 0) {
        /* Let connect() pick the port, so (src, dst) pairs, not bind(),
         * limit how many connections one source address can hold (an
         * IPPROTO_IP option that IPv6 sockets take too).  The sources
         * are of dst's family (load_config.c). */
        int one = 1;
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
        if (bind(fd, &cfg->src[c->idx % cfg->nsrc].sa, cfg->dst_len) < 0) {
            conn_fail(w, c, fail_reason_of_errno(errno), now);
            return;
        }
    }
    if (connect(fd, &cfg->dst.sa, cfg->dst_len) < 0 &&
        errno != EINPROGRESS) {
        conn_fail(w, c, fail_reason_of_errno(errno), now);
        return;
    }
    struct epoll_event e = {.events = EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &e) < 0) {
        conn_fail(w, c, fail_reason_of_errno(errno), now);
        return;
    }
    c->events = EPOLLOUT;
    timer_set(w, c, now + (uint64_t)cfg->connect_timeout_ms * NS_PER_MS);
}

static void conn_handshake(struct worker *w, struct conn *c, uint64_t now)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err) {
        conn_fail(w, c, fail_reason_of_errno(err), now);
        return;
    }
    w->st.handshakes++;
    if (w->run->cfg->tls) {
        c->t_a = now;
        engine_tls_start(w, c, now); /* connect timeout still armed */
        return;
    }
    conn_ready(w, c, now);
}

void conn_ready(struct worker *w, struct conn *c, uint64_t now)
{
    conn_want(w, c, 0);
    if (w->run->sc->probe) {
        c->state = CS_PROBING; /* connect timeout still armed */
    } else {
        conn_established(w, c, now);
    }
    w->run->sc->connected(w, c, now);
}

static void open_due(struct worker *w, uint64_t now)
{
    struct run *r = w->run;
    int opened = 0;
    w->next_open_at = 0;
    while (w->next_open < w->n && w->pending < w->pending_cap) {
        struct conn *c = &w->conns[w->next_open];
        if (r->cfg->scenario >= SC_PING && r->cfg->rate > 0 && !w->burst) {
            uint64_t due = r->t0 + (uint64_t)((double)c->idx * 1e9 /
                                              r->cfg->rate);
            if (due > now) {
                w->next_open_at = due;
                return;
            }
        }
        if (opened++ == (w->burst ? OPENS_PER_ROUND_BURST : OPENS_PER_ROUND)) {
            w->next_open_at = now;
            return;
        }
        w->next_open++;
        conn_open(w, c, now);
    }
}

void worker_publish(struct worker *w)
{
    atomic_store_explicit(&w->pub_msgs, w->raw_msgs, memory_order_relaxed);
    atomic_store_explicit(&w->pub_up, w->up, memory_order_relaxed);
    atomic_store_explicit(&w->pub_pending, w->pending, memory_order_relaxed);
    atomic_store_explicit(&w->pub_unopened, w->n - w->next_open,
                          memory_order_relaxed);
    atomic_store_explicit(&w->pub_last_resolve, w->last_resolve,
                          memory_order_relaxed);
    atomic_store_explicit(&w->pub_resolved, w->resolved, memory_order_relaxed);
    uint64_t e = 0;
    for (int i = 0; i < F_NREASONS; i++) {
        e += w->st.failures[i];
        atomic_store_explicit(&w->pub_fail[i], w->st.failures[i],
                              memory_order_relaxed);
    }
    atomic_store_explicit(&w->pub_failed, e, memory_order_relaxed);
    atomic_store_explicit(&w->pub_attempts, w->st.attempts,
                          memory_order_relaxed);
    atomic_store_explicit(&w->pub_established, w->st.established,
                          memory_order_relaxed);
    if (w->run->sc->errors)
        e += w->run->sc->errors(w);
    atomic_store_explicit(&w->pub_errors, e, memory_order_relaxed);
    atomic_store(&w->pub_phase, w->phase); /* after the counters */
}

static void wait_events(struct worker *w, struct epoll_event *evs, int *n,
                        uint64_t now)
{
    uint64_t until = now + NS_PER_S / 4;
    if (w->heap_n && w->heap[0]->deadline < until)
        until = w->heap[0]->deadline;
    if (w->next_open_at && w->next_open_at < until)
        until = w->next_open_at;
    uint64_t wait = until > now && !w->tls_pending ? until - now : 0;
    /* epoll_pwait2 takes nanoseconds: open-loop --rate needs sub-ms sends */
    struct timespec ts = {.tv_sec = (time_t)(wait / NS_PER_S),
                          .tv_nsec = (long)(wait % NS_PER_S)};
    *n = epoll_pwait2(w->ep, evs, MAX_EVENTS, &ts, NULL);
    if (*n < 0 && errno == ENOSYS)
        *n = epoll_wait(w->ep, evs, MAX_EVENTS,
                        (int)((wait + NS_PER_MS - 1) / NS_PER_MS));
    if (*n < 0)
        *n = 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->run;
    const struct scenario *sc = r->sc;
    struct epoll_event evs[MAX_EVENTS];
    uint64_t now = now_ns();
    open_due(w, now);
    while (!stopping(r)) {
        int n;
        worker_publish(w);
        wait_events(w, evs, &n, now);
        now = now_ns();
        for (int i = 0; i < n && !stopping(r); i++) {
            struct conn *c = evs[i].data.ptr;
            uint32_t ev = evs[i].events;
            if (!c) {
                uint64_t v;
                if (read(w->wake, &v, sizeof v) < 0)
                    (void)0;
                continue;
            }
            if (c->state == CS_DONE)
                continue;
            if (c->state == CS_CONNECTING) {
                conn_handshake(w, c, now);
                continue;
            }
            if (c->state == CS_TLS) {
                engine_tls_step(w, c, now);
                continue;
            }
            if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))
                sc->readable(w, c, now);
            if ((ev & EPOLLOUT) && c->state != CS_DONE && sc->writable)
                sc->writable(w, c, now);
        }
        if (w->heap_n && w->heap[0]->deadline <= now) {
            now = now_ns();
            while (w->heap_n && w->heap[0]->deadline <= now && !stopping(r)) {
                struct conn *c = w->heap[0];
                timer_clear(w, c);
                if (c->state == CS_TLS)
                    conn_fail(w, c, F_TLS_TIMEOUT, now);
                else if (conn_pending(c))
                    conn_fail(w, c, F_ETIMEDOUT, now);
                else if (c->state == CS_UP && sc->timer)
                    sc->timer(w, c, now);
            }
        }
        if (w->tls_pending)
            engine_tls_drain(w, now);
        int phase = atomic_load(&r->phase);
        if (phase != w->phase && sc->phase) {
            w->phase = phase;
            sc->phase(w, phase, now);
        }
        if (w->next_open < w->n)
            open_due(w, now);
    }
    now = now_ns();
    if (sc->finish)
        sc->finish(w, now);
    worker_publish(w);
    return NULL;
}

int engine_start(struct run *r)
{
    struct cfg *cfg = r->cfg;
    int nw = r->nw;
    uint32_t cap_total = (uint32_t)cfg->connect_concurrency;
    for (int i = 0; i < nw; i++) {
        struct worker *w = &r->w[i];
        w->run = r;
        w->id = i;
        w->n = (uint32_t)((cfg->conns - i + nw - 1) / nw);
        w->conns = calloc(w->n ? w->n : 1, sizeof *w->conns);
        w->heap = calloc(w->n ? w->n : 1, sizeof *w->heap);
        w->lat = malloc(sizeof *w->lat);
        w->clat = malloc(sizeof *w->clat);
        w->tlslat = malloc(sizeof *w->tlslat);
        w->rbuf_len = RBUF_LEN;
        w->rbuf = malloc(w->rbuf_len);
        w->pending_cap = cap_total / (uint32_t)nw;
        if (w->pending_cap < 1)
            w->pending_cap = 1;
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        w->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (!w->conns || !w->heap || !w->lat || !w->clat || !w->tlslat ||
            !w->rbuf || w->ep < 0 || w->wake < 0 ||
            engine_tls_worker_init(w) < 0) {
            fprintf(stderr, PROG ": worker setup: %s\n", strerror(errno));
            return -1;
        }
        hist_init(w->lat);
        hist_init(w->clat);
        hist_init(w->tlslat);
        for (uint32_t k = 0; k < w->n; k++) {
            struct conn *c = &w->conns[k];
            c->fd = -1;
            c->idx = (uint32_t)i + k * (uint32_t)nw;
            c->heap_pos = HEAP_NONE;
        }
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = NULL};
        epoll_ctl(w->ep, EPOLL_CTL_ADD, w->wake, &e);
        if (r->sc->worker_init)
            r->sc->worker_init(w);
    }
    r->t0 = now_ns();
    for (int i = 0; i < nw; i++)
        if (pthread_create(&r->w[i].th, NULL, worker_main, &r->w[i]) != 0) {
            fprintf(stderr, PROG ": pthread_create failed\n");
            return -1;
        }
    return 0;
}

void engine_reopen(struct worker *w, uint64_t now)
{
    w->next_open = 0;
    w->burst = 1;
    w->pending_cap = w->n ? w->n : 1;
    w->next_open_at = now;
}

void engine_join(struct run *r)
{
    uint64_t one = 1;
    atomic_store(&r->stop, 1);
    for (int i = 0; i < r->nw; i++)
        if (write(r->w[i].wake, &one, sizeof one) < 0)
            perror(PROG ": eventfd");
    for (int i = 0; i < r->nw; i++)
        pthread_join(r->w[i].th, NULL);
    /* Connections stay open until here so that the server sees no close
     * while any worker is still measuring. */
    for (int i = 0; i < r->nw; i++)
        for (uint32_t k = 0; k < r->w[i].n; k++)
            if (r->w[i].conns[k].fd >= 0)
                close(r->w[i].conns[k].fd);
}
