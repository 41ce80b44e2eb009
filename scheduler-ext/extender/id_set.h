/* id_set.h - a compact, immutable set of tensor ids for node inventories.
 *
 * A node inventory is thousands of tensor ids (tensor_ids.h) and the
 * extender keeps one per node: as sorted uint32 arrays, 5,000 nodes of
 * 10,000 tensors took 190 MiB. Ids are small and dense (tensor_ids hands
 * them out from 0 and reuses released ones), so a set is split by the ids'
 * high 16 bits into chunks, as Roaring bitmaps do: a chunk of at most 4,096
 * ids is a sorted array of their low 16 bits (2 bytes an id), a fuller one
 * an 8 KiB bitmap (at most 2 bytes an id, less the fuller it is). A set is
 * one allocation of exactly the size it needs.
 *
 * Membership is a binary search of the chunks' keys, then a bit test or a
 * binary search of at most 4,096 uint16. A set never changes once built,
 * so any number of threads may read it. */
#ifndef TETRIS_ID_SET_H
#define TETRIS_ID_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct id_set id_set;

/* The set of n ids, which must be sorted ascending and distinct; NULL when
 * out of memory. n may be 0 (ids may then be NULL). */
id_set *id_set_new(const uint32_t *ids, size_t n);
void id_set_free(id_set *s);

bool id_set_contains(const id_set *s, uint32_t id);
size_t id_set_count(const id_set *s);
/* Bytes the set holds: its allocation's requested size. */
size_t id_set_bytes(const id_set *s);

/* Reading the ids back in ascending order, a batch at a time (to release
 * their references without allocating). Start from a zeroed cursor. */
typedef struct id_set_cursor {
    size_t chunk;
    uint32_t pos; /* index in an array chunk, bit in a bitmap chunk */
} id_set_cursor;

/* Up to max next ids into out; 0 once all were read. */
size_t id_set_next(const id_set *s, id_set_cursor *c, uint32_t *out, size_t max);

#endif
