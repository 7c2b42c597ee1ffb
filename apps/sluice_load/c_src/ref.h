/* sluice-ref's shared parts: its options, a connection, a thread.  The
 * server loop, accept and main are in ref.c; a connection's reads,
 * replies, out buffer and TLS handshake in ref_conn.c. */
#ifndef SLUICE_REF_H
#define SLUICE_REF_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ref_proto.h"
#include "tls.h"

#define PROG "sluice-ref"
#define OUT_LIMIT (256 * 1024)
#ifndef READS_PER_EVENT
#define READS_PER_EVENT 4 /* re-read a full buffer before epoll again */
#endif

struct rconn {
    int fd;
    uint32_t events;           /* currently registered with epoll */
    SSL *ssl;                  /* --tls */
    int handshaking;
    struct proto_state ps;
    unsigned char *ob;         /* pending output */
    uint32_t ob_off, ob_len, ob_cap;
    int closing;               /* the client's EOF or a protocol error: read
                                * no more, close once ob is out */
};

struct rthread {
    int id;
    pthread_t th;
    int ep, lfd, wake;
    unsigned char *rbuf, *obuf;
    uint64_t accepted, rejected, oversized, emfile, tls_failed;
    uint64_t lfd_resume;       /* 0, or when to re-arm the listen socket */
};

struct ref_cfg {
    int protocol, ack, threads;
    long port, max_frame, max_conns, bufsize;
    const char *ip;
    int tls, tls_version, share_port;
    long tls_tickets;
    const char *certfile, *keyfile, *tls_alpn;
    SSL_CTX *ctx;
};
extern struct ref_cfg cfg;
extern atomic_long g_conns;

/* ref_conn.c; -1 from these: close the connection */
void ep_set(struct rthread *t, struct rconn *c, uint32_t ev);
void conn_close(struct rthread *t, struct rconn *c);
int conn_flush(struct rthread *t, struct rconn *c);
int conn_readable(struct rthread *t, struct rconn *c);
int conn_handshake(struct rthread *t, struct rconn *c);

#endif
