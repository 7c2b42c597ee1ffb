/* sluice-load: types shared by the engine core, the scenarios and the
 * report.  The engine (engine.c) owns threads, epoll, connection set-up,
 * timers and failure accounting; a scenario (sc_*.c) owns what flows on a
 * connection once it is up. */
#ifndef SLUICE_LOAD_H
#define SLUICE_LOAD_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "hist.h"
#include "json.h"
#include "opts.h"
#include "util.h"

#define PROG "sluice-load"

struct ssl_st;
struct ssl_ctx_st;
struct tls_slot;

/* SC_SCALE is ping with a ramp and a hold: the same callbacks (sc_ping.c);
 * the scenarios from SC_PING on open connections at --rate. */
enum scenario_id { SC_LOCKSTEP, SC_PIPELINE, SC_FLOOD, SC_PING, SC_CONNECT,
                   SC_SCALE, SC_STORM };
enum ack_kind { AK_EACH, AK_LAST, AK_COUNTED };
enum probe_kind { PROBE_NONE, PROBE_PING };

/* Why a connection failed or ended early.  Errno-named reasons come from
 * socket()/bind()/connect(); CLOSED_BY_PEER is an EOF or reset after the
 * connection was established (or, with --probe ping, after the handshake);
 * TLS_HANDSHAKE is any failure of the TLS handshake (alert, bad record,
 * certificate, EOF or reset during it), TLS_TIMEOUT the connect timeout
 * expiring during it (ETIMEDOUT: during the TCP handshake). */
enum fail_reason {
    F_ECONNREFUSED,
    F_ETIMEDOUT,
    F_EADDRNOTAVAIL,
    F_EADDRINUSE,
    F_EMFILE,
    F_ENFILE,
    F_ECONNRESET,
    F_EHOSTUNREACH,
    F_ENETUNREACH,
    F_ENOBUFS,
    F_TLS_HANDSHAKE,
    F_TLS_TIMEOUT,
    F_CLOSED_BY_PEER,
    F_OTHER,
    F_NREASONS
};
extern const char *const fail_names[F_NREASONS];
int fail_reason_of_errno(int e);

struct cfg {
    int scenario;
    const char *host;
    long port;
    long conns;
    double duration, warmup;
    long window, batch, payload;
    long interval_ms, timeout_ms, connect_timeout_ms;
    long threads;
    const char *source_ips;
    double rate;
    int ack;
    int probe;
    long connect_concurrency;
    const char *json;
    int quiet, progress;
    int progress_json; /* one JSON object per second on stdout */
    int go_stdin;      /* window starts on a "go" line; EOF stops */
    int check;         /* validate the options, run nothing */
    int tls, tls_verify, tls_resume, tls_version;
    const char *tls_ca, *tls_sni, *tls_alpn;
    /* derived */
    union sockaddr_any dst; /* IPv4 or IPv6; every src of its family */
    socklen_t dst_len;
    union sockaddr_any *src;
    int nsrc;
    uint32_t frame_len; /* ack frames: 12 + payload */
    struct ssl_ctx_st *tls_ctx;
    int src_auto;       /* storm chose the source addresses */
};

enum conn_state { CS_NEW, CS_CONNECTING, CS_TLS, CS_PROBING, CS_UP,
                  CS_DONE };

#define HEAP_NONE UINT32_MAX

/* One connection.  Kept small: the ping scenario holds ~19,000 of these
 * per process. */
struct conn {
    int fd;
    uint32_t idx;       /* global index, as named in error messages */
    uint32_t heap_pos;  /* slot in the worker's timer heap */
    uint8_t state;
    uint8_t events;     /* EPOLLIN/EPOLLOUT bits registered (low byte) */
    uint8_t match;      /* ping/probe: bytes of "Pong\n" matched */
    uint8_t flags;      /* scenario flags */
    uint64_t deadline;  /* timer, when heap_pos != HEAP_NONE */
    uint64_t t_connect; /* when connect() was called */
    /* scenario clocks (ping: sent at, next tick); before the scenario has
     * the connection, t_a is the engine's (TLS: end of the TCP handshake) */
    uint64_t t_a, t_b;
    void *sx;           /* scenario per-connection state (ack scenarios) */
    struct ssl_st *ssl; /* --tls */
};

/* Per-worker counters, merged at the end.  "Window" counters only count
 * events inside the measurement window (after ramp and warmup). */
struct stats {
    uint64_t messages, bytes;        /* window */
    uint64_t writes, sent_bytes;     /* window (flood) */
    uint64_t pings, pongs, timeouts, skipped, late; /* window (ping) */
    uint64_t attempts, handshakes, established;
    uint64_t tls_handshakes, tls_resumed;
    uint64_t failures[F_NREASONS];
    uint64_t first_connect, last_established; /* ns, 0 = none */
};

struct run;

struct worker {
    struct run *run;
    int id;
    pthread_t th;
    int ep, wake;
    struct conn *conns;   /* local; global index = id + k * nworkers */
    uint32_t n;
    uint32_t next_open, pending, up, resolved;
    uint64_t last_resolve;
    uint64_t next_open_at;
    uint32_t pending_cap;
    struct conn **heap;
    uint32_t heap_n;
    struct hist *lat;     /* scenario latency, window only */
    struct hist *clat;    /* connect latency */
    struct hist *tlslat;  /* TLS handshake: end of TCP's to end of TLS's */
    struct stats st;
    uint64_t raw_msgs;    /* all messages incl. warmup, for progress */
    unsigned char *rbuf;
    size_t rbuf_len;
    void *sw;             /* scenario per-worker state */
    struct tls_slot *tls_slot; /* --tls-resume: the session to offer */
    int tls_pending;      /* a TLS conn may hold buffered plaintext */
    const char *tls_version, *tls_cipher; /* of the first handshake */
    char tls_alpn[64];
    int phase;            /* run->phase last acted on (storm) */
    int burst;            /* open the rest at once, ignoring --rate */
    /* published for the main thread (relaxed) */
    _Atomic uint64_t pub_msgs, pub_up, pub_pending, pub_resolved, pub_errors,
        pub_last_resolve, pub_unopened, pub_attempts, pub_established,
        pub_failed, pub_fail[F_NREASONS];
    _Atomic int pub_phase;
};

struct scenario {
    int probe;                    /* established only after a ping probe */
    void (*worker_init)(struct worker *w);
    /* handshake done (state CS_UP, or CS_PROBING when probe) */
    void (*connected)(struct worker *w, struct conn *c, uint64_t now);
    void (*readable)(struct worker *w, struct conn *c, uint64_t now);
    void (*writable)(struct worker *w, struct conn *c, uint64_t now);
    void (*timer)(struct worker *w, struct conn *c, uint64_t now);
    void (*finish)(struct worker *w, uint64_t now); /* after the run */
    uint64_t (*errors)(const struct worker *w);     /* scenario errors */
    void (*json)(struct run *r, struct json *j);    /* extra JSON fields */
    void (*text)(struct run *r, FILE *f);           /* extra summary lines */
    /* A scenario in phases (storm): the main thread's loop calls control
     * instead of its ramp/window logic (1: the run is over; *phase names
     * the phase for --progress-json), and each worker calls phase when
     * run->phase changes. */
    int (*control)(struct run *r, uint64_t now, const char **phase);
    void (*phase)(struct worker *w, int phase, uint64_t now);
};

extern const char *const scenario_names[]; /* by cfg->scenario */
extern const struct scenario sc_ack, sc_flood, sc_ping,
    sc_connect, sc_connect_probe, sc_storm, sc_storm_probe;

struct run {
    struct cfg *cfg;
    const struct scenario *sc;
    struct worker *w;
    int nw;
    uint64_t t0;
    _Atomic uint64_t mstart, mend; /* measurement window, 0 = not yet */
    _Atomic int stop, proto_error;
    int main_wake;
    _Atomic int warnings;
    _Atomic int phase;
    int go; /* the measured part may start (--go-stdin: "go" came); main
             * thread only */
    int interrupted; /* SIGTERM/SIGINT (or EOF on --go-stdin) ended it */
    /* host-wide TcpExt ListenOverflows/ListenDrops around the run */
    struct listen_counters kbefore, kafter;
};

/* ---- engine API for scenarios ---- */
void conn_want(struct worker *w, struct conn *c, uint32_t events);
void conn_established(struct worker *w, struct conn *c, uint64_t now);
/* The handshake (TCP, and TLS with --tls) is done: hand it to the scenario. */
void conn_ready(struct worker *w, struct conn *c, uint64_t now);
void conn_fail(struct worker *w, struct conn *c, int reason, uint64_t now);
/* EOF or error after the handshake: counted as closed_by_peer, reported. */
void conn_lost(struct worker *w, struct conn *c, int err, uint64_t now);
void timer_set(struct worker *w, struct conn *c, uint64_t deadline);
void timer_clear(struct worker *w, struct conn *c);
void protocol_error(struct worker *w, struct conn *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* read() into w->rbuf: >0 bytes, 0 nothing now, -1 connection gone
 * (already accounted for via conn_lost). */
long conn_read(struct worker *w, struct conn *c, uint64_t now);
/* write(2) on the connection (through TLS with --tls): same contract;
 * inline, as the plain write it replaces was. */
ssize_t tls_write(struct ssl_st *ssl, const void *buf, size_t len);
static inline long conn_write(struct conn *c, const void *buf, size_t len)
{
    return c->ssl ? tls_write(c->ssl, buf, len) : write(c->fd, buf, len);
}
/* Like conn_lost, with the reason in words. */
void conn_lost_why(struct worker *w, struct conn *c, const char *why,
                   uint64_t now);
/* Make the worker's counters visible to the main thread (progress, stop). */
void worker_publish(struct worker *w);

/* opened, not yet established nor failed */
static inline int conn_pending(const struct conn *c)
{
    return c->state == CS_CONNECTING || c->state == CS_TLS ||
           c->state == CS_PROBING;
}

/* failures and closes printed on stderr (then only counted) */
#define MAX_WARNINGS 5

static inline int in_window(struct run *r, uint64_t now)
{
    uint64_t s = atomic_load_explicit(&r->mstart, memory_order_relaxed);
    uint64_t e = atomic_load_explicit(&r->mend, memory_order_relaxed);
    return s && now >= s && now < e;
}

static inline int stopping(struct run *r)
{
    return atomic_load_explicit(&r->stop, memory_order_relaxed);
}

/* control.c: what a coordinator of several engine processes needs */
void control_progress_json(struct run *r, FILE *f, uint64_t now,
                           const char *phase);
/* Reads stdin (non-blocking): 1 on a "go" line, -1 on EOF, 0 otherwise. */
int control_read_go(int fd);

/* sc_ping.c: rounds every worker has finished since *next, one JSON
 * object a line (`{"round":K,...}`); returns whether it wrote any. */
int ping_live_rounds(struct run *r, FILE *f, uint32_t *next);

/* engine.c */
int engine_start(struct run *r);
void engine_join(struct run *r);
/* storm: close every connection from this side (TLS: close_notify) and
 * make all of them new again (conn.c); then open them all at once, with no
 * concurrency cap and no --rate. */
void engine_close_all(struct worker *w);
void engine_reopen(struct worker *w, uint64_t now);

/* sc_storm.c: source addresses on loopback when one has too few ports */
void storm_sources(struct cfg *cfg);

/* engine_tls.c: --tls in the engine */
void engine_tls_configure(struct cfg *cfg, const struct opt *opts);
int engine_tls_worker_init(struct worker *w);
void engine_tls_start(struct worker *w, struct conn *c, uint64_t now);
void engine_tls_step(struct worker *w, struct conn *c, uint64_t now);
/* --tls only: rescan connections whose plaintext waits in OpenSSL */
void engine_tls_drain(struct worker *w, uint64_t now);
void engine_tls_json(struct run *r, struct json *j);
void engine_tls_text(struct run *r, FILE *f);

/* load_config.c: checks the parsed options against each other (exit 2) and
 * derives the rest of cfg */
void load_configure(struct cfg *cfg, struct opt *opts, int argc, char **argv);

/* outcome.c: how a run ended.  Exit codes (README.md): */
enum { EXIT_OK = 0, EXIT_PROTOCOL = 1, EXIT_USAGE = 2, EXIT_NO_CONNECTION = 3,
       EXIT_ERRORS = 4 };
/* errors by kind: a protocol error (one stops the run), connections that
 * failed or were closed by the server, pings that timed out */
struct outcome {
    uint64_t protocol, failures, timeouts, total;
    int code;
};
struct outcome run_outcome(struct run *r, const struct stats *t);
/* After the workers are done: the checks of the whole run, the lines
 * that explain the exit code on stderr; returns the exit code. */
int run_finish(struct run *r, const struct stats *t, double secs);
/* the summary's errors line, with the exit code */
void outcome_text(FILE *f, const struct outcome *o);

/* report.c */
void report_text(struct run *r, FILE *f, double measured_s);
int report_json(struct run *r, const char *path, double measured_s,
                int exit_code);
void report_hist_json(struct json *j, const char *key, const struct hist *h);
void report_latency_json(struct json *j, const char *key,
                         const struct hist *h);
void report_latency_text(FILE *f, const char *label, const struct hist *h);
/* ListenOverflows/ListenDrops between a and b (null unless both were read) */
void report_kernel_json(struct json *j, const char *key,
                        const struct listen_counters *a,
                        const struct listen_counters *b);
struct stats report_totals(struct run *r);

#endif
