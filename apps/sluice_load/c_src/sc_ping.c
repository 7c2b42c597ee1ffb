/* ping (and scale, which is ping with a ramp at --rate and a hold): connscale's pattern.  Every connection sends "Ping\n" every
 * --interval ms from the moment it is up and expects "Pong\n" within
 * --timeout ms.  At most one ping is outstanding per connection: a tick that
 * finds the previous ping unanswered is counted as skipped (that is what a
 * stalled server causes).  A ping unanswered after --timeout counts as a
 * timeout; the connection is KEPT, and a pong that arrives later counts as
 * late (its latency is still recorded, so a stall shows in max).
 *
 * Per-round figures (a round = one interval, starting after the ramp and
 * warmup) are kept per worker and carry a sparse latency histogram, so rounds
 * from several engine processes merge exactly. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "load.h"
#include "util.h"

#define F_OUT 1      /* a ping is outstanding */
#define F_TIMEDOUT 2 /* ... and it has been counted as a timeout */

struct round_out {
    uint64_t pings, pongs, timeouts, skipped, late, conns_up, max;
    uint32_t nb;        /* non-empty buckets */
    uint32_t *idx;
    uint64_t *cnt;
    int present;
};

struct ping_worker {
    uint32_t nrounds;
    int64_t cur;             /* round being accumulated, -1 = none yet */
    struct round_out acc;    /* its counters */
    struct hist *rh;         /* its latency */
    struct round_out *out;
    uint64_t raw_timeouts;
    /* rounds [0, flushed) are final in out[]: the main thread may read
     * them (release/acquire) to report each round live */
    _Atomic uint32_t flushed;
};

static const unsigned char PING[5] = {'P', 'i', 'n', 'g', '\n'};
static const unsigned char PONG[5] = {'P', 'o', 'n', 'g', '\n'};

static void ping_worker_init(struct worker *w)
{
    struct cfg *cfg = w->run->cfg;
    struct ping_worker *p = calloc(1, sizeof *p);
    double n = cfg->duration * 1000.0 / (double)cfg->interval_ms;
    p->nrounds = n < 1 ? 1 : (uint32_t)n;
    p->cur = -1;
    p->rh = malloc(sizeof *p->rh);
    hist_init(p->rh);
    p->out = calloc(p->nrounds, sizeof *p->out);
    w->sw = p;
}

static void flush_round(struct worker *w, struct ping_worker *p)
{
    if (p->cur < 0 || p->cur >= p->nrounds)
        return;
    struct round_out *o = &p->out[p->cur];
    *o = p->acc;
    o->present = 1;
    o->conns_up = w->up;
    o->max = p->rh->count ? p->rh->max : 0;
    uint32_t nb = 0;
    for (unsigned i = 0; i < HIST_NBUCKETS; i++)
        nb += p->rh->b[i] != 0;
    o->nb = nb;
    o->idx = malloc((nb ? nb : 1) * sizeof *o->idx);
    o->cnt = malloc((nb ? nb : 1) * sizeof *o->cnt);
    nb = 0;
    for (unsigned i = 0; i < HIST_NBUCKETS; i++)
        if (p->rh->b[i]) {
            o->idx[nb] = i;
            o->cnt[nb++] = p->rh->b[i];
        }
    memset(&p->acc, 0, sizeof p->acc);
    hist_init(p->rh);
}

/* The current round's accumulator, or NULL outside the rounds. */
static struct round_out *round_at(struct worker *w, uint64_t now)
{
    struct ping_worker *p = w->sw;
    if (!in_window(w->run, now))
        return NULL;
    uint64_t ms = atomic_load_explicit(&w->run->mstart, memory_order_relaxed);
    int64_t r = (int64_t)((now - ms) /
                          ((uint64_t)w->run->cfg->interval_ms * NS_PER_MS));
    if (r >= p->nrounds)
        return NULL;
    if (r != p->cur) {
        flush_round(w, p);
        for (int64_t k = p->cur + 1; k < r; k++) {
            p->out[k].present = 1;
            p->out[k].conns_up = w->up;
        }
        p->cur = r;
        atomic_store_explicit(&p->flushed, (uint32_t)r, memory_order_release);
    }
    return &p->acc;
}

static void arm(struct worker *w, struct conn *c)
{
    uint64_t d = c->t_b;
    if ((c->flags & (F_OUT | F_TIMEDOUT)) == F_OUT) {
        uint64_t t = c->t_a + (uint64_t)w->run->cfg->timeout_ms * NS_PER_MS;
        if (t < d)
            d = t;
    }
    timer_set(w, c, d);
}

static void tick(struct worker *w, struct conn *c, uint64_t now)
{
    struct round_out *acc = round_at(w, now);
    int counting = in_window(w->run, now);
    if (c->flags & F_OUT) {
        if (acc)
            acc->skipped++;
        if (counting)
            w->st.skipped++;
    } else {
        ssize_t r = conn_write(c, PING, sizeof PING);
        if (r == (ssize_t)sizeof PING) {
            c->flags = F_OUT;
            c->t_a = now;
            if (acc)
                acc->pings++;
            if (counting)
                w->st.pings++;
        } else if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (acc)
                acc->skipped++;
            if (counting)
                w->st.skipped++;
        } else {
            conn_lost(w, c, r < 0 ? errno : EIO, now);
            return;
        }
    }
    uint64_t iv = (uint64_t)w->run->cfg->interval_ms * NS_PER_MS;
    c->t_b += iv;
    if (c->t_b <= now)
        c->t_b = now + iv;
    arm(w, c);
}

static void ping_connected(struct worker *w, struct conn *c, uint64_t now)
{
    conn_want(w, c, EPOLLIN | EPOLLRDHUP);
    c->t_b = now;
    c->flags = 0;
    c->match = 0;
    tick(w, c, now);
}

static void ping_timer(struct worker *w, struct conn *c, uint64_t now)
{
    struct ping_worker *p = w->sw;
    if ((c->flags & (F_OUT | F_TIMEDOUT)) == F_OUT &&
        now >= c->t_a + (uint64_t)w->run->cfg->timeout_ms * NS_PER_MS) {
        c->flags |= F_TIMEDOUT;
        p->raw_timeouts++;
        struct round_out *acc = round_at(w, now);
        if (acc)
            acc->timeouts++;
        if (in_window(w->run, now))
            w->st.timeouts++;
    }
    if (now >= c->t_b)
        tick(w, c, now);
    else
        arm(w, c);
}

static void ping_readable(struct worker *w, struct conn *c, uint64_t now)
{
    struct ping_worker *p = w->sw;
    long n = conn_read(w, c, now);
    if (n <= 0)
        return;
    now = now_ns();
    for (long i = 0; i < n; i++) {
        if (w->rbuf[i] != PONG[c->match]) {
            protocol_error(w, c, "unexpected byte 0x%02x from the server "
                           "(expected \"Pong\\n\")", w->rbuf[i]);
            return;
        }
        if (++c->match < 5)
            continue;
        c->match = 0;
        if (!(c->flags & F_OUT)) {
            protocol_error(w, c, "\"Pong\" with no \"Ping\" outstanding");
            return;
        }
        uint64_t lat = now - c->t_a;
        int late = (c->flags & F_TIMEDOUT) != 0;
        struct round_out *acc = round_at(w, now);
        if (acc) {
            acc->pongs++;
            acc->late += (uint64_t)late;
            hist_record(p->rh, lat);
        }
        if (in_window(w->run, now)) {
            w->st.pongs++;
            w->st.late += (uint64_t)late;
            w->st.messages++;
            w->st.bytes += 5;
            hist_record(w->lat, lat);
        }
        w->raw_msgs++;
        c->flags = 0;
        arm(w, c);
    }
}

static void ping_finish(struct worker *w, uint64_t now)
{
    (void)now;
    struct ping_worker *p = w->sw;
    flush_round(w, p);
    /* Every round is final now, the last ones too: a round was flushed
     * only by an event in the next one, so the last round was never
     * reported live, nor one whose flush came in the window's last
     * moments (a thread that started late, a loaded host). */
    atomic_store_explicit(&p->flushed, p->nrounds, memory_order_release);
}

static uint64_t ping_errors(const struct worker *w)
{
    return ((const struct ping_worker *)w->sw)->raw_timeouts;
}

/* Round k over all workers into *sum and h; 0 if the run ended before. */
static int merge_round(struct run *r, uint32_t k, struct round_out *sum,
                       struct hist *h)
{
    int present = 0;
    memset(sum, 0, sizeof *sum);
    hist_init(h);
    for (int i = 0; i < r->nw; i++) {
        struct round_out *o = &((struct ping_worker *)r->w[i].sw)->out[k];
        if (!o->present)
            continue;
        present = 1;
        sum->pings += o->pings;
        sum->pongs += o->pongs;
        sum->timeouts += o->timeouts;
        sum->skipped += o->skipped;
        sum->late += o->late;
        sum->conns_up += o->conns_up;
        for (uint32_t b = 0; b < o->nb; b++) {
            h->b[o->idx[b]] += o->cnt[b];
            h->count += o->cnt[b];
        }
        if (o->max > sum->max)
            sum->max = o->max;
    }
    if (h->count) {
        h->min = 0;
        h->max = sum->max;
    }
    return present;
}

static uint32_t nrounds(struct run *r)
{
    return ((struct ping_worker *)r->w[0].sw)->nrounds;
}

/* One merged round as a JSON object (in the result's rounds[], and live). */
static void round_json(struct json *j, const char *key, uint32_t k,
                       const struct cfg *cfg, const struct round_out *s,
                       const struct hist *h)
{
    json_obj(j, key);
    json_u64(j, "round", k);
    json_dbl(j, "start_s", (double)k * (double)cfg->interval_ms / 1000.0);
    json_u64(j, "conns_up", s->conns_up);
    json_u64(j, "pings", s->pings);
    json_u64(j, "pongs", s->pongs);
    json_u64(j, "timeouts", s->timeouts);
    json_u64(j, "skipped", s->skipped);
    json_u64(j, "late_pongs", s->late);
    json_obj(j, "latency_us");
    json_dbl(j, "p50", (double)hist_percentile(h, 50) / 1e3);
    json_dbl(j, "p90", (double)hist_percentile(h, 90) / 1e3);
    json_dbl(j, "p99", (double)hist_percentile(h, 99) / 1e3);
    json_dbl(j, "p999", (double)hist_percentile(h, 99.9) / 1e3);
    json_dbl(j, "max", (double)s->max / 1e3);
    json_end_obj(j);
        report_hist_json(j, "latency_hist", h);
    json_end_obj(j);
}

static void ping_json(struct run *r, struct json *j)
{
    struct stats t = report_totals(r);
    struct cfg *cfg = r->cfg;
    uint64_t raw_to = 0;
    for (int i = 0; i < r->nw; i++)
        raw_to += ((struct ping_worker *)r->w[i].sw)->raw_timeouts;
    json_u64(j, "interval_ms", (uint64_t)cfg->interval_ms);
    json_u64(j, "timeout_ms", (uint64_t)cfg->timeout_ms);
    json_str(j, "on_timeout", "keep");
    json_u64(j, "pings", t.pings);
    json_u64(j, "pongs", t.pongs);
    json_u64(j, "timeouts", t.timeouts);
    json_u64(j, "timeouts_whole_run", raw_to);
    json_u64(j, "skipped", t.skipped);
    json_u64(j, "late_pongs", t.late);

    struct hist *h = malloc(sizeof *h);
    struct round_out sum;
    json_arr(j, "rounds");
    for (uint32_t k = 0; k < nrounds(r) && merge_round(r, k, &sum, h); k++)
        round_json(j, NULL, k, cfg, &sum, h);
    json_end_arr(j);
    free(h);
}

static void ping_text(struct run *r, FILE *f)
{
    struct stats t = report_totals(r);
    fprintf(f, "ping: every %ld ms, timeout %ld ms (connection kept on "
            "timeout): %llu pings, %llu pongs, %llu timeouts, %llu skipped "
            "ticks, %llu late pongs\n", r->cfg->interval_ms,
            r->cfg->timeout_ms, (unsigned long long)t.pings,
            (unsigned long long)t.pongs, (unsigned long long)t.timeouts,
            (unsigned long long)t.skipped, (unsigned long long)t.late);
    struct hist *h = malloc(sizeof *h);
    struct round_out sum;
    fprintf(f, "%6s %8s %8s %8s %8s %8s %10s %10s %10s\n", "round", "up",
            "pings", "pongs", "timeouts", "skipped", "p50 us", "p99 us",
            "max us");
    uint32_t k = 0;
    for (; k < nrounds(r) && k < 60 && merge_round(r, k, &sum, h); k++)
        fprintf(f, "%6u %8llu %8llu %8llu %8llu %8llu %10.1f %10.1f %10.1f\n",
                k, (unsigned long long)sum.conns_up,
                (unsigned long long)sum.pings, (unsigned long long)sum.pongs,
                (unsigned long long)sum.timeouts,
                (unsigned long long)sum.skipped,
                (double)hist_percentile(h, 50) / 1e3,
                (double)hist_percentile(h, 99) / 1e3, (double)sum.max / 1e3);
    if (k < nrounds(r) && k == 60)
        fprintf(f, "(%u more rounds in --json)\n", nrounds(r) - k);
    free(h);
}

int ping_live_rounds(struct run *r, FILE *f, uint32_t *next)
{
    uint32_t done = nrounds(r);
    for (int i = 0; i < r->nw; i++) {
        uint32_t fl = atomic_load_explicit(
            &((struct ping_worker *)r->w[i].sw)->flushed, memory_order_acquire);
        if (fl < done)
            done = fl;
    }
    if (*next >= done)
        return 0;
    struct hist *h = malloc(sizeof *h);
    struct round_out sum;
    struct json j;
    for (; *next < done; (*next)++) {
        if (!merge_round(r, *next, &sum, h))
            continue;
        json_start(&j, f);
        round_json(&j, NULL, *next, r->cfg, &sum, h);
        json_finish(&j);
    }
    free(h);
    fflush(f);
    return 1;
}

const struct scenario sc_ping = {
    .worker_init = ping_worker_init,
    .connected = ping_connected,
    .readable = ping_readable,
    .timer = ping_timer,
    .finish = ping_finish,
    .errors = ping_errors,
    .json = ping_json,
    .text = ping_text,
};
