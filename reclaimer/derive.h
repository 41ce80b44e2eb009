/* derive.h - derived forms made by the node daemon (see derive.c and
 * protocol/derived.h): the bounded tetris-derive child and the index
 * entry. Publishing the form's two tensors is the ingest server's, since
 * they are claims charged like any other. */
#ifndef TETRIS_RECLAIMER_DERIVE_H
#define TETRIS_RECLAIMER_DERIVE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "protocol/derived.h"
#include "reclaimer/config.h"
#include "tensorstore/store.h"

struct derive_output {
    tensor_digest source;           /* of the image the child read */
    char runtime[DERIVED_NAME_MAX]; /* what the child reported */
    char cpu[DERIVED_NAME_MAX];     /* this node's (derived_cpu_features) */
    long long uid, gid;             /* what the child ran as (its report) */
    bool capabilities;              /* it reported effective capabilities */
    int graph_fd, data_fd;          /* the outputs, read-only; -1 when none */
    int ort_fd;                     /* the ORT-format part; -1 when not made */
    uint64_t prepacked_bytes;       /* what the child reported */
    bool has_ort;                   /* it reported the ORT-format part */
    int64_t took_ms;
};

/* Copies the image behind client_fd (a pod's descriptor) into a sealed
 * memfd (*out_fd), hashing it into *source: the bytes the child reads are
 * the bytes the form is named by. */
int derive_copy_image(int client_fd, int *out_fd, tensor_digest *source, tetris_error *err);

/* A runtime tetris-derive makes forms with: its name ("onnxruntime
 * 1.29.0") and the library it is in ("": the one tetris-derive links). */
struct derive_runtime {
    char name[DERIVED_NAME_MAX];
    char lib[PATH_MAX];
};

/* The runtime named want ("": tetris-derive's own), among tetris-derive's
 * own and the operator's libs (--derive-runtimes). Each one's name is
 * asked of the program once (tetris-derive --runtime [--runtime-lib
 * PATH], bounded like a derivation) and kept; a library is asked only
 * when root alone could have written it (trusted_path.h), else it is left
 * out with one log line. TETRIS_E_UNAVAILABLE when tetris-derive is not
 * installed; TETRIS_E_NOTFOUND when no runtime has that name. */
int derive_runtime(const struct reclaimer_derive_runtimes *libs, const char *want, int stop_fd,
                   struct derive_runtime *out, tetris_error *err);

/* One derivation per source at a time: derive_claim waits while another
 * thread holds a claim on the same source, then holds it until
 * derive_release. The claim lives in the caller's storage. */
struct derive_claim {
    tensor_digest source;
    struct derive_claim *next;
};
void derive_claim(struct derive_claim *c, const tensor_digest *source);
void derive_release(struct derive_claim *c);

/* Whether the store has a usable form of source: an index entry for this
 * transform, runtime and CPU whose two tensors are in the store (*e). */
bool derive_find(store *s, const tensor_digest *source, const char *transform, const char *runtime,
                 const char *cpu, derived_entry *e);

/* Runs tetris-derive with runtime rt on image_fd (derive_copy_image's,
 * named source), with external data resolved in public_dir and output
 * under store_root/private/tmp; killed, TETRIS_E_UNAVAILABLE, once stop_fd
 * is readable. TETRIS_E_UNAVAILABLE too when tetris-derive is not
 * installed beside the daemon; TETRIS_E_RUNTIME when the child made the
 * form with another runtime than rt's name (its library was replaced). */
int derive_make(const char *store_root, const char *public_dir, int image_fd,
                const tensor_digest *source, const struct derive_runtime *rt, int stop_fd,
                struct derive_output *out, tetris_error *err);
void derive_output_close(struct derive_output *out);
/* Writes e's index entry under public_dir/derived/ (0444, by rename). */
int derive_write_entry(const char *public_dir, const derived_entry *e, tetris_error *err);

#endif
