/* fn_process.h - one tetris-function process for the profiler and the
 * benchmark: started with a config through its environment (the way the
 * autoscaler configures it), optionally inside a CPU-limited cgroup, ready
 * once it printed its ready line; stopped with SIGTERM. */
#ifndef TETRIS_FN_PROCESS_H
#define TETRIS_FN_PROCESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

struct fn_process_options {
    const char *function_bin; /* path of tetris-function */
    const char *model;
    const char *store_dir;    /* NULL: private */
    bool direct;              /* ingest into the store without a daemon */
    int batch, concurrency, threads;
    double max_wait_ms;
    const char *cgroup_procs; /* cgroup.procs to join before exec, or NULL */
    const char *log_path;     /* its stderr goes here (NULL: ours) */
    int ready_timeout_s;      /* default 120 */
};

typedef struct fn_process {
    pid_t pid;
    unsigned port;
    char url[64];             /* http://127.0.0.1:PORT */
    uint64_t shared_bytes;    /* weights ORT reads from the store */
    bool batching_concat;     /* one run per batch (else sequential) */
    bool fell_back;           /* wanted the store, got a private load */
} fn_process;

int fn_process_start(const struct fn_process_options *o, fn_process *out, tetris_error *err);

/* SIGTERM, then waits; -TETRIS_E_RUNTIME when it did not exit 0. */
int fn_process_stop(fn_process *p, tetris_error *err);

/* The tetris-function next to this program's executable. */
int fn_process_default_bin(char *buf, size_t len, tetris_error *err);

#endif
