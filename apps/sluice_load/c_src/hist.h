/* Log-linear latency histogram (HDR-style).
 *
 * Values are unsigned 64-bit integers (the engine records nanoseconds).
 * Below 128 every value has its own bucket; above, each power of two
 * [2^k, 2^(k+1)) is split into 128 equal sub-buckets, so a bucket is at most
 * 1/128 of its lower bound wide and its midpoint is within 1/256 (0.4%) of
 * any value in it.  Values at or above 2^HIST_MAX_BITS are clamped into the
 * top bucket (max stays exact).  Histograms of equal layout merge by adding
 * bucket counts, so per-thread and per-process histograms combine exactly.
 *
 * The JSON form (hist_json_layout and the engine's "buckets" list of
 * [lowest value, count]) carries HIST_SUB_BITS as "sub_bucket_bits": a
 * bucket with lowest value lo is 1 wide when lo < 2^sub_bucket_bits, else
 * 2^(floor(log2 lo) - sub_bucket_bits) wide.  Readers (bin/sluice's merge
 * of several engines' histograms) derive every width from that field, so
 * the constants here are the only copy. */
#ifndef SLUICE_HIST_H
#define SLUICE_HIST_H

#include <stdint.h>
#include <stdio.h>

#include "json.h"

#define HIST_SUB_BITS 7
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_MAX_BITS 42 /* 2^42 ns = 73 minutes */
#define HIST_NBUCKETS ((HIST_MAX_BITS - HIST_SUB_BITS + 1) * HIST_SUB)

struct hist {
    uint64_t count;
    uint64_t min;
    uint64_t max;
    uint64_t sum;
    uint64_t b[HIST_NBUCKETS];
};

static inline unsigned hist_index(uint64_t v)
{
    if (v < HIST_SUB)
        return (unsigned)v;
    if (v >= (1ULL << HIST_MAX_BITS))
        return HIST_NBUCKETS - 1;
    unsigned e = (unsigned)(63 - __builtin_clzll(v)) - HIST_SUB_BITS;
    return e * HIST_SUB + (unsigned)(v >> e);
}

static inline void hist_record_n(struct hist *h, uint64_t v, uint64_t n)
{
    h->b[hist_index(v)] += n;
    h->count += n;
    h->sum += v * n;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
}

static inline void hist_record(struct hist *h, uint64_t v)
{
    hist_record_n(h, v, 1);
}

void hist_init(struct hist *h);
void hist_merge(struct hist *dst, const struct hist *src);
/* Lowest value that falls in bucket idx, and the bucket's width. */
uint64_t hist_bucket_lo(unsigned idx);
uint64_t hist_bucket_width(unsigned idx);
/* Value at percentile q (0..100): the midpoint of the bucket holding the
 * ceil(q% * count)-th smallest value, clamped to [min, max]; 0 if empty. */
uint64_t hist_percentile(const struct hist *h, double q);
double hist_mean(const struct hist *h);
/* The layout and the exact extremes, as members of the JSON object being
 * written: "sub_bucket_bits", "min", "max" (0 and 0 when empty). */
void hist_json_layout(struct json *j, const struct hist *h);

#endif
