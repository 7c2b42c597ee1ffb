/* OpenSSL glue shared by sluice-load and sluice-ref (see tls.h). */
#define _GNU_SOURCE
#include "tls.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

const char *const tls_version_names[] = {"any", "1.2", "1.3", NULL};

static __thread char last_error[256];

const char *tls_last_error(void)
{
    return last_error;
}

/* The first queued OpenSSL error as one line, or fallback. */
static void queued_error(char *buf, size_t n, const char *fallback)
{
    unsigned long e = ERR_get_error();
    if (!e) {
        snprintf(buf, n, "%s", fallback);
        return;
    }
    ERR_error_string_n(e, buf, n);
    ERR_clear_error();
}

/* Why an SSL call that returned r failed with SSL_get_error() == kind. */
static void set_error(SSL *ssl, int kind, int r, int saved_errno)
{
    unsigned long e = ERR_peek_error();
    if (kind == SSL_ERROR_ZERO_RETURN) {
        snprintf(last_error, sizeof last_error, "close_notify from the peer");
    } else if (kind == SSL_ERROR_SYSCALL && !e) {
        snprintf(last_error, sizeof last_error, "%s",
                 r == 0 || saved_errno == 0 ? "connection closed by the peer"
                                            : strerror(saved_errno));
    } else if (ERR_GET_LIB(e) == ERR_LIB_SSL &&
               ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        snprintf(last_error, sizeof last_error,
                 "connection closed by the peer");
    } else if (ERR_GET_LIB(e) == ERR_LIB_SSL &&
               ERR_GET_REASON(e) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
        snprintf(last_error, sizeof last_error,
                 "certificate verify failed: %s",
                 X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
    } else {
        queued_error(last_error, sizeof last_error, "TLS error");
    }
    ERR_clear_error();
}

int tls_alpn_wire(const char *list, unsigned char *out, size_t cap)
{
    size_t n = 0;
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len > 255 || n + 1 + len > cap)
            return -1;
        out[n++] = (unsigned char)len;
        memcpy(out + n, p, len);
        n += len;
        if (!comma)
            return (int)n;
        p = comma + 1;
    }
}

struct alpn {
    unsigned len;
    unsigned char wire[];
};

/* Server: the first of our protocols the client offers; none in common
 * is not fatal (the connection goes on without ALPN), as most servers do. */
static int alpn_select(SSL *ssl, const unsigned char **out,
                       unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg)
{
    const struct alpn *a = arg;
    (void)ssl;
    if (SSL_select_next_proto((unsigned char **)out, outlen, a->wire, a->len,
                              in, inlen) == OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_OK;
    return SSL_TLSEXT_ERR_NOACK;
}

/* Client with --tls-resume: keep the newest session (TLS 1.3 tickets
 * arrive after the handshake, so it is taken when OpenSSL hands it over,
 * not right after SSL_connect). */
static int new_session(SSL *ssl, SSL_SESSION *sess)
{
    struct tls_slot *slot = SSL_get_app_data(ssl);
    if (!slot)
        return 0;
    if (slot->sess)
        SSL_SESSION_free(slot->sess);
    slot->sess = sess;
    return 1; /* we keep the reference */
}

void tls_slot_offer(SSL *ssl, struct tls_slot *slot)
{
    SSL_set_app_data(ssl, slot);
    if (slot && slot->sess)
        SSL_set_session(ssl, slot->sess);
}

static SSL_CTX *fail(SSL_CTX *ctx, char *err, size_t n, const char *what,
                     const char *file)
{
    char why[200];
    queued_error(why, sizeof why, "unknown error");
    snprintf(err, n, "%s %s: %s", what, file, why);
    SSL_CTX_free(ctx);
    return NULL;
}

SSL_CTX *tls_ctx_new(const struct tls_opts *o, char *err, size_t errlen)
{
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(o->server ? TLS_server_method()
                                         : TLS_client_method());
    if (!ctx)
        return fail(NULL, err, errlen, "SSL_CTX_new", "");
    if (o->version == TLSV_12) {
        SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
        SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
    } else if (o->version == TLSV_13) {
        SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    }
    /* write(2)'s contract: a short count means a full socket, and the
     * retry of a record that did not fit may come from another buffer
     * (the server's out buffer) */
    long mode = SSL_MODE_ENABLE_PARTIAL_WRITE |
                SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER;
    if (o->release_buffers)
        mode |= SSL_MODE_RELEASE_BUFFERS;
    SSL_CTX_set_mode(ctx, mode);
    /* a peer closing without close_notify is an ordinary EOF here, as it
     * is on a plain socket */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* Read ahead: one read(2) takes many records instead of two reads per
     * record (header, then body); the callers drain what it buffers. */
    SSL_CTX_set_read_ahead(ctx, 1);
    if (o->read_buffer > 0)
        SSL_CTX_set_default_read_buffer_len(ctx, (size_t)o->read_buffer);

    if (o->alpn) {
        struct alpn *a = malloc(sizeof *a + 512);
        int n = a ? tls_alpn_wire(o->alpn, a->wire, 512) : -1;
        if (n < 0) {
            snprintf(err, errlen, "ALPN list '%s': expected names of 1-255 "
                     "bytes separated by commas", o->alpn);
            free(a);
            SSL_CTX_free(ctx);
            return NULL;
        }
        a->len = (unsigned)n;
        if (o->server) {
            SSL_CTX_set_alpn_select_cb(ctx, alpn_select, a); /* kept */
        } else {
            SSL_CTX_set_alpn_protos(ctx, a->wire, a->len);
            free(a);
        }
    }

    if (o->server) {
        if (SSL_CTX_use_certificate_chain_file(ctx, o->cert) != 1)
            return fail(ctx, err, errlen, "certificate file", o->cert);
        if (SSL_CTX_use_PrivateKey_file(ctx, o->key, SSL_FILETYPE_PEM) != 1)
            return fail(ctx, err, errlen, "key file", o->key);
        if (SSL_CTX_check_private_key(ctx) != 1)
            return fail(ctx, err, errlen, "key file", o->key);
        /* No resumption unless asked: every handshake is a full one, and
         * no CPU goes into tickets nobody uses. */
        SSL_CTX_set_num_tickets(ctx, (size_t)o->tickets);
        if (o->tickets == 0) {
            SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
            SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        } else {
            SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
            SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"sluice",
                                           6);
        }
        return ctx;
    }

    if (o->ca && SSL_CTX_load_verify_locations(ctx, o->ca, NULL) != 1)
        return fail(ctx, err, errlen, "CA file", o->ca);
    if (o->verify) {
        if (!o->ca && SSL_CTX_set_default_verify_paths(ctx) != 1)
            return fail(ctx, err, errlen, "system CA store", "");
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    if (o->resume) {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT |
                                                SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(ctx, new_session);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    }
    return ctx;
}

int tls_handshake(SSL *ssl, unsigned *want)
{
    ERR_clear_error();
    errno = 0;
    int r = SSL_do_handshake(ssl);
    if (r == 1)
        return 1;
    int saved = errno;
    int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ) {
        *want = EPOLLIN;
        return 0;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        *want = EPOLLOUT;
        return 0;
    }
    set_error(ssl, e, r, saved);
    /* without close_notify, OpenSSL (told to take a bare EOF for one)
     * says close_notify: in a handshake, it is the peer hanging up */
    if (e == SSL_ERROR_ZERO_RETURN ||
        strcmp(last_error, "connection closed by the peer") == 0)
        snprintf(last_error, sizeof last_error, "connection closed by the "
                 "peer during the handshake (does it speak TLS?)");
    return -1;
}

ssize_t tls_read(SSL *ssl, void *buf, size_t len)
{
    unsigned char *p = buf;
    size_t got = 0;
    ERR_clear_error();
    /* Drain what read-ahead buffered (no event will announce it), but do
     * not go back to the socket for more once OpenSSL holds nothing: the
     * next epoll round does that, as for a plain read. */
    do {
        size_t room = len - got;
        errno = 0;
        int r = SSL_read(ssl, p + got, room > INT_MAX ? INT_MAX : (int)room);
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        int saved = errno;
        int e = SSL_get_error(ssl, r);
        if (got)
            break; /* report the data now, the condition on the next call */
        switch (e) {
        case SSL_ERROR_WANT_READ:
        case SSL_ERROR_WANT_WRITE:
            errno = EAGAIN;
            return -1;
        case SSL_ERROR_ZERO_RETURN:
            return 0;
        case SSL_ERROR_SYSCALL:
            if (!ERR_peek_error() && (r == 0 || saved == 0))
                return 0;
            set_error(ssl, e, r, saved);
            errno = saved ? saved : EPROTO;
            return -1;
        default:
            set_error(ssl, e, r, saved);
            errno = EPROTO;
            return -1;
        }
    } while (got < len && SSL_has_pending(ssl));
    return (ssize_t)got;
}

ssize_t tls_write(SSL *ssl, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    size_t done = 0;
    ERR_clear_error();
    /* Partial-write mode returns after each record: go on until the
     * socket is full, as one write(2) would. */
    while (done < len) {
        size_t room = len - done;
        errno = 0;
        int r = SSL_write(ssl, p + done, room > INT_MAX ? INT_MAX : (int)room);
        if (r > 0) {
            done += (size_t)r;
            continue;
        }
        int saved = errno;
        int e = SSL_get_error(ssl, r);
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
            break;
        if (done)
            return (ssize_t)done;
        set_error(ssl, e, r, saved);
        errno = e != SSL_ERROR_SYSCALL ? EPROTO : saved ? saved : EPIPE;
        return -1;
    }
    if (done == 0 && len > 0) {
        errno = EAGAIN;
        return -1;
    }
    return (ssize_t)done;
}
