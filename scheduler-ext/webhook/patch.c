/* patch.c - which pods tetris-webhook mutates and the JSON Patch it gives
 * them (webhook.h says what and why).
 *
 * The patch is built as: the pod's volumes, then each container's mounts
 * and environment, then the model label, then the scheduler. Each list is
 * reconciled the same way (sync_named): an item of ours the pod lacks is
 * added, one it has under our name but different is replaced, one it has
 * already is left alone; a list the pod lacks altogether is added whole
 * in one operation, since "add /spec/volumes/-" needs the array to exist. */
#include "scheduler-ext/webhook/webhook.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/names.h"
#include "tensorstore/store.h"

#define MAX_WANTED 8

static const json_t *member(const json_t *obj, const char *key)
{
    return json_is_object(obj) ? json_object_get(obj, key) : NULL;
}

/* A string in metadata.labels / metadata.annotations, NULL otherwise. */
static const char *meta_string(const json_t *pod, const char *map, const char *key)
{
    return json_string_value(member(member(member(pod, "metadata"), map), key));
}

static bool namespace_served(const struct webhook_config *c, const char *ns)
{
    if (c->n_namespaces == 0)
        return true;
    for (size_t i = 0; i < c->n_namespaces; i++)
        if (strcmp(c->namespaces[i], ns) == 0)
            return true;
    return false;
}

void webhook_select(const struct webhook_config *c, const webhook_review *r, webhook_selection *out)
{
    memset(out, 0, sizeof *out);
    if (!r->is_pod || r->pod == NULL)
        out->reason = "not-a-pod";
    else if (strcmp(r->operation, "CREATE") != 0)
        out->reason = "not-a-create";
    else if (!namespace_served(c, r->namespace_))
        out->reason = "namespace-not-served";
    if (out->reason != NULL)
        return;
    out->model = meta_string(r->pod, "annotations", TETRIS_LABEL_MODEL);
    if (out->model == NULL)
        out->model = meta_string(r->pod, "labels", TETRIS_LABEL_MODEL);
    out->tenant = meta_string(r->pod, "labels", TETRIS_LABEL_TENANT);
    if (out->tenant == NULL)
        out->tenant = meta_string(r->pod, "annotations", TETRIS_LABEL_TENANT);
    bool function = meta_string(r->pod, "labels", TETRIS_LABEL_FUNCTION) != NULL;
    if (!function && meta_string(r->pod, "annotations", TETRIS_LABEL_MODEL) == NULL) {
        out->reason = "not-a-function";
        out->model = out->tenant = NULL;
        return;
    }
    webhook_pod_controller(r->pod, &out->controller);
    out->selected = true;
}

bool webhook_pod_controller(const json_t *pod, webhook_owner *out)
{
    memset(out, 0, sizeof *out);
    const json_t *refs = member(member(pod, "metadata"), "ownerReferences");
    size_t i;
    const json_t *ref;
    json_array_foreach (refs, i, ref) {
        if (!json_is_true(member(ref, "controller")))
            continue;
        webhook_owner o = {json_string_value(member(ref, "apiVersion")),
                           json_string_value(member(ref, "kind")),
                           json_string_value(member(ref, "name")),
                           json_string_value(member(ref, "uid"))};
        /* Kubernetes allows one controller per object: the first decides. */
        if (o.api_version == NULL || o.kind == NULL || o.name == NULL || o.uid == NULL ||
            !o.api_version[0] || !o.kind[0] || !o.name[0] || !o.uid[0])
            return false;
        *out = o;
        return true;
    }
    return false;
}

/* ---- JSON Patch helpers ---- */

/* want ⊆ have: every member of an object in want is in have and equal
 * (recursively); anything else must be equal. The apiserver adds defaults
 * to what we added, and those must not make us add it again. */
static bool json_subset(const json_t *want, const json_t *have)
{
    if (!json_is_object(want))
        return json_equal(want, have);
    if (!json_is_object(have))
        return false;
    const char *key;
    const json_t *v;
    json_object_foreach ((json_t *)want, key, v)
        if (!json_subset(v, json_object_get(have, key)))
            return false;
    return true;
}

/* JSON Pointer escaping of one reference token (RFC 6901). */
static void pointer_token(const char *s, char *buf, size_t len)
{
    size_t n = 0;
    for (; *s != '\0' && n + 3 < len; s++) {
        if (*s == '~' || *s == '/') {
            buf[n++] = '~';
            buf[n++] = *s == '~' ? '0' : '1';
        } else {
            buf[n++] = *s;
        }
    }
    buf[n] = '\0';
}

static int add_op(json_t *patch, const char *op, const char *path, json_t *value, tetris_error *err)
{
    json_t *o = json_pack("{s:s, s:s, s:o}", "op", op, "path", path, "value", value);
    if (o == NULL || json_array_append_new(patch, o) < 0)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    return 0;
}

typedef struct wanted {
    json_t *item;       /* an object with "name"; owned */
    bool keep_existing; /* a differing item of that name is the pod's choice */
} wanted;

static void wanted_release(wanted *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(w[i].item);
}

/* The index of the item of have whose member key equals want's, or
 * SIZE_MAX. */
static size_t find_by(const json_t *have, const json_t *want, const char *key)
{
    const char *v = json_string_value(json_object_get(want, key));
    size_t at;
    const json_t *h;
    json_array_foreach (have, at, h) {
        const char *hv = json_string_value(member(h, key));
        if (v != NULL && hv != NULL && strcmp(hv, v) == 0)
            return at;
    }
    return SIZE_MAX;
}

/* Reconciles the array at path (have, NULL when absent) with the wanted
 * items, matched by "name", else by also_key when not NULL: a mount of
 * the pod's own at our mountPath would make the apiserver refuse the pod
 * for two mounts at one path, so ours takes its place. Releases the
 * wanted items. */
static int sync_named(json_t *patch, const char *path, const json_t *have, const char *also_key,
                      wanted *w, size_t n, tetris_error *err)
{
    if (have != NULL && !json_is_array(have)) {
        wanted_release(w, n);
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "pod: %s is not an array", path);
    }
    json_t *missing = json_array();
    int r = missing != NULL ? 0 : tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    for (size_t i = 0; i < n && r == 0; i++) {
        size_t at = find_by(have, w[i].item, "name");
        if (at == SIZE_MAX && also_key != NULL)
            at = find_by(have, w[i].item, also_key);
        if (at == SIZE_MAX) {
            r = json_array_append(missing, w[i].item) < 0
                    ? tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory")
                    : 0;
        } else if (!w[i].keep_existing && !json_subset(w[i].item, json_array_get(have, at))) {
            char p[512];
            snprintf(p, sizeof p, "%s/%zu", path, at);
            r = add_op(patch, "replace", p, json_incref(w[i].item), err);
        }
    }
    wanted_release(w, n);
    if (r == 0 && json_array_size(missing) > 0 && have == NULL)
        return add_op(patch, "add", path, missing, err);
    char append[512];
    snprintf(append, sizeof append, "%s/-", path);
    for (size_t i = 0; i < json_array_size(missing) && r == 0; i++)
        r = add_op(patch, "add", append, json_incref(json_array_get(missing, i)), err);
    json_decref(missing);
    return r;
}

/* ---- what a pod gets ---- */

/* The host directory the pod mounts: a tenant's store, or the part of the
 * store shared pods see. */
static int store_mount_dir(const struct webhook_config *c, const webhook_pod_facts *f, char *buf,
                           size_t len, tetris_error *err)
{
    int n;
    if (f->tenant != NULL) {
        int r = store_tenant_check(f->tenant, err);
        if (r < 0)
            return r;
        n = snprintf(buf, len, "%s/" TETRIS_TENANTS_SUBDIR "/%s/" TETRIS_STORE_PUBLIC_SUBDIR,
                     c->store_dir, f->tenant);
    } else if (c->store_subdir != NULL && c->store_subdir[0] != '\0') {
        n = snprintf(buf, len, "%s/%s", c->store_dir, c->store_subdir);
    } else {
        n = snprintf(buf, len, "%s", c->store_dir);
    }
    if (n < 0 || (size_t)n >= len)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "store path too long");
    return 0;
}

static int sync_volumes(json_t *patch, const json_t *spec, const char *store_dir,
                        const webhook_pod_facts *f, tetris_error *err)
{
    wanted w[2];
    size_t n = 0;
    w[n++] = (wanted){.item = json_pack("{s:s, s:{s:s, s:s}}", "name", TETRIS_VOLUME_STORE,
                                        "hostPath", "path", store_dir, "type",
                                        "DirectoryOrCreate")};
    if (f->manifest_configmap != NULL)
        w[n++] = (wanted){.item = json_pack("{s:s, s:{s:s, s:b, s:[{s:s, s:s}]}}", "name",
                                            TETRIS_VOLUME_MANIFEST, "configMap", "name",
                                            f->manifest_configmap, "optional", 1, "items", "key",
                                            TETRIS_MANIFEST_CONFIGMAP_KEY, "path",
                                            TETRIS_MANIFEST_CONFIGMAP_KEY)};
    for (size_t i = 0; i < n; i++)
        if (w[i].item == NULL) {
            wanted_release(w, n);
            return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
        }
    return sync_named(patch, "/spec/volumes", member(spec, "volumes"), NULL, w, n, err);
}

static json_t *env_var(const char *name, const char *value)
{
    return json_pack("{s:s, s:s}", "name", name, "value", value);
}

static int sync_container(json_t *patch, const struct webhook_config *c, size_t index,
                          const json_t *container, const char *store_dir,
                          const webhook_pod_facts *f, tetris_error *err)
{
    if (!json_is_object(container))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "pod: spec.containers[%zu] is not an object",
                           index);
    wanted mounts[2], env[4];
    size_t nm = 0, ne = 0;
    mounts[nm++] = (wanted){.item = json_pack("{s:s, s:s, s:b}", "name", TETRIS_VOLUME_STORE,
                                              "mountPath", store_dir, "readOnly", 1)};
    env[ne++] = (wanted){.item = env_var(TETRIS_ENV_STORE, c->store_dir)};
    if (f->tenant != NULL)
        env[ne++] = (wanted){.item = env_var(TETRIS_ENV_TENANT, f->tenant)};
    if (f->manifest_configmap != NULL) {
        mounts[nm++] = (wanted){.item = json_pack("{s:s, s:s, s:b}", "name", TETRIS_VOLUME_MANIFEST,
                                                  "mountPath", TETRIS_MANIFEST_MOUNT_DIR,
                                                  "readOnly", 1)};
        env[ne++] = (wanted){.item = env_var(TETRIS_ENV_MANIFEST, TETRIS_MANIFEST_MOUNT_DIR
                                             "/" TETRIS_MANIFEST_CONFIGMAP_KEY)};
    }
    if (f->model_path != NULL)
        env[ne++] = (wanted){.item = env_var(TETRIS_ENV_MODEL, f->model_path),
                             .keep_existing = true};
    bool nomem = false;
    for (size_t i = 0; i < nm; i++)
        nomem |= mounts[i].item == NULL;
    for (size_t i = 0; i < ne; i++)
        nomem |= env[i].item == NULL;
    if (nomem) {
        wanted_release(mounts, nm);
        wanted_release(env, ne);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    char path[128];
    snprintf(path, sizeof path, "/spec/containers/%zu/volumeMounts", index);
    int r = sync_named(patch, path, member(container, "volumeMounts"), "mountPath", mounts, nm,
                       err);
    snprintf(path, sizeof path, "/spec/containers/%zu/env", index);
    if (r == 0)
        return sync_named(patch, path, member(container, "env"), NULL, env, ne, err);
    wanted_release(env, ne);
    return r;
}

static int sync_model_label(json_t *patch, const json_t *pod, const char *model, tetris_error *err)
{
    const json_t *labels = member(member(pod, "metadata"), "labels");
    if (labels != NULL && !json_is_object(labels))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "pod: metadata.labels is not an object");
    const char *have = json_string_value(json_object_get(labels, TETRIS_LABEL_MODEL));
    if (have != NULL && strcmp(have, model) == 0)
        return 0;
    if (labels == NULL)
        return add_op(patch, "add", "/metadata/labels",
                      json_pack("{s:s}", TETRIS_LABEL_MODEL, model), err);
    char token[64], path[96];
    pointer_token(TETRIS_LABEL_MODEL, token, sizeof token);
    snprintf(path, sizeof path, "/metadata/labels/%s", token);
    return add_op(patch, "add", path, json_string(model), err);
}

static int sync_scheduler(json_t *patch, const json_t *spec, const char *name, tetris_error *err)
{
    const json_t *have = member(spec, "schedulerName");
    if (have != NULL && !json_is_string(have))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "pod: spec.schedulerName is not a string");
    const char *s = json_string_value(have);
    if (s != NULL && s[0] != '\0' && strcmp(s, TETRIS_DEFAULT_SCHEDULER_NAME) != 0)
        return 0; /* the pod chose its scheduler (ours included) */
    return add_op(patch, "add", "/spec/schedulerName", json_string(name), err);
}

int webhook_patch_build(const struct webhook_config *c, const webhook_review *r,
                        const webhook_pod_facts *f, json_t **out, tetris_error *err)
{
    const json_t *spec = member(r->pod, "spec");
    const json_t *containers = member(spec, "containers");
    if (!json_is_array(containers) || json_array_size(containers) == 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "pod: spec.containers is missing or empty");
    if (f->model != NULL && !names_label_value_valid(f->model))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "model name '%.64s' is not a label value",
                           f->model);
    char store_dir[1024];
    int rc = store_mount_dir(c, f, store_dir, sizeof store_dir, err);
    if (rc < 0)
        return rc;
    json_t *patch = json_array();
    if (patch == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    rc = sync_volumes(patch, spec, store_dir, f, err);
    for (size_t i = 0; i < json_array_size(containers) && rc == 0; i++)
        rc = sync_container(patch, c, i, json_array_get(containers, i), store_dir, f, err);
    if (rc == 0 && f->model != NULL)
        rc = sync_model_label(patch, r->pod, f->model, err);
    if (rc == 0 && c->scheduler_name != NULL && c->scheduler_name[0] != '\0')
        rc = sync_scheduler(patch, spec, c->scheduler_name, err);
    if (rc < 0) {
        json_decref(patch);
        return rc;
    }
    *out = patch;
    return 0;
}
