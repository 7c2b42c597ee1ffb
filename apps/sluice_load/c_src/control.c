/* What lets a coordinator (bin/sluice load --engines/--nodes, in Erlang)
 * drive several engine processes as one run: a machine-readable progress
 * line, and a start signal on stdin so that every engine starts its
 * measured window (the hold) at the same moment, once all of them have
 * ramped up, which keeps their rounds aligned for merging. */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "load.h"
#include "util.h"

static uint64_t sum(struct run *r, size_t off)
{
    uint64_t s = 0;
    for (int i = 0; i < r->nw; i++)
        s += atomic_load_explicit(
            (_Atomic uint64_t *)((char *)&r->w[i] + off),
            memory_order_relaxed);
    return s;
}
#define SUM(r, field) sum(r, offsetof(struct worker, field))

/* Cumulative counters over the whole run (ramp included), so a reader can
 * difference any two lines; one line, flushed, for a pipe. */
void control_progress_json(struct run *r, FILE *f, uint64_t now,
                           const char *phase)
{
    uint64_t failed = SUM(r, pub_failed), errors = SUM(r, pub_errors);
    int pinging = r->cfg->scenario == SC_PING || r->cfg->scenario == SC_SCALE;
    fprintf(f, "{\"progress\":true,\"t_s\":%.3f,\"phase\":\"%s\","
            "\"conns\":%ld,\"attempts\":%llu,\"established\":%llu,"
            "\"failed\":%llu,\"up\":%llu,\"pending\":%llu,"
            "\"unopened\":%llu,\"resolved\":%llu,\"messages\":%llu,"
            "\"timeouts\":%llu,\"errors\":%llu,\"failures\":{",
            (double)(now - r->t0) / 1e9, phase, r->cfg->conns,
            (unsigned long long)SUM(r, pub_attempts),
            (unsigned long long)SUM(r, pub_established),
            (unsigned long long)failed, (unsigned long long)SUM(r, pub_up),
            (unsigned long long)SUM(r, pub_pending),
            (unsigned long long)SUM(r, pub_unopened),
            (unsigned long long)SUM(r, pub_resolved),
            (unsigned long long)SUM(r, pub_msgs),
            (unsigned long long)(pinging ? errors - failed : 0),
            (unsigned long long)errors);
    int n = 0;
    for (int k = 0; k < F_NREASONS; k++) {
        uint64_t v = sum(r, offsetof(struct worker, pub_fail) +
                                (size_t)k * sizeof(_Atomic uint64_t));
        if (v)
            fprintf(f, "%s\"%s\":%llu", n++ ? "," : "", fail_names[k],
                    (unsigned long long)v);
    }
    fputs("}}\n", f);
    fflush(f);
}

int control_read_go(int fd)
{
    static char line[16];
    static size_t len;
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0)
        return -1;
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] != '\n') {
            if (len < sizeof line - 1)
                line[len++] = buf[i];
            continue;
        }
        line[len] = 0;
        int go = strcmp(line, "go") == 0;
        len = 0;
        if (go)
            return 1;
    }
    return 0;
}
