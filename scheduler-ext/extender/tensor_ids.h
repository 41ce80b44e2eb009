/* tensor_ids.h - dense 32-bit ids for tensor digests.
 *
 * Node inventories and model manifests name tensors by SHA-256 digest. The
 * extender holds thousands of inventories of thousands of tensors, mostly
 * the same digests over and over, so each distinct digest is stored once
 * and everything else holds its 32-bit id: an inventory is a set of ids
 * (id_set.h, about 2 bytes an id or less) and a similarity check is a
 * membership test per model tensor.
 *
 * Every intern takes a reference and tensor_ids_release drops it: a digest
 * no inventory or manifest refers to any more leaves the table and its id
 * is reused, so the table is bounded by the digests in use at its busiest
 * (about 48 bytes each), not by every digest a node ever reported. An id
 * is stable while it is referenced. Thread-safe. */
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
 * "sha256:", with one more reference. TETRIS_E_FORMAT for anything else. */
int tensor_ids_intern(tensor_ids *t, const char *digest, uint32_t *id, tetris_error *err);
/* The id of a decoded digest. */
int tensor_ids_intern_digest(tensor_ids *t, const tensor_digest *digest, uint32_t *id,
                             tetris_error *err);

/* Drops one reference per entry of ids (a duplicate drops two); NULL t
 * does nothing. */
void tensor_ids_release(tensor_ids *t, const uint32_t *ids, size_t n);

/* Number of distinct digests referenced now. */
size_t tensor_ids_count(tensor_ids *t);
/* Bytes the table holds (digests, counts, free list, index). */
size_t tensor_ids_bytes(tensor_ids *t);
/* Size of the digest index (slots), which shrinks with the count. */
size_t tensor_ids_slots(tensor_ids *t);

#endif
