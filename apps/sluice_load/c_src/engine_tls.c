/* --tls in the load engine: the options, the handshake as one more step
 * of a connection in the epoll loop (state CS_TLS, after the TCP handshake;
 * the connect timeout covers both), and what TLS adds to the report.
 * Scenarios see a TLS connection only through conn_read/conn_write. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/x509v3.h>

#include "load.h"
#include "tls.h"
#include "util.h"

/* Set once by engine_tls_configure, before any worker starts. */
static const char *sni;   /* server name sent, NULL: none */
static int host_is_ip;

void engine_tls_configure(struct cfg *cfg, const struct opt *opts)
{
    static const char *const tls_only[] = {"tls-ca", "tls-verify",
        "tls-sni", "tls-alpn", "tls-resume", "tls-version", NULL};
    if (!cfg->tls) {
        for (const char *const *o = tls_only; *o; o++)
            if (opts_given(opts, *o))
                usage_error(PROG, "--%s applies with --tls only", *o);
        return;
    }
    union sockaddr_any ip;
    host_is_ip = parse_ip(cfg->host, &ip) == 0; /* IPv6 too: no SNI */
    /* as browsers and curl do: the host's name, never an address */
    sni = cfg->tls_sni ? cfg->tls_sni : host_is_ip ? NULL : cfg->host;
    /* Many mostly idle connections (ping, connect, storm): OpenSSL's
     * buffers are freed while empty (~34 KiB a connection otherwise).
     * Few busy ones (lockstep, pipeline, flood): read ahead 64 KiB at a
     * time. */
    int many = cfg->scenario >= SC_PING;
    struct tls_opts o = {
        .server = 0, .version = cfg->tls_version, .alpn = cfg->tls_alpn,
        .ca = cfg->tls_ca, .verify = cfg->tls_verify,
        .resume = cfg->tls_resume, .release_buffers = many,
        .read_buffer = many ? 0 : 65536,
    };
    char err[400];
    cfg->tls_ctx = tls_ctx_new(&o, err, sizeof err);
    if (!cfg->tls_ctx)
        usage_error(PROG, "--tls: %s", err);
}

int engine_tls_worker_init(struct worker *w)
{
    if (w->run->cfg->tls_resume && !(w->tls_slot = calloc(1, sizeof *w->tls_slot)))
        return -1;
    return 0;
}

void engine_tls_start(struct worker *w, struct conn *c, uint64_t now)
{
    struct cfg *cfg = w->run->cfg;
    SSL *ssl = SSL_new(cfg->tls_ctx);
    if (!ssl || SSL_set_fd(ssl, c->fd) != 1) {
        SSL_free(ssl);
        conn_fail(w, c, F_OTHER, now);
        return;
    }
    c->ssl = ssl;
    c->state = CS_TLS;
    SSL_set_connect_state(ssl);
    if (sni)
        SSL_set_tlsext_host_name(ssl, sni);
    if (cfg->tls_verify) {
        if (cfg->tls_sni || !host_is_ip)
            SSL_set1_host(ssl, sni);
        else
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), cfg->host);
    }
    tls_slot_offer(ssl, w->tls_slot);
    engine_tls_step(w, c, now);
}

static void handshake_failed(struct worker *w, struct conn *c, uint64_t now)
{
    if (!stopping(w->run)) {
        char local[64];
        sock_local_str(c->fd, local, sizeof local);
        int n = atomic_fetch_add(&w->run->warnings, 1);
        if (n < MAX_WARNINGS)
            fprintf(stderr, PROG ": TLS handshake failed on connection %u "
                    "(local %s): %s\n", c->idx, local, tls_last_error());
        else if (n == MAX_WARNINGS)
            fprintf(stderr, PROG ": more failures; see the failure "
                    "counts\n");
    }
    conn_fail(w, c, F_TLS_HANDSHAKE, now);
}

void engine_tls_step(struct worker *w, struct conn *c, uint64_t now)
{
    unsigned want = 0;
    int r = tls_handshake(c->ssl, &want);
    if (r == 0) {
        conn_want(w, c, want);
        return;
    }
    if (r < 0) {
        handshake_failed(w, c, now);
        return;
    }
    /* the step itself may have taken the whole handshake (the server on
     * this core, run at once by the wake-up): time it from here */
    now = now_ns();
    w->st.tls_handshakes++;
    if (SSL_session_reused(c->ssl))
        w->st.tls_resumed++;
    hist_record(w->tlslat, now - c->t_a);
    if (!w->tls_version) {
        const unsigned char *a = NULL;
        unsigned alen = 0;
        SSL_get0_alpn_selected(c->ssl, &a, &alen);
        if (alen >= sizeof w->tls_alpn)
            alen = sizeof w->tls_alpn - 1;
        memcpy(w->tls_alpn, a ? (const char *)a : "", alen);
        w->tls_alpn[alen] = 0;
        w->tls_cipher = SSL_get_cipher_name(c->ssl);
        w->tls_version = SSL_get_version(c->ssl);
    }
    conn_ready(w, c, now);
    /* Bytes that came with the handshake's last flight wait in OpenSSL's
     * read-ahead buffer, where epoll will not announce them. */
    if ((c->state == CS_UP || c->state == CS_PROBING) &&
        SSL_has_pending(c->ssl))
        w->run->sc->readable(w, c, now);
}

void engine_tls_drain(struct worker *w, uint64_t now)
{
    w->tls_pending = 0;
    for (uint32_t k = 0; k < w->n && !stopping(w->run); k++) {
        struct conn *c = &w->conns[k];
        if (c->ssl && (c->state == CS_UP || c->state == CS_PROBING) &&
            SSL_has_pending(c->ssl))
            w->run->sc->readable(w, c, now);
    }
}

/* The first worker's negotiated parameters (every connection of a run
 * negotiates the same ones against one server). */
static const struct worker *first_tls(struct run *r)
{
    for (int i = 0; i < r->nw; i++)
        if (r->w[i].tls_version)
            return &r->w[i];
    return NULL;
}

static void tls_hist(struct run *r, struct hist *h)
{
    hist_init(h);
    for (int i = 0; i < r->nw; i++)
        hist_merge(h, r->w[i].tlslat);
}

void engine_tls_json(struct run *r, struct json *j)
{
    struct cfg *cfg = r->cfg;
    if (!cfg->tls)
        return;
    struct stats t = report_totals(r);
    const struct worker *f = first_tls(r);
    struct hist *h = malloc(sizeof *h);
    tls_hist(r, h);
    double span = t.last_established > t.first_connect
                      ? (double)(t.last_established - t.first_connect) / 1e9
                      : 0;
    json_obj(j, "tls");
    if (f) {
        json_str(j, "version", f->tls_version);
        json_str(j, "cipher", f->tls_cipher);
    } else {
        json_null(j, "version");
        json_null(j, "cipher");
    }
    if (f && f->tls_alpn[0])
        json_str(j, "alpn", f->tls_alpn);
    else
        json_null(j, "alpn");
    if (sni)
        json_str(j, "sni", sni);
    else
        json_null(j, "sni");
    json_bool(j, "verify", cfg->tls_verify);
    json_bool(j, "resume", cfg->tls_resume);
    json_u64(j, "handshakes", t.tls_handshakes);
    json_u64(j, "full_handshakes", t.tls_handshakes - t.tls_resumed);
    json_u64(j, "resumed", t.tls_resumed);
    json_dbl(j, "full_handshakes_per_s",
             span > 0 ? (double)(t.tls_handshakes - t.tls_resumed) / span : 0);
    report_latency_json(j, "handshake_latency_us", h);
    report_hist_json(j, "handshake_hist", h);
    json_end_obj(j);
    free(h);
}

void engine_tls_text(struct run *r, FILE *out)
{
    struct cfg *cfg = r->cfg;
    if (!cfg->tls)
        return;
    struct stats t = report_totals(r);
    const struct worker *f = first_tls(r);
    struct hist *h = malloc(sizeof *h);
    tls_hist(r, h);
    fprintf(out, "tls: %s %s, ALPN %s, SNI %s, verify %s; %llu handshakes "
            "(%llu full, %llu resumed)\n", f ? f->tls_version : "-",
            f ? f->tls_cipher : "-", f && f->tls_alpn[0] ? f->tls_alpn : "none",
            sni ? sni : "none", cfg->tls_verify ? "on" : "off",
            (unsigned long long)t.tls_handshakes,
            (unsigned long long)(t.tls_handshakes - t.tls_resumed),
            (unsigned long long)t.tls_resumed);
    report_latency_text(out, "tls handshake latency (after TCP's)", h);
    free(h);
}
