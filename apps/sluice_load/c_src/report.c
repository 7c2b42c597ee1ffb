/* Merging the workers' figures and writing them: the human summary (stdout)
 * and the --json object. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "load.h"
#include "util.h"

struct stats report_totals(struct run *r)
{
    struct stats t;
    memset(&t, 0, sizeof t);
    for (int i = 0; i < r->nw; i++) {
        const struct stats *s = &r->w[i].st;
        t.messages += s->messages;
        t.bytes += s->bytes;
        t.writes += s->writes;
        t.sent_bytes += s->sent_bytes;
        t.pings += s->pings;
        t.pongs += s->pongs;
        t.timeouts += s->timeouts;
        t.skipped += s->skipped;
        t.late += s->late;
        t.attempts += s->attempts;
        t.handshakes += s->handshakes;
        t.tls_handshakes += s->tls_handshakes;
        t.tls_resumed += s->tls_resumed;
        t.established += s->established;
        for (int k = 0; k < F_NREASONS; k++)
            t.failures[k] += s->failures[k];
        if (s->first_connect &&
            (!t.first_connect || s->first_connect < t.first_connect))
            t.first_connect = s->first_connect;
        if (s->last_established > t.last_established)
            t.last_established = s->last_established;
    }
    return t;
}

static void merged(struct run *r, struct hist *lat, struct hist *clat)
{
    hist_init(lat);
    hist_init(clat);
    for (int i = 0; i < r->nw; i++) {
        hist_merge(lat, r->w[i].lat);
        hist_merge(clat, r->w[i].clat);
    }
}

static double connect_rate(const struct stats *t)
{
    if (!t->established || t->last_established <= t->first_connect)
        return 0;
    return (double)t->established /
           ((double)(t->last_established - t->first_connect) / 1e9);
}

/* Scenarios whose figures are connections (storm's own are per wave). */
static int conn_sc(const struct run *r)
{
    return r->cfg->scenario == SC_CONNECT || r->cfg->scenario == SC_STORM;
}

/* The headline figures: what "messages" means depends on the scenario. */
static void headline(struct run *r, const struct stats *t, double secs,
                     uint64_t *msgs, double *rate)
{
    if (conn_sc(r)) {
        *msgs = t->established;
        *rate = connect_rate(t);
    } else {
        *msgs = t->messages;
        *rate = secs > 0 ? (double)t->messages / secs : 0;
    }
}

void report_hist_json(struct json *j, const char *key, const struct hist *h)
{
    json_obj(j, key);
    json_str(j, "unit", "ns");
    hist_json_layout(j, h);
    json_arr(j, "buckets"); /* [lowest value of the bucket, count] */
    for (unsigned i = 0; i < HIST_NBUCKETS; i++)
        if (h->b[i]) {
            json_arr(j, NULL);
            json_u64(j, NULL, hist_bucket_lo(i));
            json_u64(j, NULL, h->b[i]);
            json_end_arr(j);
        }
    json_end_arr(j);
    json_end_obj(j);
}

void report_latency_json(struct json *j, const char *key,
                         const struct hist *h)
{
    json_obj(j, key);
    json_dbl(j, "p50", (double)hist_percentile(h, 50) / 1e3);
    json_dbl(j, "p90", (double)hist_percentile(h, 90) / 1e3);
    json_dbl(j, "p99", (double)hist_percentile(h, 99) / 1e3);
    json_dbl(j, "p999", (double)hist_percentile(h, 99.9) / 1e3);
    json_dbl(j, "max", h->count ? (double)h->max / 1e3 : 0);
    json_dbl(j, "mean", hist_mean(h) / 1e3);
    json_u64(j, "samples", h->count);
    json_end_obj(j);
}

void report_latency_text(FILE *f, const char *label, const struct hist *h)
{
    if (!h->count) {
        fprintf(f, "%s: no samples\n", label);
        return;
    }
    fprintf(f, "%s (us): p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f"
            "  (%llu samples)\n", label,
            (double)hist_percentile(h, 50) / 1e3,
            (double)hist_percentile(h, 90) / 1e3,
            (double)hist_percentile(h, 99) / 1e3,
            (double)hist_percentile(h, 99.9) / 1e3, (double)h->max / 1e3,
            (unsigned long long)h->count);
}

static void failures_text(FILE *f, const struct stats *t,
                          const struct outcome *o)
{
    /* connections that failed or that the server closed, by reason */
    fprintf(f, "connection failures:");
    if (!o->failures)
        fprintf(f, " none");
    for (int k = 0; k < F_NREASONS; k++)
        if (t->failures[k])
            fprintf(f, " %s %llu", fail_names[k],
                    (unsigned long long)t->failures[k]);
    fprintf(f, "\n");
}

void report_text(struct run *r, FILE *f, double secs)
{
    struct stats t = report_totals(r);
    struct hist *lat = malloc(sizeof *lat), *clat = malloc(sizeof *clat);
    merged(r, lat, clat);
    uint64_t msgs;
    double rate;
    headline(r, &t, secs, &msgs, &rate);
    fprintf(f, "%s %s: %ld connection%s, %d thread%s, %.2f s measured%s\n",
            PROG, scenario_names[r->cfg->scenario], r->cfg->conns, r->cfg->conns == 1 ? "" : "s",
            r->nw, r->nw == 1 ? "" : "s", secs,
            r->interrupted ? " (interrupted)" : "");
    if (r->sc->text)
        r->sc->text(r, f);
    if (!conn_sc(r)) {
        fprintf(f, "messages: %llu  rate: %.0f/s  bytes: %llu\n",
                (unsigned long long)msgs, rate, (unsigned long long)t.bytes);
        report_latency_text(f, "latency", lat);
    }
    fprintf(f, "connect: %llu established of %llu attempts, %.0f/s\n",
            (unsigned long long)t.established,
            (unsigned long long)t.attempts, connect_rate(&t));
    report_latency_text(f, "connect latency", clat);
    struct outcome o = run_outcome(r, &t);
    failures_text(f, &t, &o);
    engine_tls_text(r, f);
    if (r->kbefore.ok && r->kafter.ok)
        fprintf(f, "kernel over the run (host-wide, every listener, "
                "/proc/net/netstat): ListenOverflows +%llu, ListenDrops "
                "+%llu\n",
                (unsigned long long)(r->kafter.overflows - r->kbefore.overflows),
                (unsigned long long)(r->kafter.drops - r->kbefore.drops));
    outcome_text(f, &o);
    free(lat);
    free(clat);
}

/* Host-wide counters: engines of one run on one host see the same ones,
 * so a coordinator must not add them up; the host's name and the raw
 * counters let it take the union of their windows, host by host. */
void report_kernel_json(struct json *j, const char *key,
                        const struct listen_counters *a,
                        const struct listen_counters *b)
{
    if (!a->ok || !b->ok) {
        json_null(j, key);
        return;
    }
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        host[0] = 0;
    json_obj(j, key);
    json_str(j, "scope", "host");
    json_str(j, "host", host);
    json_str(j, "source", "/proc/net/netstat TcpExt");
    json_u64(j, "listen_overflows", b->overflows - a->overflows);
    json_u64(j, "listen_drops", b->drops - a->drops);
    json_obj(j, "before");
    json_u64(j, "ListenOverflows", a->overflows);
    json_u64(j, "ListenDrops", a->drops);
    json_end_obj(j);
    json_obj(j, "after");
    json_u64(j, "ListenOverflows", b->overflows);
    json_u64(j, "ListenDrops", b->drops);
    json_end_obj(j);
    json_end_obj(j);
}

int report_json(struct run *r, const char *path, double secs, int exit_code)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    struct stats t = report_totals(r);
    struct hist *lat = malloc(sizeof *lat), *clat = malloc(sizeof *clat);
    merged(r, lat, clat);
    uint64_t msgs;
    double rate;
    headline(r, &t, secs, &msgs, &rate);
    const struct hist *main_lat = conn_sc(r) ? clat : lat;
    uint64_t up = 0;
    for (int i = 0; i < r->nw; i++)
        up += r->w[i].up;

    struct json j;
    json_start(&j, f);
    json_obj(&j, NULL);
    json_str(&j, "scenario", scenario_names[r->cfg->scenario]);
    json_u64(&j, "conns", (uint64_t)r->cfg->conns);
    json_dbl(&j, "duration_s", secs);
    json_u64(&j, "messages", msgs);
    json_dbl(&j, "rate", rate);
    json_u64(&j, "bytes", t.bytes);
    json_u64(&j, "errors", run_outcome(r, &t).total);
    report_latency_json(&j, "latency_us", main_lat);
    json_u64(&j, "threads", (uint64_t)r->nw);
    json_dbl(&j, "warmup_s", r->cfg->warmup);
    /* wall-clock start of the measurement window: aligns the rounds of
     * engine processes run side by side */
    uint64_t ms = atomic_load(&r->mstart);
    if (ms) {
        struct timespec rt;
        clock_gettime(CLOCK_REALTIME, &rt);
        uint64_t real = (uint64_t)rt.tv_sec * NS_PER_S + (uint64_t)rt.tv_nsec;
        json_u64(&j, "window_start_unix_ms", (real - (now_ns() - ms)) /
                                                 NS_PER_MS);
    }
    json_i64(&j, "exit_code", exit_code);
    json_bool(&j, "protocol_error", exit_code == 1);
    /* a run cut short exits as a whole one would: the figures say so */
    json_bool(&j, "interrupted", r->interrupted);
    json_u64(&j, "conns_up_at_end", up);
    json_obj(&j, "failures");
    for (int k = 0; k < F_NREASONS; k++)
        if (t.failures[k])
            json_u64(&j, fail_names[k], t.failures[k]);
    json_end_obj(&j);
    json_obj(&j, "connect");
    json_u64(&j, "attempts", t.attempts);
    json_u64(&j, "handshakes", t.handshakes);
    json_u64(&j, "established", t.established);
    json_dbl(&j, "rate_per_s", connect_rate(&t));
    /* to the ns: a coordinator divides by it (rounded to the ms, a
     * sub-ms ramp of a few connections gave a rate of 0) */
    json_dbl_prec(&j, "span_s", t.last_established > t.first_connect
                               ? (double)(t.last_established -
                                          t.first_connect) / 1e9 : 0, 9);
    report_latency_json(&j, "latency_us", clat);
    report_hist_json(&j, "latency_hist", clat);
    json_end_obj(&j);
    report_kernel_json(&j, "kernel", &r->kbefore, &r->kafter);
    /* the engine's own CPU: shows when the client, not the server, is
     * what bounds a figure (TLS handshakes cost the client more) */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    json_obj(&j, "engine_cpu_s");
    json_dbl(&j, "user", (double)ru.ru_utime.tv_sec +
                             (double)ru.ru_utime.tv_usec / 1e6);
    json_dbl(&j, "sys", (double)ru.ru_stime.tv_sec +
                            (double)ru.ru_stime.tv_usec / 1e6);
    json_end_obj(&j);
    engine_tls_json(r, &j);
    if (r->sc->json)
        r->sc->json(r, &j);
    report_hist_json(&j, "latency_hist", main_lat);
    json_end_obj(&j);
    json_finish(&j);
    free(lat);
    free(clat);
    if (fclose(f) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}
