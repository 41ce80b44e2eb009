/* profile_run.h - measuring a model's profile: for every config <c, b, p>
 * of a grid, a tetris-function process limited to c CPUs (cgroup CPU
 * quota) with batch b and concurrency p, saturated by a closed-loop load
 * generator; recorded are the batch latency (mean, p95, p99 over distinct
 * batches), the throughput, the peak private memory and the bytes shared
 * from the tensor store. The result is a profile (protocol/profile.h). */
#ifndef TETRIS_PROFILE_RUN_H
#define TETRIS_PROFILE_RUN_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "protocol/profile.h"

#define GRID_MAX 32

struct grid {
    double c[GRID_MAX];
    int b[GRID_MAX], p[GRID_MAX];
    size_t n_c, n_b, n_p;
};

/* The paper's default grid: c = 1,2; b = 1,2,4; p = 1,2,3,4. */
void grid_default(struct grid *g);
/* Parses "c=1,2" / "b=1,2,4" / "p=1,2" (several separated by spaces); each
 * dimension named replaces its default. */
int grid_parse(struct grid *g, const char *spec, tetris_error *err);
size_t grid_size(const struct grid *g);

struct profile_run_options {
    const char *model;        /* ONNX file */
    const char *name;         /* profile's model name */
    const char *function_bin; /* tetris-function */
    const char *store_dir;    /* NULL: private */
    bool direct;
    struct grid grid;
    double duration_s, warmup_s;
    double max_wait_ms;
    int clients_per_slot;     /* closed-loop clients per b*p slot (default 2) */
    const char *log_dir;      /* functions' stderr as LOG_DIR/function-<i>.log */
    bool progress;            /* draw a progress bar on stderr */
};

/* Runs the grid. A CPU limit that cannot be set is warned about once and
 * noted in the profile's source; every other failure stops the run. */
int profile_run(const struct profile_run_options *o, profile **out, tetris_error *err);

#endif
