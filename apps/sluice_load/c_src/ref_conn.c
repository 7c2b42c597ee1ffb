/* A connection of sluice-ref: reads of up to --buffer bytes, the replies
 * to a read in one write, the out buffer and its back-pressure, and (with
 * --tls) the server side of the handshake.  TLS reads and writes keep
 * read(2)/write(2)'s contract on plaintext (tls.c), so the plain paths
 * serve both. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ref.h"

static ssize_t rc_read(struct rconn *c, void *buf, size_t n)
{
    return c->ssl ? tls_read(c->ssl, buf, n) : read(c->fd, buf, n);
}

static ssize_t rc_write(struct rconn *c, const void *buf, size_t n)
{
    return c->ssl ? tls_write(c->ssl, buf, n) : write(c->fd, buf, n);
}

void ep_set(struct rthread *t, struct rconn *c, uint32_t ev)
{
    if (c->events == ev)
        return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    epoll_ctl(t->ep, EPOLL_CTL_MOD, c->fd, &e);
    c->events = ev;
}

void conn_close(struct rthread *t, struct rconn *c)
{
    (void)t;
    SSL_free(c->ssl);
    close(c->fd); /* also removes it from the epoll set */
    free(c->ob);
    free(c);
    atomic_fetch_sub_explicit(&g_conns, 1, memory_order_relaxed);
}

/* What to wait for with `pending' bytes queued: reading pauses over the
 * limit, and a closing connection reads no more. */
static uint32_t out_events(const struct rconn *c, uint32_t pending)
{
    return c->closing || pending > OUT_LIMIT ? EPOLLOUT : EPOLLIN | EPOLLOUT;
}

/* Queue bytes the socket did not take; pause reading when over the limit. */
static int out_append(struct rthread *t, struct rconn *c,
                      const unsigned char *p, size_t n)
{
    if (c->ob_off > 0 && c->ob_off == c->ob_len)
        c->ob_off = c->ob_len = 0;
    if (c->ob_len + n > c->ob_cap) {
        if (c->ob_off > 0) {
            memmove(c->ob, c->ob + c->ob_off, c->ob_len - c->ob_off);
            c->ob_len -= c->ob_off;
            c->ob_off = 0;
        }
        if (c->ob_len + n > c->ob_cap) {
            uint32_t cap = c->ob_cap ? c->ob_cap : 16384;
            while (cap < c->ob_len + n)
                cap *= 2;
            unsigned char *nb = realloc(c->ob, cap);
            if (!nb)
                return -1;
            c->ob = nb;
            c->ob_cap = cap;
        }
    }
    memcpy(c->ob + c->ob_len, p, n);
    c->ob_len += (uint32_t)n;
    ep_set(t, c, out_events(c, c->ob_len - c->ob_off));
    return 0;
}

/* Send replies: straight to the socket when nothing is queued. */
static int conn_send(struct rthread *t, struct rconn *c,
                     const unsigned char *p, size_t n)
{
    if (n == 0)
        return 0;
    if (c->ob_len == c->ob_off) {
        ssize_t w = rc_write(c, p, n);
        if (w < 0) {
            if (errno != EAGAIN && errno != EINTR)
                return -1;
            w = 0;
        }
        if ((size_t)w == n)
            return 0;
        p += w;
        n -= (size_t)w;
    }
    return out_append(t, c, p, n);
}

int conn_flush(struct rthread *t, struct rconn *c)
{
    while (c->ob_off < c->ob_len) {
        ssize_t w = rc_write(c, c->ob + c->ob_off, c->ob_len - c->ob_off);
        if (w < 0) {
            if (errno == EAGAIN)
                break;
            if (errno == EINTR)
                continue;
            return -1;
        }
        c->ob_off += (uint32_t)w;
    }
    uint32_t pending = c->ob_len - c->ob_off;
    if (pending == 0) {
        if (c->closing)
            return -1;
        c->ob_off = c->ob_len = 0;
        ep_set(t, c, EPOLLIN);
    } else {
        ep_set(t, c, out_events(c, pending));
    }
    return 0;
}

/* The end of what the client sends (its EOF, or a protocol error after the
 * replies owed before it): close once those replies are out.  Closing at
 * once freed the out buffer: a client that half-closed after its last
 * request lost the replies the socket had not taken yet, which sluice and
 * the peers send. */
static int conn_finish(struct rthread *t, struct rconn *c)
{
    if (c->ob_off == c->ob_len)
        return -1;
    c->closing = 1;
    ep_set(t, c, EPOLLOUT);
    return 0;
}

/* Returns -1 when the connection must be closed. */
int conn_readable(struct rthread *t, struct rconn *c)
{
    for (int r = 0; r < READS_PER_EVENT; r++) {
        ssize_t n = rc_read(c, t->rbuf, (size_t)cfg.bufsize);
        if (n == 0)
            return conn_finish(t, c);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        const unsigned char *out = t->obuf;
        size_t olen;
        switch (cfg.protocol) {
        case PROTO_ACK:
            olen = ack_feed(&c->ps, (enum ack_mode)cfg.ack,
                            (uint32_t)cfg.max_frame, t->rbuf, (size_t)n,
                            t->obuf);
            t->oversized += c->ps.error;
            break;
        case PROTO_PING:
            olen = ping_feed(&c->ps, t->rbuf, (size_t)n, t->obuf);
            break;
        default:
            out = t->rbuf;
            olen = (size_t)n;
            break;
        }
        if (conn_send(t, c, out, olen) < 0)
            return -1;
        /* a protocol error: the replies owed before it, then the close */
        if (c->ps.error)
            return conn_finish(t, c);
        if (n < cfg.bufsize || !(c->events & EPOLLIN))
            break;
    }
    /* Plaintext left in OpenSSL has no epoll event of its own: ask for
     * EPOLLOUT, which fires at once, and read it on that round. */
    if (c->ssl && (c->events & EPOLLIN) && SSL_has_pending(c->ssl))
        ep_set(t, c, EPOLLIN | EPOLLOUT);
    return 0;
}

/* One step of the server side of a TLS handshake; -1: close it. */
int conn_handshake(struct rthread *t, struct rconn *c)
{
    unsigned want = 0;
    int r = tls_handshake(c->ssl, &want);
    if (r == 0) {
        ep_set(t, c, want);
        return 0;
    }
    if (r < 0) {
        t->tls_failed++;
        return -1;
    }
    c->handshaking = 0;
    ep_set(t, c, EPOLLIN);
    /* the client's first bytes may have come with its Finished */
    return SSL_has_pending(c->ssl) ? conn_readable(t, c) : 0;
}
