/* derive.h - derived forms made by the node daemon (see derive.c and
 * protocol/derived.h): the bounded tetris-derive child and the index
 * entry. Publishing the form's two tensors is the ingest server's, since
 * they are claims charged like any other. */
#ifndef TETRIS_RECLAIMER_DERIVE_H
#define TETRIS_RECLAIMER_DERIVE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "protocol/derived.h"

struct derive_output {
    tensor_digest source;           /* of the image the child read */
    char runtime[DERIVED_NAME_MAX]; /* what the child reported */
    char cpu[DERIVED_NAME_MAX];     /* this node's (derived_cpu_features) */
    long long uid, gid;             /* what the child ran as (its report) */
    bool capabilities;              /* it reported effective capabilities */
    int graph_fd, data_fd;          /* the outputs, read-only; -1 when none */
    int64_t took_ms;
};

/* Runs tetris-derive on the image behind client_fd (a pod's descriptor),
 * with external data resolved in public_dir and output under
 * store_root/private/tmp. TETRIS_E_UNAVAILABLE when tetris-derive is not
 * installed beside the daemon. */
int derive_make(const char *store_root, const char *public_dir, int client_fd,
                struct derive_output *out, tetris_error *err);
void derive_output_close(struct derive_output *out);
/* Writes e's index entry under public_dir/derived/ (0444, by rename). */
int derive_write_entry(const char *public_dir, const derived_entry *e, tetris_error *err);

#endif
