/* ort_inputs.h - deterministic inputs for an ONNX Runtime session, built
 * from its input metadata and a seed, one request's worth or a batch of
 * requests concatenated along the leading (batch) dimension, and the output
 * side: per-request SHA-256 of the output bytes.
 *
 * One request's inputs: input by input in model order, every element drawn
 * from splitmix64(seed): float types uniform in [-1, 1), integer types
 * uniform in [0, 16), bool 0/1. An input's first dynamic dimension is the
 * batch (1 per request); later dynamic dimensions get `dynamic_dim`.
 *
 * A batch of k requests is the k requests' inputs concatenated along dim 0,
 * so sample j of the batch holds exactly the values request j would have had
 * alone. That is possible when the model is "batchable": every input and
 * every output has a dynamic first dimension. Otherwise a batch runs as k
 * single-request runs (ort_io.batchable tells which).
 *
 * The metadata covers every tensor input and output, of any element type
 * (model_dims keeps the model's own dimensions, -1 where dynamic), so a
 * server can take inputs from its clients, strings included; only the
 * types above can be generated from a seed (ort_io.seedable). */
#ifndef TETRIS_ORT_INPUTS_H
#define TETRIS_ORT_INPUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorstore/digest.h"
#include "common/error.h"
#include "agent/ort_adapter.h"

#define ORT_INPUTS_DEFAULT_DYNAMIC_DIM 256

struct ort_input_desc {
    ONNXTensorElementDataType type;
    size_t ndim;
    int64_t model_dims[TENSOR_MAX_DIMS]; /* as the model declares them, -1: dynamic */
    int64_t dims[TENSOR_MAX_DIMS];       /* one seeded request's shape (batch dim = 1) */
    size_t sample_elements;              /* elements of one seeded request */
    bool leading_dynamic;                /* dim 0 is dynamic: the batch */
};

struct ort_output_desc {
    ONNXTensorElementDataType type;
    size_t ndim;
    int64_t model_dims[TENSOR_MAX_DIMS]; /* -1: dynamic */
};

typedef struct ort_io {
    size_t n_in, n_out;
    char **in_names, **out_names; /* malloc'd copies */
    struct ort_input_desc *in;
    struct ort_output_desc *out;
    bool batchable; /* every input and output has a dynamic dim 0 */
    bool seedable;  /* every input's type can be generated (ort_inputs_make) */
} ort_io;

/* Reads the session's input/output metadata. dynamic_dim (>= 1) is the size
 * of dynamic dimensions after an input's first one. TETRIS_E_FORMAT for a
 * non-tensor input or output, or one of rank above TENSOR_MAX_DIMS. */
int ort_io_describe(const ort_model *m, int64_t dynamic_dim, ort_io **out, tetris_error *err);
void ort_io_free(ort_io *io);
/* Whether two sessions take and give the same tensors: names, element
 * types and declared dimensions, in order (the seeded shapes follow). */
bool ort_io_equal(const ort_io *a, const ort_io *b);

/* Creates io->n_in inputs holding the n requests with the given seeds
 * concatenated along dim 0. n > 1 needs io->batchable, and every input
 * io->seedable (else TETRIS_E_INVAL naming the input). inputs[] gets owned
 * OrtValues (release with ort_values_release). */
int ort_inputs_make(const ort_model *m, const ort_io *io, const uint64_t *seeds, size_t n,
                    OrtValue **inputs, tetris_error *err);

/* Runs the session on inputs (io->n_in) and fills outputs (io->n_out). */
int ort_io_run(const ort_model *m, const ort_io *io, OrtValue *const *inputs,
               OrtValue **outputs, tetris_error *err);
/* The same computing only the outputs with wanted[i] (NULL: all); the
 * others are left NULL. */
int ort_io_run_some(const ort_model *m, const ort_io *io, OrtValue *const *inputs,
                    const bool *wanted, OrtValue **outputs, tetris_error *err);

/* SHA-256 (lowercase hex) of request j's share of every output, in output
 * order: with n requests in the batch, each output's first dimension must be
 * n and request j owns the j-th slice. *out_bytes gets the bytes hashed. */
int ort_outputs_sha256(const ort_model *m, const ort_io *io, OrtValue *const *outputs, size_t n,
                       size_t j, char hex[65], uint64_t *out_bytes, tetris_error *err);

/* What ort_io_run_repeated measured: the first run (with the page faults
 * of what the session maps) and the mean of all, each run's hash of its
 * outputs included. */
struct ort_run_times {
    double first_ms, mean_ms;
};

/* Runs the session `runs` times on inputs, each run's outputs hashed as
 * ort_outputs_sha256 hashes a batch of one; hex gets the first run's
 * hash and every later run must give the same (TETRIS_E_RUNTIME naming
 * the run otherwise). outputs keeps the last run's (release them). */
int ort_io_run_repeated(const ort_model *m, const ort_io *io, OrtValue *const *inputs,
                        OrtValue **outputs, int runs, char hex[65], uint64_t *out_bytes,
                        struct ort_run_times *times, tetris_error *err);

void ort_values_release(const ort_model *m, OrtValue **values, size_t n);

#endif
