/* Small helpers shared by every sluice C binary: clocks, byte order,
 * sockets, errno names. */
#ifndef SLUICE_UTIL_H
#define SLUICE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <netinet/in.h>

#define NS_PER_S  1000000000ULL
#define NS_PER_MS 1000000ULL

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static inline void put_be64(unsigned char *p, uint64_t v)
{
    v = __builtin_bswap64(v);
    __builtin_memcpy(p, &v, 8);
}

static inline uint64_t get_be64(const unsigned char *p)
{
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

static inline void put_be32(unsigned char *p, uint32_t v)
{
    v = __builtin_bswap32(v);
    __builtin_memcpy(p, &v, 4);
}

static inline uint32_t get_be32(const unsigned char *p)
{
    uint32_t v;
    __builtin_memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}

/* Number of online CPUs (at least 1). */
int ncpus(void);

/* Set O_NONBLOCK; returns 0 or -1 (errno set). */
int set_nonblock(int fd);

/* TCP_NODELAY on; errors ignored (not fatal for a benchmark). */
void set_nodelay(int fd);

/* An IPv4 or IPv6 socket address, as bind() and connect() take it. */
union sockaddr_any {
    struct sockaddr sa;
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
};

/* "127.0.0.1:8000" or "[::1]:8000" of the socket's local side, into buf. */
const char *sock_local_str(int fd, char *buf, size_t n);
const char *addr_str(const union sockaddr_any *a, char *buf, size_t n);
/* The address alone: "127.0.0.1", "::1". */
const char *ip_str(const union sockaddr_any *a, char *buf, size_t n);
/* The length bind() and connect() take for a's family. */
socklen_t sockaddr_len(const union sockaddr_any *a);

/* Parse a numeric IPv4 or IPv6 address (port 0); 0 ok, -1 bad. */
int parse_ip(const char *s, union sockaddr_any *out);

/* Symbolic errno name ("ECONNREFUSED"), or NULL when not in our table. */
const char *errno_name(int e);

/* The kernel's TcpExt ListenOverflows (accept queue full: the handshake's
 * last ACK dropped) and ListenDrops (every SYN or ACK a listener dropped,
 * overflows included) from /proc/net/netstat: host-wide (this network
 * namespace), all listeners.  ok = 0 when they could not be read. */
struct listen_counters {
    int ok;
    uint64_t overflows, drops;
};
void listen_counters_read(struct listen_counters *k);

/* Write all of buf to a blocking fd; 0 ok, -1 error. */
int write_all(int fd, const void *buf, size_t n);

#endif
