/* lockstep and pipeline: the ack protocol's client side.
 *
 * Frames are Id:64, Len:32, Payload; ids start at 1 on every connection and
 * go up by one.  A worker pre-builds one batch of frames and only patches the
 * 8-byte ids before each write, so the cost per frame is a store, not a
 * syscall.  Every ack is checked against what was sent on its connection
 * (ack_check.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "load.h"
#include "sc_ack.h"
#include "util.h"

static void ack_worker_init(struct worker *w)
{
    struct cfg *cfg = w->run->cfg;
    struct ack_worker *a = calloc(1, sizeof *a);
    a->flen = cfg->frame_len;
    a->batch = (uint32_t)cfg->batch;
    a->window = (uint32_t)cfg->window;
    a->mode = cfg->ack;
    a->ack_len = cfg->ack == AK_COUNTED ? 12 : 8;
    a->open_loop = cfg->rate > 0;
    a->ns_per_frame = a->open_loop ? 1e9 / cfg->rate : 0;
    /* One connection, one frame in flight: nothing else can happen on this
     * worker while it waits for the ack, so it waits in a blocking read
     * (two syscalls per round trip, like a plain client) rather than in
     * epoll (three).  The receive timeout lets it notice the end of the
     * run. */
    a->blocking = !a->open_loop && a->window == 1 && w->n == 1;
    a->tmpl = malloc((size_t)a->batch * a->flen);
    static const char text[] = "Hello";
    for (uint32_t i = 0; i < a->batch; i++) {
        unsigned char *f = a->tmpl + (size_t)i * a->flen;
        put_be64(f, 0);
        put_be32(f + 8, a->flen - 12);
        for (uint32_t k = 12; k < a->flen; k++)
            f[k] = (unsigned char)text[(k - 12) % 5];
    }
    w->sw = a;
}

static void patch_ids(struct ack_worker *a, uint64_t first, uint32_t n)
{
    unsigned char *p = a->tmpl;
    for (uint32_t i = 0; i < n; i++, p += a->flen)
        put_be64(p, first + i);
}

/* Write whatever the window (and, open loop, the schedule) allows.
 * Returns -1 if the connection is gone. */
static int try_send(struct worker *w, struct conn *c, uint64_t now)
{
    struct ack_worker *a = w->sw;
    struct ack_conn *s = c->sx;
    for (;;) {
        if (s->wr_n == 0) {
            uint64_t inflight = s->next_id - 1 - s->acked;
            uint32_t n;
            if (!a->open_loop) {
                if (inflight + a->batch > a->window)
                    break;
                n = a->batch;
                s->bt[((s->next_id - 1) / a->batch) % s->nbt] = now;
            } else {
                uint64_t due = (uint64_t)((double)(now - s->t_origin) /
                                          a->ns_per_frame) + 1;
                uint64_t room = a->window - inflight;
                uint64_t want = due > s->next_id - 1 ? due - (s->next_id - 1)
                                                     : 0;
                if (want > room)
                    want = room;
                if (want > a->batch)
                    want = a->batch;
                if (want == 0) {
                    if (inflight < a->window)
                        timer_set(w, c, send_time(a, s, s->next_id));
                    break;
                }
                n = (uint32_t)want;
            }
            s->wr_first = s->next_id;
            s->wr_n = n;
            s->wr_off = 0;
            s->next_id += n;
        }
        /* (Re)build this write's frames: the template is shared by every
         * connection of the worker, so a partial write is rebuilt too. */
        patch_ids(a, s->wr_first, s->wr_n);
        uint32_t len = s->wr_n * a->flen;
        ssize_t r = conn_write(c, a->tmpl + s->wr_off, len - s->wr_off);
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                conn_want(w, c, EPOLLIN | EPOLLOUT);
                return 0;
            }
            conn_lost(w, c, errno, now);
            return -1;
        }
        s->wr_off += (uint32_t)r;
        s->sent_hi = s->wr_first + s->wr_off / a->flen - 1;
        ack_watch_wrote(&s->watch, s->sent_hi);
        if (s->wr_off < len) {
            conn_want(w, c, EPOLLIN | EPOLLOUT);
            return 0;
        }
        s->wr_n = 0;
    }
    conn_want(w, c, EPOLLIN);
    return 0;
}

static void ack_readable(struct worker *w, struct conn *c, uint64_t now)
{
    struct ack_worker *a = w->sw;
    struct ack_conn *s = c->sx;
    const uint32_t al = a->ack_len;
    uint64_t published = now;
    for (int rounds = 0; rounds < 4 || a->blocking; rounds++) {
        long n = conn_read(w, c, now);
        if (n <= 0)
            return;
        now = now_ns();
        int counting = in_window(w->run, now);
        uint64_t acked0 = s->acked;
        const unsigned char *p = w->rbuf, *end = w->rbuf + n;
        if (ack_watch_head(w, c, p, (size_t)n) < 0)
            return;
        if (s->part_n) {
            uint32_t take = al - s->part_n;
            if (take > (uint32_t)n)
                take = (uint32_t)n;
            memcpy(s->part + s->part_n, p, take);
            s->part_n = (uint8_t)(s->part_n + take);
            p += take;
            if (s->part_n < al)
                return;
            s->part_n = 0;
            /* the ack and what follows it, to tell a wrong mode */
            unsigned char ack[12 + 16];
            size_t more = (size_t)(end - p) < 16 ? (size_t)(end - p) : 16;
            memcpy(ack, s->part, al);
            memcpy(ack + al, p, more);
            if (ack_check(w, c, ack, al + more, now, counting) < 0)
                return;
        }
        if (a->mode == AK_EACH && !a->open_loop)
            p += 8 * ack_check_each_run(w, c, p, (size_t)(end - p) / 8, now,
                                   counting);
        for (; end - p >= (long)al; p += al)
            if (ack_check(w, c, p, (size_t)(end - p), now, counting) < 0)
                return;
        if (p < end) {
            memcpy(s->part, p, (size_t)(end - p));
            s->part_n = (uint8_t)(end - p);
            s->t_part = now;
        }
        if (counting)
            w->st.bytes += (s->acked - acked0) * a->flen;
        if (try_send(w, c, now) < 0)
            return;
        ack_stall_watch(w, c);
        if (a->blocking) {
            if (stopping(w->run))
                return;
            if (now - published > 10 * NS_PER_MS) {
                worker_publish(w);
                published = now;
            }
            continue;
        }
        if ((size_t)n < w->rbuf_len)
            return;
    }
}

static void ack_writable(struct worker *w, struct conn *c, uint64_t now)
{
    if (c->state == CS_UP)
        (void)try_send(w, c, now_ns());
    (void)now;
}

static void ack_timer(struct worker *w, struct conn *c, uint64_t now)
{
    if (ack_stall_check(w, c, now, STALL_NS) < 0 || try_send(w, c, now) < 0)
        return;
    ack_stall_watch(w, c);
}

/* A run shorter than STALL_NS still tells a stall. */
static void ack_finish(struct worker *w, uint64_t now)
{
    if (atomic_load(&w->run->proto_error))
        return;
    for (uint32_t k = 0; k < w->n; k++)
        if (w->conns[k].state == CS_UP && w->conns[k].sx &&
            ack_stall_check(w, &w->conns[k], now, STALL_END_NS) < 0)
            return;
}

static void ack_connected(struct worker *w, struct conn *c, uint64_t now)
{
    struct ack_worker *a = w->sw;
    uint32_t nbt = a->open_loop ? 0 : a->window / a->batch + 2;
    size_t wend = a->mode == AK_LAST ? ACK_WATCH_WEND_BYTES : 0;
    struct ack_conn *s = calloc(1, sizeof *s + nbt * sizeof(uint64_t) + wend);
    if (!s) {
        conn_fail(w, c, F_OTHER, now);
        return;
    }
    if (wend)
        s->watch.wend = (uint8_t *)&s->bt[nbt];
    s->nbt = nbt;
    s->next_id = 1;
    s->t_origin = now;
    c->sx = s;
    if (a->blocking) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = 50000};
        setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL, 0) & ~O_NONBLOCK);
    }
    (void)try_send(w, c, now);
}

static void ack_json(struct run *r, struct json *j)
{
    static const char *const modes[] = {"each", "last", "counted"};
    struct cfg *cfg = r->cfg;
    json_u64(j, "window", (uint64_t)cfg->window);
    json_u64(j, "batch", (uint64_t)cfg->batch);
    json_u64(j, "payload", (uint64_t)cfg->payload);
    json_u64(j, "frame_bytes", cfg->frame_len);
    json_str(j, "ack", modes[cfg->ack]);
    json_str(j, "load", cfg->rate > 0 ? "open" : "closed");
    json_dbl(j, "target_rate_per_conn", cfg->rate);
}

static void ack_text(struct run *r, FILE *f)
{
    static const char *const modes[] = {"each", "last", "counted"};
    struct cfg *cfg = r->cfg;
    fprintf(f, "frames: %u bytes (payload %ld), ack %s, window %ld, batch %ld",
            cfg->frame_len, cfg->payload, modes[cfg->ack], cfg->window,
            cfg->batch);
    if (cfg->rate > 0)
        fprintf(f, ", open loop at %.0f frames/s per connection "
                "(latency from intended send times)", cfg->rate);
    /* every other mismatch stops the run (ack_check.c) */
    if (cfg->batch == 1 && cfg->ack != AK_COUNTED)
        fprintf(f, " (one frame per write: servers in --ack each and last "
                "answer alike)");
    fprintf(f, "\n");
}

/* Lock-step and pipelined differ only in the window and batch that
 * load_main.c gives them; the callbacks are the same. */
const struct scenario sc_ack = {
    .worker_init = ack_worker_init,
    .connected = ack_connected,
    .readable = ack_readable,
    .writable = ack_writable,
    .timer = ack_timer,
    .finish = ack_finish,
    .json = ack_json,
    .text = ack_text,
};
