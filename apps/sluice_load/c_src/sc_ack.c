/* lockstep and pipeline: the ack protocol's client side.
 *
 * Frames are Id:64, Len:32, Payload; ids start at 1 on every connection and
 * go up by one.  A worker pre-builds one batch of frames and only patches the
 * 8-byte ids before each write, so the cost per frame is a store, not a
 * syscall.  Every ack is checked against what was sent on its connection. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "load.h"
#include "util.h"

struct ack_conn {
    uint64_t next_id;  /* next id to put in a frame */
    uint64_t sent_hi;  /* highest id whose frame is fully written */
    uint64_t acked;    /* highest id acked */
    uint64_t t_origin; /* open loop: intended send time of id 1 */
    uint64_t wr_first; /* write in progress: first id, frames, bytes done */
    uint32_t wr_n, wr_off;
    uint8_t part_n;    /* bytes of a partial ack carried to the next read */
    unsigned char part[12];
    uint32_t nbt;      /* closed loop: ring of batch send times */
    uint64_t bt[];
};

struct ack_worker {
    unsigned char *tmpl; /* batch * frame_len bytes */
    uint32_t flen, batch, window, ack_len;
    int mode;
    int open_loop;
    int blocking;      /* lockstep on a worker's only connection */
    double ns_per_frame;
};

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

static uint64_t send_time(struct ack_worker *a, struct ack_conn *s,
                          uint64_t id)
{
    if (a->open_loop)
        return s->t_origin + (uint64_t)((double)(id - 1) * a->ns_per_frame);
    return s->bt[((id - 1) / a->batch) % s->nbt];
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
        if (s->wr_off < len) {
            conn_want(w, c, EPOLLIN | EPOLLOUT);
            return 0;
        }
        s->wr_n = 0;
    }
    conn_want(w, c, EPOLLIN);
    return 0;
}

/* Returns -1 on a protocol error (the run is stopping). */
static int on_ack(struct worker *w, struct conn *c, const unsigned char *p,
                  uint64_t now, int counting)
{
    struct ack_worker *a = w->sw;
    struct ack_conn *s = c->sx;
    uint64_t id = get_be64(p);
    if (id <= s->acked) {
        protocol_error(w, c, "ack id %llu goes backwards (already acked up "
                       "to id %llu)", (unsigned long long)id,
                       (unsigned long long)s->acked);
        return -1;
    }
    if (id > s->sent_hi) {
        protocol_error(w, c, "ack id %llu was never sent (highest id sent "
                       "%llu)", (unsigned long long)id,
                       (unsigned long long)s->sent_hi);
        return -1;
    }
    uint64_t covered = id - s->acked;
    if (a->mode == AK_EACH && covered != 1) {
        protocol_error(w, c, "ack id %llu skips ids after %llu (is the server "
                       "in --ack each mode?)", (unsigned long long)id,
                       (unsigned long long)s->acked);
        return -1;
    }
    if (a->mode == AK_COUNTED) {
        uint32_t count = get_be32(p + 8);
        if (count == 0) {
            protocol_error(w, c, "ack id %llu covers zero frames",
                           (unsigned long long)id);
            return -1;
        }
        if (count != covered) {
            protocol_error(w, c, "ack id %llu has count %u but covers %llu "
                           "frames (ids %llu..%llu)", (unsigned long long)id,
                           count, (unsigned long long)covered,
                           (unsigned long long)s->acked + 1,
                           (unsigned long long)id);
            return -1;
        }
    }
    if (counting) {
        w->st.messages += covered;
        hist_record(w->lat, now - send_time(a, s, id));
    }
    w->raw_msgs += covered;
    s->acked = id;
    return 0;
}

/* ack each, closed loop: the acks in a read must be exactly acked+1,
 * acked+2, ...  Check them in a tight loop and record latency once per
 * batch (every frame of a batch was sent, and is acked, at the same time,
 * so the samples are identical).  Returns how many acks were consumed; the
 * caller hands the first bad one, if any, to on_ack for the error. */
static size_t acks_each_run(struct worker *w, struct conn *c,
                            const unsigned char *p, size_t nacks,
                            uint64_t now, int counting)
{
    struct ack_worker *a = w->sw;
    struct ack_conn *s = c->sx;
    uint64_t first = s->acked + 1;
    uint64_t room = s->sent_hi - s->acked;
    if (nacks > room)
        nacks = (size_t)room;
    size_t k = 0;
    while (k < nacks && get_be64(p + 8 * k) == first + k)
        k++;
    if (k == 0)
        return 0;
    uint64_t last = first + k - 1;
    if (counting) {
        w->st.messages += k;
        for (uint64_t id = first; id <= last;) {
            uint64_t b = (id - 1) / a->batch;
            uint64_t bend = (b + 1) * a->batch;
            uint64_t hi = bend < last ? bend : last;
            hist_record_n(w->lat, now - s->bt[b % s->nbt], hi - id + 1);
            id = hi + 1;
        }
    }
    w->raw_msgs += k;
    s->acked = last;
    return k;
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
            if (on_ack(w, c, s->part, now, counting) < 0)
                return;
        }
        if (a->mode == AK_EACH && !a->open_loop)
            p += 8 * acks_each_run(w, c, p, (size_t)(end - p) / 8, now,
                                   counting);
        for (; end - p >= (long)al; p += al)
            if (on_ack(w, c, p, now, counting) < 0)
                return;
        if (p < end) {
            memcpy(s->part, p, (size_t)(end - p));
            s->part_n = (uint8_t)(end - p);
        }
        if (counting)
            w->st.bytes += (s->acked - acked0) * a->flen;
        if (try_send(w, c, now) < 0)
            return;
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
    (void)try_send(w, c, now);
}

static void ack_connected(struct worker *w, struct conn *c, uint64_t now)
{
    struct ack_worker *a = w->sw;
    uint32_t nbt = a->open_loop ? 0 : a->window / a->batch + 2;
    struct ack_conn *s = calloc(1, sizeof *s + nbt * sizeof(uint64_t));
    if (!s) {
        conn_fail(w, c, F_OTHER, now);
        return;
    }
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
    .json = ack_json,
    .text = ack_text,
};
