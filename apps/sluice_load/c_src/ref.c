/* sluice-ref: the C reference server every Erlang figure is compared with.
 *
 * One thread per core, each with its own SO_REUSEPORT listen socket and its
 * own epoll set (level-triggered), so threads share nothing on the hot path.
 * A read takes up to --buffer bytes; the replies for one read leave in one
 * write.  Replies that do not fit in the socket go to a per-connection out
 * buffer; while that buffer is above OUT_LIMIT the connection is not read
 * (back-pressure on a client that does not read its acks).  With --tls the
 * same loop runs OpenSSL non-blocking: the handshake is a state of the
 * connection, and reads and writes keep read(2)/write(2)'s contract on
 * plaintext (ref_conn.c, tls.c). */
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
#include "ref.h"
#include "util.h"

#define MAX_EVENTS 256
#define ACCEPTS_PER_EVENT 64
#define EMFILE_BACKOFF_MS 50

struct ref_cfg cfg;
static atomic_int g_stop;
atomic_long g_conns;
static atomic_ulong g_emfile_log_at;
static char g_lmark, g_wmark; /* epoll tags for the listen socket / eventfd */

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
        if (cfg.ctx) {
            c->ssl = SSL_new(cfg.ctx);
            if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) {
                t->tls_failed++;
                close(fd);
                free(c);
                atomic_fetch_sub_explicit(&g_conns, 1, memory_order_relaxed);
                continue;
            }
            SSL_set_accept_state(c->ssl);
            c->handshaking = 1; /* the ClientHello: EPOLLIN */
        }
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
            if (c->handshaking) {
                if (conn_handshake(t, c) < 0)
                    conn_close(t, c);
                continue;
            }
            if (ev & EPOLLOUT)
                bad = conn_flush(t, c) < 0;
            if (!bad && (c->events & EPOLLIN) &&
                ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) ||
                 (c->ssl && SSL_has_pending(c->ssl))))
                bad = conn_readable(t, c) < 0;
            else if (!bad && (ev & EPOLLERR))
                bad = 1;
            if (bad)
                conn_close(t, c);
        }
    }
    return NULL;
}

static void set_port(union sockaddr_any *a, int port)
{
    if (a->sa.sa_family == AF_INET6)
        a->in6.sin6_port = htons((uint16_t)port);
    else
        a->in4.sin_port = htons((uint16_t)port);
}

static int make_listener(union sockaddr_any ip, int port, int *real_port)
{
    int fd = socket(ip.sa.sa_family,
                    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    union sockaddr_any a = ip;
    set_port(&a, port);
    if (bind(fd, &a.sa, sockaddr_len(&a)) < 0 ||
        listen(fd, SOMAXCONN) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    socklen_t len = sizeof a;
    getsockname(fd, &a.sa, &len);
    *real_port = ntohs(a.sa.sa_family == AF_INET6 ? a.in6.sin6_port
                                                  : a.in4.sin_port);
    return fd;
}

/* Whether something already listens on ip:port. The listeners share the
 * port through SO_REUSEPORT, so their bind succeeds next to another
 * SO_REUSEPORT listener of this user (a second sluice-ref): it would start
 * and get a share of the connections instead of failing. A probe without
 * SO_REUSEPORT fails on any listener there (SO_REUSEADDR lets it bind next
 * to TIME_WAIT leftovers, as the listeners can). */
static int port_taken(union sockaddr_any ip, int port)
{
    int fd = socket(ip.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    union sockaddr_any a = ip;
    set_port(&a, port);
    int taken = bind(fd, &a.sa, sockaddr_len(&a)) < 0 &&
                errno == EADDRINUSE;
    close(fd);
    return taken;
}

static const char *const protocols[] = {"ack", "ping", "echo", NULL};
static const char *const ack_modes[] = {"each", "last", "counted", NULL};

static void tls_configure(void)
{
    if (!cfg.certfile || !cfg.keyfile)
        usage_error(PROG, "--tls needs --certfile and --keyfile");
    /* OpenSSL's buffers are freed while empty: a held idle connection
     * costs ~34 KiB less (storms of 15,000); read ahead 64 KiB */
    struct tls_opts o = {.server = 1, .version = cfg.tls_version,
                         .alpn = cfg.tls_alpn, .cert = cfg.certfile,
                         .key = cfg.keyfile, .tickets = cfg.tls_tickets,
                         .release_buffers = 1, .read_buffer = 65536};
    char err[400];
    if (!(cfg.ctx = tls_ctx_new(&o, err, sizeof err)))
        usage_error(PROG, "--tls: %s", err);
}

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
         "bytes per read (--tls: of plaintext)", NULL, 64, 16 << 20, 0},
        {"share-port", OPT_FLAG, &cfg.share_port, NULL, NULL,
         "join the sluice-ref processes already on --port (SO_REUSEPORT: "
         "the kernel spreads connections over all), to hold more "
         "connections than one process's file limit; without it a port "
         "in use is exit 1", NULL, 0, 0, 0},
        {"tls", OPT_FLAG, &cfg.tls, NULL, NULL,
         "TLS (OpenSSL) on every connection; needs --certfile, --keyfile",
         NULL, 0, 0, 0},
        {"certfile", OPT_STR, &cfg.certfile, "FILE", NULL,
         "--tls: certificate chain (PEM), the server's first", NULL, 0, 0, 0},
        {"keyfile", OPT_STR, &cfg.keyfile, "FILE", NULL,
         "--tls: private key (PEM)", NULL, 0, 0, 0},
        {"tls-alpn", OPT_STR, &cfg.tls_alpn, "LIST", "none",
         "--tls: ALPN protocols, comma list, ours first; no match is no "
         "ALPN, not an error", NULL, 0, 0, 0},
        {"tls-tickets", OPT_INT, &cfg.tls_tickets, "N", "0",
         "--tls: session tickets (TLS 1.3) / a session cache (1.2) for "
         "resumption; 0: every handshake is a full one", NULL, 0, 10, 0},
        {"tls-version", OPT_CHOICE, &cfg.tls_version, "V", "any",
         "--tls: TLS version", tls_version_names, 0, 0, 0},
        {NULL, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, 0},
    };
    opts_parse(PROG,
               "C reference server for the sluice ack, ping and echo protocols, "
               "plain or TLS.\n"
               "Prints 'listening on IP:PORT' on stdout once it accepts; "
               "SIGTERM/SIGINT stop it.\n"
               "Exit codes: 0 stopped by a signal, 1 could not listen, 2 bad usage "
               "(a bad TLS file included).",
               opts, argc, argv);
    if (cfg.protocol < 0)
        usage_error(PROG, "--protocol is required");
    cfg.threads = threads ? (int)threads : ncpus();
    if (cfg.tls)
        tls_configure();
    else if (cfg.certfile || cfg.keyfile || opts_given(opts, "tls-alpn") ||
             opts_given(opts, "tls-tickets") || opts_given(opts, "tls-version"))
        usage_error(PROG, "--certfile, --keyfile and --tls-* apply with "
                    "--tls only");
    union sockaddr_any ip;
    if (parse_ip(cfg.ip, &ip) < 0)
        usage_error(PROG, "--ip: '%s' is not an IPv4 or IPv6 address",
                    cfg.ip);
    /* "[::1]:8000", as bin/sluice serve prints an IPv6 address */
    const char *fmt = ip.sa.sa_family == AF_INET6 ? "[%s]:%d" : "%s:%d";
    char where[INET6_ADDRSTRLEN + 16];

    /* Threads inherit this mask; only main takes the signals, via sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct rthread *ts = calloc((size_t)cfg.threads, sizeof *ts);
    int port = (int)cfg.port;
    if (port != 0 && !cfg.share_port && port_taken(ip, port)) {
        snprintf(where, sizeof where, fmt, cfg.ip, port);
        fprintf(stderr, PROG ": listen on %s: %s\n", where,
                strerror(EADDRINUSE));
        return 1;
    }
    for (int i = 0; i < cfg.threads; i++) {
        struct rthread *t = &ts[i];
        t->id = i;
        t->lfd = make_listener(ip, port, &port);
        if (t->lfd < 0) {
            int e = errno;
            snprintf(where, sizeof where, fmt, cfg.ip, port);
            fprintf(stderr, PROG ": listen on %s: %s\n", where, strerror(e));
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
    snprintf(where, sizeof where, fmt, cfg.ip, port);
    printf("listening on %s\n", where);
    /* SIGPIPE is ignored (for the sockets): a stdout already closed
     * ("| head") ends the server as SIGPIPE would have, at once and with
     * 141, as docs/cli.md says of every command (it served on) */
    errno = 0;
    if (fflush(stdout) == EOF && errno == EPIPE)
        return 128 + SIGPIPE;

    int sig;
    while (sigwait(&sigs, &sig) != 0)
        ;
    atomic_store(&g_stop, 1);
    uint64_t one = 1;
    uint64_t acc = 0, rej = 0, big = 0, emf = 0, tlsf = 0;
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
        tlsf += ts[i].tls_failed;
    }
    fprintf(stderr,
            PROG ": stopped: accepted %llu, rejected %llu (max-connections), "
            "closed %llu for oversized frames, %llu accept EMFILE, %llu "
            "failed TLS handshakes\n",
            (unsigned long long)acc, (unsigned long long)rej,
            (unsigned long long)big, (unsigned long long)emf,
            (unsigned long long)tlsf);
    return 0;
}
