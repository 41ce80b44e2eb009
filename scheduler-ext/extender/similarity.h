/* similarity.h - tensor similarity between a model and a node's store.
 *
 * θ = (bytes of the model's distinct tensors already resident on the node)
 *     / (bytes of the model's distinct tensors)
 * A node fits the model when its store has room for the missing bytes:
 * capacity - resident + evictable >= missing, where evictable (cold
 * tensors the node daemon evicts for room) is less the model's present
 * bytes, which may be among them and will not be evicted for it. A
 * capacity of 0 means "no limit reported". The extender's score is round(10 θ), the extender
 * protocol's 0..10 range, except that 10 is kept for a node that lacks no
 * byte and 0 for one that holds none: a node that must pull part of the
 * model scores 1..9 by the bytes it lacks (tests/extender/extender_test.c,
 * score_by_bytes_lacking). */
#ifndef TETRIS_SIMILARITY_H
#define TETRIS_SIMILARITY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "scheduler-ext/extender/id_set.h"
#include "scheduler-ext/extender/tensor_ids.h"

#define SIMILARITY_MAX_SCORE 10

/* What a model needs: its distinct tensors (ids from tensor_ids). */
typedef struct model_need {
    tensor_ids *owner; /* holds a reference per id; NULL: ids not counted */
    uint64_t version;  /* unique per parsed manifest (model_need_version) */
    size_t slot;       /* the model's index in every inventory's memo */
    char *model;
    size_t n;
    uint32_t *ids;     /* distinct */
    uint64_t *bytes;   /* per id */
    uint64_t total_bytes;
} model_need;

/* One model's present bytes on a node, valid while version is the model's. */
typedef struct similarity_memo {
    uint64_t version; /* model_need.version; 0: empty */
    uint64_t present;
} similarity_memo;

/* A node store's contents at one generation. Immutable once built, except
 * for the memo: the present bytes of each model (by model_need.slot), so a
 * decision is a lookup per node and not a search per tensor. The extender
 * fills it when an inventory or a manifest changes, before either is
 * published; a decision that still misses (a race with a change) computes
 * and fills it. A new generation is a new node_inventory. */
typedef struct node_inventory {
    tensor_ids *owner; /* holds a reference per id; NULL: ids not counted */
    uint64_t generation;
    uint64_t capacity_bytes; /* 0: unlimited / not reported */
    uint64_t resident_bytes;
    uint64_t evictable_bytes; /* of resident_bytes, cold */
    id_set *ids;              /* NULL: none */
    pthread_mutex_t memo_lock;
    similarity_memo *memo; /* n_memo entries, by model slot */
    size_t n_memo;
} node_inventory;

typedef struct node_fit {
    uint64_t present_bytes;
    uint64_t missing_bytes;
    double theta;  /* 0..1; 0 for a model without tensors */
    int score;     /* round(10 θ), 1..9 unless nothing or everything is missing */
    bool fits;
} node_fit;

void similarity_eval(const model_need *m, const node_inventory *inv, node_fit *out);
/* The score of a node holding present bytes of a model and lacking
 * missing (any unit): round(10 θ), 10 only when nothing is missing, 0
 * only when nothing is present. */
int similarity_score(uint64_t present, uint64_t missing);

/* A fresh version number for a model_need (never 0). */
uint64_t model_need_version(void);

/* An empty inventory (calloc + memo lock); NULL when out of memory. */
node_inventory *node_inventory_new(void);

/* Sets inv's tensors (empty before) to the n ids, which hold one
 * reference each in owner (NULL: not counted): sorts them, drops
 * duplicates (releasing their extra references) and keeps them as an
 * id_set; ids is scratch. On failure (out of memory) the references are
 * released and inv is unchanged. */
int node_inventory_set_ids(node_inventory *inv, tensor_ids *owner, uint32_t *ids, size_t n,
                           tetris_error *err);

/* Bytes inv holds: the structure, its id set and its memo. */
size_t node_inventory_bytes(const node_inventory *inv);

/* Sorts ids and drops duplicates (releasing their extra references in
 * owner, if not NULL); returns the new count. */
size_t similarity_sort_ids(tensor_ids *owner, uint32_t *ids, size_t n);

/* Free, releasing the ids' references in their owner. */
void model_need_free(model_need *m);
void node_inventory_free(node_inventory *inv);

#endif
