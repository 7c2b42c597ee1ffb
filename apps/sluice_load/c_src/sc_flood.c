/* flood: against an echo server, tiny writes (--payload bytes, "aloha\n" by
 * default) as fast as the socket takes them, never waiting for the echo;
 * echoed bytes are read back, checked against what was sent and counted.
 * Measures per-write server cost, the case seed 000 is about. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "load.h"
#include "util.h"

#define WRITES_PER_EVENT 64

struct flood_worker {
    unsigned char *msg;
    uint32_t len;
    uint64_t echoed_raw; /* all echoed bytes, for the progress rate */
};

static void flood_worker_init(struct worker *w)
{
    struct flood_worker *f = calloc(1, sizeof *f);
    f->len = (uint32_t)w->run->cfg->payload;
    f->msg = malloc(f->len);
    static const char aloha[] = "aloha\n";
    for (uint32_t i = 0; i < f->len; i++)
        f->msg[i] = (unsigned char)aloha[i % 6];
    if (f->len > 0)
        f->msg[f->len - 1] = '\n';
    w->sw = f;
}

/* Per connection: the stream is the message over and over; a write the
 * socket took only part of goes on from where it stopped, so that byte k
 * of the echo must be msg[k % len]. */
struct flood_conn {
    uint64_t sent, echoed;
};

static void flood_connected(struct worker *w, struct conn *c, uint64_t now)
{
    c->sx = calloc(1, sizeof(struct flood_conn));
    if (!c->sx) {
        conn_fail(w, c, F_OTHER, now);
        return;
    }
    conn_want(w, c, EPOLLIN | EPOLLOUT);
}

static void flood_writable(struct worker *w, struct conn *c, uint64_t now)
{
    struct flood_worker *f = w->sw;
    struct flood_conn *fc = c->sx;
    int counting = in_window(w->run, now);
    for (int i = 0; i < WRITES_PER_EVENT; i++) {
        uint32_t at = (uint32_t)(fc->sent % f->len);
        ssize_t r = conn_write(c, f->msg + at, f->len - at);
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            conn_lost(w, c, errno, now);
            return;
        }
        fc->sent += (uint64_t)r;
        if (counting) {
            w->st.writes++;
            w->st.sent_bytes += (uint64_t)r;
        }
    }
}

/* The n bytes at p are the echo from byte fc->echoed on: each must be the
 * byte sent there.  Returns -1 after raising the protocol error. */
static int flood_check(struct worker *w, struct conn *c,
                       const unsigned char *p, size_t n)
{
    struct flood_worker *f = w->sw;
    struct flood_conn *fc = c->sx;
    if (fc->echoed + n > fc->sent) {
        protocol_error(w, c, "%llu bytes came back, only %llu were sent: is "
                       "the server an echo server?",
                       (unsigned long long)(fc->echoed + n),
                       (unsigned long long)fc->sent);
        return -1;
    }
    for (size_t i = 0; i < n;) {
        uint32_t at = (uint32_t)((fc->echoed + i) % f->len);
        size_t k = f->len - at < n - i ? f->len - at : n - i;
        if (memcmp(p + i, f->msg + at, k) != 0) {
            size_t j = 0;
            while (p[i + j] == f->msg[at + j])
                j++;
            protocol_error(w, c, "echo byte %llu is 0x%02x, 0x%02x was sent "
                           "there: is the server an echo server?",
                           (unsigned long long)(fc->echoed + i + j), p[i + j],
                           f->msg[at + j]);
            return -1;
        }
        i += k;
    }
    fc->echoed += n;
    return 0;
}

static void flood_readable(struct worker *w, struct conn *c, uint64_t now)
{
    struct flood_worker *f = w->sw;
    long n = conn_read(w, c, now);
    if (n <= 0)
        return;
    if (flood_check(w, c, w->rbuf, (size_t)n) < 0)
        return;
    f->echoed_raw += (uint64_t)n;
    w->raw_msgs = f->echoed_raw / f->len;
    if (in_window(w->run, now))
        w->st.bytes += (uint64_t)n;
}

static void flood_finish(struct worker *w, uint64_t now)
{
    struct flood_worker *f = w->sw;
    (void)now;
    w->st.messages = w->st.bytes / f->len;
}

static void flood_json(struct run *r, struct json *j)
{
    struct stats t = report_totals(r);
    uint64_t ms = atomic_load(&r->mend) - atomic_load(&r->mstart);
    double s = ms ? (double)ms / 1e9 : 0;
    json_u64(j, "payload", (uint64_t)r->cfg->payload);
    json_u64(j, "writes", t.writes);
    json_u64(j, "sent_bytes", t.sent_bytes);
    json_dbl(j, "writes_per_s", s > 0 ? (double)t.writes / s : 0);
    json_dbl(j, "echo_bytes_per_s", s > 0 ? (double)t.bytes / s : 0);
}

static void flood_text(struct run *r, FILE *f)
{
    struct stats t = report_totals(r);
    uint64_t ms = atomic_load(&r->mend) - atomic_load(&r->mstart);
    double s = ms ? (double)ms / 1e9 : 0;
    fprintf(f, "writes: %llu of %ld bytes (%.0f writes/s), echoed %llu bytes "
            "(%.0f bytes/s)\n", (unsigned long long)t.writes,
            r->cfg->payload, s > 0 ? (double)t.writes / s : 0,
            (unsigned long long)t.bytes, s > 0 ? (double)t.bytes / s : 0);
}

const struct scenario sc_flood = {
    .worker_init = flood_worker_init,
    .connected = flood_connected,
    .readable = flood_readable,
    .writable = flood_writable,
    .finish = flood_finish,
    .json = flood_json,
    .text = flood_text,
};
