/* manifests.h - which tensors each model needs, from its tetris manifest.
 *
 * In a cluster a model's manifest (the JSON `tetris-agent index` writes,
 * format in model/manifest.h) is stored in a ConfigMap:
 *   metadata.name   tetris-manifest-<model>   (convention, not required)
 *   label           tetris.io/model=<model>   (the key the extender uses)
 *   data            manifest.json: <the manifest>
 * (protocol/names.h: TETRIS_LABEL_MODEL, TETRIS_MANIFEST_CONFIGMAP_KEY).
 * The cache lists and watches those ConfigMaps in one namespace, so lookups
 * never wait for the apiserver. Without a cluster, a directory of
 * <model>.json files serves the same purpose.
 *
 * Lookups happen under the read lock (manifest_cache_rdlock); the pointer
 * from manifest_cache_find is valid until manifest_cache_unlock. */
#ifndef TETRIS_MANIFESTS_H
#define TETRIS_MANIFESTS_H

#include <stddef.h>

#include "common/error.h"
#include "common/kube.h"
#include "scheduler-ext/extender/similarity.h"
#include "scheduler-ext/extender/tensor_ids.h"

typedef struct manifest_cache manifest_cache;

manifest_cache *manifest_cache_new(tensor_ids *ids);
/* Stops the watch (if any) and frees. */
void manifest_cache_free(manifest_cache *mc);

/* Reads a manifest's identities (manifest_read_digests: each tensor's digest
 * and nbytes) into what the model needs (distinct digests + bytes). */
int manifest_need_parse(tensor_ids *ids, const char *model, const char *json, size_t len,
                        model_need **out, tetris_error *err);

/* Called by manifest_cache_put with a parsed model (its slot set) before
 * it replaces the old one, without the cache's lock held: where the
 * extender computes the model's θ on every node. */
typedef void (*manifest_prepare_fn)(void *user, const model_need *m);
/* NULL fn: none. */
void manifest_cache_set_prepare(manifest_cache *mc, manifest_prepare_fn fn, void *user);

int manifest_cache_put(manifest_cache *mc, const char *model, const char *json, size_t len,
                       tetris_error *err);
void manifest_cache_remove(manifest_cache *mc, const char *model);

/* Loads every DIR/<model>.json. */
int manifest_cache_load_dir(manifest_cache *mc, const char *dir, tetris_error *err);

/* Starts a thread that lists + watches the manifest ConfigMaps in ns. */
int manifest_cache_watch(manifest_cache *mc, kube_client *kc, const char *ns,
                         tetris_error *err);

void manifest_cache_rdlock(manifest_cache *mc);
void manifest_cache_unlock(manifest_cache *mc);
const model_need *manifest_cache_find(manifest_cache *mc, const char *model);
/* Calls fn for every model; under the read lock. */
void manifest_cache_each(manifest_cache *mc, void (*fn)(void *user, const model_need *m),
                         void *user);
size_t manifest_cache_count(manifest_cache *mc);

#endif
