/* sluice-ref: the C reference server every Erlang figure is compared with.
 *
 * One thread per core, each with its own SO_REUSEPORT listen socket and its
 * own epoll set (level-triggered), so threads share nothing on the hot path.
 * A read takes up to --buffer bytes; the replies for one read leave in one
 * write.  Replies that do not fit in the socket go to a per-connection out
 * buffer; while that buffer is above OUT_LIMIT the connection is not read
 * (back-pressure on a client that does not read its acks). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "opts.h"
#include "ref_proto.h"
#include "util.h"

#define PROG "sluice-ref"
#define OUT_LIMIT (256 * 1024)
#define MAX_EVENTS 256
#ifndef READS_PER_EVENT
#define READS_PER_EVENT 4 /* re-read a full buffer before epoll again */
#endif
#define ACCEPTS_PER_EVENT 64
#define EMFILE_BACKOFF_MS 50

struct rconn {
    int fd;
    uint32_t events;           /* currently registered with epoll */
    struct proto_state ps;
    unsigned char *ob;         /* pending output */
    uint32_t ob_off, ob_len, ob_cap;
};

struct rthread {
    int id;
    pthread_t th;
    int ep, lfd, wake;
    unsigned char *rbuf, *obuf;
    uint64_t accepted, rejected, oversized, emfile;
    uint64_t lfd_resume;       /* 0, or when to re-arm the listen socket */
};

static struct {
    int protocol, ack, threads;
    long port, max_frame, max_conns, bufsize;
    const char *ip;
} cfg;

static atomic_int g_stop;
static atomic_long g_conns;
static atomic_ulong g_emfile_log_at;
static char g_lmark, g_wmark; /* epoll tags for the listen socket / eventfd */

static void ep_set(struct rthread *t, struct rconn *c, uint32_t ev)
{
    if (c->events == ev)
        return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    epoll_ctl(t->ep, EPOLL_CTL_MOD, c->fd, &e);
    c->events = ev;
}

static void conn_close(struct rthread *t, struct rconn *c)
{
    (void)t;
    close(c->fd); /* also removes it from the epoll set */
    free(c->ob);
    free(c);
    atomic_fetch_sub_explicit(&g_conns, 1, memory_order_relaxed);
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
    uint32_t pending = c->ob_len - c->ob_off;
    ep_set(t, c, pending > OUT_LIMIT ? EPOLLOUT : EPOLLIN | EPOLLOUT);
    return 0;
}

/* Send replies: straight to the socket when nothing is queued. */
static int conn_send(struct rthread *t, struct rconn *c,
                     const unsigned char *p, size_t n)
{
    if (n == 0)
        return 0;
    if (c->ob_len == c->ob_off) {
        ssize_t w = write(c->fd, p, n);
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

static int conn_flush(struct rthread *t, struct rconn *c)
{
    while (c->ob_off < c->ob_len) {
        ssize_t w = write(c->fd, c->ob + c->ob_off, c->ob_len - c->ob_off);
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
        c->ob_off = c->ob_len = 0;
        ep_set(t, c, EPOLLIN);
    } else {
        ep_set(t, c, pending > OUT_LIMIT ? EPOLLOUT : EPOLLIN | EPOLLOUT);
    }
    return 0;
}

/* Returns -1 when the connection must be closed. */
static int conn_readable(struct rthread *t, struct rconn *c)
{
    for (int r = 0; r < READS_PER_EVENT; r++) {
        ssize_t n = read(c->fd, t->rbuf, (size_t)cfg.bufsize);
        if (n == 0)
            return -1;
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        const unsigned char *out = t->obuf;
        long olen;
        switch (cfg.protocol) {
        case PROTO_ACK:
            olen = ack_feed(&c->ps, (enum ack_mode)cfg.ack,
                            (uint32_t)cfg.max_frame, t->rbuf, (size_t)n,
                            t->obuf);
            if (olen < 0) {
                t->oversized++;
                return -1;
            }
            break;
        case PROTO_PING:
            olen = (long)ping_feed(&c->ps, t->rbuf, (size_t)n, t->obuf);
            break;
        default:
            out = t->rbuf;
            olen = n;
            break;
        }
        if (conn_send(t, c, out, (size_t)olen) < 0)
            return -1;
        if (n < cfg.bufsize || !(c->events & EPOLLIN))
            break;
    }
    return 0;
}

static void log_emfile(void)
{
    uint64_t now = now_ns();
    unsigned long at = atomic_load(&g_emfile_log_at);
    if (now >= at && atomic_compare_exchange_strong(&g_emfile_log_at, &at,
                                                    now + NS_PER_S)) {
        fprintf(stderr, PROG ": accept: %s, backing off %d ms\n",
                strerror(EMFILE), EMFILE_BACKOFF_MS);
    }
}

static void do_accept(struct rthread *t)
{
    for (int k = 0; k < ACCEPTS_PER_EVENT; k++) {
        int fd = accept4(t->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM) {
                /* Do not spin on a full fd table: stop polling the listen
                 * socket for a moment; pending clients wait in the backlog. */
                t->emfile++;
                log_emfile();
                struct epoll_event e = {.events = 0, .data.ptr = &g_lmark};
                epoll_ctl(t->ep, EPOLL_CTL_MOD, t->lfd, &e);
                t->lfd_resume = now_ns() + EMFILE_BACKOFF_MS * NS_PER_MS;
            }
            return;
        }
        long n = atomic_fetch_add_explicit(&g_conns, 1, memory_order_relaxed);
        if (cfg.max_conns >= 0 && n >= cfg.max_conns) {
            atomic_fetch_sub_explicit(&g_conns, 1, memory_order_relaxed);
            t->rejected++;
            close(fd);
            continue;
        }
        struct rconn *c = calloc(1, sizeof *c);
        if (!c) {
            atomic_fetch_sub_explicit(&g_conns, 1, memory_order_relaxed);
            close(fd);
            continue;
        }
        set_nodelay(fd);
        c->fd = fd;
        c->events = EPOLLIN;
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(t->ep, EPOLL_CTL_ADD, fd, &e) < 0) {
            conn_close(t, c);
            continue;
        }
        t->accepted++;
    }
}

static void *thread_main(void *arg)
{
    struct rthread *t = arg;
    struct epoll_event evs[MAX_EVENTS];
    while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
        int timeout = -1;
        if (t->lfd_resume) {
            uint64_t now = now_ns();
            if (now >= t->lfd_resume) {
                struct epoll_event e = {.events = EPOLLIN, .data.ptr = &g_lmark};
                epoll_ctl(t->ep, EPOLL_CTL_MOD, t->lfd, &e);
                t->lfd_resume = 0;
            } else {
                timeout = (int)((t->lfd_resume - now) / NS_PER_MS) + 1;
            }
        }
        int n = epoll_wait(t->ep, evs, MAX_EVENTS, timeout);
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            uint32_t ev = evs[i].events;
            if (p == &g_lmark) {
                do_accept(t);
                continue;
            }
            if (p == &g_wmark)
                continue;
            struct rconn *c = p;
            int bad = 0;
            if (ev & EPOLLOUT)
                bad = conn_flush(t, c) < 0;
            if (!bad && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
                (c->events & EPOLLIN))
                bad = conn_readable(t, c) < 0;
            else if (!bad && (ev & EPOLLERR))
                bad = 1;
            if (bad)
                conn_close(t, c);
        }
    }
    return NULL;
}

static int make_listener(struct in_addr ip, int port, int *real_port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr = ip,
                            .sin_port = htons((uint16_t)port)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(fd, SOMAXCONN) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    *real_port = ntohs(a.sin_port);
    return fd;
}

static const char *const protocols[] = {"ack", "ping", "echo", NULL};
static const char *const ack_modes[] = {"each", "last", "counted", NULL};

int main(int argc, char **argv)
{
    long threads = 0;
    cfg.port = 8000;
    cfg.ip = "0.0.0.0";
    cfg.protocol = -1;
    cfg.ack = ACK_EACH;
    cfg.max_frame = 1 << 20;
    cfg.max_conns = -1;
    cfg.bufsize = 262144;
    struct opt opts[] = {
        {"port", OPT_INT, &cfg.port, "P", "8000", "TCP port, 0 = any free port",
         NULL, 0, 65535, 0},
        {"ip", OPT_STR, &cfg.ip, "A", "0.0.0.0", "address to listen on", NULL,
         0, 0, 0},
        {"protocol", OPT_CHOICE, &cfg.protocol, "NAME", NULL,
         "protocol to serve (required)", protocols, 0, 0, 0},
        {"ack", OPT_CHOICE, &cfg.ack, "MODE", "each",
         "ack protocol: one ack per frame, one per read, or one per read with a count",
         ack_modes, 0, 0, 0},
        {"max-frame", OPT_INT, &cfg.max_frame, "BYTES", "1048576",
         "ack protocol: close a connection whose frame is longer", NULL, 0,
         4294967295.0, 0},
        {"threads", OPT_INT, &threads, "T", "number of cores",
         "threads, each with its own SO_REUSEPORT listen socket and epoll set",
         NULL, 1, 1024, 0},
        {"max-connections", OPT_INT, &cfg.max_conns, "N", "unlimited",
         "connections beyond N are accepted and closed at once", NULL, 0,
         1e9, 0},
        {"buffer", OPT_INT, &cfg.bufsize, "BYTES", "262144",
         "bytes per read", NULL, 64, 16 << 20, 0},
        {NULL, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, 0},
    };
    opts_parse(PROG,
               "C reference server for the sluice ack, ping and echo protocols.\n"
               "Prints 'listening on IP:PORT' on stdout once it accepts; "
               "SIGTERM/SIGINT stop it (exit 0).",
               opts, argc, argv);
    if (cfg.protocol < 0)
        usage_error(PROG, "--protocol is required");
    cfg.threads = threads ? (int)threads : ncpus();
    struct in_addr ip;
    if (parse_ipv4(cfg.ip, &ip) < 0)
        usage_error(PROG, "--ip: '%s' is not an IPv4 address", cfg.ip);

    /* Threads inherit this mask; only main takes the signals, via sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct rthread *ts = calloc((size_t)cfg.threads, sizeof *ts);
    int port = (int)cfg.port;
    for (int i = 0; i < cfg.threads; i++) {
        struct rthread *t = &ts[i];
        t->id = i;
        t->lfd = make_listener(ip, port, &port);
        if (t->lfd < 0) {
            fprintf(stderr, PROG ": listen on %s:%d: %s\n", cfg.ip, port,
                    strerror(errno));
            return 1;
        }
        t->ep = epoll_create1(EPOLL_CLOEXEC);
        t->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        t->rbuf = malloc((size_t)cfg.bufsize);
        t->obuf = malloc((size_t)cfg.bufsize + 64);
        if (t->ep < 0 || t->wake < 0 || !t->rbuf || !t->obuf) {
            fprintf(stderr, PROG ": setup: %s\n", strerror(errno));
            return 1;
        }
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = &g_lmark};
        epoll_ctl(t->ep, EPOLL_CTL_ADD, t->lfd, &e);
        struct epoll_event w = {.events = EPOLLIN, .data.ptr = &g_wmark};
        epoll_ctl(t->ep, EPOLL_CTL_ADD, t->wake, &w);
    }
    for (int i = 0; i < cfg.threads; i++)
        if (pthread_create(&ts[i].th, NULL, thread_main, &ts[i]) != 0) {
            fprintf(stderr, PROG ": pthread_create failed\n");
            return 1;
        }
    printf("listening on %s:%d\n", cfg.ip, port);
    fflush(stdout);

    int sig;
    while (sigwait(&sigs, &sig) != 0)
        ;
    atomic_store(&g_stop, 1);
    uint64_t one = 1;
    uint64_t acc = 0, rej = 0, big = 0, emf = 0;
    for (int i = 0; i < cfg.threads; i++)
        if (write(ts[i].wake, &one, sizeof one) < 0)
            perror(PROG ": eventfd");
    for (int i = 0; i < cfg.threads; i++) {
        pthread_join(ts[i].th, NULL);
        close(ts[i].lfd);
        acc += ts[i].accepted;
        rej += ts[i].rejected;
        big += ts[i].oversized;
        emf += ts[i].emfile;
    }
    fprintf(stderr,
            PROG ": stopped: accepted %llu, rejected %llu (max-connections), "
            "closed %llu for oversized frames, %llu accept EMFILE\n",
            (unsigned long long)acc, (unsigned long long)rej,
            (unsigned long long)big, (unsigned long long)emf);
    return 0;
}
