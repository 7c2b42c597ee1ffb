/* sluice-blocking-client: a deliberately plain client for the ack protocol,
 * the yardstick the load engine must match.  One blocking connection: write
 * a batch of frames, read acks until they cover the batch, repeat. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "json.h"
#include "opts.h"
#include "util.h"

#define PROG "sluice-blocking-client"

static const char *const acks[] = {"each", "last", "counted", NULL};

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1", *json = NULL;
    long port = 8000, batch = 2048, payload = 5;
    double duration = 10;
    int ack = 0;
    struct opt opts[] = {
        {"host", OPT_STR, &host, "IP", "127.0.0.1", "server address", NULL,
         0, 0, 0},
        {"port", OPT_INT, &port, "P", "8000", "server port", NULL, 1, 65535,
         0},
        {"duration", OPT_DOUBLE, &duration, "SECONDS", "10", "run time", NULL,
         0, 1e7, 0},
        {"batch", OPT_INT, &batch, "FRAMES", "2048",
         "frames per write; the next batch waits for all their acks", NULL,
         1, 1 << 22, 0},
        {"payload", OPT_INT, &payload, "BYTES", "5", "payload bytes per frame",
         NULL, 0, 1 << 20, 0},
        {"ack", OPT_CHOICE, &ack, "MODE", "each",
         "ack mode; must match the server's --ack", acks, 0, 0, 0},
        {"json", OPT_STR, &json, "FILE", NULL, "also write {frames,seconds,rate}",
         NULL, 0, 0, 0},
        {NULL, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, 0},
    };
    opts_parse(PROG, "Plain blocking ack-protocol client (one connection).",
               opts, argc, argv);
    union sockaddr_any dst;
    if (parse_ip(host, &dst) < 0)
        usage_error(PROG, "--host: '%s' is not an IPv4 or IPv6 address", host);
    if (dst.sa.sa_family == AF_INET6)
        dst.in6.sin6_port = htons((uint16_t)port);
    else
        dst.in4.sin_port = htons((uint16_t)port);

    int fd = socket(dst.sa.sa_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, &dst.sa, sockaddr_len(&dst)) < 0) {
        fprintf(stderr, PROG ": connect %s:%ld: %s\n", host, port,
                strerror(errno));
        return 3;
    }
    set_nodelay(fd);

    size_t flen = 12 + (size_t)payload, alen = ack == 2 ? 12 : 8;
    unsigned char *buf = malloc(flen * (size_t)batch);
    for (long i = 0; i < batch; i++) {
        put_be32(buf + i * flen + 8, (uint32_t)payload);
        memset(buf + i * flen + 12, 'x', (size_t)payload);
    }
    size_t rlen = 256 * 1024;
    unsigned char *rbuf = malloc(rlen + 12);
    size_t carry = 0;
    uint64_t next = 1, acked = 0;
    uint64_t t0 = now_ns(), end = t0 + (uint64_t)(duration * 1e9), t;
    do {
        for (long i = 0; i < batch; i++)
            put_be64(buf + i * flen, next + (uint64_t)i);
        if (write_all(fd, buf, flen * (size_t)batch) < 0) {
            perror(PROG ": write");
            return 1;
        }
        next += (uint64_t)batch;
        while (acked < next - 1) {
            ssize_t n = read(fd, rbuf + carry, rlen);
            if (n <= 0) {
                fprintf(stderr, PROG ": server closed the connection\n");
                return 1;
            }
            size_t have = carry + (size_t)n, off = 0;
            for (; have - off >= alen; off += alen) {
                uint64_t id = get_be64(rbuf + off);
                if (id <= acked || id >= next) {
                    fprintf(stderr, PROG ": bad ack id %llu (acked %llu)\n",
                            (unsigned long long)id, (unsigned long long)acked);
                    return 1;
                }
                acked = id;
            }
            carry = have - off;
            memmove(rbuf, rbuf + off, carry);
        }
        t = now_ns();
    } while (t < end);
    double secs = (double)(t - t0) / 1e9;
    printf("frames %llu in %.3f s: %.0f frames/s (batch %ld, ack %s)\n",
           (unsigned long long)acked, secs, (double)acked / secs, batch,
           acks[ack]);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            perror(json);
            return 1;
        }
        struct json j;
        json_start(&j, f);
        json_obj(&j, NULL);
        json_u64(&j, "frames", acked);
        json_dbl(&j, "seconds", secs);
        json_dbl(&j, "rate", (double)acked / secs);
        json_u64(&j, "batch", (uint64_t)batch);
        json_str(&j, "ack", acks[ack]);
        json_end_obj(&j);
        json_finish(&j);
        fclose(f);
    }
    close(fd);
    return 0;
}
