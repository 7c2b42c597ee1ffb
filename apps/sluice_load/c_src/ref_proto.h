/* Server side of the sluice protocols (ack, ping, echo) as pure functions
 * over the bytes of one read: no I/O here, so partial frames and lines are
 * carried in a small per-connection state. */
#ifndef SLUICE_REF_PROTO_H
#define SLUICE_REF_PROTO_H

#include <stddef.h>
#include <stdint.h>

enum ref_protocol { PROTO_ACK, PROTO_PING, PROTO_ECHO };
enum ack_mode { ACK_EACH, ACK_LAST, ACK_COUNTED };

struct proto_state {
    uint32_t skip;          /* ack: payload bytes of the current frame to skip */
    uint8_t hdr_n;          /* ack: header bytes buffered; ping: bytes of the
                             * current line, up to PING_MAX_LINE + 1 */
    uint8_t junk;           /* ping: inside a line that is not "Ping" */
    uint8_t error;          /* a protocol error: send the replies returned,
                             * then close (as sluice's reply_close) */
    unsigned char hdr[12];  /* ack: partial header; Id kept while skipping */
};

/* A ping line longer than this without its newline is a protocol error, as
 * in sluice_proto_ping. */
#define PING_MAX_LINE 64

/* Feed one chunk of an ack connection.  Writes the acks for it into out
 * (which must hold n + 16 bytes) and returns their length.  A frame that
 * announces more than max_frame bytes sets s->error: the acks returned are
 * those of the whole frames before it, owed before the close. */
size_t ack_feed(struct proto_state *s, enum ack_mode mode, uint32_t max_frame,
                const unsigned char *p, size_t n, unsigned char *out);

/* Feed one chunk of a ping connection: every line "Ping" is answered with
 * "Pong\n"; any other line, or more than PING_MAX_LINE bytes without a
 * newline, sets s->error after the Pongs owed before it (sluice_proto_ping
 * does the same).  out must hold n bytes. */
size_t ping_feed(struct proto_state *s, const unsigned char *p, size_t n,
                 unsigned char *out);

#endif
