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

static void add_source(struct cfg *cfg, int *cap, const union sockaddr_any *a)
{
    if (cfg->nsrc == *cap)
        cfg->src = realloc(cfg->src, (size_t)(*cap *= 2) * sizeof *cfg->src);
    cfg->src[cfg->nsrc++] = *a;
}

/* The last byte of a range's two ends, which must agree on every other:
 * one IPv4 /24 or one IPv6 /120, at most 256 addresses, as the
 * coordinator splits them (sluice_load_plan). */
static unsigned char *last_byte(union sockaddr_any *a)
{
    return a->sa.sa_family == AF_INET6 ? &a->in6.sin6_addr.s6_addr[15]
                                       : (unsigned char *)&a->in4.sin_addr + 3;
}

static int same_but_last_byte(union sockaddr_any *a, union sockaddr_any *b)
{
    if (a->sa.sa_family != b->sa.sa_family)
        return 0;
    return a->sa.sa_family == AF_INET6
        ? memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 15) == 0
        : memcmp(&a->in4.sin_addr, &b->in4.sin_addr, 3) == 0;
}

static int parse_range(struct cfg *cfg, int *cap, char *tok)
{
    char *dash = strchr(tok, '-');
    union sockaddr_any lo, hi;
    if (dash)
        *dash = 0;
    if (parse_ip(tok, &lo) < 0)
        return -1;
    if (!dash) {
        add_source(cfg, cap, &lo);
        return 0;
    }
    const char *h = dash + 1;
    if (strchr(h, '.') || strchr(h, ':')) {
        if (parse_ip(h, &hi) < 0 || !same_but_last_byte(&lo, &hi))
            return -1;
    } else {
        /* A.B.C.X-Y: IPv4 only (an IPv6 last part would be hex) */
        char *end;
        long last = strtol(h, &end, 10);
        if (*end || end == h || last < 0 || last > 255 ||
            lo.sa.sa_family != AF_INET)
            return -1;
        hi = lo;
        *last_byte(&hi) = (unsigned char)last;
    }
    int x = *last_byte(&lo), y = *last_byte(&hi);
    if (y < x)
        return -1;
    for (; x <= y; x++) {
        *last_byte(&lo) = (unsigned char)x;
        add_source(cfg, cap, &lo);
    }
    return 0;
}

static int parse_sources(struct cfg *cfg)
{
    /* "A.B.C.X-A.B.C.Y", "A.B.C.X-Y", IPv6 "P::X-P::Y", or a comma list
     * of addresses/ranges; strtok_r() would skip an empty entry
     * ("127.0.0.1,,"): refuse it */
    size_t n = strlen(cfg->source_ips);
    if (!n || cfg->source_ips[0] == ',' || cfg->source_ips[n - 1] == ',' ||
        strstr(cfg->source_ips, ",,"))
        return -1;
    char *s = strdup(cfg->source_ips), *save = NULL;
    int cap = 16, ok = 1;
    cfg->src = malloc((size_t)cap * sizeof *cfg->src);
    for (char *tok = strtok_r(s, ",", &save); tok && ok;
         tok = strtok_r(NULL, ",", &save))
        ok = parse_range(cfg, &cap, tok) == 0;
    free(s);
    return ok && cfg->nsrc > 0 ? 0 : -1;
}

static const char *family_name(int family)
{
    return family == AF_INET6 ? "IPv6" : "IPv4";
}

/* connect() from a source address of one family to a server of the other
 * fails on every connection (EAFNOSUPPORT, EINVAL): refused here, once. */
static void sources_one_family(const struct cfg *cfg)
{
    for (int i = 1; i < cfg->nsrc; i++)
        if (cfg->src[i].sa.sa_family != cfg->src[0].sa.sa_family)
            usage_error(PROG, "--source-ips '%s' mixes IPv4 and IPv6 "
                        "addresses", cfg->source_ips);
}

/* The server's address: of the --source-ips' family when given (a name
 * such as localhost has both), else IPv4 first, as before IPv6 and as
 * `bin/sluice load' resolves it; an IPv6-only name or literal (::1) gives
 * IPv6. */
static void resolve_host(struct cfg *cfg)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res;
    int e = getaddrinfo(cfg->host, NULL, &hints, &res);
    if (e != 0)
        usage_error(PROG, "--host %s: %s", cfg->host, gai_strerror(e));
    int want = cfg->nsrc ? cfg->src[0].sa.sa_family : AF_INET;
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *a = res; a && !pick; a = a->ai_next)
        if (a->ai_family == want)
            pick = a;
    for (const struct addrinfo *a = res; a && !pick && !cfg->nsrc;
         a = a->ai_next)
        if (a->ai_family == AF_INET6)
            pick = a;
    if (!pick)
        usage_error(PROG, "--source-ips '%s' are %s addresses but --host %s "
                    "has no %s address: use one family", cfg->source_ips,
                    family_name(want), cfg->host, family_name(want));
    memcpy(&cfg->dst, pick->ai_addr, pick->ai_addrlen);
    cfg->dst_len = pick->ai_addrlen;
    if (pick->ai_family == AF_INET6)
        cfg->dst.in6.sin6_port = htons((uint16_t)cfg->port);
    else
        cfg->dst.in4.sin_port = htons((uint16_t)cfg->port);
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
                    "A.B.C.X-A.B.C.Y, an IPv6 P::X-P::Y (one /120) or a "
                    "comma list", cfg->source_ips);
    sources_one_family(cfg);
    if (!cfg->threads)
        cfg->threads = ncpus();
    if (cfg->threads > cfg->conns)
        cfg->threads = cfg->conns;
    resolve_host(cfg);
    if (sc == SC_STORM && !cfg->source_ips)
        storm_sources(cfg);
    engine_tls_configure(cfg, opts);
}

