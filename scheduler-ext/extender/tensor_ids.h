/* tensor_ids.h - dense 32-bit ids for tensor digests.
 *
 * Node inventories and model manifests name tensors by SHA-256 digest. The
 * extender holds thousands of inventories of thousands of tensors, mostly
 * the same digests over and over, so each distinct digest is stored once
 * and everything else holds its 4-byte id: an inventory is a sorted id
 * array and a similarity check is a binary search per model tensor.
 *
 * Ids are never recycled; the table grows with the number of distinct
 * digests ever seen (32 bytes + 12 bytes of index each). Thread-safe. */
#ifndef TETRIS_TENSOR_IDS_H
#define TETRIS_TENSOR_IDS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "tensorstore/digest.h"

typedef struct tensor_ids tensor_ids;

tensor_ids *tensor_ids_new(void);
void tensor_ids_free(tensor_ids *t);

/* The id of a digest given as 64 hex digits, optionally prefixed by
 * "sha256:". TETRIS_E_FORMAT for anything else. */
int tensor_ids_intern(tensor_ids *t, const char *digest, uint32_t *id, tetris_error *err);
/* The id of a decoded digest. */
int tensor_ids_intern_digest(tensor_ids *t, const tensor_digest *digest, uint32_t *id,
                             tetris_error *err);

/* Number of distinct digests interned so far. */
size_t tensor_ids_count(tensor_ids *t);

#endif
