#include "hist.h"

#include <string.h>

void hist_init(struct hist *h)
{
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

void hist_merge(struct hist *dst, const struct hist *src)
{
    if (src->count == 0)
        return;
    for (unsigned i = 0; i < HIST_NBUCKETS; i++)
        dst->b[i] += src->b[i];
    dst->count += src->count;
    dst->sum += src->sum;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
}

uint64_t hist_bucket_lo(unsigned idx)
{
    if (idx < HIST_SUB)
        return idx;
    unsigned e = idx / HIST_SUB - 1;
    return (uint64_t)(idx - e * HIST_SUB) << e;
}

uint64_t hist_bucket_width(unsigned idx)
{
    if (idx < HIST_SUB)
        return 1;
    return 1ULL << (idx / HIST_SUB - 1);
}

uint64_t hist_percentile(const struct hist *h, double q)
{
    if (h->count == 0)
        return 0;
    if (q >= 100.0)
        return h->max;
    if (q < 0)
        q = 0;
    /* ceil without libm: the binaries link libc and pthreads only */
    double x = q / 100.0 * (double)h->count;
    /* q/100 is inexact in binary: 99.9% of 1000 comes out as
     * 999.0000000000001, which ceil made the 1000th value (the max) */
    x -= x * 1e-12;
    uint64_t rank = (uint64_t)x;
    if ((double)rank < x)
        rank++;
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HIST_NBUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t v = hist_bucket_lo(i) + (hist_bucket_width(i) - 1) / 2;
            if (v < h->min)
                v = h->min;
            if (v > h->max)
                v = h->max;
            return v;
        }
    }
    return h->max;
}

double hist_mean(const struct hist *h)
{
    return h->count ? (double)h->sum / (double)h->count : 0.0;
}

void hist_json_layout(struct json *j, const struct hist *h)
{
    json_u64(j, "sub_bucket_bits", HIST_SUB_BITS);
    /* the exact extremes: a merged percentile is clamped to them as
     * hist_percentile clamps its own */
    json_u64(j, "min", h->count ? h->min : 0);
    json_u64(j, "max", h->max);
}
