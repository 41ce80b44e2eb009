/* digest.h - tensor identity: SHA-256 over (dtype, shape, bytes), plus the
 * CRC32 (zlib) integrity checksum computed in the same pass.
 *
 * The digest input is the domain tag "tetris-tensor-v1", a NUL, the dtype
 * name, a NUL, ndim as a little-endian u32, each dim as a little-endian i64,
 * then the tensor bytes. Two tensors with equal bytes but different dtype or
 * shape therefore have different identities. The CRC32 covers the bytes only. */
#ifndef TETRIS_DIGEST_H
#define TETRIS_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define TENSOR_DIGEST_BYTES 32
#define TENSOR_DIGEST_HEX_LEN 64 /* without the NUL */
#define TENSOR_MAX_DIMS 8
#define TENSOR_DTYPE_MAX 16

typedef struct tensor_digest {
    uint8_t bytes[TENSOR_DIGEST_BYTES];
} tensor_digest;

/* What a tensor is, independent of where its bytes live. */
typedef struct tensor_meta {
    char dtype[TENSOR_DTYPE_MAX]; /* canonical name, see tensor_dtype_size() */
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    uint64_t nbytes;
    uint32_t crc32;
    tensor_digest digest;
} tensor_meta;

/* Element size in bytes of a canonical dtype name ("float32", "float16",
 * "bfloat16", "float64", "int8", "uint8", "int16", "uint16", "int32",
 * "uint32", "int64", "uint64", "bool", "float8e4m3fn", "float8e5m2"),
 * 0 for an unknown name. */
size_t tensor_dtype_size(const char *dtype);

/* Checks dtype is known, 0 <= ndim <= TENSOR_MAX_DIMS, dims >= 0, and that
 * product(shape) * dtype_size == nbytes without overflow. */
int tensor_meta_validate(const tensor_meta *meta, tetris_error *err);

/* The typed header hashed before the bytes (the domain tag, dtype, ndim,
 * dims: see the top) of a valid meta, written into buf; returns its
 * length. A registry's tensor blob is this header followed by the bytes
 * (protocol/oci.h), so that the blob's SHA-256 is the identity. */
#define TENSOR_DIGEST_HEADER_MAX 112
size_t tensor_digest_header(const tensor_meta *meta, uint8_t buf[TENSOR_DIGEST_HEADER_MAX]);

/* Streaming digest + crc32 over the bytes of one tensor. */
typedef struct tensor_hasher tensor_hasher;
/* Fetches SHA-256 from OpenSSL, once per process: that loads OpenSSL's
 * configuration and providers (about 1.5 ms, during which every other
 * hashing thread waits). tensor_hasher_new does it on first use; a
 * long-lived process calls this at start so that its first ingest does not
 * pay for it, and learns there that OpenSSL has no SHA-256. */
int tensor_hasher_prepare(tetris_error *err);
int tensor_hasher_new(const tensor_meta *meta, tensor_hasher **out, tetris_error *err);
void tensor_hasher_update(tensor_hasher *h, const void *data, size_t len);
/* Fills digest and crc32; frees h. */
void tensor_hasher_finish(tensor_hasher *h, tensor_digest *digest, uint32_t *crc32);
void tensor_hasher_free(tensor_hasher *h);

/* One-shot: sets meta->digest and meta->crc32 from bytes (meta->nbytes long). */
int tensor_digest_compute(tensor_meta *meta, const void *bytes, tetris_error *err);

void tensor_digest_to_hex(const tensor_digest *d, char out[TENSOR_DIGEST_HEX_LEN + 1]);
/* Accepts 64 lowercase/uppercase hex chars, optionally prefixed "sha256:". */
int tensor_digest_from_hex(const char *hex, tensor_digest *out, tetris_error *err);
int tensor_digest_equal(const tensor_digest *a, const tensor_digest *b);

#endif
