/* volumes.c - publishing and unpublishing tetris-csi's volumes (the
 * layout and invariants are in volumes.h).
 *
 * Publish: check the request (what CSI requires, and what we accept:
 * the "model" attribute and the kubelet's own), resolve the target path
 * beneath the pods directory and the model beneath the models directory,
 * then either find the volume published already (idempotent) or:
 *   load    the model through the node daemon, as an agent (its
 *           connection holds the references while we work): a file is
 *           ingested, a registry reference pulled by the daemon (its tag
 *           resolved to a digest there, once);
 *   view    write the self-contained view into the volume's directory,
 *           with the store's derived form of the graph when the
 *           attributes ask for one and the store has it;
 *   keep    take the kept holder of the model's tensors (and the form's);
 *   record  write volume.json (by rename);
 *   mount   bind-mount the view at the target, then make it read-only;
 *   free    end the load: the kept holder alone holds the tensors now.
 * A failure undoes the steps done, in reverse. A crash between two steps
 * leaves an unfinished volume that recovery removes at the next start:
 * without a record, or with a record but no mount.
 *
 * Unpublish: unmount, remove the target directory, then the record (the
 * volume is gone from here on), the view and the kept holder. */
#include "reclaimer/csi/volumes.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "agent/agent.h"
#include "agent/view.h"
#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/log.h"
#include "protocol/ingest.h"
#include "protocol/names.h"
#include "protocol/oci.h"
#include "tensorstore/store.h"

#define VOLUMES_DIR "volumes"
#define RECORD_NAME "volume.json"
#define RECORD_TMP ".volume.json.tmp"
#define VIEW_DIR_NAME "view"
#define KEPT_PREFIX "csi-"
#define KEY_HEX 64
#define RECORD_MAX_BYTES (64u << 10)
/* A tenant's name (store_tenant_check: at most 63 bytes) and its NUL. */
#define TENANT_NAME_BYTES 64
/* "sha256:<hex>" and its NUL: a pulled model's manifest digest. */
#define DIGEST_TEXT_BYTES (7 + TENSOR_DIGEST_HEX_LEN + 1)

/* A store that volumes use: the shared one or a tenant's, opened the
 * first time a volume needs it and kept open. The shared store is the
 * root: it holds every volume's record and view, whichever its tenant. */
struct volume_store {
    char tenant[TENANT_NAME_BYTES]; /* "" for the shared store */
    store *store;
    char tensors[PATH_MAX]; /* its public tensors/, what views mount */
};

struct csi_volumes {
    struct csi_volumes_config c;
    char *pods_real, *models_real;
    struct volume_store **stores; /* [0] the shared store; tenants' as opened */
    size_t n_stores;
    char volumes_dir[PATH_MAX];
    /* Every publish and unpublish, the stores, and the tenant map: its
     * file is refreshed and the map asked under the lock only. */
    pthread_mutex_t lock;
    size_t count;
};

/* What a publish asks for, checked. */
struct publish_plan {
    char key[KEY_HEX + 1];
    char target[PATH_MAX]; /* resolved: its parent's real path + its name */
    char model[PATH_MAX];  /* a file's real path, or the reference as asked */
    bool by_ref;           /* model is a registry reference (oci://) */
    /* by_ref: the manifest the reference resolved to, "sha256:<hex>",
     * once loaded (a republish: the record's); "" for a file. */
    char digest[DIGEST_TEXT_BYTES];
    const char *ns, *pod, *pod_uid, *service_account;
    /* The volume's store: NULL for the shared one, else tenant_buf, a copy
     * of the map's answer (or the record's), so that no answer outlives
     * the map that gave it: a later publish may swap the map. */
    const char *tenant;
    char tenant_buf[TENANT_NAME_BYTES];
    /* The view's derived form: the pod's choice for its own volume, as
     * tetris-agent's --derived and --runtime (make is refused: a publish
     * does not wait for a derivation). */
    struct view_options view;
};

/* A volume's record, as read back. */
struct record {
    char *volume_id, *target, *model;
    char *digest; /* a reference's manifest, "sha256:<hex>"; NULL: a file */
    char *tenant; /* NULL: the shared store */
    /* The pod's identity the volume was published for; NULL in a record
     * without it. */
    char *ns, *service_account;
};

static void record_free(struct record *r)
{
    free(r->volume_id);
    free(r->target);
    free(r->model);
    free(r->digest);
    free(r->tenant);
    free(r->ns);
    free(r->service_account);
    memset(r, 0, sizeof(*r));
}

static const char *tenant_name(const char *tenant)
{
    return tenant != NULL ? tenant : "";
}

/* ---- names and paths ---- */

static int volume_key(const char *volume_id, char key[KEY_HEX + 1], tetris_error *err)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(volume_id, strlen(volume_id), md, &n, EVP_sha256(), NULL) != 1 || n != 32)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "sha256 of the volume id failed");
    for (unsigned i = 0; i < n; i++)
        snprintf(key + 2 * i, 3, "%02x", md[i]);
    return 0;
}

static void kept_name(const char *key, char *out, size_t len)
{
    snprintf(out, len, KEPT_PREFIX "%s", key);
}

static int volume_path(const csi_volumes *v, const char *key, const char *name, char *out,
                       size_t len, tetris_error *err)
{
    int n = name != NULL ? snprintf(out, len, "%s/%s/%s", v->volumes_dir, key, name)
                         : snprintf(out, len, "%s/%s", v->volumes_dir, key);
    if (n < 0 || (size_t)n >= len)
        return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "%s: path too long", v->volumes_dir);
    return 0;
}

static bool beneath(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    if (strcmp(dir, "/") == 0)
        return path[0] == '/';
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* The target must name a directory to be made (or an empty one) whose
 * parent resolves, links followed, beneath the pods directory: a pod
 * cannot make us mount elsewhere through a link in its own volume
 * directory. The last component must not be a link either. */
static int resolve_target(const csi_volumes *v, const char *target, char *out, size_t len,
                          tetris_error *err)
{
    if (target[0] != '/')
        return tetris_fail(err, TETRIS_E_INVAL, 0, "target_path %s is not absolute", target);
    cleanup_free char *copy = strdup(target);
    if (copy == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    size_t n = strlen(copy);
    while (n > 1 && copy[n - 1] == '/')
        copy[--n] = '\0';
    char *slash = strrchr(copy, '/');
    const char *base = slash + 1;
    if (slash == copy || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "target_path %s names no directory", target);
    *slash = '\0';
    cleanup_free char *parent = realpath(copy, NULL);
    if (parent == NULL)
        return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_INVAL, errno,
                           "target_path %s: its parent does not resolve", target);
    if (!beneath(parent, v->pods_real) || strcmp(parent, v->pods_real) == 0)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "target_path %s is outside the kubelet's pods directory %s", target,
                           v->pods_real);
    int w = snprintf(out, len, "%s/%s", parent, base);
    if (w < 0 || (size_t)w >= len)
        return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "target_path %s: too long", target);
    struct stat st;
    if (lstat(out, &st) == 0 && !S_ISDIR(st.st_mode))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "target_path %s exists and is not a directory",
                           target);
    return 0;
}

/* A model file beneath the models directory, or a registry reference
 * (protocol/oci.h's grammar): the node daemon pulls it from a registry
 * its --registries allows, which is its decision, not ours. */
static int resolve_model(const csi_volumes *v, const char *model_path, char *out, size_t len,
                         bool *by_ref, tetris_error *err)
{
    *by_ref = oci_ref_is(model_path);
    if (*by_ref) {
        oci_ref ref;
        int r = oci_ref_parse(model_path, &ref, err);
        if (r < 0)
            return tetris_wrap(err, "model");
        if (strlen(model_path) >= len || strlen(model_path) > INGEST_MAX_REF)
            return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "model %.64s...: too long",
                               model_path);
        strcpy(out, model_path);
        return 0;
    }
    if (model_path[0] != '/')
        return tetris_fail(err, TETRIS_E_INVAL, 0, "model %s is not an absolute path", model_path);
    cleanup_free char *real = realpath(model_path, NULL);
    if (real == NULL)
        return tetris_fail(err, TETRIS_E_NOTFOUND, errno, "model %s", model_path);
    if (!beneath(real, v->models_real))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "model %s is outside the models directory %s",
                           model_path, v->models_real);
    struct stat st;
    if (stat(real, &st) < 0 || !S_ISREG(st.st_mode))
        return tetris_fail(err, TETRIS_E_NOTFOUND, errno, "model %s is not a regular file",
                           model_path);
    if (strlen(real) >= len)
        return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "model %s: too long", model_path);
    strcpy(out, real);
    return 0;
}

/* ---- stores ---- */

static void volume_store_free(struct volume_store *vs)
{
    if (vs == NULL)
        return;
    store_close(vs->store);
    free(vs);
}

/* Opens the shared store (tenant NULL) or a tenant's as a writer: kept
 * holders are written into it. TETRIS_E_NOTFOUND for a tenant whose
 * store the node daemon does not serve. */
static int volume_store_open(const csi_volumes *v, const char *tenant, struct volume_store **out,
                             tetris_error *err)
{
    struct volume_store *vs = calloc(1, sizeof(*vs));
    if (vs == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    snprintf(vs->tenant, sizeof(vs->tenant), "%s", tenant_name(tenant));
    struct store_options so = {.tenant = tenant};
    int rc = store_open(v->c.store_dir, &so, &vs->store, err);
    if (rc == -TETRIS_E_NOTFOUND && tenant != NULL)
        rc = tetris_fail(err, TETRIS_E_NOTFOUND, 0,
                         "tenant %s has no store on this node: the node daemon serves the "
                         "tenants it is configured with only",
                         tenant);
    if (rc == 0 && snprintf(vs->tensors, sizeof(vs->tensors), "%s/tensors",
                            store_public_dir(vs->store)) >= (int)sizeof(vs->tensors))
        rc = tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "%s: too long", store_root(vs->store));
    if (rc < 0) {
        volume_store_free(vs);
        return rc;
    }
    *out = vs;
    return 0;
}

/* The store of tenant (NULL: the shared one), opened now if it was not
 * yet. Called with the lock held (or before any thread runs). */
static int store_for(csi_volumes *v, const char *tenant, struct volume_store **out,
                     tetris_error *err)
{
    for (size_t i = 0; i < v->n_stores; i++)
        if (strcmp(v->stores[i]->tenant, tenant_name(tenant)) == 0) {
            *out = v->stores[i];
            return 0;
        }
    struct volume_store **grown = realloc(v->stores, (v->n_stores + 1) * sizeof(*grown));
    if (grown == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    v->stores = grown;
    int rc = volume_store_open(v, tenant, &v->stores[v->n_stores], err);
    if (rc < 0)
        return rc;
    *out = v->stores[v->n_stores++];
    return 0;
}

static store *shared_store(const csi_volumes *v)
{
    assert(v->n_stores > 0 && v->stores[0]->tenant[0] == '\0');
    return v->stores[0]->store;
}

/* ---- the request ---- */

static bool attribute_known(const char *key)
{
    return strcmp(key, TETRIS_CSI_ATTR_MODEL) == 0 || strcmp(key, TETRIS_CSI_ATTR_DERIVED) == 0 ||
           strcmp(key, TETRIS_CSI_ATTR_RUNTIME) == 0 || strcmp(key, CSI_CONTEXT_POD_NAME) == 0 ||
           strcmp(key, CSI_CONTEXT_POD_NAMESPACE) == 0 || strcmp(key, CSI_CONTEXT_POD_UID) == 0 ||
           strcmp(key, CSI_CONTEXT_SERVICE_ACCOUNT) == 0 ||
           strcmp(key, CSI_CONTEXT_EPHEMERAL) == 0 ||
           strcmp(key, "storage.kubernetes.io/csiProvisionerIdentity") == 0;
}

/* CSI's required fields, then our attributes: INVALID_ARGUMENT. */
static int check_request(const struct csi_publish_request *r, struct grpc_reply *reply)
{
    if (r->volume_id[0] == '\0')
        return grpc_reply_fail(reply, GRPC_INVALID_ARGUMENT, "volume_id is required");
    if (r->target_path[0] == '\0')
        return grpc_reply_fail(reply, GRPC_INVALID_ARGUMENT, "target_path is required");
    if (!r->has_capability)
        return grpc_reply_fail(reply, GRPC_INVALID_ARGUMENT, "volume_capability is required");
    if (r->access_type != CSI_ACCESS_MOUNT)
        return grpc_reply_fail(reply, GRPC_INVALID_ARGUMENT,
                               "volume_capability: only mount volumes are served (a model view "
                               "is a directory)");
    for (size_t i = 0; i < r->n_context; i++)
        if (!attribute_known(r->context[i].key))
            return grpc_reply_fail(reply, GRPC_INVALID_ARGUMENT,
                                   "volumeAttributes: unknown key %s (known: model, derived, "
                                   "runtime)",
                                   r->context[i].key);
    const char *eph = csi_context_get(r, CSI_CONTEXT_EPHEMERAL);
    if (eph != NULL && strcmp(eph, "true") != 0)
        return grpc_reply_fail(reply, GRPC_INVALID_ARGUMENT,
                               "only inline ephemeral volumes are served (%s is %s)",
                               CSI_CONTEXT_EPHEMERAL, eph);
    const char *model_path = csi_context_get(r, TETRIS_CSI_ATTR_MODEL);
    if (model_path == NULL || model_path[0] == '\0')
        return grpc_reply_fail(reply, GRPC_INVALID_ARGUMENT,
                               "volumeAttributes: model is required (a model file the node "
                               "can read, or a registry reference oci://...)");
    return GRPC_OK;
}

static const char *or_empty(const char *s)
{
    return s != NULL ? s : "";
}

/* Whether the pod's identity in the volume context is the kubelet's. With
 * podInfoOnMount the kubelet writes pod.namespace, serviceAccount.name and
 * pod.uid over whatever the pod's volumeAttributes said; without it (a
 * CSIDriver changed or deleted) those keys are the pod's own. A pod cannot
 * know its uid when it is created, so a pod.uid that names the pod
 * directory the kubelet made the target in (<pods>/<uid>/volumes/...)
 * shows the keys are the kubelet's. */
static bool identity_from_kubelet(const csi_volumes *v, const struct publish_plan *p)
{
    size_t dir_len = strlen(v->pods_real), uid_len = strlen(p->pod_uid);
    const char *uid = p->target + dir_len + 1;
    return uid_len > 0 && beneath(p->target, v->pods_real) && p->target[dir_len] == '/' &&
           strncmp(uid, p->pod_uid, uid_len) == 0 && uid[uid_len] == '/';
}

static void set_tenant(struct publish_plan *p, const char *tenant)
{
    p->tenant = NULL;
    if (tenant == NULL)
        return;
    snprintf(p->tenant_buf, sizeof(p->tenant_buf), "%s", tenant);
    p->tenant = p->tenant_buf;
}

/* The tenant map to ask now, its file read again when it changed
 * (tenant_map.h). A change that is refused (a text that does not parse, a
 * file that is gone) leaves the map before it in use, and is said once.
 * Called with the lock held. */
static const tenant_map *current_tenants(csi_volumes *v)
{
    tetris_error err = {0};
    const char *path = tenant_map_file_path(v->c.tenants);
    int rc = tenant_map_file_refresh(v->c.tenants, &err);
    const tenant_map *m = tenant_map_file_map(v->c.tenants);
    assert(m != NULL);
    if (rc == 1)
        log_info("event=tenant-map-changed path=%s rules=%zu", LOG_Q(path), tenant_map_rules(m));
    else if (rc == -TETRIS_E_NOTFOUND)
        log_warn("event=tenant-map-missing path=%s msg=%s rules=%zu kept=previous", LOG_Q(path),
                 LOG_Q(err.msg), tenant_map_rules(m));
    else if (rc < 0)
        log_warn("event=tenant-map-refused path=%s code=%s msg=%s rules=%zu kept=previous",
                 LOG_Q(path), tetris_code_name(err.code), LOG_Q(err.msg), tenant_map_rules(m));
    return m;
}

/* The store a volume gets, from the pod's identity as the kubelet gave it
 * (tenant_map.h): without a map, the shared store; with one, the most
 * specific rule of the map in use now, and PERMISSION_DENIED when none
 * matches. The pod has no say: an attribute naming a tenant was refused
 * by check_request, and an identity that is not the kubelet's counts as
 * none (only "* *" matches it). Called with the lock held. */
static int tenant_of(csi_volumes *v, struct publish_plan *p, struct grpc_reply *reply)
{
    set_tenant(p, NULL);
    if (v->c.tenants == NULL)
        return GRPC_OK;
    bool named = identity_from_kubelet(v, p);
    const char *tenant = NULL;
    if (tenant_map_lookup(current_tenants(v), named ? p->ns : "", named ? p->service_account : "",
                          &tenant)) {
        set_tenant(p, tenant);
        return GRPC_OK;
    }
    if (!named)
        return grpc_reply_fail(reply, GRPC_PERMISSION_DENIED,
                               "the volume context names no pod the kubelet vouches for (its "
                               "pod.uid is not the target's pod: the CSIDriver needs "
                               "podInfoOnMount), and the node's tenant map has no \"* *\" rule");
    return grpc_reply_fail(reply, GRPC_PERMISSION_DENIED,
                           "no store for a pod of namespace \"%s\", service account \"%s\": the "
                           "node's tenant map has no rule for it (and no \"* * shared\")",
                           p->ns, p->service_account);
}

/* The view's derived form from the attributes: off unless "derived" says
 * use or auto, which need a "runtime" that can name one. TETRIS_E_INVAL
 * otherwise. */
static int view_options_of(const struct csi_publish_request *r, struct view_options *o,
                           tetris_error *err)
{
    const char *derived = csi_context_get(r, TETRIS_CSI_ATTR_DERIVED);
    const char *runtime = csi_context_get(r, TETRIS_CSI_ATTR_RUNTIME);
    *o = (struct view_options){.mounted_tensors = true};
    if (derived == NULL)
        return 0;
    int rc = derived_mode_parse("volumeAttributes: derived", derived, &o->derived, err);
    if (rc < 0)
        return rc;
    if (o->derived == DERIVED_MAKE)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "volumeAttributes: derived: make would hold the publish for a whole "
                           "derivation; use auto (the next volume gets the form)");
    if (o->derived == DERIVED_OFF)
        return 0;
    if (runtime == NULL || !derived_name_valid(runtime))
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "volumeAttributes: derived %s needs runtime, the pod's runtime and "
                           "version (\"onnxruntime 1.22.0\")",
                           derived);
    o->runtime = runtime;
    return 0;
}

static int plan_publish(csi_volumes *v, const struct csi_publish_request *r, struct publish_plan *p,
                        struct grpc_reply *reply)
{
    tetris_error err = {0};
    if (volume_key(r->volume_id, p->key, &err) < 0 ||
        resolve_target(v, r->target_path, p->target, sizeof(p->target), &err) < 0 ||
        resolve_model(v, csi_context_get(r, TETRIS_CSI_ATTR_MODEL), p->model, sizeof(p->model),
                      &p->by_ref, &err) < 0)
        return grpc_reply_error(reply, &err);
    if (view_options_of(r, &p->view, &err) < 0)
        return grpc_reply_error(reply, &err);
    p->ns = or_empty(csi_context_get(r, CSI_CONTEXT_POD_NAMESPACE));
    p->pod = or_empty(csi_context_get(r, CSI_CONTEXT_POD_NAME));
    p->pod_uid = or_empty(csi_context_get(r, CSI_CONTEXT_POD_UID));
    p->service_account = or_empty(csi_context_get(r, CSI_CONTEXT_SERVICE_ACCOUNT));
    return GRPC_OK;
}

/* The store of the volume p asks for; rec is its record when it is
 * published already. The same request again (the record's pod identity:
 * the kubelet retries, or remounts after its restart) keeps the record's
 * store whatever the map says now: the map chose once, when the volume
 * was published, and a map changed since applies to new volumes. Any
 * other request asks the map (and a store other than the record's is
 * then ALREADY_EXISTS, publish_again). Called with the lock held. */
static int choose_store(csi_volumes *v, struct publish_plan *p, const struct record *rec,
                        struct grpc_reply *reply)
{
    if (rec != NULL && rec->ns != NULL && rec->service_account != NULL &&
        strcmp(rec->ns, p->ns) == 0 && strcmp(rec->service_account, p->service_account) == 0) {
        set_tenant(p, rec->tenant);
        return GRPC_OK;
    }
    return tenant_of(v, p, reply);
}

/* ---- records ---- */

static int read_record(const csi_volumes *v, const char *key, struct record *out, tetris_error *err)
{
    char path[PATH_MAX];
    int r = volume_path(v, key, RECORD_NAME, path, sizeof(path), err);
    if (r < 0)
        return r;
    cleanup_free char *text = NULL;
    size_t len;
    if ((r = file_read_all(path, RECORD_MAX_BYTES, &text, &len, err)) < 0)
        return r;
    json_error_t jerr;
    json_t *j = json_loadb(text, len, 0, &jerr);
    const char *id = json_string_value(json_object_get(j, "volume_id"));
    const char *target = json_string_value(json_object_get(j, "target_path"));
    const char *model_path = json_string_value(json_object_get(j, "model"));
    const char *digest = json_string_value(json_object_get(j, "digest"));
    json_t *tenant = json_object_get(j, "tenant");
    json_t *pod = json_object_get(j, "pod");
    const char *ns = json_string_value(json_object_get(pod, "namespace"));
    const char *sa = json_string_value(json_object_get(pod, "service_account"));
    tensor_digest parsed;
    /* A tenant is a valid name, so its store stays under the root; a
     * reference has the digest it resolved to, a file none. */
    if (id == NULL || target == NULL || model_path == NULL ||
        (tenant != NULL && !json_is_null(tenant) &&
         (!json_is_string(tenant) || store_tenant_check(json_string_value(tenant), NULL) < 0)) ||
        oci_ref_is(model_path) != (digest != NULL) ||
        (digest != NULL && oci_digest_parse(digest, &parsed, NULL) < 0)) {
        json_decref(j);
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not a volume record", path);
    }
    out->volume_id = strdup(id);
    out->target = strdup(target);
    out->model = strdup(model_path);
    if (digest != NULL)
        out->digest = strdup(digest);
    bool has_tenant = json_is_string(tenant);
    if (has_tenant)
        out->tenant = strdup(json_string_value(tenant));
    if (ns != NULL)
        out->ns = strdup(ns);
    if (sa != NULL)
        out->service_account = strdup(sa);
    json_decref(j);
    if (out->volume_id == NULL || out->target == NULL || out->model == NULL ||
        (digest != NULL && out->digest == NULL) || (has_tenant && out->tenant == NULL) ||
        (ns != NULL && out->ns == NULL) || (sa != NULL && out->service_account == NULL)) {
        record_free(out);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    }
    return 0;
}

static int write_record(const csi_volumes *v, const struct csi_publish_request *r,
                        const struct publish_plan *p, tetris_error *err)
{
    char dir[PATH_MAX];
    int rc = volume_path(v, p->key, NULL, dir, sizeof(dir), err);
    if (rc < 0)
        return rc;
    json_t *j = json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s}, s:o}", "volume_id", r->volume_id,
                          "target_path", p->target, "model", p->model, "pod", "namespace", p->ns,
                          "name", p->pod, "uid", p->pod_uid, "service_account", p->service_account,
                          "tenant", p->tenant != NULL ? json_string(p->tenant) : json_null());
    /* What a reference resolved to is the volume's model from here on:
     * nothing resolves its tag again (a republish and recovery read the
     * view this digest was pulled as). */
    if (j != NULL && p->by_ref && json_object_set_new(j, "digest", json_string(p->digest)) < 0) {
        json_decref(j);
        j = NULL;
    }
    cleanup_free char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    cleanup_close int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", dir);
    cleanup_close int fd = openat(dfd, RECORD_TMP,
                                  O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "create %s/%s", dir, RECORD_TMP);
    if ((rc = fd_write_all(fd, text, strlen(text), RECORD_TMP, err)) < 0)
        return rc;
    if (renameat(dfd, RECORD_TMP, dfd, RECORD_NAME) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "rename %s/%s", dir, RECORD_TMP);
    return 0;
}

/* ---- mounts ---- */

/* Whether path is dir, mounted read-only (the same directory). */
static bool mounted_at(const char *dir, const char *path)
{
    struct stat a, b;
    struct statvfs fs;
    if (stat(dir, &a) < 0 || lstat(path, &b) < 0 || statvfs(path, &fs) < 0)
        return false;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino && (fs.f_flag & ST_RDONLY) != 0;
}

/* Whether the volume is whole at target: its view, and its store's
 * tensors on the view's tensors/. */
static bool view_mounted_at(const struct volume_store *vs, const char *view, const char *target)
{
    char tensors[PATH_MAX];
    return mounted_at(view, target) &&
           snprintf(tensors, sizeof(tensors), "%s/tensors", target) < (int)sizeof(tensors) &&
           mounted_at(vs->tensors, tensors);
}

/* Unmounts whatever is mounted at target (stacked mounts too). */
static int unmount_all(const char *target, tetris_error *err)
{
    for (int i = 0; i < 16; i++) {
        if (umount2(target, UMOUNT_NOFOLLOW) == 0)
            continue;
        if (errno == EINVAL || errno == ENOENT)
            return 0; /* not a mount point (any more) */
        return tetris_fail(err, TETRIS_E_IO, errno, "unmount %s", target);
    }
    return tetris_fail(err, TETRIS_E_IO, 0, "unmount %s: still mounted after 16 unmounts", target);
}

/* A bind mount of src at dst, then read-only: a bind mount takes its
 * flags from a remount of its own. */
static int bind_read_only(const char *src, const char *dst, tetris_error *err)
{
    if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
        return tetris_fail(err, errno == EPERM ? TETRIS_E_DENIED : TETRIS_E_IO, errno,
                           "bind-mount %s at %s", src, dst);
    if (mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0) {
        int e = errno;
        if (umount2(dst, MNT_DETACH) < 0)
            log_error("event=unmount-failed path=%s msg=%s", LOG_Q(dst), LOG_Q(strerror(errno)));
        return tetris_fail(err, TETRIS_E_IO, e, "make the mount at %s read-only", dst);
    }
    return 0;
}

/* Unmounts the volume at target: the store's tensors, then the view. */
static int unmount_volume(const char *target, tetris_error *err)
{
    char tensors[PATH_MAX];
    if (snprintf(tensors, sizeof(tensors), "%s/tensors", target) >= (int)sizeof(tensors))
        return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "%s: too long", target);
    int r = unmount_all(tensors, err);
    return r < 0 ? r : unmount_all(target, err);
}

/* The view at target, and its store's tensors/ on its tensors/, both
 * read-only; on failure nothing stays mounted. */
static int mount_view(const struct volume_store *vs, const char *view, const char *target,
                      bool *made_target, tetris_error *err)
{
    char tensors[PATH_MAX];
    *made_target = false;
    if (snprintf(tensors, sizeof(tensors), "%s/tensors", target) >= (int)sizeof(tensors))
        return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "%s: too long", target);
    if (mkdir(target, 0750) == 0)
        *made_target = true;
    else if (errno != EEXIST)
        return tetris_fail(err, TETRIS_E_IO, errno, "create target %s", target);
    int r = bind_read_only(view, target, err);
    if (r == 0 && (r = bind_read_only(vs->tensors, tensors, err)) < 0) {
        tetris_error undo = {0};
        if (unmount_volume(target, &undo) < 0)
            log_error("event=unmount-failed path=%s msg=%s", LOG_Q(target), LOG_Q(undo.msg));
    }
    return r;
}

/* ---- removal ---- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    int r = flag == FTW_DP ? rmdir(path) : unlink(path);
    if (r < 0 && errno != ENOENT)
        log_warn("event=remove-failed path=%s msg=%s", LOG_Q(path), LOG_Q(strerror(errno)));
    return 0;
}

/* Removes a volume's directory (its record first: from then on the
 * volume does not exist) and releases its kept holder in vs, the
 * volume's store (NULL when not known: recovery's scan of every store
 * finds the holder). Never crosses a mount point: a view still mounted
 * somewhere is left alone. */
static int forget_volume(csi_volumes *v, const char *key, const struct volume_store *vs,
                         tetris_error *err)
{
    char dir[PATH_MAX], rec[PATH_MAX], kept[KEY_HEX + 8];
    int rc;
    if ((rc = volume_path(v, key, NULL, dir, sizeof(dir), err)) < 0 ||
        (rc = volume_path(v, key, RECORD_NAME, rec, sizeof(rec), err)) < 0)
        return rc;
    if (unlink(rec) < 0 && errno != ENOENT)
        return tetris_fail(err, TETRIS_E_IO, errno, "remove %s", rec);
    if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0 && errno != ENOENT)
        return tetris_fail(err, TETRIS_E_IO, errno, "remove %s", dir);
    if (vs == NULL)
        return 0;
    kept_name(key, kept, sizeof(kept));
    return store_kept_release(vs->store, kept, err);
}

/* ---- publish ---- */

/* Distinct digests of the tensors the store holds for the model. */
static int collect_refs(const agent_model *am, tensor_digest **d, uint64_t **nbytes, size_t *n,
                        tetris_error *err)
{
    const model *m = am->model;
    *d = calloc(m->n_tensors + 1, sizeof(**d));
    *nbytes = calloc(m->n_tensors + 1, sizeof(**nbytes));
    *n = 0;
    if (*d == NULL || *nbytes == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        if (!t->has_digest)
            continue;
        bool seen = false;
        for (size_t k = 0; k < *n && !seen; k++)
            seen = tensor_digest_equal(&(*d)[k], &t->meta.digest);
        if (!seen) {
            (*d)[*n] = t->meta.digest;
            (*nbytes)[(*n)++] = t->meta.nbytes;
        }
    }
    return 0;
}

/* The load's fallback reason as the call's status: the store could not
 * serve the model whole, so there is no view of its pages to give. */
static int fallback_status(const agent_model *am, struct grpc_reply *reply)
{
    const char *why = am->stats.fallback_reason;
    int status = strstr(why, "full") != NULL ? GRPC_RESOURCE_EXHAUSTED : GRPC_UNAVAILABLE;
    return grpc_reply_fail(reply, status, "the store cannot serve the model: %s", why);
}

/* A pull's failure as the call's status. A registry the node daemon may
 * not reach (not on its --registries, or a redirect elsewhere) is the
 * volume's attribute to change: INVALID_ARGUMENT, CSI's "not allowed by
 * the Plugin" (PERMISSION_DENIED is for an identity from the request's
 * secrets, which there are none of). A registry that failed (bytes that
 * are not their digest, an error status, unreachable) is UNAVAILABLE,
 * which the kubelet retries. The rest are a file's statuses: NOT_FOUND (no
 * such manifest), INVALID_ARGUMENT (not a model), RESOURCE_EXHAUSTED,
 * DEADLINE_EXCEEDED. */
static int pull_failed(const char *ref, tetris_error *err, struct grpc_reply *reply)
{
    tetris_wrap(err, "model %s", ref);
    switch (err->code) {
    case TETRIS_E_DENIED: return grpc_reply_fail(reply, GRPC_INVALID_ARGUMENT, "%s", err->msg);
    case TETRIS_E_CORRUPT:
    case TETRIS_E_HTTP:
    case TETRIS_E_PROTOCOL:
    case TETRIS_E_IO: return grpc_reply_fail(reply, GRPC_UNAVAILABLE, "%s", err->msg);
    default: return grpc_reply_error(reply, err);
    }
}

/* ref pinned to digest: what a volume's view says it is ("ref"), the
 * manifest its tag resolved to in the reference's repository. */
static int pinned_ref(const char *ref_text, const char *digest, char *out, size_t len,
                      tetris_error *err)
{
    oci_ref ref;
    char port[16] = "";
    int r = oci_ref_parse(ref_text, &ref, err);
    if (r < 0)
        return r;
    if (ref.port != 0)
        snprintf(port, sizeof(port), ":%u", ref.port);
    int n = snprintf(out, len, "oci://%s%s/%s@%s", ref.host, port, ref.repo, digest);
    if (n < 0 || (size_t)n >= len)
        return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "model %s: too long", ref_text);
    return 0;
}

/* Loads the model through the volume's store's daemon socket, as an agent
 * does: a file is ingested, a reference pulled (agent_load), and then
 * p->digest is the manifest it resolved to. */
static int load_model(const csi_volumes *v, struct publish_plan *p, agent_model **am,
                      struct grpc_reply *reply)
{
    struct agent_options o;
    tetris_error err = {0};
    agent_options_init(&o);
    o.mode = AGENT_MODE_STORE;
    o.store_dir = v->c.store_dir;
    o.tenant = p->tenant;
    /* A tenant's socket is in its store; --daemon-socket is the shared one. */
    o.daemon_socket = p->tenant == NULL ? v->c.daemon_socket : NULL;
    if (v->c.daemon_timeout_ms > 0)
        o.daemon_timeout_ms = v->c.daemon_timeout_ms;
    if (v->c.pull_timeout_ms > 0)
        o.pull_timeout_ms = v->c.pull_timeout_ms;
    o.map_only = true;
    o.label = strrchr(p->model, '/') + 1;
    if (agent_load(p->model, &o, am, &err) < 0)
        return p->by_ref ? pull_failed(p->model, &err, reply) : grpc_reply_error(reply, &err);
    if (p->by_ref) {
        tensor_digest d;
        bool pulled = agent_model_pulled_digest(*am, &d);
        assert(pulled); /* agent_load pulls every reference */
        (void)pulled;
        oci_digest_format(&d, p->digest);
    }
    if ((*am)->stats.fell_back) {
        int status = fallback_status(*am, reply);
        agent_model_free(*am);
        *am = NULL;
        return status;
    }
    return GRPC_OK;
}

/* Takes the volume's kept holder: the model's n tensors and the derived
 * form's two when the view mv carries one. */
static int keep_tensors(const struct volume_store *vs, const char *kept, const char *model_path,
                        tensor_digest *d, uint64_t *nbytes, size_t n, const model_view *mv,
                        tetris_error *err)
{
    tensor_digest form[2];
    uint64_t form_bytes[2];
    size_t extra = view_derived_tensors(mv, form, form_bytes);
    cleanup_free tensor_digest *all = NULL;
    cleanup_free uint64_t *all_bytes = NULL;
    if (extra > 0) {
        all = malloc((n + extra) * sizeof(*all));
        all_bytes = malloc((n + extra) * sizeof(*all_bytes));
        if (all == NULL || all_bytes == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
        memcpy(all, d, n * sizeof(*d));
        memcpy(all_bytes, nbytes, n * sizeof(*nbytes));
        memcpy(all + n, form, extra * sizeof(*form));
        memcpy(all_bytes + n, form_bytes, extra * sizeof(*form_bytes));
        d = all;
        nbytes = all_bytes;
    }
    return store_kept_hold(vs->store, kept, strrchr(model_path, '/') + 1, d, nbytes, n + extra,
                           err);
}

/* The steps after the load; on failure, what they did is undone. */
static int publish_new(csi_volumes *v, const struct csi_publish_request *r,
                       const struct publish_plan *p, const struct volume_store *vs,
                       const agent_model *am, struct grpc_reply *reply)
{
    tetris_error err = {0};
    cleanup_free tensor_digest *d = NULL;
    cleanup_free uint64_t *nbytes = NULL;
    size_t n;
    char dir[PATH_MAX], view[PATH_MAX], kept[KEY_HEX + 8], pinned[PATH_MAX];
    bool made_target = false;
    kept_name(p->key, kept, sizeof(kept));
    int rc = collect_refs(am, &d, &nbytes, &n, &err);
    if (rc == 0 && p->by_ref)
        rc = pinned_ref(p->model, p->digest, pinned, sizeof(pinned), &err);
    if (rc == 0)
        rc = volume_path(v, p->key, NULL, dir, sizeof(dir), &err);
    if (rc == 0)
        rc = volume_path(v, p->key, VIEW_DIR_NAME, view, sizeof(view), &err);
    if (rc < 0)
        return grpc_reply_error(reply, &err);
    /* A volume directory without a record is an unfinished publish. */
    if ((rc = forget_volume(v, p->key, vs, &err)) < 0)
        return grpc_reply_error(reply, &err);
    rc = mkdir(dir, 0700) < 0 ? tetris_fail(&err, TETRIS_E_IO, errno, "create %s", dir) : 0;
    if (rc == 0) {
        /* The view holds its derived form while it is written; the kept
         * holder, taken before the view lets go, holds it from then on. */
        model_view *mv = NULL;
        rc = view_write(am, p->by_ref ? pinned : p->model, view, &p->view, &mv, &err);
        if (rc == 0 && view_stats(mv)->fallback != NULL)
            rc = tetris_fail(&err, TETRIS_E_UNAVAILABLE, 0,
                             "the store holds only part of the model (%s)",
                             view_stats(mv)->fallback);
        if (rc == 0)
            rc = keep_tensors(vs, kept, p->model, d, nbytes, n, mv, &err);
        view_forget(mv);
    }
    if (rc == 0)
        rc = write_record(v, r, p, &err);
    if (rc == 0)
        rc = mount_view(vs, view, p->target, &made_target, &err);
    if (rc == 0)
        return GRPC_OK;
    tetris_error undo = {0};
    if (made_target && rmdir(p->target) < 0)
        log_warn("event=remove-failed path=%s msg=%s", LOG_Q(p->target), LOG_Q(strerror(errno)));
    if (forget_volume(v, p->key, vs, &undo) < 0)
        log_error("event=publish-undo-failed volume=%s msg=%s", LOG_Q(r->volume_id),
                  LOG_Q(undo.msg));
    return grpc_reply_error(reply, &err);
}

/* The volume is published already: the same target, model and tenant is
 * the idempotent answer (after a crash between record and mount, the
 * mount is made again); anything else is ALREADY_EXISTS. */
static int publish_again(csi_volumes *v, const struct publish_plan *p, const struct record *rec,
                         struct grpc_reply *reply)
{
    if (strcmp(rec->target, p->target) != 0)
        return grpc_reply_fail(reply, GRPC_ALREADY_EXISTS,
                               "volume %s is published at another target path, %s", rec->volume_id,
                               rec->target);
    if (strcmp(rec->model, p->model) != 0)
        return grpc_reply_fail(reply, GRPC_ALREADY_EXISTS,
                               "volume %s is published with another model, %s", rec->volume_id,
                               rec->model);
    if (strcmp(tenant_name(rec->tenant), tenant_name(p->tenant)) != 0)
        return grpc_reply_fail(reply, GRPC_ALREADY_EXISTS,
                               "volume %s is published in another store, %s", rec->volume_id,
                               rec->tenant != NULL ? rec->tenant : "the shared one");
    char view[PATH_MAX];
    tetris_error err = {0};
    bool made_target;
    struct volume_store *vs;
    if (volume_path(v, p->key, VIEW_DIR_NAME, view, sizeof(view), &err) < 0 ||
        store_for(v, p->tenant, &vs, &err) < 0)
        return grpc_reply_error(reply, &err);
    if (view_mounted_at(vs, view, p->target))
        return GRPC_OK;
    /* What a crash left half done is redone whole. */
    if (unmount_volume(p->target, &err) < 0 ||
        mount_view(vs, view, p->target, &made_target, &err) < 0)
        return grpc_reply_error(reply, &err);
    return GRPC_OK;
}

/* A volume not published yet: its store, the load, the rest. */
static int publish_first(csi_volumes *v, const struct csi_publish_request *r,
                         struct publish_plan *p, struct grpc_reply *reply)
{
    struct volume_store *vs;
    agent_model *am = NULL;
    tetris_error err = {0};
    if (v->count >= (size_t)v->c.max_volumes)
        return grpc_reply_fail(reply, GRPC_RESOURCE_EXHAUSTED,
                               "this node serves %d volumes already", v->c.max_volumes);
    /* A tenant the daemon does not serve is the node's configuration,
     * not the request: the kubelet's retry succeeds once it is fixed. */
    if (store_for(v, p->tenant, &vs, &err) < 0)
        return err.code == TETRIS_E_NOTFOUND
                   ? grpc_reply_fail(reply, GRPC_FAILED_PRECONDITION, "%s", err.msg)
                   : grpc_reply_error(reply, &err);
    int rc = load_model(v, p, &am, reply);
    if (rc == GRPC_OK) {
        rc = publish_new(v, r, p, vs, am, reply);
        if (rc == GRPC_OK)
            v->count++;
        agent_model_free(am);
    }
    return rc;
}

static void log_publish_refused(const struct csi_publish_request *r, const struct grpc_reply *reply)
{
    log_info("event=publish-refused volume=%s code=%s msg=%s", LOG_Q(r->volume_id),
             grpc_status_name(reply->status), LOG_Q(reply->message));
}

void csi_volumes_publish(csi_volumes *v, const struct csi_publish_request *r,
                         struct grpc_reply *reply)
{
    struct publish_plan p = {0};
    if (check_request(r, reply) != GRPC_OK || plan_publish(v, r, &p, reply) != GRPC_OK) {
        log_publish_refused(r, reply);
        return;
    }
    pthread_mutex_lock(&v->lock);
    struct record rec = {0};
    tetris_error err = {0};
    bool again = false, refused = false;
    int rc = read_record(v, p.key, &rec, &err);
    if (rc < 0 && err.code != TETRIS_E_NOTFOUND) {
        grpc_reply_error(reply, &err);
    } else if (choose_store(v, &p, rc == 0 ? &rec : NULL, reply) != GRPC_OK) {
        refused = true;
    } else if (rc == 0) {
        again = true;
        if (rec.digest != NULL)
            snprintf(p.digest, sizeof(p.digest), "%s", rec.digest);
        publish_again(v, &p, &rec, reply);
    } else {
        publish_first(v, r, &p, reply);
    }
    pthread_mutex_unlock(&v->lock);
    record_free(&rec);
    if (refused)
        log_publish_refused(r, reply);
    else if (reply->status == GRPC_OK)
        log_info("event=published volume=%s target=%s model=%s digest=%s namespace=%s pod=%s "
                 "service_account=%s tenant=%s again=%s",
                 LOG_Q(r->volume_id), LOG_Q(p.target), LOG_Q(p.model),
                 p.digest[0] != '\0' ? p.digest : "none", LOG_Q(p.ns), LOG_Q(p.pod),
                 LOG_Q(p.service_account), LOG_Q(tenant_name(p.tenant)), again ? "true" : "false");
    else
        log_warn("event=publish-failed volume=%s target=%s code=%s msg=%s", LOG_Q(r->volume_id),
                 LOG_Q(p.target), grpc_status_name(reply->status), LOG_Q(reply->message));
}

/* ---- unpublish ---- */

/* No record: nothing of ours is there. A directory the kubelet made and
 * nothing is mounted on is removed, as the spec asks. */
static void unpublish_unknown(const char *target)
{
    struct stat st, parent;
    char up[PATH_MAX];
    if (snprintf(up, sizeof(up), "%s/..", target) >= (int)sizeof(up))
        return;
    if (lstat(target, &st) == 0 && S_ISDIR(st.st_mode) && stat(up, &parent) == 0 &&
        st.st_dev == parent.st_dev && rmdir(target) < 0 && errno != ENOTEMPTY)
        log_warn("event=remove-failed path=%s msg=%s", LOG_Q(target), LOG_Q(strerror(errno)));
}

/* The store a recorded volume's kept holder is in; NULL (logged) when it
 * cannot be opened: a tenant's store the daemon no longer has took the
 * holder with it, and any other is found by the next start's scan. */
static struct volume_store *record_store(csi_volumes *v, const struct record *rec)
{
    struct volume_store *vs;
    tetris_error err = {0};
    if (store_for(v, rec->tenant, &vs, &err) == 0)
        return vs;
    log_warn("event=volume-store-unavailable volume=%s tenant=%s msg=%s", LOG_Q(rec->volume_id),
             LOG_Q(tenant_name(rec->tenant)), LOG_Q(err.msg));
    return NULL;
}

/* The record's target is resolved; the kubelet names it as it did. */
static bool same_target(const char *recorded, const char *asked)
{
    char real[PATH_MAX];
    return strcmp(recorded, asked) == 0 ||
           (realpath(asked, real) != NULL && strcmp(recorded, real) == 0);
}

void csi_volumes_unpublish(csi_volumes *v, const struct csi_unpublish_request *r,
                           struct grpc_reply *reply)
{
    if (r->volume_id[0] == '\0' || r->target_path[0] == '\0') {
        grpc_reply_fail(reply, GRPC_INVALID_ARGUMENT, "%s is required",
                        r->volume_id[0] == '\0' ? "volume_id" : "target_path");
        log_info("event=unpublish-refused code=INVALID_ARGUMENT msg=%s", LOG_Q(reply->message));
        return;
    }
    char key[KEY_HEX + 1];
    tetris_error err = {0};
    struct record rec = {0};
    bool known = false;
    if (volume_key(r->volume_id, key, &err) < 0) {
        grpc_reply_error(reply, &err);
        return;
    }
    pthread_mutex_lock(&v->lock);
    int rc = read_record(v, key, &rec, &err);
    if (rc < 0 && err.code == TETRIS_E_NOTFOUND) {
        unpublish_unknown(r->target_path);
    } else if (rc < 0) {
        grpc_reply_error(reply, &err);
    } else if (!same_target(rec.target, r->target_path)) {
        grpc_reply_fail(reply, GRPC_NOT_FOUND, "volume %s is published at %s, not at %s",
                        r->volume_id, rec.target, r->target_path);
    } else if (unmount_volume(rec.target, &err) < 0) {
        grpc_reply_error(reply, &err);
    } else {
        known = true;
        if (rmdir(rec.target) < 0 && errno != ENOENT)
            log_warn("event=remove-failed path=%s msg=%s", LOG_Q(rec.target),
                     LOG_Q(strerror(errno)));
        if (forget_volume(v, key, record_store(v, &rec), &err) < 0)
            grpc_reply_error(reply, &err);
        else if (v->count > 0)
            v->count--;
    }
    pthread_mutex_unlock(&v->lock);
    record_free(&rec);
    if (reply->status == GRPC_OK)
        log_info("event=unpublished volume=%s target=%s known=%s", LOG_Q(r->volume_id),
                 LOG_Q(r->target_path), known ? "true" : "false");
    else
        log_warn("event=unpublish-failed volume=%s target=%s code=%s msg=%s", LOG_Q(r->volume_id),
                 LOG_Q(r->target_path), grpc_status_name(reply->status), LOG_Q(reply->message));
}

/* ---- opening and recovery ---- */

static bool is_key(const char *name)
{
    return strlen(name) == KEY_HEX && strspn(name, "0123456789abcdef") == KEY_HEX;
}

/* One volume directory left by a previous run: kept if its view is
 * mounted at its record's target, with its store's tensors, else
 * forgotten. */
static void recover_volume(csi_volumes *v, const char *key)
{
    struct record rec = {0};
    tetris_error err = {0};
    char view[PATH_MAX];
    struct volume_store *vs = NULL;
    bool mounted = false;
    if (volume_path(v, key, VIEW_DIR_NAME, view, sizeof(view), &err) == 0 &&
        read_record(v, key, &rec, &err) == 0 && (vs = record_store(v, &rec)) != NULL)
        mounted = view_mounted_at(vs, view, rec.target);
    if (mounted) {
        v->count++;
        log_info("event=volume-recovered volume=%s target=%s model=%s digest=%s tenant=%s",
                 LOG_Q(rec.volume_id), LOG_Q(rec.target), LOG_Q(rec.model),
                 rec.digest != NULL ? rec.digest : "none", LOG_Q(tenant_name(rec.tenant)));
    } else if (forget_volume(v, key, vs, &err) < 0) {
        log_error("event=recover-failed key=%s msg=%s", key, LOG_Q(err.msg));
    } else {
        log_info("event=volume-forgotten key=%s reason=%s", key,
                 rec.volume_id == NULL ? "no-record"
                 : vs == NULL          ? "no-store"
                                       : "not-mounted");
    }
    record_free(&rec);
}

struct orphan_kept {
    csi_volumes *v;
    const struct volume_store *vs;
    char (*keys)[KEY_HEX + 1];
    size_t n, cap;
};

/* Whether the volume of key is this store's: its directory is there and
 * its record names this store. */
static bool volume_in_store(csi_volumes *v, const char *key, const struct volume_store *vs)
{
    char dir[PATH_MAX];
    struct stat st;
    struct record rec = {0};
    tetris_error err = {0};
    if (volume_path(v, key, NULL, dir, sizeof(dir), NULL) < 0 || stat(dir, &st) < 0)
        return false;
    /* Recovery removed every directory without a readable record. */
    if (read_record(v, key, &rec, &err) < 0)
        return true;
    bool mine = strcmp(tenant_name(rec.tenant), vs->tenant) == 0;
    record_free(&rec);
    return mine;
}

static int find_orphan_kept(void *ctx, const struct store_holder_info *h)
{
    struct orphan_kept *o = ctx;
    const char *key = h->id + strlen(KEPT_PREFIX);
    if (!h->kept || strncmp(h->id, KEPT_PREFIX, strlen(KEPT_PREFIX)) != 0 || !is_key(key) ||
        volume_in_store(o->v, key, o->vs))
        return 0;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 16;
        void *k = realloc(o->keys, cap * sizeof(*o->keys));
        if (k == NULL)
            return -TETRIS_E_NOMEM;
        o->keys = k;
        o->cap = cap;
    }
    snprintf(o->keys[o->n++], KEY_HEX + 1, "%s", key);
    return 0;
}

/* Releases the kept holders of one store that no volume of it owns: an
 * unpublish that stopped between the volume and its holder, or a volume
 * forgotten before its store was known. */
static int release_orphans(csi_volumes *v, const struct volume_store *vs, tetris_error *err)
{
    struct orphan_kept o = {.v = v, .vs = vs};
    int rc = store_foreach_holder(vs->store, find_orphan_kept, &o, err);
    for (size_t i = 0; rc == 0 && i < o.n; i++) {
        char kept[KEY_HEX + 8];
        kept_name(o.keys[i], kept, sizeof(kept));
        rc = store_kept_release(vs->store, kept, err);
        if (rc == 0)
            log_info("event=kept-holder-released name=%s tenant=%s reason=no-volume", kept,
                     LOG_Q(vs->tenant));
    }
    free(o.keys);
    return rc == -TETRIS_E_NOMEM ? tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory") : rc;
}

/* Opens every tenant store the daemon made (DIR/tenants/NAME), so that
 * their kept holders are looked at too, whatever the tenant map says now:
 * a map changed between two runs leaves no holder behind. */
static int open_tenant_stores(csi_volumes *v, tetris_error *err)
{
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof(dir), "%s/" TETRIS_TENANTS_SUBDIR, store_root(shared_store(v))) >=
        (int)sizeof(dir))
        return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "%s: too long", dir);
    cleanup_closedir DIR *d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT ? 0 : tetris_fail(err, TETRIS_E_IO, errno, "open %s", dir);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct volume_store *vs;
        tetris_error skip = {0};
        if (de->d_name[0] == '.' || store_tenant_check(de->d_name, NULL) < 0)
            continue;
        if (store_for(v, de->d_name, &vs, &skip) < 0)
            log_warn("event=tenant-store-skipped tenant=%s msg=%s", LOG_Q(de->d_name),
                     LOG_Q(skip.msg));
    }
    return 0;
}

static int recover(csi_volumes *v, tetris_error *err)
{
    cleanup_closedir DIR *d = opendir(v->volumes_dir);
    if (d == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", v->volumes_dir);
    int rc = open_tenant_stores(v, err);
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL)
        if (is_key(de->d_name))
            recover_volume(v, de->d_name);
    for (size_t i = 0; rc == 0 && i < v->n_stores; i++)
        rc = release_orphans(v, v->stores[i], err);
    return rc;
}

int csi_volumes_open(const struct csi_volumes_config *c, csi_volumes **out, tetris_error *err)
{
    csi_volumes *v = calloc(1, sizeof(*v));
    if (v == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    v->c = *c;
    pthread_mutex_init(&v->lock, NULL);
    int rc = 0;
    if ((v->pods_real = realpath(c->pods_dir, NULL)) == NULL)
        rc = tetris_fail(err, TETRIS_E_INVAL, errno, "pods directory %s", c->pods_dir);
    else if ((v->models_real = realpath(c->models_dir, NULL)) == NULL)
        rc = tetris_fail(err, TETRIS_E_INVAL, errno, "models directory %s", c->models_dir);
    struct volume_store *shared;
    if (rc == 0)
        rc = store_for(v, NULL, &shared, err);
    if (rc == 0 && snprintf(v->volumes_dir, sizeof(v->volumes_dir), "%s/private/" VOLUMES_DIR,
                            store_root(shared->store)) >= (int)sizeof(v->volumes_dir))
        rc = tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "%s: too long",
                         store_root(shared->store));
    if (rc == 0 && mkdir(v->volumes_dir, 0700) < 0 && errno != EEXIST)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "create %s", v->volumes_dir);
    if (rc == 0)
        rc = recover(v, err);
    if (rc < 0) {
        csi_volumes_close(v);
        return rc;
    }
    *out = v;
    return 0;
}

void csi_volumes_close(csi_volumes *v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < v->n_stores; i++)
        volume_store_free(v->stores[i]);
    free(v->stores);
    free(v->pods_real);
    free(v->models_real);
    pthread_mutex_destroy(&v->lock);
    free(v);
}

size_t csi_volumes_count(csi_volumes *v)
{
    pthread_mutex_lock(&v->lock);
    size_t n = v->count;
    pthread_mutex_unlock(&v->lock);
    return n;
}
