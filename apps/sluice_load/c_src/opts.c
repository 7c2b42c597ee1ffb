#include "opts.h"

#include <errno.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

void usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see --help)\n");
    exit(2);
}

static void print_help(const char *prog, const char *summary,
                       const struct opt *opts)
{
    printf("usage: %s [OPTIONS]\n%s\n\noptions:\n", prog, summary);
    for (const struct opt *o = opts; o->name; o++) {
        char left[64];
        if (o->type == OPT_FLAG)
            snprintf(left, sizeof left, "--%s", o->name);
        else
            snprintf(left, sizeof left, "--%s %s", o->name,
                     o->meta ? o->meta : "VALUE");
        printf("  %-26s %s", left, o->help);
        if (o->type == OPT_CHOICE) {
            printf(" (");
            for (const char *const *c = o->choices; *c; c++)
                printf("%s%s", c == o->choices ? "" : "|", *c);
            printf(")");
        }
        if (o->def)
            printf(" [default: %s]", o->def);
        printf("\n");
    }
    printf("  %-26s %s\n", "--help", "show this help and exit");
    printf("  %-26s %s\n", "--options-json", "print these options as JSON and exit");
}

static const char *const type_names[] = {
    [OPT_INT] = "int", [OPT_DOUBLE] = "double", [OPT_STR] = "string",
    [OPT_FLAG] = "flag", [OPT_CHOICE] = "choice"};

/* The option table as one JSON object, for bin/sluice: its Erlang CLI
 * parses, validates and documents these options from this table, so the
 * table stays the only description of them. */
static void print_json(const char *prog, const char *summary,
                       const struct opt *opts)
{
    struct json j;
    json_start(&j, stdout);
    json_obj(&j, NULL);
    json_str(&j, "program", prog);
    json_str(&j, "summary", summary);
    json_arr(&j, "options");
    for (const struct opt *o = opts; o->name; o++) {
        json_obj(&j, NULL);
        json_str(&j, "name", o->name);
        json_str(&j, "type", type_names[o->type]);
        if (o->meta)
            json_str(&j, "meta", o->meta);
        if (o->def)
            json_str(&j, "default", o->def);
        json_str(&j, "help", o->help);
        if (o->type == OPT_CHOICE) {
            json_arr(&j, "choices");
            for (const char *const *c = o->choices; *c; c++)
                json_str(&j, NULL, *c);
            json_end_arr(&j);
        } else if (o->type == OPT_INT) {
            json_i64(&j, "min", (int64_t)o->lo);
            json_i64(&j, "max", (int64_t)o->hi);
        } else if (o->type == OPT_DOUBLE) {
            json_dbl(&j, "min", o->lo);
            json_dbl(&j, "max", o->hi);
        }
        json_end_obj(&j);
    }
    json_end_arr(&j);
    json_end_obj(&j);
    json_finish(&j);
}

static void set_value(const char *prog, struct opt *o, const char *v)
{
    char *end;
    switch (o->type) {
    case OPT_INT: {
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end)
            usage_error(prog, "--%s: '%s' is not an integer", o->name, v);
        if ((double)x < o->lo || (double)x > o->hi)
            usage_error(prog, "--%s: %ld is out of range [%.0f, %.0f]",
                        o->name, x, o->lo, o->hi);
        *(long *)o->dst = x;
        break;
    }
    case OPT_DOUBLE: {
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || x != x)
            usage_error(prog, "--%s: '%s' is not a number", o->name, v);
        if (x < o->lo || x > o->hi)
            usage_error(prog, "--%s: %s is out of range [%.15g, %.15g]", o->name,
                        v, o->lo, o->hi);
        *(double *)o->dst = x;
        break;
    }
    case OPT_STR:
        if (!*v)
            usage_error(prog, "--%s: empty value", o->name);
        *(const char **)o->dst = v;
        break;
    case OPT_CHOICE:
        for (int i = 0; o->choices[i]; i++)
            if (strcmp(o->choices[i], v) == 0) {
                *(int *)o->dst = i;
                return;
            }
        usage_error(prog, "--%s: unknown value '%s'", o->name, v);
    case OPT_FLAG:
        *(int *)o->dst = 1;
        break;
    }
}

void opts_parse(const char *prog, const char *summary, struct opt *opts,
                int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_help(prog, summary, opts);
            exit(0);
        }
        if (strcmp(a, "--options-json") == 0) {
            print_json(prog, summary, opts);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0)
            usage_error(prog, "unexpected argument '%s'", a);
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        struct opt *o = opts;
        for (; o->name; o++)
            if (strlen(o->name) == nlen && strncmp(o->name, name, nlen) == 0)
                break;
        if (!o->name)
            usage_error(prog, "unknown option '%.*s'", (int)(nlen + 2), a);
        const char *v;
        if (o->type == OPT_FLAG) {
            if (eq)
                usage_error(prog, "--%s takes no value", o->name);
            v = "";
        } else if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc)
                usage_error(prog, "--%s needs a value", o->name);
            v = argv[++i];
        }
        set_value(prog, o, v);
        o->given = 1;
    }
}

int opts_given(const struct opt *opts, const char *name)
{
    for (const struct opt *o = opts; o->name; o++)
        if (strcmp(o->name, name) == 0)
            return o->given;
    return 0;
}
