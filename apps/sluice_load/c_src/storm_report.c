/* storm: its figures, per wave, for the JSON (the storm object) and the
 * summary.  A wave's figures are the sum of the workers'. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"
#include "sc_storm.h"
#include "util.h"

struct wave_sum {
    struct hist *up, *back;
    uint64_t nup, nback, last_back, attempts, failures[F_NREASONS], nfail;
    uint64_t last_connect;
};

static void wave_sum(struct run *r, int i, struct wave_sum *s)
{
    memset(s, 0, sizeof *s);
    s->up = malloc(sizeof *s->up);
    s->back = malloc(sizeof *s->back);
    hist_init(s->up);
    hist_init(s->back);
    for (int k = 0; k < r->nw; k++) {
        struct wave *v = &((struct storm_worker *)r->w[k].sw)->wv[i];
        hist_merge(s->up, &v->up);
        hist_merge(s->back, &v->back);
        s->nup += v->nup;
        s->nback += v->nback;
        s->attempts += v->attempts;
        if (v->last_back > s->last_back)
            s->last_back = v->last_back;
        if (v->last_connect > s->last_connect)
            s->last_connect = v->last_connect;
        for (int f = 0; f < F_NREASONS; f++) {
            s->failures[f] += v->failures[f];
            s->nfail += v->failures[f];
        }
    }
}

static void wave_free(struct wave_sum *s)
{
    free(s->up);
    free(s->back);
}

/* Time from the wave's start until the last connection came back. */
static double wave_time(const struct wave_sum *s, uint64_t start)
{
    return s->last_back > start ? (double)(s->last_back - start) / 1e9 : 0;
}

static void wave_json(struct run *r, struct json *j, const char *key,
                      const struct wave_sum *s, uint64_t start)
{
    double t = wave_time(s, start);
    json_obj(j, key);
    json_u64(j, "attempts", s->attempts);
    json_u64(j, "handshakes", s->nup);
    json_u64(j, "back", s->nback);
    json_bool(j, "all_back", s->nback == (uint64_t)r->cfg->conns);
    json_dbl(j, "time_s", t);
    json_dbl(j, "rate_per_s", t > 0 ? (double)s->nback / t : 0);
    json_obj(j, "failures");
    for (int k = 0; k < F_NREASONS; k++)
        if (s->failures[k])
            json_u64(j, fail_names[k], s->failures[k]);
    json_end_obj(j);
    report_latency_json(j, "connect_latency_us", s->up);
    report_latency_json(j, "back_latency_us", s->back);
    report_hist_json(j, "connect_hist", s->up);
    report_hist_json(j, "back_hist", s->back);
    json_end_obj(j);
}

void storm_json(struct run *r, struct json *j)
{
    struct wave_sum a, b;
    wave_sum(r, 0, &a);
    wave_sum(r, 1, &b);
    json_obj(j, "storm");
    json_str(j, "probe", r->cfg->probe == PROBE_PING ? "ping" : "none");
    json_dbl(j, "hold_s", r->cfg->duration);
    json_u64(j, "source_addresses", (uint64_t)r->cfg->nsrc);
    json_bool(j, "source_addresses_auto", r->cfg->src_auto);
    json_str(j, "reached", (const char *[]){"open", "hold", "close",
                                            "reopen", "done"}[storm_st.phase]);
    wave_json(r, j, "open", &a, r->t0);
    json_dbl(j, "close_s", storm_st.t_reopen > storm_st.t_close
                               ? (double)(storm_st.t_reopen - storm_st.t_close) / 1e9 : 0);
    wave_json(r, j, "reopen", &b, storm_st.t_reopen);
    /* how "at once" wave 2 was: the engine's time to make its connects */
    json_dbl(j, "reopen_connects_issued_s",
             b.last_connect > storm_st.t_reopen
                 ? (double)(b.last_connect - storm_st.t_reopen) / 1e9 : 0);
    report_kernel_json(j, "reopen_kernel", &storm_st.k0, &storm_st.k1);
    json_end_obj(j);
    wave_free(&a);
    wave_free(&b);
}

static void wave_text(struct run *r, FILE *f, const char *name,
                      const struct wave_sum *s, uint64_t start)
{
    double t = wave_time(s, start);
    fprintf(f, "%s: %llu of %ld back in %.3f s (%.0f/s), %llu attempts; "
            "failures:", name, (unsigned long long)s->nback, r->cfg->conns,
            t, t > 0 ? (double)s->nback / t : 0,
            (unsigned long long)s->attempts);
    if (!s->nfail)
        fprintf(f, " none");
    for (int k = 0; k < F_NREASONS; k++)
        if (s->failures[k])
            fprintf(f, " %s %llu", fail_names[k],
                    (unsigned long long)s->failures[k]);
    fprintf(f, "\n");
    report_latency_text(f, "  connect latency", s->up);
    if (r->cfg->probe == PROBE_PING)
        report_latency_text(f, "  until Pong", s->back);
}

void storm_text(struct run *r, FILE *f)
{
    struct cfg *cfg = r->cfg;
    struct wave_sum a, b;
    wave_sum(r, 0, &a);
    wave_sum(r, 1, &b);
    char lo[INET6_ADDRSTRLEN] = "kernel's choice", hi[INET6_ADDRSTRLEN] = "";
    if (cfg->nsrc) {
        ip_str(&cfg->src[0], lo, sizeof lo);
        ip_str(&cfg->src[cfg->nsrc - 1], hi, sizeof hi);
    }
    fprintf(f, "storm: %ld connections from %d source address%s (%s%s%s%s),"
            " back = %s, hold %.1f s\n", cfg->conns, cfg->nsrc ? cfg->nsrc : 1,
            cfg->nsrc > 1 ? "es" : "", lo, cfg->nsrc > 1 ? " .. " : "", hi,
            cfg->src_auto ? ", chosen: 2 waves need 2 ports a connection"
                          : "",
            cfg->probe == PROBE_PING ? "Ping answered with Pong"
                                     : "handshake done",
            cfg->duration);
    wave_text(r, f, "wave 1 (open, --connect-concurrency)", &a, r->t0);
    if (storm_st.phase >= ST_REOPEN) {
        fprintf(f, "closed all from this side in %.3f s\n",
                (double)(storm_st.t_reopen - storm_st.t_close) / 1e9);
        char name[96];
        snprintf(name, sizeof name, "wave 2 (all at once: connects made "
                 "in %.3f s)", b.last_connect > storm_st.t_reopen
                 ? (double)(b.last_connect - storm_st.t_reopen) / 1e9 : 0);
        wave_text(r, f, name, &b, storm_st.t_reopen);
        if (storm_st.k0.ok && storm_st.k1.ok)
            fprintf(f, "kernel during wave 2 (host-wide, every listener): "
                    "ListenOverflows +%llu, ListenDrops +%llu\n",
                    (unsigned long long)(storm_st.k1.overflows - storm_st.k0.overflows),
                    (unsigned long long)(storm_st.k1.drops - storm_st.k0.drops));
    } else {
        fprintf(f, "the run ended before wave 2 (phase %s)\n",
                (const char *[]){"open", "hold", "close", "reopen",
                                 "done"}[storm_st.phase]);
    }
    wave_free(&a);
    wave_free(&b);
}
