/* A load engine connection's life cycle (established, failed, lost), its
 * I/O (plain or TLS), and the failure accounting by reason. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "load.h"
#include "tls.h"
#include "util.h"

const char *const fail_names[F_NREASONS] = {
    "ECONNREFUSED", "ETIMEDOUT",    "EADDRNOTAVAIL", "EADDRINUSE",
    "EMFILE",       "ENFILE",       "ECONNRESET",    "EHOSTUNREACH",
    "ENETUNREACH",  "ENOBUFS",      "tls_handshake", "tls_timeout",
    "closed_by_peer", "other",
};

int fail_reason_of_errno(int e)
{
    switch (e) {
    case ECONNREFUSED: return F_ECONNREFUSED;
    case ETIMEDOUT: return F_ETIMEDOUT;
    case EADDRNOTAVAIL: return F_EADDRNOTAVAIL;
    case EADDRINUSE: return F_EADDRINUSE;
    case EMFILE: return F_EMFILE;
    case ENFILE: return F_ENFILE;
    case ECONNRESET: return F_ECONNRESET;
    case EHOSTUNREACH: return F_EHOSTUNREACH;
    case ENETUNREACH: return F_ENETUNREACH;
    case ENOBUFS: return F_ENOBUFS;
    default: return F_OTHER;
    }
}

/* ---- connection life cycle ---- */

void conn_want(struct worker *w, struct conn *c, uint32_t events)
{
    if (c->events == (uint8_t)events || c->state == CS_DONE)
        return;
    struct epoll_event e = {.events = events, .data.ptr = c};
    epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &e);
    c->events = (uint8_t)events;
}

static void resolved(struct worker *w, uint64_t now)
{
    w->resolved++;
    w->last_resolve = now;
}

static void conn_close(struct worker *w, struct conn *c)
{
    timer_clear(w, c);
    if (c->ssl)
        SSL_free(c->ssl);
    c->ssl = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    if (conn_pending(c))
        w->pending--;
    else if (c->state == CS_UP)
        w->up--;
    c->state = CS_DONE;
    free(c->sx);
    c->sx = NULL;
}

void conn_established(struct worker *w, struct conn *c, uint64_t now)
{
    if (conn_pending(c))
        w->pending--;
    c->state = CS_UP;
    w->up++;
    w->st.established++;
    hist_record(w->clat, now - c->t_connect);
    if (now > w->st.last_established)
        w->st.last_established = now;
    timer_clear(w, c);
    resolved(w, now);
}

void conn_fail(struct worker *w, struct conn *c, int reason, uint64_t now)
{
    int was_up = c->state == CS_UP;
    w->st.failures[reason]++;
    conn_close(w, c);
    if (!was_up)
        resolved(w, now);
}

void conn_lost_why(struct worker *w, struct conn *c, const char *why,
                   uint64_t now)
{
    if (stopping(w->run)) {
        conn_close(w, c);
        return;
    }
    char local[64];
    sock_local_str(c->fd, local, sizeof local);
    int n = atomic_fetch_add(&w->run->warnings, 1);
    if (n < MAX_WARNINGS)
        fprintf(stderr, PROG ": connection %u (local %s) closed by the "
                "server%s%s%s\n", c->idx, local, why ? " (" : "",
                why ? why : "", why ? ")" : "");
    else if (n == MAX_WARNINGS)
        fprintf(stderr, PROG ": more connections closed by the server; "
                "see the failure counts\n");
    conn_fail(w, c, F_CLOSED_BY_PEER, now);
}

void conn_lost(struct worker *w, struct conn *c, int err, uint64_t now)
{
    conn_lost_why(w, c, !err ? NULL : err == EPROTO && c->ssl
                            ? tls_last_error() : strerror(err), now);
}

void protocol_error(struct worker *w, struct conn *c, const char *fmt, ...)
{
    char local[64], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sock_local_str(c->fd, local, sizeof local);
    int expected = 0;
    if (atomic_compare_exchange_strong(&w->run->proto_error, &expected, 1)) {
        fprintf(stderr, PROG ": protocol error on connection %u (local %s): "
                "%s\n", c->idx, local, msg);
        fflush(stderr);
    }
    atomic_store(&w->run->stop, 1);
    uint64_t one = 1;
    if (write(w->run->main_wake, &one, sizeof one) < 0)
        perror(PROG ": eventfd");
}

long conn_read(struct worker *w, struct conn *c, uint64_t now)
{
    ssize_t n = c->ssl ? tls_read(c->ssl, w->rbuf, w->rbuf_len)
                       : read(c->fd, w->rbuf, w->rbuf_len);
    if (n > 0) {
        /* a full buffer may leave plaintext in OpenSSL, where no epoll
         * event will announce it */
        if (c->ssl && (size_t)n == w->rbuf_len)
            w->tls_pending = 1;
        return n;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    conn_lost(w, c, n < 0 ? errno : 0, now);
    return -1;
}

void engine_close_all(struct worker *w)
{
    for (uint32_t k = 0; k < w->n; k++) {
        struct conn *c = &w->conns[k];
        /* a client that leaves politely: close_notify, then FIN */
        if (c->ssl && c->state == CS_UP)
            (void)SSL_shutdown(c->ssl);
        conn_close(w, c);
        c->state = CS_NEW;
        c->events = c->match = c->flags = 0;
    }
    /* nothing to open until engine_reopen */
    w->next_open = w->n;
    w->pending = w->up = w->resolved = 0;
    w->tls_pending = 0;
}
