/* How a run ended, in one place so that the exit code, the summary's
 * errors line and the JSON say the same (README.md, "Exit codes"): the
 * errors by kind, the checks made once the workers are done, and the exit
 * code they make. */
#include <stdio.h>
#include <string.h>

#include "load.h"

/* A run of these scenarios in which the server sent nothing back at all,
 * and held on or closed every connection, did not measure the server: it
 * says so, as a protocol error, rather than report a rate of 0.  Shorter
 * windows are left alone: a slow start is not a silent server. */
#define SILENT_MIN_S 0.5

struct outcome run_outcome(struct run *r, const struct stats *t)
{
    struct outcome o = {0};
    for (int k = 0; k < F_NREASONS; k++)
        o.failures += t->failures[k];
    o.protocol = (uint64_t)atomic_load(&r->proto_error);
    if (r->sc->errors)
        for (int i = 0; i < r->nw; i++)
            o.timeouts += r->sc->errors(&r->w[i]);
    o.total = o.protocol + o.failures + o.timeouts;
    /* A run interrupted before any connection came up or failed (a
       Ctrl-C as it starts, or while the connects are still pending) could
       not connect at all only if one failed: it printed "could not
       connect ... at all ()" beside "connection failures: none", exit 3. */
    int none_up = t->established == 0 && (o.failures || !r->interrupted);
    o.code = o.protocol ? EXIT_PROTOCOL
             : none_up ? EXIT_NO_CONNECTION
             : o.total ? EXIT_ERRORS : EXIT_OK;
    return o;
}

/* Lockstep, pipeline, flood: connections were up, the window ran or the
 * server closed them all, and not one reply came back on any of them. */
static void silent_server(struct run *r, const struct stats *t, double secs)
{
    int sc = r->cfg->scenario;
    int all_closed = t->failures[F_CLOSED_BY_PEER] >= t->established;
    if ((sc != SC_LOCKSTEP && sc != SC_PIPELINE && sc != SC_FLOOD) ||
        atomic_load(&r->proto_error) || !t->established ||
        (secs < SILENT_MIN_S && !all_closed))
        return;
    for (int i = 0; i < r->nw; i++)
        if (r->w[i].raw_msgs)
            return;
    atomic_store(&r->proto_error, 1);
    uint64_t n = t->established;
    const char *hint = sc == SC_FLOOD
        ? "is the server an echo server (bin/sluice serve --protocol echo)?"
        : "is the server serving the ack protocol (bin/sluice serve "
          "--protocol ack)?";
    if (all_closed)
        fprintf(stderr, PROG ": protocol error: nothing came back on %s "
                "before the server closed %s: %s\n",
                n > 1 ? "any connection" : "the connection",
                n > 1 ? "them" : "it", hint);
    else
        fprintf(stderr, PROG ": protocol error: nothing came back in %.1f s "
                "on %s%llu connection%s: %s\n", secs, n > 1 ? "any of the " : "",
                (unsigned long long)n, n > 1 ? "s" : "", hint);
}

/* The failures that are the client host's limits, not the server's doing,
 * say which limit: a bare "EADDRNOTAVAIL 150" did not tell that the
 * ephemeral ports ran out. */
static void limit_hints(const struct run *r, const struct stats *t)
{
    if (t->failures[F_EADDRNOTAVAIL])
        fprintf(stderr, PROG ": EADDRNOTAVAIL %llu: out of local ports for "
                "%s and this server (the range in "
                "/proc/sys/net/ipv4/ip_local_port_range; a closed "
                "connection's port waits ~60 s in TIME_WAIT)%s: more source "
                "addresses (%s) give more ports\n",
                (unsigned long long)t->failures[F_EADDRNOTAVAIL],
                r->cfg->nsrc ? "the --source-ips addresses" : "this host's address",
                r->cfg->nsrc ? ", or a --source-ips address is not this "
                               "host's" : "",
                /* IPv6 loopback is ::1 alone: no range to suggest */
                r->cfg->dst.sa.sa_family == AF_INET6
                    ? "--source-ips with IPv6 addresses of this host"
                    : "--source-ips 127.0.0.2-50 on loopback");
    if (t->failures[F_EMFILE])
        fprintf(stderr, PROG ": EMFILE %llu: out of open files for this "
                "process (ulimit -n)\n",
                (unsigned long long)t->failures[F_EMFILE]);
    if (t->failures[F_ENFILE])
        fprintf(stderr, PROG ": ENFILE %llu: out of open files for the whole "
                "system (/proc/sys/fs/file-max)\n",
                (unsigned long long)t->failures[F_ENFILE]);
}

int run_finish(struct run *r, const struct stats *t, double secs)
{
    limit_hints(r, t);
    silent_server(r, t, secs);
    struct outcome o = run_outcome(r, t);
    if (o.code == EXIT_NO_CONNECTION) {
        const char *h = r->cfg->host;
        fprintf(stderr, PROG ": could not connect to %s%s%s:%ld at all (",
                strchr(h, ':') ? "[" : "", h, strchr(h, ':') ? "]" : "",
                r->cfg->port);
        for (int k = 0, n = 0; k < F_NREASONS; k++)
            if (t->failures[k])
                fprintf(stderr, "%s%s %llu", n++ ? ", " : "", fail_names[k],
                        (unsigned long long)t->failures[k]);
        fprintf(stderr, ")\n");
    }
    return o.code;
}

void outcome_text(FILE *f, const struct outcome *o)
{
    fprintf(f, "errors: %llu", (unsigned long long)o->total);
    if (o->code == EXIT_PROTOCOL)
        fprintf(f, " (protocol error: see stderr)");
    else if (o->code == EXIT_NO_CONNECTION)
        fprintf(f, " (no connection at all: see connection failures)");
    else if (o->total) {
        const char *sep = " (";
        if (o->failures) {
            fprintf(f, "%sconnection failures %llu", sep,
                    (unsigned long long)o->failures);
            sep = ", ";
        }
        if (o->timeouts)
            fprintf(f, "%sping timeouts %llu", sep,
                    (unsigned long long)o->timeouts);
        fprintf(f, ")");
    }
    fprintf(f, "; exit %d\n", o->code);
}
