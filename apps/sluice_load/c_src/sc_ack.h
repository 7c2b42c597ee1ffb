/* sluice-load's lockstep and pipeline scenarios, the ack protocol's client:
 * the state that sc_ack.c (sending and reading) and ack_check.c (checking
 * every ack, and telling the server's ack mode from its acks) share. */
#ifndef SLUICE_SC_ACK_H
#define SLUICE_SC_ACK_H

#include <stddef.h>
#include <stdint.h>

#include "load.h"

/* Frames whose write ends are remembered to tell each from last. */
#define ACK_WATCH_IDS 4096
/* Bytes of zeroed storage an --ack last connection gives its watch (it
 * lives as long as the connection's own state, and is freed with it). */
#define ACK_WATCH_WEND_BYTES (ACK_WATCH_IDS / 8)

/* --ack counted: an 8-byte ack left waiting for its count this long, with
 * nothing else owed, came from a server that sends 8-byte acks (the 12
 * bytes of a counted ack leave in one write). */
#define STALL_NS (1000 * NS_PER_MS)
/* the same, told at the end of a run shorter than STALL_NS */
#define STALL_END_NS (200 * NS_PER_MS)

/* Per connection: what is watched until the server's ack mode is known. */
struct ack_watch {
    unsigned char head[16]; /* the connection's first bytes */
    uint8_t head_n, head_done;
    uint16_t ones;          /* see ack_check.c */
    uint8_t *wend; /* --ack last: a bit per id 1..ACK_WATCH_IDS that ended
                    * a write; NULL once told (and in other modes) */
};

struct ack_conn {
    uint64_t next_id;  /* next id to put in a frame */
    uint64_t sent_hi;  /* highest id whose frame is fully written */
    uint64_t acked;    /* highest id acked */
    uint64_t t_origin; /* open loop: intended send time of id 1 */
    uint64_t wr_first; /* write in progress: first id, frames, bytes done */
    uint32_t wr_n, wr_off;
    uint8_t part_n;    /* bytes of a partial ack carried to the next read */
    unsigned char part[12];
    uint64_t t_part;   /* when the partial ack was left */
    struct ack_watch watch;
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

static inline uint64_t send_time(struct ack_worker *a, struct ack_conn *s,
                                 uint64_t id)
{
    if (a->open_loop)
        return s->t_origin + (uint64_t)((double)(id - 1) * a->ns_per_frame);
    return s->bt[((id - 1) / a->batch) % s->nbt];
}

/* A write(2) of the connection ended after frame sent_hi. */
static inline void ack_watch_wrote(struct ack_watch *aw, uint64_t sent_hi)
{
    if (aw->wend && sent_hi >= 1 && sent_hi <= ACK_WATCH_IDS)
        aw->wend[(sent_hi - 1) / 8] |= (uint8_t)(1u << ((sent_hi - 1) % 8));
}

/* ---- ack_check.c ---- */

/* Bytes read on the connection, in order, before they are parsed: the
 * first ones tell counted acks from 8-byte ones, and an echo server.
 * Returns -1 after raising the protocol error. */
int ack_watch_head(struct worker *w, struct conn *c, const unsigned char *p,
                   size_t n);

/* The ack at p; n: the bytes read from p on, the ack and at least what
 * follows it up to 16 bytes (they tell the server's mode when it is the
 * wrong one); counting: inside the measured window.  Returns -1 after
 * raising the protocol error. */
int ack_check(struct worker *w, struct conn *c, const unsigned char *p,
              size_t n, uint64_t now, int counting);

/* --ack each, closed loop: the acks in a read must be exactly acked+1,
 * acked+2, ...: checked in a tight loop.  Returns how many of the nacks at
 * p were good; the caller hands the first bad one to ack_check. */
size_t ack_check_each_run(struct worker *w, struct conn *c,
                          const unsigned char *p, size_t nacks, uint64_t now,
                          int counting);

/* --ack counted with 8 bytes of an ack left over: after a read or a timer,
 * arm the connection's timer to tell a stall; ack_stall_check then raises
 * the protocol error (-1) when the rest has not come `after' ns later. */
void ack_stall_watch(struct worker *w, struct conn *c);
int ack_stall_check(struct worker *w, struct conn *c, uint64_t now,
                    uint64_t after);

#endif
