/* sluice-load: command line, run control (ramp, warmup, measurement window,
 * progress, stop) and exit codes.  See README.md. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "load.h"
#include "opts.h"
#include "tls.h"
#include "util.h"

const char *const scenario_names[] = {"lockstep", "pipeline", "flood",
                                        "ping", "connect", "scale", "storm",
                                        NULL};
static const char *const acks[] = {"each", "last", "counted", NULL};
static const char *const probes[] = {"none", "ping", NULL};

static int pinging_sc(int sc) { return sc == SC_PING || sc == SC_SCALE; }

/* Every connection is a descriptor.  Shells commonly start programs with
 * a soft limit of 1024 under a much higher hard one: --conns 1500 then
 * failed ~490 connections with a bare "EMFILE" count, where tcpkali and
 * wrk raise the soft limit.  Raise it as far as the run needs (the
 * connections, each worker's epoll and eventfd, main's own and a few
 * files), and say so in one line when the hard limit is short of that. */
static void fd_limit(const struct cfg *cfg)
{
    rlim_t need = (rlim_t)cfg->conns + 2 * (rlim_t)cfg->threads + 32;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= need)
        return;
    rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need
                      ? rl.rlim_max : need;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need)
        fprintf(stderr, PROG ": --conns %ld needs about %llu open files, "
                "the limit is %llu (ulimit -n): connections past it fail "
                "with EMFILE\n", cfg->conns, (unsigned long long)need,
                (unsigned long long)rl.rlim_cur);
}

static uint64_t sum_pub(struct run *r, size_t off)
{
    uint64_t s = 0;
    for (int i = 0; i < r->nw; i++)
        s += atomic_load_explicit(
            (_Atomic uint64_t *)((char *)&r->w[i] + off),
            memory_order_relaxed);
    return s;
}
#define SUM(r, field) sum_pub(r, offsetof(struct worker, field))

/* The timeline of every scenario but storm (README.md): the ramp, then
 * warmup and the measured window (r->mstart, r->mend).  Returns 1 when
 * the run is over; *phase for --progress-json. */
static int timeline(struct run *r, uint64_t now, int *ramped,
                    const char **phase)
{
    struct cfg *cfg = r->cfg;
    uint64_t mstart = atomic_load(&r->mstart), mend = atomic_load(&r->mend);
    uint64_t up = SUM(r, pub_up), pending = SUM(r, pub_pending);
    uint64_t unopened = SUM(r, pub_unopened);
    if (!*ramped && SUM(r, pub_resolved) == (uint64_t)cfg->conns)
        *ramped = 1;
    if (!mstart && *ramped && r->go) {
        uint64_t ramp_end = 0;
        for (int i = 0; i < r->nw; i++) {
            uint64_t t = atomic_load(&r->w[i].pub_last_resolve);
            if (t > ramp_end)
                ramp_end = t;
        }
        /* with --go-stdin the window starts at "go", not at this
         * engine's own ramp end */
        mstart = (cfg->go_stdin ? now : ramp_end) +
                 (uint64_t)(cfg->warmup * 1e9);
        if (mstart < now)
            mstart = now;
        mend = mstart + (uint64_t)(cfg->duration * 1e9);
        atomic_store(&r->mend, mend);
        atomic_store(&r->mstart, mstart);
    }
    *phase = !*ramped ? "ramp" : !mstart ? "ready" :
             now < mstart ? "warmup" : "window";
    if (mstart && now >= mend)
        return 1;
    return *ramped && up + pending + unopened == 0; /* all failed or closed */
}

int main(int argc, char **argv)
{
    struct cfg cfg = {
        .scenario = SC_LOCKSTEP, .host = "127.0.0.1", .port = 8000,
        .conns = 1, .duration = 10, .warmup = 0, .window = 1000,
        .batch = 100, .payload = 5, .interval_ms = 1000, .timeout_ms = 5000,
        .connect_timeout_ms = 5000, .threads = 0, .rate = 0, .ack = AK_EACH,
        .probe = PROBE_NONE, .connect_concurrency = 256,
    };
    struct opt opts[] = {
        {"scenario", OPT_CHOICE, &cfg.scenario, "NAME", "lockstep",
         "what to run", scenario_names, 0, 0, 0},
        {"host", OPT_STR, &cfg.host, "HOST", "127.0.0.1",
         "server address or name, IPv4 or IPv6 (a name with both: IPv4, "
         "unless --source-ips are IPv6)", NULL, 0, 0, 0},
        {"port", OPT_INT, &cfg.port, "P", "8000", "server port", NULL, 1,
         65535, 0},
        {"conns", OPT_INT, &cfg.conns, "N", "1", "connections", NULL, 1,
         4000000, 0},
        {"duration", OPT_DOUBLE, &cfg.duration, "SECONDS", "10 (storm: 1)",
         "measurement time after the ramp and warmup (connect: hold time; "
         "storm: hold between the waves)", NULL, 0, 1e7, 0},
        {"warmup", OPT_DOUBLE, &cfg.warmup, "SECONDS", "0",
         "run this long after the ramp before measuring", NULL, 0, 1e7, 0},
        {"window", OPT_INT, &cfg.window, "FRAMES", "262144 (pipeline)",
         "pipeline: frames in flight per connection", NULL, 1, 1 << 30, 0},
        {"batch", OPT_INT, &cfg.batch, "FRAMES", "2048 (pipeline)",
         "pipeline: frames per write", NULL, 1, 1 << 24, 0},
        {"payload", OPT_INT, &cfg.payload, "BYTES",
         "5 (ack frames), 6 (flood)", "payload bytes per frame / flood write",
         NULL, 0, 1 << 20, 0},
        {"ack", OPT_CHOICE, &cfg.ack, "MODE", "each",
         "ack mode; must match the server's --ack (a mismatch stops the run "
         "and names the server's; with one frame per write, each and last "
         "answer alike)", acks, 0, 0, 0},
        {"rate", OPT_DOUBLE, &cfg.rate, "R", "0",
         "lockstep/pipeline: open loop, frames/s per connection, latency "
         "from intended send times; ping/connect/scale/storm: connections "
         "opened per second (storm: first wave); 0 = closed loop / as fast "
         "as possible", NULL, 0, 1e12, 0},
        {"interval", OPT_INT, &cfg.interval_ms, "MS", "1000",
         "ping: each connection pings this often", NULL, 1, 86400000, 0},
        {"timeout", OPT_INT, &cfg.timeout_ms, "MS", "5000",
         "ping: a Pong later than this is a timeout (connection kept)", NULL,
         1, 86400000, 0},
        {"connect-timeout", OPT_INT, &cfg.connect_timeout_ms, "MS",
         "5000 (storm: 30000)",
         "give up a connect (and a --probe) after this long", NULL, 1,
         86400000, 0},
        {"connect-concurrency", OPT_INT, &cfg.connect_concurrency, "N",
         "256", "connects in progress at once, over all threads", NULL, 1,
         1000000, 0},
        {"probe", OPT_CHOICE, &cfg.probe, "KIND", "none (storm: ping)",
         "connect, storm: established only once Ping got Pong", probes, 0,
         0, 0},
        {"threads", OPT_INT, &cfg.threads, "T", "number of cores",
         "worker threads (capped at --conns)", NULL, 1, 1024, 0},
        {"source-ips", OPT_STR, &cfg.source_ips, "LIST", "kernel's choice",
         "source addresses, round-robin per connection: 127.0.0.2-127.0.0.9, "
         "127.0.0.2-9, fd00::2-fd00::9 (one /120) or a comma list, of "
         "--host's family", NULL, 0, 0, 0},
        {"json", OPT_STR, &cfg.json, "FILE", NULL,
         "write the results as one JSON object", NULL, 0, 0, 0},
        {"quiet", OPT_FLAG, &cfg.quiet, NULL, NULL,
         "no summary on stdout, no progress", NULL, 0, 0, 0},
        {"progress", OPT_FLAG, &cfg.progress, NULL, NULL,
         "progress line every second on stderr even when it is not a "
         "terminal", NULL, 0, 0, 0},
        {"progress-json", OPT_FLAG, &cfg.progress_json, NULL, NULL,
         "one JSON progress object a second on stdout (cumulative counts; "
         "for a coordinator)", NULL, 0, 0, 0},
        {"go-stdin", OPT_FLAG, &cfg.go_stdin, NULL, NULL,
         "start the measured window only when the line \"go\" arrives on "
         "stdin after the ramp (storm: the hold, after wave 1); EOF on stdin "
         "ends the run", NULL, 0, 0, 0},
        {"tls", OPT_FLAG, &cfg.tls, NULL, NULL,
         "TLS (OpenSSL) on every connection, any scenario; the connect "
         "timeout covers the TLS handshake", NULL, 0, 0, 0},
        {"tls-ca", OPT_STR, &cfg.tls_ca, "FILE", NULL,
         "CA certificates (PEM) for --tls-verify", NULL, 0, 0, 0},
        {"tls-verify", OPT_FLAG, &cfg.tls_verify, NULL, NULL,
         "verify the server's certificate and name (--tls-sni, else --host)",
         NULL, 0, 0, 0},
        {"tls-sni", OPT_STR, &cfg.tls_sni, "NAME", "--host unless an address",
         "server name sent in the handshake (SNI)", NULL, 0, 0, 0},
        {"tls-alpn", OPT_STR, &cfg.tls_alpn, "LIST", "none",
         "ALPN protocols offered, comma list (h2,http/1.1)", NULL, 0, 0, 0},
        {"tls-resume", OPT_FLAG, &cfg.tls_resume, NULL, NULL,
         "offer the session of an earlier connection of the thread (without "
         "it every handshake is a full one)", NULL, 0, 0, 0},
        {"tls-version", OPT_CHOICE, &cfg.tls_version, "V", "any",
         "TLS version", tls_version_names, 0, 0, 0},
        {"check", OPT_FLAG, &cfg.check, NULL, NULL,
         "check the options and exit 0 without running", NULL, 0, 0, 0},
        {NULL, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, 0},
    };
    load_configure(&cfg, opts, argc, argv);
    if (cfg.check)
        return 0;
    fd_limit(&cfg);
    if (cfg.json) {
        /* a --json that cannot be written is said now, not after the run
         * (it was a line on stderr, no JSON, and exit 0); append, so
         * that nothing is lost if the run never gets to write it */
        FILE *jf = fopen(cfg.json, "a");
        if (!jf)
            usage_error(PROG, "--json %s: %s", cfg.json, strerror(errno));
        fclose(jf);
    }

    static const struct scenario *const table[] = {
        &sc_ack, &sc_ack, &sc_flood, &sc_ping, &sc_connect, &sc_ping,
        &sc_storm};
    struct run r;
    memset(&r, 0, sizeof r);
    r.cfg = &cfg;
    r.sc = cfg.scenario == SC_CONNECT && cfg.probe == PROBE_PING
               ? &sc_connect_probe
           : cfg.scenario == SC_STORM && cfg.probe == PROBE_PING
               ? &sc_storm_probe : table[cfg.scenario];
    r.nw = (int)cfg.threads;
    r.w = calloc((size_t)r.nw, sizeof *r.w);
    r.main_wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

    /* Workers inherit the mask: SIGINT/SIGTERM reach main's signalfd and
     * end the run early with a normal report. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    int sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
    signal(SIGPIPE, SIG_IGN);

    /* before any socket can take fd 1 (not to be watched as stdout) */
    int stdout_open = fcntl(1, F_GETFD) != -1;
    listen_counters_read(&r.kbefore);
    if (engine_start(&r) < 0)
        return 1;

    int progress = !cfg.quiet && (cfg.progress || isatty(2));
    uint64_t next_prog = r.t0 + NS_PER_S, last_msgs = 0, last_t = r.t0;
    uint64_t next_json = r.t0 + NS_PER_S;
    uint64_t now, mstart = 0, mend = 0;
    int interrupted = 0, ramped = 0;
    /* A stdout this run writes to that is closed under it ("| head", the
     * reader gone) ends the run at once, with 141 and nothing more, as
     * SIGPIPE would have (ignored here for the sockets) and as docs/cli.md
     * says of every command: polled with the run's other fds, so a long
     * run stops then, not at its summary's write. */
    int watch_out = (!cfg.quiet || cfg.progress_json) && stdout_open,
        stdout_gone = 0;
    r.go = !cfg.go_stdin;
    const char *json_phase = "ramp";
    uint32_t live_round = 0;
    if (cfg.go_stdin)
        set_nonblock(0);
    for (;;) {
        now = now_ns();
        if (atomic_load(&r.proto_error) || interrupted || stdout_gone)
            break;
        const char *ph;
        int over = r.sc->control ? r.sc->control(&r, now, &ph)
                                 : timeline(&r, now, &ramped, &ph);
        mstart = atomic_load(&r.mstart);
        mend = atomic_load(&r.mend);
        if (over)
            break;
        if (cfg.progress_json) {
            /* a phase change is news for the coordinator: say it now */
            if (pinging_sc(cfg.scenario))
                ping_live_rounds(&r, stdout, &live_round);
            if (now >= next_json || ph != json_phase) {
                control_progress_json(&r, stdout, now, ph);
                json_phase = ph;
                next_json = now + NS_PER_S;
            }
        }
        if (progress && now >= next_prog) {
            uint64_t m = SUM(&r, pub_msgs);
            double dt = (double)(now - last_t) / 1e9;
            const char *phase = !mstart ? "  (ramp)" :
                                now < mstart ? "  (warmup)" : "";
            fprintf(stderr, "[%6.1fs] rate %.0f/s  conns %llu/%ld up  "
                    "errors %llu%s\n", (double)(now - r.t0) / 1e9,
                    dt > 0 ? (double)(m - last_msgs) / dt : 0,
                    (unsigned long long)SUM(&r, pub_up), cfg.conns,
                    (unsigned long long)SUM(&r, pub_errors), phase);
            last_msgs = m;
            last_t = now;
            next_prog += NS_PER_S;
            if (next_prog < now)
                next_prog = now + NS_PER_S;
        }
        uint64_t until = now + 50 * NS_PER_MS;
        if (progress && next_prog < until)
            until = next_prog;
        if (mstart && mend < until)
            until = mend;
        /* a negative fd is not polled; stdout is polled for nothing but
         * the errors poll always reports: a pipe's POLLERR when its reader
         * is gone, a socket's POLLHUP */
        struct pollfd pf[4] = {{.fd = r.main_wake, .events = POLLIN},
                               {.fd = sfd, .events = POLLIN},
                               {.fd = cfg.go_stdin ? 0 : -1, .events = POLLIN},
                               {.fd = watch_out ? 1 : -1, .events = 0}};
        int ms = until > now ? (int)((until - now + NS_PER_MS - 1) / NS_PER_MS)
                             : 0;
        if (poll(pf, 4, ms) > 0) {
            uint64_t v;
            if (pf[0].revents && read(r.main_wake, &v, sizeof v) < 0)
                (void)0;
            if (pf[1].revents) {
                struct signalfd_siginfo si;
                if (read(sfd, &si, sizeof si) > 0)
                    interrupted = 1;
            }
            if (cfg.go_stdin && pf[2].revents) {
                int g = control_read_go(0);
                if (g > 0)
                    r.go = 1;
                else if (g < 0)
                    interrupted = 1; /* the coordinator is gone */
            }
            if (pf[3].revents & (POLLERR | POLLHUP))
                stdout_gone = 1;
            else if (pf[3].revents & POLLNVAL)
                watch_out = 0; /* no stdout at all: nothing to lose */
        }
    }
    now = now_ns();
    engine_join(&r);
    if (stdout_gone)
        return 128 + SIGPIPE;
    /* the rounds the threads finished as the run ended, before the
     * result: every round is said live (README.md, --progress-json) */
    if (cfg.progress_json && pinging_sc(cfg.scenario))
        ping_live_rounds(&r, stdout, &live_round);
    listen_counters_read(&r.kafter);
    double secs = 0;
    if (mstart) {
        if (now < mend)
            mend = now > mstart ? now : mstart;
        atomic_store(&r.mend, mend);
        secs = (double)(mend - mstart) / 1e9;
    }
    if (interrupted)
        fprintf(stderr, PROG ": interrupted, reporting what was measured\n");
    r.interrupted = interrupted;

    struct stats t = report_totals(&r);
    int code = run_finish(&r, &t, secs);
    if (!cfg.quiet)
        report_text(&r, stdout, secs);
    if (cfg.json)
        (void)report_json(&r, cfg.json, secs, code); /* reports its errors */
    /* SIGPIPE is ignored (for the sockets): a summary that finds stdout
     * closed ("| head") ends the run as SIGPIPE would have, 141, as
     * docs/cli.md says of every command (it was 0) */
    errno = 0;
    if (fflush(stdout) == EOF && errno == EPIPE)
        return 128 + SIGPIPE;
    return code;
}
