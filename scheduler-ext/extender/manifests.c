/* manifests.c - the model -> model_need cache, fed by ConfigMaps (list +
 * watch in a thread) or a directory. A manifest is read by model/manifest.h's
 * identities-only decoder. */
#include "scheduler-ext/extender/manifests.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/strmap.h"
#include "model/manifest.h"
#include "protocol/names.h"

#define MANIFEST_MAX_BYTES (64u << 20)

struct manifest_cache {
    tensor_ids *ids;
    pthread_rwlock_t lock;
    strmap *models; /* model name -> model_need */
    bool *slot_used; /* model_need.slot in use, n_slots of them */
    size_t n_slots;
    pthread_rwlock_t hook_lock; /* prepare and its user, held while it runs */
    manifest_prepare_fn prepare;
    void *prepare_user;
    kube_client *kc;
    char *ns;
    pthread_t thread;
    bool watching;
    volatile bool stop;
};

manifest_cache *manifest_cache_new(tensor_ids *ids)
{
    manifest_cache *mc = calloc(1, sizeof *mc);
    if (mc == NULL)
        return NULL;
    mc->models = strmap_new();
    if (mc->models == NULL) {
        free(mc);
        return NULL;
    }
    mc->ids = ids;
    pthread_rwlock_init(&mc->lock, NULL);
    pthread_rwlock_init(&mc->hook_lock, NULL);
    return mc;
}

static void free_need(void *p)
{
    model_need_free(p);
}

void manifest_cache_free(manifest_cache *mc)
{
    if (mc == NULL)
        return;
    if (mc->watching) {
        mc->stop = true;
        pthread_join(mc->thread, NULL);
    }
    strmap_free(mc->models, free_need);
    free(mc->slot_used);
    pthread_rwlock_destroy(&mc->lock);
    pthread_rwlock_destroy(&mc->hook_lock);
    free(mc->ns);
    free(mc);
}

/* ---- parsing ---- */

static int cmp_pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return *x < *y ? -1 : *x > *y;
}

/* Sorts (id, bytes) pairs by id and keeps each id once: a model that uses
 * the same tensor twice stores it once, and holds one reference to it. */
static size_t dedup_pairs(tensor_ids *owner, uint32_t *ids, uint64_t *bytes, size_t n,
                          uint64_t *total)
{
    uint64_t *pairs = malloc((n ? n : 1) * sizeof *pairs * 2);
    if (pairs == NULL)
        return SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        pairs[2 * i] = ids[i];
        pairs[2 * i + 1] = bytes[i];
    }
    qsort(pairs, n, 2 * sizeof *pairs, cmp_pair);
    size_t out = 0;
    *total = 0;
    for (size_t i = 0; i < n; i++) {
        if (out > 0 && ids[out - 1] == (uint32_t)pairs[2 * i]) {
            tensor_ids_release(owner, &ids[out - 1], 1);
            continue;
        }
        ids[out] = (uint32_t)pairs[2 * i];
        bytes[out] = pairs[2 * i + 1];
        *total += bytes[out];
        out++;
    }
    free(pairs);
    return out;
}

int manifest_need_parse(tensor_ids *ids, const char *model, const char *json, size_t len,
                        model_need **out, tetris_error *err)
{
    char what[300];
    snprintf(what, sizeof what, "manifest of %s", model);
    manifest_digests d;
    int r = manifest_read_digests(json, len, what, true, &d, err);
    if (r < 0)
        return r;
    model_need *m = calloc(1, sizeof *m);
    if (m == NULL || (m->model = strdup(model)) == NULL ||
        (m->ids = malloc((d.n ? d.n : 1) * sizeof *m->ids)) == NULL) {
        r = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", what);
        goto out;
    }
    /* m->n counts the references taken, so a failure releases them. */
    m->owner = ids;
    for (; m->n < d.n; m->n++) {
        r = tensor_ids_intern_digest(ids, &d.digests[m->n], &m->ids[m->n], err);
        if (r < 0) {
            tetris_wrap(err, "%s: tensor %zu", what, m->n);
            goto out;
        }
    }
    m->bytes = steal_pointer(&d.nbytes);
    size_t n = dedup_pairs(ids, m->ids, m->bytes, d.n, &m->total_bytes);
    m->version = model_need_version();
    if (n == SIZE_MAX)
        r = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", what);
    else
        m->n = n;
out:
    manifest_digests_release(&d);
    if (r < 0)
        model_need_free(m);
    else
        *out = m;
    return r;
}

/* ---- the cache ---- */

/* Under the write lock: the memo slot of a model new to the cache; SIZE_MAX
 * when out of memory. */
static size_t alloc_slot(manifest_cache *mc)
{
    for (size_t i = 0; i < mc->n_slots; i++)
        if (!mc->slot_used[i]) {
            mc->slot_used[i] = true;
            return i;
        }
    bool *grown = realloc(mc->slot_used, (mc->n_slots + 1) * sizeof *grown);
    if (grown == NULL)
        return SIZE_MAX;
    mc->slot_used = grown;
    mc->slot_used[mc->n_slots] = true;
    return mc->n_slots++;
}

void manifest_cache_set_prepare(manifest_cache *mc, manifest_prepare_fn fn, void *user)
{
    /* Waits for a running hook: its user may be going away. */
    pthread_rwlock_wrlock(&mc->hook_lock);
    mc->prepare = fn;
    mc->prepare_user = user;
    pthread_rwlock_unlock(&mc->hook_lock);
}

int manifest_cache_put(manifest_cache *mc, const char *model, const char *json, size_t len,
                       tetris_error *err)
{
    model_need *m = NULL;
    int r = manifest_need_parse(mc->ids, model, json, len, &m, err);
    if (r < 0)
        return r;
    /* A replaced model keeps its slot. Racing with its removal, the slot
     * may end up shared with another model: memo entries carry the
     * model's version, so sharing costs recomputation, never a wrong θ. */
    pthread_rwlock_wrlock(&mc->lock);
    const model_need *prev = strmap_get(mc->models, model);
    m->slot = prev != NULL ? prev->slot : alloc_slot(mc);
    pthread_rwlock_unlock(&mc->lock);
    if (m->slot == SIZE_MAX) {
        model_need_free(m);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "manifest cache");
    }
    /* Before it is published, so no decision waits for its θ. */
    pthread_rwlock_rdlock(&mc->hook_lock);
    if (mc->prepare != NULL)
        mc->prepare(mc->prepare_user, m);
    pthread_rwlock_unlock(&mc->hook_lock);
    pthread_rwlock_wrlock(&mc->lock);
    void *old = strmap_put(mc->models, model, m);
    if (old == STRMAP_NOMEM && strmap_get(mc->models, model) == NULL)
        mc->slot_used[m->slot] = false;
    pthread_rwlock_unlock(&mc->lock);
    if (old == STRMAP_NOMEM) {
        model_need_free(m);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "manifest cache");
    }
    model_need_free(old);
    return 0;
}

void manifest_cache_remove(manifest_cache *mc, const char *model)
{
    pthread_rwlock_wrlock(&mc->lock);
    model_need *old = strmap_remove(mc->models, model);
    if (old != NULL)
        mc->slot_used[old->slot] = false;
    pthread_rwlock_unlock(&mc->lock);
    model_need_free(old);
}

int manifest_cache_load_dir(manifest_cache *mc, const char *dir, tetris_error *err)
{
    cleanup_closedir DIR *d = opendir(dir);
    if (d == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "manifest dir %s", dir);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len <= 5 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        char path[4096], model[256];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        snprintf(model, sizeof model, "%.*s", (int)(len - 5), de->d_name);
        cleanup_free char *text = NULL;
        size_t n;
        int r = file_read_all(path, MANIFEST_MAX_BYTES, &text, &n, err);
        if (r == 0)
            r = manifest_cache_put(mc, model, text, n, err);
        if (r < 0)
            return r;
    }
    return 0;
}

void manifest_cache_rdlock(manifest_cache *mc)
{
    pthread_rwlock_rdlock(&mc->lock);
}

void manifest_cache_unlock(manifest_cache *mc)
{
    pthread_rwlock_unlock(&mc->lock);
}

const model_need *manifest_cache_find(manifest_cache *mc, const char *model)
{
    return strmap_get(mc->models, model);
}

typedef struct each_ctx {
    void (*fn)(void *user, const model_need *m);
    void *user;
} each_ctx;

static int each_need(const char *key, void *value, void *user)
{
    (void)key;
    each_ctx *e = user;
    e->fn(e->user, value);
    return 0;
}

void manifest_cache_each(manifest_cache *mc, void (*fn)(void *user, const model_need *m),
                         void *user)
{
    each_ctx e = {fn, user};
    strmap_foreach(mc->models, each_need, &e);
}

size_t manifest_cache_count(manifest_cache *mc)
{
    pthread_rwlock_rdlock(&mc->lock);
    size_t n = strmap_size(mc->models);
    pthread_rwlock_unlock(&mc->lock);
    return n;
}

/* ---- ConfigMaps ---- */

static const char *configmap_model(json_t *cm)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(cm, "metadata"), "labels"),
                        TETRIS_LABEL_MODEL));
}

/* Adds one ConfigMap's manifest; a bad one is logged and skipped so that one
 * broken ConfigMap cannot take the other models down. */
static void apply_configmap(manifest_cache *mc, json_t *cm)
{
    const char *model = configmap_model(cm);
    const char *name = json_string_value(json_object_get(json_object_get(cm, "metadata"), "name"));
    const char *text = json_string_value(
        json_object_get(json_object_get(cm, "data"), TETRIS_MANIFEST_CONFIGMAP_KEY));
    if (model == NULL || text == NULL) {
        log_warn("event=manifest-skipped configmap=%s reason=\"no %s label or %s key\"",
                 name != NULL ? name : "?", TETRIS_LABEL_MODEL, TETRIS_MANIFEST_CONFIGMAP_KEY);
        return;
    }
    tetris_error err = {0};
    if (manifest_cache_put(mc, model, text, strlen(text), &err) < 0) {
        log_warn("event=manifest-invalid configmap=%s model=%s msg=%s", name, model,
                 LOG_Q(err.msg));
        return;
    }
    log_info("event=manifest-loaded configmap=%s model=%s", name, model);
}

static int on_configmaps_listed(json_t *items, void *user)
{
    manifest_cache *mc = user;
    /* A re-list replaces everything: models deleted while we were not
     * watching must go too. */
    strmap *fresh = strmap_new();
    if (fresh == NULL)
        return 0;
    pthread_rwlock_wrlock(&mc->lock);
    strmap *old = mc->models;
    mc->models = fresh;
    pthread_rwlock_unlock(&mc->lock);
    strmap_free(old, free_need);
    size_t i;
    json_t *cm;
    json_array_foreach(items, i, cm)
        apply_configmap(mc, cm);
    log_info("event=manifests-listed namespace=%s models=%zu", mc->ns, manifest_cache_count(mc));
    return 0;
}

static int on_configmap_event(const char *type, json_t *cm, void *user)
{
    manifest_cache *mc = user;
    const char *model = configmap_model(cm);
    if (strcmp(type, "DELETED") == 0) {
        if (model != NULL) {
            manifest_cache_remove(mc, model);
            log_info("event=manifest-removed model=%s", model);
        }
    } else {
        apply_configmap(mc, cm);
    }
    return 0;
}

static void *watch_thread(void *arg)
{
    manifest_cache *mc = arg;
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps", mc->ns);
    kube_list_opts opts = {.label_selector = TETRIS_LABEL_MODEL};
    tetris_error err = {0};
    if (kube_list_watch(mc->kc, path, &opts, on_configmaps_listed, on_configmap_event, mc,
                        &mc->stop, &err) < 0) {
        log_error("event=manifest-watch-failed namespace=%s msg=%s", mc->ns, LOG_Q(err.msg));
    }
    return NULL;
}

int manifest_cache_watch(manifest_cache *mc, kube_client *kc, const char *ns,
                         tetris_error *err)
{
    mc->kc = kc;
    mc->ns = strdup(ns);
    if (mc->ns == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "manifest watch");
    int e = pthread_create(&mc->thread, NULL, watch_thread, mc);
    if (e != 0)
        return tetris_fail(err, TETRIS_E_IO, e, "manifest watch thread");
    mc->watching = true;
    return 0;
}
