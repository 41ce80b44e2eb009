/* tensor_index.h - the daemon's in-memory view of the store's resident
 * tensors: digest -> size, publish time and last time a live holder was
 * seen referencing it. It answers /inventory and /metrics without walking
 * the store, and gives the reclaim pass its keep-alive and LRU order.
 * Not thread-safe: the daemon guards it with one mutex. */
#ifndef TETRIS_TENSOR_INDEX_H
#define TETRIS_TENSOR_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorstore/digest.h"
#include "common/error.h"

struct index_entry {
    tensor_digest digest;
    uint64_t bytes;      /* tensor bytes (nbytes) */
    uint64_t file_bytes; /* what the capacity is charged for its file:
                            store_charged_bytes (pages and an inode) */
    int64_t mtime_s;     /* publish time */
    int64_t last_ref_s;  /* last seen referenced, 0: never */
    uint32_t mark;       /* scratch for passes (seen / referenced) */
    uint32_t fresh;      /* requests in flight that published it and have
                            not referenced it yet: no pass counts it cold */
    bool used;           /* slot in use */
};

typedef struct tensor_index tensor_index;

int tensor_index_new(tensor_index **out, tetris_error *err);
void tensor_index_free(tensor_index *ix);

/* Finds d, or NULL. */
struct index_entry *tensor_index_find(tensor_index *ix, const tensor_digest *d);
/* Finds or inserts d (new entries are zeroed but for the digest; *created
 * says which). Pointers stay valid until the next insert or remove. */
int tensor_index_upsert(tensor_index *ix, const tensor_digest *d, struct index_entry **out,
                        bool *created, tetris_error *err);
void tensor_index_remove(tensor_index *ix, const tensor_digest *d);

size_t tensor_index_count(const tensor_index *ix);
/* Iteration: for (size_t i = 0; (e = tensor_index_next(ix, &i)); ) */
struct index_entry *tensor_index_next(tensor_index *ix, size_t *cursor);

/* Last-use times survive restarts in a small text file: one
 * "HEXDIGEST LAST_REF_SECONDS" line per entry with a last use. Written to a
 * temp file and renamed. Loading sets last_ref_s on entries it finds
 * (inserting them); entries no longer resident are dropped by the next
 * reconcile. A missing file is not an error. */
int tensor_index_save(tensor_index *ix, const char *path, tetris_error *err);
int tensor_index_load(tensor_index *ix, const char *path, tetris_error *err);

#endif
