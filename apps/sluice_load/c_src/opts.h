/* Table-driven long-option parser shared by the sluice binaries.
 * "--name value" and "--name=value"; unknown or malformed options print one
 * line on stderr and exit 2; --help prints the table (with defaults) and
 * exits 0; --options-json prints the table as JSON and exits 0 (bin/sluice
 * reads it to parse and document these options, so that the table here is
 * their one description). */
#ifndef SLUICE_OPTS_H
#define SLUICE_OPTS_H

#include <stdint.h>

enum opt_type {
    OPT_INT,    /* long, within [lo, hi] */
    OPT_DOUBLE, /* double, within [lo, hi] */
    OPT_STR,    /* const char * (points into argv) */
    OPT_FLAG,   /* int set to 1, takes no value */
    OPT_CHOICE  /* int index into choices[] */
};

struct opt {
    const char *name;  /* without the leading "--" */
    enum opt_type type;
    void *dst;         /* long*, double*, const char**, int* */
    const char *meta;  /* placeholder in --help, e.g. "MS" */
    const char *def;   /* default as shown in --help (NULL: none) */
    const char *help;
    const char *const *choices; /* OPT_CHOICE: NULL-terminated */
    double lo, hi;     /* numeric bounds (inclusive) */
    int given;         /* set by the parser when the option appeared */
};

/* Parse argv[1..]; positional arguments are an error. */
void opts_parse(const char *prog, const char *summary, struct opt *opts,
                int argc, char **argv);
/* Whether option `name` was given on the command line. */
int opts_given(const struct opt *opts, const char *name);
/* Print a one-line usage error and exit 2. */
void usage_error(const char *prog, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));

#endif
