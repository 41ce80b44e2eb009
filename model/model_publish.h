/* model_publish.h - publish one tensor of a model file into the store,
 * reading its bytes from an open descriptor of its source file. Shared by
 * the agent (direct mode) and the node daemon (ingest service), so both
 * take the same fast path and the same checks. */
#ifndef TETRIS_MODEL_PUBLISH_H
#define TETRIS_MODEL_PUBLISH_H

#include <stdbool.h>

#include "common/error.h"
#include "model/model.h"
#include "tensorstore/store.h"

/* Raw tensors are read chunk by chunk at their offset (hashed in cache,
 * written with pwrite); encoded ones (packed varints) are decoded whole into
 * the store's temp mapping. The store re-hashes what it wrote, so bytes
 * that do not match t->meta are never published (TETRIS_E_CORRUPT). */
int model_publish_tensor(store *s, const tensor_desc *t, int source_fd, bool *published,
                         tetris_error *err);

/* Asked before a tensor's bytes are read and between its chunks (raw
 * tensors): a non-zero return (err filled) abandons the tensor, nothing of
 * it published. The node daemon's budget: a deadline, a client that hung
 * up. */
typedef int (*model_publish_check_fn)(void *ctx, tetris_error *err);
int model_publish_tensor_checked(store *s, const tensor_desc *t, int source_fd,
                                 model_publish_check_fn check, void *check_ctx, bool *published,
                                 tetris_error *err);

/* As model_publish_tensor_checked for a tensor without its identity
 * (t->has_digest false): the store computes it from the bytes as it writes
 * them (store_publish_tensor_computed), and it is filled into t->meta, with
 * t->has_digest, on success (published or found resident). flags:
 * store.h's STORE_PUBLISH_* (STORE_PUBLISH_SMALL_PAGES: raw tensors only). */
int model_publish_tensor_computed(store *s, tensor_desc *t, int source_fd,
                                  model_publish_check_fn check, void *check_ctx, unsigned flags,
                                  bool *published, tetris_error *err);

#endif
