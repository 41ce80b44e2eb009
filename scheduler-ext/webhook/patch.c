/* patch.c - which pods tetris-webhook mutates and the JSON Patch it gives
 * them (webhook.h says what and why).
 *
 * The patch is built as: the pod's volumes, then each container's mounts
 * and environment (the CSI way: then the pod's and each container's
 * security context), then the model label, then the scheduler. Each list is
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
    out->model_ref = meta_string(r->pod, "annotations", TETRIS_ANNOTATION_MODEL_REF);
    out->derived = meta_string(r->pod, "annotations", TETRIS_ANNOTATION_DERIVED);
    out->runtime = meta_string(r->pod, "annotations", TETRIS_ANNOTATION_RUNTIME);
    out->tenant_label = meta_string(r->pod, "labels", TETRIS_LABEL_TENANT);
    out->tenant_annotation = meta_string(r->pod, "annotations", TETRIS_LABEL_TENANT);
    bool function = meta_string(r->pod, "labels", TETRIS_LABEL_FUNCTION) != NULL;
    if (!function && meta_string(r->pod, "annotations", TETRIS_LABEL_MODEL) == NULL) {
        out->reason = "not-a-function";
        out->model = out->model_ref = out->tenant_label = out->tenant_annotation = NULL;
        out->derived = out->runtime = NULL;
        return;
    }
    webhook_pod_controller(r->pod, &out->controller);
    out->selected = true;
}

/* ---- the tenant ---- */

static bool tenant_configured(const struct webhook_config *c, const char *tenant)
{
    for (size_t i = 0; i < c->n_tenants; i++)
        if (strcmp(c->tenants[i], tenant) == 0)
            return true;
    return false;
}

/* Whether what the pod says (NULL or "": nothing) agrees with its
 * namespace's tenant (NULL: none). */
static bool claim_agrees(const char *claim, const char *ns_tenant)
{
    if (claim == NULL || claim[0] == '\0')
        return true;
    return ns_tenant != NULL && strcmp(claim, ns_tenant) == 0;
}

int webhook_tenant_decide(const struct webhook_config *c, const webhook_selection *sel,
                          const char *ns_tenant, const char **tenant, tetris_error *err)
{
    *tenant = NULL;
    const char *claims[2] = {sel->tenant_label, sel->tenant_annotation};
    static const char *const claim_kinds[2] = {"label", "annotation"};
    for (size_t i = 0; i < 2; i++) {
        if (claim_agrees(claims[i], ns_tenant))
            continue;
        char owner[96] = "no tenant";
        if (ns_tenant != NULL)
            snprintf(owner, sizeof owner, "tenant '%.64s'", ns_tenant);
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "the pod's " TETRIS_LABEL_TENANT " %s says '%.64s' but its namespace "
                           "belongs to %s: a pod's tenant is its namespace's " TETRIS_LABEL_TENANT
                           " label, never its own; remove the %s or create the pod in that "
                           "tenant's namespace",
                           claim_kinds[i], claims[i], owner, claim_kinds[i]);
    }
    if (ns_tenant != NULL && !tenant_configured(c, ns_tenant))
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "the namespace's " TETRIS_LABEL_TENANT " label names tenant '%.64s', "
                           "which the operator has not configured (the chart's tenants "
                           "list): the nodes have no store for it",
                           ns_tenant);
    *tenant = ns_tenant;
    return 0;
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
                                        "hostPath", "path", store_dir, "type", "Directory")};
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

/* ---- the CSI way ---- */

/* What the model view volume names: the pod's registry reference, else
 * the model file its manifest describes (a file on the node). */
static const char *csi_model(const webhook_pod_facts *f)
{
    return f->model_ref != NULL && f->model_ref[0] != '\0' ? f->model_ref : f->model_path;
}

/* The volume's attributes: the model, and the pod's derived-form choice
 * where it states one (the plugin refuses a bad one, with a message). */
static json_t *csi_attributes(const webhook_pod_facts *f, const char *model)
{
    json_t *a = json_pack("{s:s}", TETRIS_CSI_ATTR_MODEL, model);
    if (a != NULL && f->derived != NULL &&
        json_object_set_new(a, TETRIS_CSI_ATTR_DERIVED, json_string(f->derived)) < 0)
        goto fail;
    if (a != NULL && f->runtime != NULL &&
        json_object_set_new(a, TETRIS_CSI_ATTR_RUNTIME, json_string(f->runtime)) < 0)
        goto fail;
    return a;
fail:
    json_decref(a);
    return NULL;
}

static int sync_csi_volume(json_t *patch, const struct webhook_config *c, const json_t *spec,
                           const webhook_pod_facts *f, const char *model, tetris_error *err)
{
    json_t *attributes = csi_attributes(f, model);
    wanted w = {.item = attributes == NULL
                            ? NULL
                            : json_pack("{s:s, s:{s:s, s:b, s:o}}", "name", TETRIS_VOLUME_MODEL,
                                        "csi", "driver", c->csi_driver, "readOnly", 1,
                                        "volumeAttributes", attributes)};
    if (w.item == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    return sync_named(patch, "/spec/volumes", member(spec, "volumes"), NULL, &w, 1, err);
}

static int sync_csi_container(json_t *patch, size_t index, const json_t *container,
                              tetris_error *err)
{
    if (!json_is_object(container))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "pod: spec.containers[%zu] is not an object",
                           index);
    wanted mount = {.item = json_pack("{s:s, s:s, s:b}", "name", TETRIS_VOLUME_MODEL, "mountPath",
                                      TETRIS_MODEL_VIEW_MOUNT_DIR, "readOnly", 1)};
    wanted env = {.item = env_var(TETRIS_ENV_MODEL_VIEW, TETRIS_MODEL_VIEW_MOUNT_DIR)};
    if (mount.item == NULL || env.item == NULL) {
        wanted_release(&mount, 1);
        wanted_release(&env, 1);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    char path[128];
    snprintf(path, sizeof path, "/spec/containers/%zu/volumeMounts", index);
    int r = sync_named(patch, path, member(container, "volumeMounts"), "mountPath", &mount, 1, err);
    snprintf(path, sizeof path, "/spec/containers/%zu/env", index);
    if (r == 0)
        return sync_named(patch, path, member(container, "env"), NULL, &env, 1, err);
    wanted_release(&env, 1);
    return r;
}

/* Adds key = value to the object at path (have, NULL when absent) unless
 * it has the key: what the pod states itself is its own choice. */
static int add_missing(json_t *patch, const char *path, const json_t *have, const char *key,
                       json_t *value, tetris_error *err)
{
    if (json_object_get(have, key) != NULL) {
        json_decref(value);
        return 0;
    }
    char p[256];
    snprintf(p, sizeof p, "%s/%s", path, key);
    return add_op(patch, "add", p, value, err);
}

/* Adds the object at path whole when absent, else each of its members the
 * pod lacks (one level down: an object member present is left alone). */
static int add_object_members(json_t *patch, const char *path, const json_t *have, json_t *want,
                              tetris_error *err)
{
    if (want == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    if (have == NULL)
        return add_op(patch, "add", path, want, err);
    if (!json_is_object(have)) {
        json_decref(want);
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "pod: %s is not an object", path);
    }
    int r = 0;
    const char *key;
    json_t *v;
    json_object_foreach (want, key, v)
        if (r == 0)
            r = add_missing(patch, path, have, key, json_incref(v), err);
    json_decref(want);
    return r;
}

/* A container's part of "restricted": no privilege escalation, every
 * capability dropped. A capabilities object of the pod's own gets "ALL"
 * added to its drop list; what it adds is left (and judged by admission). */
static int sync_container_restricted(json_t *patch, const char *list, size_t index,
                                     const json_t *container, tetris_error *err)
{
    if (!json_is_object(container))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "pod: spec.%s[%zu] is not an object", list,
                           index);
    char path[160];
    snprintf(path, sizeof path, "/spec/%s/%zu/securityContext", list, index);
    const json_t *sc = member(container, "securityContext");
    int r = add_object_members(patch, path, sc,
                               json_pack("{s:b, s:{s:[s]}}", "allowPrivilegeEscalation", 0,
                                         "capabilities", "drop", "ALL"),
                               err);
    const json_t *caps = member(sc, "capabilities");
    if (r < 0 || caps == NULL)
        return r;
    if (!json_is_object(caps))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "pod: %s/capabilities is not an object", path);
    const json_t *drop = json_object_get(caps, "drop");
    char caps_path[200];
    snprintf(caps_path, sizeof caps_path, "%s/capabilities", path);
    if (drop == NULL)
        return add_missing(patch, caps_path, caps, "drop", json_pack("[s]", "ALL"), err);
    if (!json_is_array(drop))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "pod: %s/drop is not an array", caps_path);
    size_t i;
    const json_t *d;
    json_array_foreach (drop, i, d)
        if (json_is_string(d) && strcmp(json_string_value(d), "ALL") == 0)
            return 0;
    char drop_path[220];
    snprintf(drop_path, sizeof drop_path, "%s/drop/-", caps_path);
    return add_op(patch, "add", drop_path, json_string("ALL"), err);
}

/* The pod's part of "restricted": non-root, the runtime's default seccomp
 * profile; then every container's and init container's part. */
static int sync_restricted(json_t *patch, const json_t *spec, tetris_error *err)
{
    int r = add_object_members(patch, "/spec/securityContext", member(spec, "securityContext"),
                               json_pack("{s:b, s:{s:s}}", "runAsNonRoot", 1, "seccompProfile",
                                         "type", "RuntimeDefault"),
                               err);
    static const char *const lists[] = {"containers", "initContainers"};
    for (size_t l = 0; l < 2 && r == 0; l++) {
        const json_t *list = member(spec, lists[l]);
        if (list != NULL && !json_is_array(list))
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "pod: spec.%s is not an array", lists[l]);
        for (size_t i = 0; i < json_array_size(list) && r == 0; i++)
            r = sync_container_restricted(patch, lists[l], i, json_array_get(list, i), err);
    }
    return r;
}

/* The CSI way: the model view volume instead of the store, and the pod
 * made to pass "restricted". */
static int build_csi(json_t *patch, const struct webhook_config *c, const json_t *spec,
                     const webhook_pod_facts *f, tetris_error *err)
{
    const char *model = csi_model(f);
    if (model == NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "no model to mount: the pod has no " TETRIS_ANNOTATION_MODEL_REF
                           " annotation and its model has no manifest naming a file");
    const json_t *containers = member(spec, "containers");
    int r = sync_csi_volume(patch, c, spec, f, model, err);
    for (size_t i = 0; i < json_array_size(containers) && r == 0; i++)
        r = sync_csi_container(patch, i, json_array_get(containers, i), err);
    return r == 0 ? sync_restricted(patch, spec, err) : r;
}

static int build_host_path(json_t *patch, const struct webhook_config *c, const json_t *spec,
                           const webhook_pod_facts *f, tetris_error *err)
{
    char store_dir[1024];
    int rc = store_mount_dir(c, f, store_dir, sizeof store_dir, err);
    if (rc == 0)
        rc = sync_volumes(patch, spec, store_dir, f, err);
    const json_t *containers = member(spec, "containers");
    for (size_t i = 0; i < json_array_size(containers) && rc == 0; i++)
        rc = sync_container(patch, c, i, json_array_get(containers, i), store_dir, f, err);
    return rc;
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
    json_t *patch = json_array();
    if (patch == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    int rc = c->csi_driver != NULL && c->csi_driver[0] != '\0'
                 ? build_csi(patch, c, spec, f, err)
                 : build_host_path(patch, c, spec, f, err);
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
