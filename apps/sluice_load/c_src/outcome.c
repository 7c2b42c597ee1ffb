/* How a run ended, in one place so that the exit code, the summary's
 * errors line and the JSON say the same (README.md, "Exit codes"): the
 * errors by kind, the checks made once the workers are done, and the exit
 * code they make. */
#include <stdio.h>

#include "load.h"

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
    o.code = o.protocol ? EXIT_PROTOCOL
             : t->established == 0 ? EXIT_NO_CONNECTION
             : o.total ? EXIT_ERRORS : EXIT_OK;
    return o;
}

int run_finish(struct run *r, const struct stats *t, double secs)
{
    (void)secs;
    struct outcome o = run_outcome(r, t);
    if (o.code == EXIT_NO_CONNECTION) {
        fprintf(stderr, PROG ": could not connect to %s:%ld at all (",
                r->cfg->host, r->cfg->port);
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
