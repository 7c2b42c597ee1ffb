/* sluice-hist-test: unit tests of the latency histogram (hist.c).
 * Prints "N passed, M failed"; exits 1 when anything failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hist.h"

static int passed, failed;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (cond) {                                                           \
            passed++;                                                         \
        } else {                                                              \
            failed++;                                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                       \
            printf(__VA_ARGS__);                                              \
            printf("\n");                                                     \
        }                                                                     \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* log-uniform in [1, 2^bits) */
static uint64_t rnd_log(int bits)
{
    int b = (int)(rnd() % (uint64_t)bits);
    uint64_t base = 1ULL << b;
    return base + rnd() % base;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double rel_err(uint64_t got, uint64_t want)
{
    if (want == 0)
        return got == 0 ? 0 : 1;
    double d = (double)got - (double)want;
    return (d < 0 ? -d : d) / (double)want;
}

static uint64_t exact_pct(const uint64_t *sorted, size_t n, double q)
{
    double x = q / 100.0 * (double)n;
    size_t rank = (size_t)x;
    if ((double)rank < x)
        rank++;
    if (rank < 1)
        rank = 1;
    return sorted[rank - 1];
}

static void test_empty(void)
{
    struct hist h;
    hist_init(&h);
    CHECK(hist_percentile(&h, 50) == 0, "empty p50 is 0");
    CHECK(hist_percentile(&h, 100) == 0, "empty max is 0");
    CHECK(hist_mean(&h) == 0, "empty mean is 0");
}

static void test_layout(void)
{
    unsigned prev = 0;
    int mono = 1, inside = 1, narrow = 1;
    for (int i = 0; i < 200000; i++) {
        uint64_t v = i < 70000 ? (uint64_t)i : rnd_log(HIST_MAX_BITS);
        unsigned idx = hist_index(v);
        uint64_t lo = hist_bucket_lo(idx), w = hist_bucket_width(idx);
        if (!(lo <= v && v < lo + w))
            inside = 0;
        if (lo >= HIST_SUB && w * HIST_SUB > lo)
            narrow = 0;
        if (i < 70000 && idx < prev)
            mono = 0;
        prev = idx;
    }
    CHECK(inside, "every value lies inside its bucket");
    CHECK(narrow, "every bucket is at most 1/128 of its lower bound wide");
    CHECK(mono, "bucket index never decreases as values grow");
    CHECK(hist_index((1ULL << HIST_MAX_BITS) - 1) == HIST_NBUCKETS - 1,
          "largest tracked value maps to the last bucket");
    CHECK(hist_index(UINT64_MAX) == HIST_NBUCKETS - 1,
          "values beyond the range clamp to the last bucket");
    for (unsigned i = 0; i < 128; i++)
        if (hist_index(i) != i || hist_bucket_width(i) != 1) {
            CHECK(0, "value %u below 128 is exact", i);
            return;
        }
    CHECK(1, "values below 128 are exact");
}

/* The rule hist.h gives JSON readers (from sub_bucket_bits alone) matches
 * hist_bucket_width for every bucket: the readers need no other copy. */
static void test_json_rule(void)
{
    for (unsigned i = 0; i < HIST_NBUCKETS; i++) {
        uint64_t lo = hist_bucket_lo(i), rule;
        if (lo < (1ULL << HIST_SUB_BITS))
            rule = 1;
        else
            rule = 1ULL << ((unsigned)(63 - __builtin_clzll(lo)) - HIST_SUB_BITS);
        if (rule != hist_bucket_width(i)) {
            CHECK(0, "bucket %u (lo %llu): rule %llu, width %llu", i,
                  (unsigned long long)lo, (unsigned long long)rule,
                  (unsigned long long)hist_bucket_width(i));
            return;
        }
    }
    CHECK(1, "the JSON width rule matches every bucket");
}

static void test_single_values(void)
{
    struct hist h;
    double worst = 0;
    uint64_t worst_v = 0;
    for (int i = 0; i < 20000; i++) {
        uint64_t v = i < 1000 ? (uint64_t)i : rnd_log(HIST_MAX_BITS);
        hist_init(&h);
        hist_record(&h, v);
        for (int q = 1; q <= 99; q += 49) {
            double e = rel_err(hist_percentile(&h, q), v);
            if (e > worst) {
                worst = e;
                worst_v = v;
            }
        }
    }
    CHECK(worst <= 0.01, "single value: worst relative error %.5f (at %llu)",
          worst, (unsigned long long)worst_v);
}

static void test_distribution(void)
{
    const size_t n = 1000000;
    uint64_t *v = malloc(n * sizeof *v);
    struct hist *h = malloc(sizeof *h), *a = malloc(sizeof *a),
                *b = malloc(sizeof *b);
    hist_init(h);
    hist_init(a);
    hist_init(b);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        v[i] = rnd_log(34); /* 1 ns .. 17 s */
        sum += v[i];
        hist_record(h, v[i]);
        hist_record(rnd() & 1 ? a : b, v[i]);
    }
    qsort(v, n, sizeof *v, cmp_u64);
    static const double qs[] = {0, 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99,
                                100};
    double worst = 0;
    for (size_t k = 0; k < sizeof qs / sizeof *qs; k++) {
        double e = rel_err(hist_percentile(h, qs[k]), exact_pct(v, n, qs[k]));
        if (e > worst)
            worst = e;
    }
    CHECK(worst <= 0.01, "1M log-uniform values 1 ns..17 s: worst percentile "
          "relative error %.5f", worst);
    CHECK(h->count == n && h->min == v[0] && h->max == v[n - 1] &&
          h->sum == sum, "count, min, max and sum are exact");
    CHECK(hist_percentile(h, 100) == v[n - 1], "p100 is the exact max");

    /* merging two halves equals recording everything in one */
    hist_merge(a, b);
    CHECK(memcmp(a->b, h->b, sizeof h->b) == 0, "merged buckets are equal");
    CHECK(a->count == h->count && a->min == h->min && a->max == h->max &&
          a->sum == h->sum, "merged count/min/max/sum are equal");
    int same = 1;
    for (size_t k = 0; k < sizeof qs / sizeof *qs; k++)
        if (hist_percentile(a, qs[k]) != hist_percentile(h, qs[k]))
            same = 0;
    CHECK(same, "merged percentiles are equal");

    struct hist *e = malloc(sizeof *e);
    hist_init(e);
    hist_merge(a, e);
    CHECK(a->min == h->min && a->count == h->count,
          "merging an empty histogram changes nothing");
    hist_merge(e, h);
    CHECK(memcmp(e->b, h->b, sizeof h->b) == 0 && e->min == h->min,
          "merging into an empty histogram copies it");
    free(v);
    free(h);
    free(a);
    free(b);
    free(e);
}

static void test_narrow_ranges(void)
{
    /* typical latencies: 10-30 us in ns, and 1-100 ms, uniform */
    static const uint64_t ranges[][2] = {{10000, 30000},
                                         {1000000, 100000000},
                                         {50, 400}};
    for (size_t r = 0; r < 3; r++) {
        const size_t n = 200000;
        uint64_t *v = malloc(n * sizeof *v);
        struct hist h;
        hist_init(&h);
        for (size_t i = 0; i < n; i++) {
            v[i] = ranges[r][0] + rnd() % (ranges[r][1] - ranges[r][0]);
            hist_record(&h, v[i]);
        }
        qsort(v, n, sizeof *v, cmp_u64);
        double worst = 0;
        for (double q = 0.5; q < 100; q += 0.5) {
            double e = rel_err(hist_percentile(&h, q), exact_pct(v, n, q));
            if (e > worst)
                worst = e;
        }
        CHECK(worst <= 0.01, "uniform %llu..%llu: worst error %.5f",
              (unsigned long long)ranges[r][0],
              (unsigned long long)ranges[r][1], worst);
        free(v);
    }
}

static void test_record_n(void)
{
    struct hist a, b;
    hist_init(&a);
    hist_init(&b);
    for (int i = 0; i < 1000; i++)
        hist_record(&a, 12345);
    hist_record_n(&b, 12345, 1000);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "record_n(v, n) == n x record(v)");
    hist_init(&a);
    hist_record(&a, 1ULL << 50);
    CHECK(a.max == 1ULL << 50 && hist_percentile(&a, 100) == 1ULL << 50,
          "a clamped value keeps its exact max");
}

/* The ceil(q% x count)-th value exactly, where q% x count is a whole
 * number that binary floating point does not hit (0.999 x 1000). */
static void test_whole_ranks(void)
{
    static struct hist h;
    const uint64_t counts[] = {1000, 10000, 100000, 1000000};
    for (unsigned i = 0; i < sizeof counts / sizeof *counts; i++) {
        uint64_t n = counts[i], tail = n / 1000;
        hist_init(&h);
        hist_record_n(&h, 10, n - tail);
        hist_record_n(&h, 1000000, tail);
        CHECK(hist_percentile(&h, 99.9) == 10,
              "p99.9 of %llu values, the top 0.1%% higher: %llu, want 10",
              (unsigned long long)n,
              (unsigned long long)hist_percentile(&h, 99.9));
        CHECK(hist_percentile(&h, 99.95) == 1000000,
              "p99.95 of %llu values, the top 0.1%% higher: the higher",
              (unsigned long long)n);
    }
}

int main(void)
{
    test_empty();
    test_layout();
    test_json_rule();
    test_single_values();
    test_distribution();
    test_narrow_ranges();
    test_record_n();
    test_whole_ranks();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
