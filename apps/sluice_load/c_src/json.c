#include "json.h"

#include <inttypes.h>

void json_start(struct json *j, FILE *f)
{
    j->f = f;
    j->depth = 0;
    j->count[0] = 0;
}

static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void prefix(struct json *j, const char *key)
{
    if (j->count[j->depth]++)
        fputc(',', j->f);
    if (key) {
        put_str(j->f, key);
        fputc(':', j->f);
    }
}

static void open_(struct json *j, const char *key, char c)
{
    prefix(j, key);
    fputc(c, j->f);
    if (j->depth + 1 < JSON_MAX_DEPTH)
        j->depth++;
    j->count[j->depth] = 0;
}

void json_obj(struct json *j, const char *key) { open_(j, key, '{'); }
void json_arr(struct json *j, const char *key) { open_(j, key, '['); }

void json_end_obj(struct json *j)
{
    fputc('}', j->f);
    if (j->depth > 0)
        j->depth--;
}

void json_end_arr(struct json *j)
{
    fputc(']', j->f);
    if (j->depth > 0)
        j->depth--;
}

void json_u64(struct json *j, const char *key, uint64_t v)
{
    prefix(j, key);
    fprintf(j->f, "%" PRIu64, v);
}

void json_i64(struct json *j, const char *key, int64_t v)
{
    prefix(j, key);
    fprintf(j->f, "%" PRId64, v);
}

void json_dbl(struct json *j, const char *key, double v)
{
    json_dbl_prec(j, key, v, 3);
}

void json_dbl_prec(struct json *j, const char *key, double v, int decimals)
{
    prefix(j, key);
    if (v != v || v > 1e300 || v < -1e300)
        fputs("null", j->f);
    else
        fprintf(j->f, "%.*f", decimals, v);
}

void json_str(struct json *j, const char *key, const char *s)
{
    prefix(j, key);
    put_str(j->f, s);
}

void json_bool(struct json *j, const char *key, int v)
{
    prefix(j, key);
    fputs(v ? "true" : "false", j->f);
}

void json_null(struct json *j, const char *key)
{
    prefix(j, key);
    fputs("null", j->f);
}

void json_finish(struct json *j)
{
    fputc('\n', j->f);
}
