#include "ref_proto.h"

#include <string.h>

#include "util.h"

size_t ack_feed(struct proto_state *s, enum ack_mode mode, uint32_t max_frame,
                const unsigned char *p, size_t n, unsigned char *out)
{
    size_t i = 0, o = 0;
    uint32_t count = 0;
    unsigned char last[8];
    const unsigned char *last_in_chunk = NULL;

    /* A frame left incomplete by the previous chunk. */
    if (s->hdr_n > 0) {
        if (s->hdr_n < 12) {
            size_t take = 12u - s->hdr_n;
            if (take > n)
                take = n;
            memcpy(s->hdr + s->hdr_n, p, take);
            s->hdr_n = (uint8_t)(s->hdr_n + take);
            i = take;
            if (s->hdr_n < 12)
                return 0;
            uint32_t len = get_be32(s->hdr + 8);
            if (len > max_frame) {
                s->error = 1;
                return 0;
            }
            s->skip = len;
        }
        size_t take = n - i < s->skip ? n - i : s->skip;
        s->skip -= (uint32_t)take;
        i += take;
        if (s->skip > 0)
            return 0;
        s->hdr_n = 0;
        count = 1;
        memcpy(last, s->hdr, 8);
        if (mode == ACK_EACH) {
            memcpy(out, last, 8);
            o = 8;
        }
    }

    /* Whole frames: the hot loop.  A frame too large stops it; the frames
     * before it are still acked, then the connection closes. */
    if (mode == ACK_EACH) {
        while (n - i >= 12) {
            uint32_t len = get_be32(p + i + 8);
            if (len > max_frame) {
                s->error = 1;
                return o;
            }
            if (n - i - 12 < len)
                break;
            memcpy(out + o, p + i, 8);
            o += 8;
            i += 12 + (size_t)len;
        }
    } else {
        while (n - i >= 12) {
            uint32_t len = get_be32(p + i + 8);
            if (len > max_frame) {
                s->error = 1;
                break;
            }
            if (n - i - 12 < len)
                break;
            last_in_chunk = p + i;
            count++;
            i += 12 + (size_t)len;
        }
    }

    /* Start of a frame that continues in the next chunk. */
    if (i < n && !s->error) {
        size_t rem = n - i;
        if (rem < 12) {
            memcpy(s->hdr, p + i, rem);
            s->hdr_n = (uint8_t)rem;
        } else {
            memcpy(s->hdr, p + i, 12);
            s->hdr_n = 12;
            s->skip = get_be32(s->hdr + 8) - (uint32_t)(rem - 12);
        }
    }

    if (mode != ACK_EACH && count > 0) {
        memcpy(out, last_in_chunk ? last_in_chunk : last, 8);
        o = 8;
        if (mode == ACK_COUNTED) {
            put_be32(out + 8, count);
            o = 12;
        }
    }
    return o;
}

size_t ping_feed(struct proto_state *s, const unsigned char *p, size_t n,
                 unsigned char *out)
{
    static const char ping[] = "Ping";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c == '\n') {
            if (s->junk || s->hdr_n != 4) {
                s->error = 1; /* a line other than "Ping" */
                return o;
            }
            memcpy(out + o, "Pong\n", 5);
            o += 5;
            s->hdr_n = 0;
            continue;
        }
        if (s->hdr_n >= 4 || c != (unsigned char)ping[s->hdr_n])
            s->junk = 1;
        if (++s->hdr_n > PING_MAX_LINE) {
            s->error = 1; /* no newline in sight */
            return o;
        }
    }
    return o;
}
