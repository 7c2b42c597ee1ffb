/* lockstep and pipeline: every ack checked against what was sent on its
 * connection, and the server's ack mode told from its acks, so that a run
 * whose --ack does not match the server's stops with the mode to use, not
 * with a puzzling id (a 12-byte ack read as 8 bytes makes ids like
 * 4294967296) or, worse, passes.
 *
 * What the bytes can tell (ids start at 1 and go up by one per frame):
 *   - counted acks are Id:64, Count:32 with Count = Id - (last acked id);
 *     read from an ack boundary, the 4 bytes after an 8-byte id of an
 *     each or last server are the high half of the next id, 0 for any id
 *     below 2^32, never a count (at least 1);
 *   - two 8-byte ids in a row that are both plausible (above the last
 *     acked, not above the highest sent, increasing) are 8-byte acks;
 *   - an ack covering several frames is cumulative (last or counted);
 *   - a counted ack's 12 bytes leave the server in one write: a read that
 *     ends 8 bytes into an ack, or 8 bytes and then nothing while nothing
 *     else is owed, is an 8-byte ack;
 *   - an echo server sends the frame back: id 1, then the payload length.
 * Each and last cannot be told apart from bytes alone when every read of
 * the server holds one frame (lockstep, one frame per write): they answer
 * alike; where frames are written together, a run of one-frame acks tells
 * them apart (watch_last). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sc_ack.h"
#include "util.h"

/* What a run of bytes from the server looks like. */
enum ack_seen {
    SEEN_UNKNOWN,    /* cannot tell (yet) */
    SEEN_EACH,       /* 8-byte acks, one per frame */
    SEEN_LAST,       /* 8-byte acks, cumulative */
    SEEN_CUMULATIVE, /* cumulative: 8 bytes of it seen, last or counted */
    SEEN_EIGHT,      /* 8-byte acks, each or last */
    SEEN_COUNTED,    /* 12-byte acks: id and count */
    SEEN_ECHO,       /* the frames came back as sent */
};

/* One-frame acks in a row, of frames written together with the next, that
 * make a server one that acks every frame. */
#define ACK_WATCH_ONES 16

static int plausible(uint64_t id, uint64_t acked, uint64_t sent_hi)
{
    return id > acked && id <= sent_hi;
}

/* The bytes p[0..n) start at an ack boundary on a connection whose ids up
 * to acked were acknowledged and up to sent_hi were sent. */
static int ack_seen(const unsigned char *p, size_t n, uint64_t acked,
                    uint64_t sent_hi)
{
    if (n < 8)
        return SEEN_UNKNOWN;
    uint64_t id = get_be64(p);
    if (!plausible(id, acked, sent_hi))
        return SEEN_UNKNOWN;
    int several = id > acked + 1;
    if (n < 12) /* p is the rest of a read: a counted ack's 12 bytes leave
                 * the server in one write, so these 8 are an 8-byte ack */
        return several ? SEEN_LAST : SEEN_EIGHT;
    if (get_be32(p + 8) == id - acked)
        return SEEN_COUNTED;
    if (n >= 16) {
        uint64_t id2 = get_be64(p + 8);
        if (plausible(id2, id, sent_hi))
            return !several && id2 == id + 1 ? SEEN_EACH : SEEN_LAST;
    }
    /* not its count, but no second id to confirm 8-byte acks either (a
     * counted server with a wrong count looks the same) */
    return several ? SEEN_CUMULATIVE : SEEN_EIGHT;
}

/* The first bytes of a connection are its first frame sent back (frame1:
 * flen bytes); told from 12 bytes and 4 of payload (or all of it). */
static int ack_echoed(const unsigned char *p, size_t n,
                      const unsigned char *frame1, uint32_t flen)
{
    uint32_t payload = flen - 12;
    uint32_t cmp = payload < 4 ? payload : 4;
    if (payload == 0 || n < 12 + cmp)
        return 0;
    return get_be64(p) == 1 && memcmp(p + 8, frame1 + 8, 4 + cmp) == 0;
}

/* Whether `seen' contradicts --ack `mode' for sure. */
static int ack_contradicts(int seen, int mode)
{
    switch (seen) {
    case SEEN_ECHO:
        return 1;
    case SEEN_COUNTED:
        return mode != AK_COUNTED;
    case SEEN_CUMULATIVE:
        return mode == AK_EACH;
    case SEEN_LAST:
        return mode != AK_LAST;
    case SEEN_EACH:
        /* a last server whose reads each hold one frame acks alike */
        return mode == AK_COUNTED;
    default:
        return 0;
    }
}

/* What to tell the user when the server seems to be in mode `seen' while
 * the run has --ack `mode'; NULL when `seen' does not contradict it. */
static const char *ack_advice(int seen, int mode)
{
    switch (seen) {
    case SEEN_ECHO:
        return "the server is an echo server, not an ack server (bin/sluice "
               "serve --protocol ack)";
    case SEEN_COUNTED:
        return mode == AK_COUNTED ? NULL
               : "the server sends counted acks (12 bytes: id and count, "
                 "--ack counted); run load with --ack counted";
    case SEEN_CUMULATIVE:
        return mode != AK_EACH ? NULL
               : "the server acks cumulatively (--ack last or counted), "
                 "not every frame; run load with the server's --ack";
    case SEEN_LAST:
        return mode == AK_LAST ? NULL
               : "the server acks cumulatively with 8-byte acks, one per "
                 "read (--ack last); run load with --ack last";
    case SEEN_EACH:
        return mode == AK_EACH ? NULL
               : "the server acks every frame with 8 bytes (--ack each); "
                 "run load with --ack each";
    case SEEN_EIGHT:
        return mode != AK_COUNTED ? NULL
               : "the server sends 8-byte acks (--ack each or last), not "
                 "counted ones; run load with --ack each";
    default:
        return NULL;
    }
}

/* ---- per connection ---- */

int ack_watch_head(struct worker *w, struct conn *c, const unsigned char *p,
                   size_t n)
{
    struct ack_worker *a = w->sw;
    struct ack_conn *s = c->sx;
    struct ack_watch *aw = &s->watch;
    if (aw->head_done)
        return 0;
    size_t take = sizeof aw->head - aw->head_n;
    if (take > n)
        take = n;
    memcpy(aw->head + aw->head_n, p, take);
    aw->head_n = (uint8_t)(aw->head_n + take);
    const unsigned char *h = aw->head;
    if (ack_echoed(h, aw->head_n, a->tmpl, a->flen)) {
        protocol_error(w, c, "the first frame came back as sent (id 1, "
                       "length %u): %s", a->flen - 12,
                       ack_advice(SEEN_ECHO, a->mode));
        return -1;
    }
    if (aw->head_n < 12 + (a->flen > 12))
        return 0; /* an echo needs a byte of payload to be told */
    int seen = ack_seen(h, aw->head_n, 0, s->sent_hi);
    if (seen == SEEN_COUNTED && a->mode != AK_COUNTED) {
        protocol_error(w, c, "ack id %llu is followed by a count of %u: %s",
                       (unsigned long long)get_be64(h), get_be32(h + 8),
                       ack_advice(seen, a->mode));
        return -1;
    }
    if (a->mode == AK_COUNTED && (seen == SEEN_EACH || seen == SEEN_LAST)) {
        protocol_error(w, c, "the first acks are 8 bytes (ids %llu, %llu): "
                       "%s", (unsigned long long)get_be64(h),
                       (unsigned long long)get_be64(h + 8),
                       ack_advice(seen, a->mode));
        return -1;
    }
    aw->head_done = aw->head_n == sizeof aw->head || seen == SEEN_COUNTED;
    return 0;
}

/* --ack last: an ack for `id', covering `covered' frames.  An each server
 * acks every frame; a last server acks a read's last frame.  Frame id and
 * the next one went out in one write when no write ended at id, so they
 * reach the server together: a last server acks both at once unless a
 * read ends exactly between them, which does not happen ACK_WATCH_ONES
 * times in a row.  Returns -1 after raising the protocol error. */
static int watch_last(struct worker *w, struct conn *c, uint64_t id,
                      uint64_t covered)
{
    struct ack_conn *s = c->sx;
    struct ack_watch *aw = &s->watch;
    if (!aw->wend)
        return 0;
    if (covered > 1 || id > ACK_WATCH_IDS) {
        aw->wend = NULL; /* cumulative, as expected; or never told */
        return 0;
    }
    uint64_t bit = id - 1;
    int ended_write = aw->wend[bit / 8] & (1u << (bit % 8));
    if (id < s->sent_hi && !ended_write && ++aw->ones >= ACK_WATCH_ONES) {
        protocol_error(w, c, "%u acks in a row each covered one frame, "
                       "though it was written together with the next: %s",
                       (unsigned)aw->ones, ack_advice(SEEN_EACH, AK_LAST));
        return -1;
    }
    return 0;
}

/* A protocol error about the ack at p (n bytes available from it), with
 * the mode to use when the bytes tell it. */
__attribute__((format(printf, 5, 6)))
static void ack_error(struct worker *w, struct conn *c,
                      const unsigned char *p, size_t n, const char *fmt, ...)
{
    struct ack_worker *a = w->sw;
    struct ack_conn *s = c->sx;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int seen = ack_seen(p, n, s->acked, s->sent_hi);
    const char *advice = ack_contradicts(seen, a->mode)
                             ? ack_advice(seen, a->mode) : NULL;
    protocol_error(w, c, "%s%s%s", msg, advice ? ": " : "",
                   advice ? advice : "");
}

/* ---- every ack ---- */

int ack_check(struct worker *w, struct conn *c, const unsigned char *p,
              size_t n, uint64_t now, int counting)
{
    struct ack_worker *a = w->sw;
    struct ack_conn *s = c->sx;
    uint64_t id = get_be64(p);
    if (id <= s->acked) {
        ack_error(w, c, p, n, "ack id %llu goes backwards (already acked up to id %llu)",
                  (unsigned long long)id, (unsigned long long)s->acked);
        return -1;
    }
    if (id > s->sent_hi) {
        ack_error(w, c, p, n, "ack id %llu was never sent (highest id sent %llu)",
                  (unsigned long long)id, (unsigned long long)s->sent_hi);
        return -1;
    }
    uint64_t covered = id - s->acked;
    if (a->mode == AK_EACH && covered != 1) {
        ack_error(w, c, p, n, "ack id %llu skips ids after %llu",
                  (unsigned long long)id, (unsigned long long)s->acked);
        return -1;
    }
    if (a->mode == AK_COUNTED) {
        uint32_t count = get_be32(p + 8);
        if (count == 0) {
            ack_error(w, c, p, n, "ack id %llu covers zero frames",
                      (unsigned long long)id);
            return -1;
        }
        if (count != covered) {
            ack_error(w, c, p, n, "ack id %llu has count %u but covers %llu frames (ids "
                      "%llu..%llu)", (unsigned long long)id, count,
                      (unsigned long long)covered,
                      (unsigned long long)s->acked + 1,
                      (unsigned long long)id);
            return -1;
        }
    }
    if (a->mode == AK_LAST && watch_last(w, c, id, covered) < 0)
        return -1;
    if (counting) {
        w->st.messages += covered;
        hist_record(w->lat, now - send_time(a, s, id));
    }
    w->raw_msgs += covered;
    s->acked = id;
    return 0;
}

/* Latency is recorded once per batch: every frame of a batch was sent,
 * and is acked, at the same time, so the samples are identical. */
size_t ack_check_each_run(struct worker *w, struct conn *c,
                          const unsigned char *p, size_t nacks, uint64_t now,
                          int counting)
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

/* --ack counted and 8 bytes of an ack waiting for the rest: the id of an
 * 8-byte ack when it covers all that was sent (the server owes nothing
 * more, so nothing more may come), else 0. */
static uint64_t stalled_id(struct worker *w, struct conn *c)
{
    struct ack_worker *a = w->sw;
    struct ack_conn *s = c->sx;
    if (a->mode != AK_COUNTED || s->part_n != 8)
        return 0;
    uint64_t id = get_be64(s->part);
    return id > s->acked && id == s->sent_hi ? id : 0;
}

/* The timer is free when nothing is due to be sent (it schedules the
 * open loop's sends otherwise). */
void ack_stall_watch(struct worker *w, struct conn *c)
{
    struct ack_conn *s = c->sx;
    if (stalled_id(w, c) && c->heap_pos == HEAP_NONE)
        timer_set(w, c, s->t_part + STALL_NS);
}

int ack_stall_check(struct worker *w, struct conn *c, uint64_t now,
                    uint64_t after)
{
    struct ack_conn *s = c->sx;
    uint64_t id = stalled_id(w, c);
    if (!id || now - s->t_part < after)
        return 0;
    protocol_error(w, c, "ack id %llu came as 8 bytes and no count followed "
                   "for %.1f s: %s", (unsigned long long)id,
                   (double)(now - s->t_part) / 1e9,
                   ack_advice(SEEN_EIGHT, AK_COUNTED));
    return -1;
}

