/* sluice-load: the options' checks across each other (one line and exit 2
 * for a combination that makes no sense) and what they derive: defaults
 * that depend on the scenario, source addresses, the server's address,
 * TLS.  See README.md. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"
#include "opts.h"
#include "util.h"

/* Pipeline defaults, chosen by measurement on one connection against
 * sluice-ref on another core (README.md, "Defaults"): a batch large enough
 * that a write carries tens of KiB, and a window that covers the 100-300 us
 * cross-core wake-up several times over at ~30M frames/s. */
#define PIPE_WINDOW 262144
#define PIPE_BATCH 2048

static int parse_sources(struct cfg *cfg)
{
    /* "A.B.C.X-A.B.C.Y", "A.B.C.X-Y", or a comma list of addresses/ranges;
     * strtok_r() would skip an empty entry ("127.0.0.1,,"): refuse it */
    size_t n = strlen(cfg->source_ips);
    if (!n || cfg->source_ips[0] == ',' || cfg->source_ips[n - 1] == ',' ||
        strstr(cfg->source_ips, ",,"))
        return -1;
    char *s = strdup(cfg->source_ips), *save = NULL;
    int cap = 16;
    cfg->src = malloc((size_t)cap * sizeof *cfg->src);
    for (char *tok = strtok_r(s, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *dash = strchr(tok, '-');
        struct in_addr lo, hi;
        if (dash) {
            *dash = 0;
            if (parse_ipv4(tok, &lo) < 0)
                return -1;
            const char *h = dash + 1;
            if (strchr(h, '.')) {
                if (parse_ipv4(h, &hi) < 0)
                    return -1;
            } else {
                char *end;
                long last = strtol(h, &end, 10);
                if (*end || end == h || last < 0 || last > 255)
                    return -1;
                hi.s_addr = htonl((ntohl(lo.s_addr) & 0xffffff00u) |
                                  (uint32_t)last);
            }
            uint32_t a = ntohl(lo.s_addr), b = ntohl(hi.s_addr);
            if ((a & 0xffffff00u) != (b & 0xffffff00u) || b < a)
                return -1;
            for (uint32_t x = a; x <= b; x++) {
                if (cfg->nsrc == cap)
                    cfg->src = realloc(cfg->src,
                                       (size_t)(cap *= 2) * sizeof *cfg->src);
                cfg->src[cfg->nsrc++].s_addr = htonl(x);
            }
        } else {
            if (parse_ipv4(tok, &lo) < 0)
                return -1;
            if (cfg->nsrc == cap)
                cfg->src = realloc(cfg->src,
                                   (size_t)(cap *= 2) * sizeof *cfg->src);
            cfg->src[cfg->nsrc++] = lo;
        }
    }
    free(s);
    return cfg->nsrc > 0 ? 0 : -1;
}

static void resolve_host(struct cfg *cfg)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res;
    int e = getaddrinfo(cfg->host, NULL, &hints, &res);
    if (e != 0)
        usage_error(PROG, "--host %s: %s", cfg->host, gai_strerror(e));
    memcpy(&cfg->dst, res->ai_addr, sizeof cfg->dst);
    cfg->dst.sin_port = htons((uint16_t)cfg->port);
    freeaddrinfo(res);
}

void load_configure(struct cfg *cfg, struct opt *opts, int argc,
                    char **argv)
{
    opts_parse(PROG,
               "Load engine for sluice servers: lockstep, pipelined and "
               "open-loop ack\nframes, echo flood, ping, connection rate, "
               "scale (ramp, ping, hold), connect storm.\nExit codes: 0 no errors, 1 "
               "protocol error (an --ack that does not match the\nserver's, no reply at "
               "all), 2 bad usage, 3 could not connect at all, 4 completed\nwith errors "
               "(connections failed or closed by the server, pings timed out).\n"
               "One process: bin/sluice load --help also "
               "lists the options for several\n(--engines), nodes (--nodes) and server "
               "memory (--server-metrics).",
               opts, argc, argv);
    int sc = cfg->scenario;
    int ack_frames = sc == SC_LOCKSTEP || sc == SC_PIPELINE;
    if (sc == SC_LOCKSTEP) {
        if ((opts_given(opts, "window") && cfg->window != 1) ||
            (opts_given(opts, "batch") && cfg->batch != 1))
            usage_error(PROG, "lockstep keeps one frame in flight: "
                        "--window/--batch belong to pipeline");
        cfg->window = cfg->batch = 1;
    } else if (sc == SC_PIPELINE) {
        if (!opts_given(opts, "window"))
            cfg->window = PIPE_WINDOW;
        if (!opts_given(opts, "batch"))
            cfg->batch = cfg->window < PIPE_BATCH ? cfg->window : PIPE_BATCH;
        if (cfg->batch > cfg->window)
            usage_error(PROG, "--batch %ld is larger than --window %ld",
                        cfg->batch, cfg->window);
    } else {
        if (opts_given(opts, "window") || opts_given(opts, "batch"))
            usage_error(PROG, "--window/--batch apply to pipeline only");
        if (opts_given(opts, "ack"))
            usage_error(PROG, "--ack applies to lockstep and pipeline only");
    }
    if (!opts_given(opts, "payload"))
        cfg->payload = sc == SC_FLOOD ? 6 : 5;
    if (ack_frames) {
        cfg->frame_len = (uint32_t)(12 + cfg->payload);
        if ((double)cfg->batch * cfg->frame_len > 64.0 * 1024 * 1024)
            usage_error(PROG, "--batch x frame size exceeds 64 MiB per write");
    } else if (opts_given(opts, "payload") && sc != SC_FLOOD) {
        usage_error(PROG, "--payload applies to lockstep, pipeline, flood");
    }
    if (sc == SC_FLOOD && cfg->payload < 1)
        usage_error(PROG, "--payload must be at least 1 for flood");
    if (sc == SC_FLOOD && opts_given(opts, "rate"))
        usage_error(PROG, "--rate does not apply to flood (it never waits)");
    if (opts_given(opts, "probe") && sc != SC_CONNECT && sc != SC_STORM)
        usage_error(PROG, "--probe applies to connect and storm only");
    if (sc == SC_STORM) {
        if (!opts_given(opts, "probe"))
            cfg->probe = PROBE_PING; /* back = served, not just queued */
        if (!opts_given(opts, "duration"))
            cfg->duration = 1;       /* the hold between the two waves */
        /* wait out SYN retransmits (1, 3, 7, 15 s): a straggler is a
         * figure of the storm, not a failure */
        if (!opts_given(opts, "connect-timeout"))
            cfg->connect_timeout_ms = 30000;
        if (opts_given(opts, "warmup"))
            usage_error(PROG, "--warmup does not apply to storm");
    }
    int pinging = sc == SC_PING || sc == SC_SCALE;
    if (!pinging && (opts_given(opts, "interval")))
        usage_error(PROG, "--interval applies to ping and scale only");
    if (!pinging && (opts_given(opts, "timeout")))
        usage_error(PROG, "--timeout applies to ping and scale only");
    if (cfg->source_ips && parse_sources(cfg) < 0)
        usage_error(PROG, "--source-ips '%s': expected A.B.C.X-Y, "
                    "A.B.C.X-A.B.C.Y or a comma list", cfg->source_ips);
    if (!cfg->threads)
        cfg->threads = ncpus();
    if (cfg->threads > cfg->conns)
        cfg->threads = cfg->conns;
    resolve_host(cfg);
    if (sc == SC_STORM && !cfg->source_ips)
        storm_sources(cfg);
    engine_tls_configure(cfg, opts);
}

