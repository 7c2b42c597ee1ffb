/* sluice-load's storm scenario: what sc_storm.c (the waves) and
 * storm_report.c (their figures) share. */
#ifndef SLUICE_SC_STORM_H
#define SLUICE_SC_STORM_H

#include <stdio.h>

#include "load.h"

enum { ST_OPEN, ST_HOLD, ST_CLOSE, ST_REOPEN, ST_DONE };

struct wave {
    struct hist up, back;  /* connect() to handshake done / to back */
    uint64_t nup, nback, last_back;
    uint64_t failures[F_NREASONS], attempts;
    uint64_t last_connect; /* wave 2: when its last connect() was made */
};

struct storm_worker {
    struct wave wv[2];
};

/* The run's phases and times: the main thread's only (one run per
 * process). */
struct storm_state {
    int phase;
    uint64_t t_open_done, t_hold_end, t_close, t_reopen, t_done;
    struct listen_counters k0, k1; /* around wave 2 */
};
extern struct storm_state storm_st;

/* storm_report.c: the storm object of the JSON and the summary's lines */
void storm_json(struct run *r, struct json *j);
void storm_text(struct run *r, FILE *f);

#endif
