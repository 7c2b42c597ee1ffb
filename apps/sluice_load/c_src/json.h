/* Minimal streaming JSON writer: keeps comma state per nesting level.
 * Every value call takes a key; pass NULL for array elements. */
#ifndef SLUICE_JSON_H
#define SLUICE_JSON_H

#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

struct json {
    FILE *f;
    int depth;
    int count[JSON_MAX_DEPTH];
};

void json_start(struct json *j, FILE *f);
void json_obj(struct json *j, const char *key);  /* opens { */
void json_arr(struct json *j, const char *key);  /* opens [ */
void json_end_obj(struct json *j);
void json_end_arr(struct json *j);
void json_u64(struct json *j, const char *key, uint64_t v);
void json_i64(struct json *j, const char *key, int64_t v);
void json_dbl(struct json *j, const char *key, double v); /* 3 decimals */
/* with `decimals' decimals (a time in s to the ns: 9) */
void json_dbl_prec(struct json *j, const char *key, double v, int decimals);
void json_str(struct json *j, const char *key, const char *s);
void json_bool(struct json *j, const char *key, int v);
void json_null(struct json *j, const char *key);
void json_finish(struct json *j); /* newline */

#endif
