#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int ncpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL, 0);
    if (fl < 0)
        return -1;
    return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

const char *ip_str(const union sockaddr_any *a, char *buf, size_t n)
{
    const void *ip = a->sa.sa_family == AF_INET6 ? (const void *)&a->in6.sin6_addr
                                                 : (const void *)&a->in4.sin_addr;
    if (!inet_ntop(a->sa.sa_family, ip, buf, (socklen_t)n))
        snprintf(buf, n, "?");
    return buf;
}

const char *addr_str(const union sockaddr_any *a, char *buf, size_t n)
{
    char ip[INET6_ADDRSTRLEN];
    ip_str(a, ip, sizeof ip);
    if (a->sa.sa_family == AF_INET6)
        snprintf(buf, n, "[%s]:%u", ip, (unsigned)ntohs(a->in6.sin6_port));
    else
        snprintf(buf, n, "%s:%u", ip, (unsigned)ntohs(a->in4.sin_port));
    return buf;
}

const char *sock_local_str(int fd, char *buf, size_t n)
{
    union sockaddr_any a;
    socklen_t len = sizeof a;
    if (fd < 0 || getsockname(fd, &a.sa, &len) != 0) {
        snprintf(buf, n, "?");
        return buf;
    }
    return addr_str(&a, buf, n);
}

socklen_t sockaddr_len(const union sockaddr_any *a)
{
    return a->sa.sa_family == AF_INET6 ? sizeof a->in6 : sizeof a->in4;
}

int parse_ip(const char *s, union sockaddr_any *out)
{
    memset(out, 0, sizeof *out);
    if (inet_pton(AF_INET, s, &out->in4.sin_addr) == 1) {
        out->in4.sin_family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, s, &out->in6.sin6_addr) == 1) {
        out->in6.sin6_family = AF_INET6;
        return 0;
    }
    return -1;
}

const char *errno_name(int e)
{
    switch (e) {
    case ECONNREFUSED: return "ECONNREFUSED";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
    case EADDRINUSE: return "EADDRINUSE";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case ECONNRESET: return "ECONNRESET";
    case ECONNABORTED: return "ECONNABORTED";
    case EPIPE: return "EPIPE";
    case EHOSTUNREACH: return "EHOSTUNREACH";
    case ENETUNREACH: return "ENETUNREACH";
    case ENOBUFS: return "ENOBUFS";
    case ENOMEM: return "ENOMEM";
    case EAGAIN: return "EAGAIN";
    case EINVAL: return "EINVAL";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    default: return NULL;
    }
}

int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

void listen_counters_read(struct listen_counters *k)
{
    /* two lines per group: "TcpExt: Name1 Name2 ..." then the values */
    char names[8192], vals[8192];
    k->ok = 0;
    k->overflows = k->drops = 0;
    FILE *f = fopen("/proc/net/netstat", "r");
    if (!f)
        return;
    int seen = 0;
    while (fgets(names, sizeof names, f) && fgets(vals, sizeof vals, f)) {
        if (strncmp(names, "TcpExt:", 7) != 0 || strncmp(vals, "TcpExt:", 7))
            continue;
        char *ns = NULL, *vs = NULL;
        char *n = strtok_r(names + 7, " \n", &ns);
        char *v = strtok_r(vals + 7, " \n", &vs);
        for (; n && v; n = strtok_r(NULL, " \n", &ns),
                       v = strtok_r(NULL, " \n", &vs)) {
            if (strcmp(n, "ListenOverflows") == 0) {
                k->overflows = strtoull(v, NULL, 10);
                seen |= 1;
            } else if (strcmp(n, "ListenDrops") == 0) {
                k->drops = strtoull(v, NULL, 10);
                seen |= 2;
            }
        }
    }
    fclose(f);
    k->ok = seen == 3;
}
