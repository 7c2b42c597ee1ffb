/* OpenSSL glue shared by sluice-load (client) and sluice-ref (server):
 * contexts built from the command line's choices, a non-blocking handshake
 * step, and read/write with the semantics of read(2)/write(2), so that the
 * callers' plain-socket code paths stay as they are. */
#ifndef SLUICE_TLS_H
#define SLUICE_TLS_H

#include <stddef.h>
#include <sys/types.h>

#include <openssl/ssl.h>

enum tls_version { TLSV_ANY, TLSV_12, TLSV_13 };
extern const char *const tls_version_names[]; /* "any", "1.2", "1.3" */

struct tls_opts {
    int server;
    int version;            /* enum tls_version */
    const char *alpn;       /* comma list, or NULL */
    /* client */
    const char *ca;         /* CA file, or NULL (system store if verify) */
    int verify;             /* verify the server's certificate and name */
    int resume;             /* keep a session and offer it (tls_slot) */
    /* server */
    const char *cert, *key;
    long tickets;           /* TLS 1.3 tickets per handshake; 0: none */
    /* both */
    int release_buffers;    /* free idle connections' buffers */
    long read_buffer;       /* read-ahead buffer, bytes (0: OpenSSL's) */
};

/* A context, or NULL with a one-line reason in err. */
SSL_CTX *tls_ctx_new(const struct tls_opts *o, char *err, size_t errlen);

/* The comma list "h2,http/1.1" in ALPN wire format; -1 if malformed. */
int tls_alpn_wire(const char *list, unsigned char *out, size_t cap);

/* Where a client keeps the session to resume (one per thread: no lock).
 * Attach it with SSL_set_app_data before the handshake. */
struct tls_slot {
    SSL_SESSION *sess;
};
/* Offer the slot's session, if any, on a new client SSL. */
void tls_slot_offer(SSL *ssl, struct tls_slot *slot);

/* One handshake step: 1 done, 0 in progress (*want: EPOLLIN or EPOLLOUT),
 * -1 failed (tls_last_error() says why). */
int tls_handshake(SSL *ssl, unsigned *want);

/* read(2)'s contract on plaintext: >0 bytes (as many as OpenSSL has
 * buffered, up to len), 0 at end of stream (close_notify or EOF), -1 with
 * errno: EAGAIN nothing now, EPROTO a TLS error (tls_last_error()), else
 * the socket's error. */
ssize_t tls_read(SSL *ssl, void *buf, size_t len);

/* write(2)'s contract: bytes taken (fewer only when the socket is full),
 * -1 with errno EAGAIN (nothing taken) or an error as tls_read.  After a
 * short count or EAGAIN the caller retries with the same bytes from where
 * the count left off (OpenSSL may hold part of them in a record). */
ssize_t tls_write(SSL *ssl, const void *buf, size_t len);

/* Why the last failing call on this thread failed (one line). */
const char *tls_last_error(void);

#endif
