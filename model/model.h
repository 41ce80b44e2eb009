/* model.h - a model file as a list of tensors: what each tensor is, where
 * its bytes are, and its identity. Format parsers (format_*.c) and the
 * manifest reader (manifest.h: a model's JSON form) fill it.
 *
 * Parsers work on an in-memory image of the file so they can be fuzzed;
 * every offset/length they produce is checked against the file size, and
 * overlapping tensor regions, absurd shapes and dtype/length mismatches are
 * TETRIS_E_FORMAT errors with a message naming the tensor. */
#ifndef TETRIS_MODEL_H
#define TETRIS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tensorstore/digest.h"
#include "common/error.h"

/* How a tensor's bytes are stored in its source region. */
enum tensor_encoding {
    TENSOR_ENC_RAW = 0,     /* the region is the little-endian tensor bytes */
    TENSOR_ENC_VARINT = 1,  /* protobuf packed varints (ONNX int32_data,
                               int64_data, uint64_data), one per element */
    TENSOR_ENC_VARINT_ZZ = 2, /* unused by ONNX today; reserved */
};

typedef struct tensor_desc {
    char *name;
    tensor_meta meta;     /* dtype, shape, nbytes, crc32, digest */
    bool has_digest;      /* meta.digest/crc32 are filled */
    char *source;         /* file holding the bytes (model or external data) */
    uint64_t offset;      /* region in source */
    uint64_t length;      /* region length (== nbytes for RAW) */
    enum tensor_encoding encoding;
} tensor_desc;

typedef struct model {
    char *path;          /* the model file */
    char *format;        /* "onnx", "safetensors" */
    size_t n_tensors;
    tensor_desc *tensors;
    uint64_t total_bytes; /* sum of nbytes */
    size_t n_skipped;     /* tensors left out as not shareable (ONNX string
                             tensors, sparse initializers) */
} model;

/* Parses a model file (format from content: safetensors header or ONNX
 * protobuf). Digests are not computed (see model_compute_digests). */
int model_parse_file(const char *path, model **out, tetris_error *err);

/* Parses an in-memory image; path is used for messages and to resolve
 * external data files relative to it. */
int model_parse_buffer(const char *path, const uint8_t *data, size_t len, model **out,
                       tetris_error *err);

/* Reads the bytes of every tensor without has_digest and fills its
 * meta.digest/crc32, tensors hashed
 * in parallel on workers threads (0: the CPU allowance, see
 * common/workers.h); model_compute_digests uses the allowance. */
int model_compute_digests_workers(model *m, unsigned workers, tetris_error *err);
int model_compute_digests(model *m, tetris_error *err);

/* Decodes one tensor's bytes (nbytes long) into dst, from an open fd of its
 * source file. */
int model_read_tensor(const tensor_desc *t, int source_fd, void *dst, tetris_error *err);

/* Reads bytes [offset, offset + len) of a RAW tensor from an open fd of its
 * source file, for callers that stream a tensor in chunks. */
int model_read_tensor_range(const tensor_desc *t, int source_fd, uint64_t offset, void *dst,
                            size_t len, tetris_error *err);

void model_free(model *m);

/* Human-readable listing (tetris-agent inspect): a summary, then one line
 * per tensor. */
int model_print(const model *m, FILE *out, tetris_error *err);

/* ---- building a model (for format parsers and the manifest reader) ---- */
model *model_new(const char *path, const char *format, tetris_error *err);
/* Appends *t, taking ownership of t->name and t->source (freed on failure
 * too); adds t->meta.nbytes to total_bytes. */
int model_add_tensor(model *m, tensor_desc *t, tetris_error *err);
/* Sets *nbytes = product(shape) * size(dtype); an unknown dtype, more than
 * TENSOR_MAX_DIMS dims, a negative dim or an overflow is TETRIS_E_FORMAT. */
int tensor_shape_nbytes(const char *dtype, int ndim, const int64_t *shape, uint64_t *nbytes,
                        tetris_error *err);
/* Writes the shape as "[d0,d1,...]" into buf (len > 0 bytes, always
 * NUL-terminated; a shape too long for it is cut). */
void tensor_shape_format(const int64_t *shape, size_t ndim, char *buf, size_t len);
/* Whole-model checks every parser ends with: unique names, region lengths
 * consistent with their encoding, and no two regions of one source
 * overlapping. `what` names the input in messages (file or manifest). */
int model_check(const model *m, const char *what, tetris_error *err);

#endif
