/* job.c - the profiling Job manifest and the result ConfigMaps (see job.h). */
#include "profiler/job.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/kube.h"
#include "common/log.h"
#include "common/yaml_write.h"
#include "protocol/names.h"

#define SA_MOUNT "/var/run/secrets/tetris"
/* The Job's app label and the managed-by label of what it stores. */
#define JOB_ACCOUNT "tetris-profiler"
/* The user and group the Job runs as: nobody's, no home, no rights. */
#define JOB_UID 65534

void job_options_init(struct job_options *o)
{
    memset(o, 0, sizeof(*o));
    o->namespace_ = TETRIS_NAMESPACE;
    o->image = "tetris:latest";
    o->model_dir = TETRIS_MODEL_HOST_DIR;
    o->store_dir = TETRIS_STORE_DIR;
    o->duration_s = 5;
    o->warmup_s = 1;
}

int job_object_name(const char *model, char *buf, size_t len, tetris_error *err)
{
    size_t n = 0;
    if (!names_label_value_valid(model))
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "model name '%s' is not a valid label value (1-63 of [A-Za-z0-9._-], "
                           "alphanumeric at both ends): use --name",
                           model);
    for (const char *s = model; *s != '\0' && n + 1 < len; s++)
        buf[n++] = isalnum((unsigned char)*s) ? (char)tolower((unsigned char)*s) : '-';
    buf[n] = '\0';
    return 0;
}

static json_t *metadata(const char *name, const char *ns, json_t *labels)
{
    json_t *m = json_pack("{s:s, s:s}", "name", name, "namespace", ns);
    if (m != NULL && labels != NULL)
        json_object_set_new(m, "labels", labels);
    else
        json_decref(labels);
    return m;
}

static json_t *job_labels(const char *model)
{
    return json_pack("{s:s, s:s}", TETRIS_LABEL_APP_NAME, JOB_ACCOUNT, TETRIS_LABEL_PROFILE, model);
}

/* The container's arguments: `tetris-profiler profile` storing ConfigMaps. */
static json_t *job_args(const struct job_options *o)
{
    char path[4096], duration[32], warmup[32];
    const char *argv[24];
    size_t n = 0;
    snprintf(path, sizeof(path), TETRIS_MODEL_DIR "/%s", o->model);
    snprintf(duration, sizeof(duration), "%g", o->duration_s);
    snprintf(warmup, sizeof(warmup), "%g", o->warmup_s);
    argv[n++] = "profile";
    argv[n++] = path;
    argv[n++] = "--name";
    argv[n++] = o->name;
    argv[n++] = "--store";
    argv[n++] = TETRIS_STORE_DIR;
    if (o->grid != NULL) {
        argv[n++] = "--grid";
        argv[n++] = o->grid;
    }
    argv[n++] = "--duration";
    argv[n++] = duration;
    argv[n++] = "--warmup";
    argv[n++] = warmup;
    argv[n++] = "--store-configmaps";
    argv[n++] = "--namespace";
    argv[n++] = o->namespace_;
    if (o->api_server != NULL) {
        argv[n++] = "--kube-server";
        argv[n++] = o->api_server;
    }
    if (o->sa_secret != NULL) {
        argv[n++] = "--kube-sa-dir";
        argv[n++] = SA_MOUNT;
    }
    argv[n++] = "-o";
    argv[n++] = "/tmp/" TETRIS_PROFILE_CONFIGMAP_KEY;
    json_t *args = json_array();
    for (size_t i = 0; args != NULL && i < n; i++)
        if (json_array_append_new(args, json_string(argv[i])) < 0) {
            json_decref(args);
            args = NULL;
        }
    return args;
}

static json_t *job_object(const struct job_options *o, const char *obj)
{
    char name[128];
    snprintf(name, sizeof(name), TETRIS_PROFILE_CONFIGMAP_PREFIX "%s", obj);
    char store_public[1024];
    snprintf(store_public, sizeof(store_public), "%s/" TETRIS_STORE_PUBLIC_SUBDIR, o->store_dir);
    json_t *mounts = json_pack("[{s:s, s:s, s:b}, {s:s, s:s, s:b}]", "name", "store", "mountPath",
                               TETRIS_STORE_DIR, "readOnly", 1, "name", "models", "mountPath",
                               TETRIS_MODEL_DIR, "readOnly", 1);
    json_t *volumes = json_pack("[{s:s, s:{s:s, s:s}}, {s:s, s:{s:s, s:s}}]", "name", "store",
                                "hostPath", "path", store_public, "type", "Directory", "name",
                                "models", "hostPath", "path", o->model_dir, "type", "Directory");
    if (o->sa_secret != NULL) {
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "api-credentials",
                                                "mountPath", SA_MOUNT, "readOnly", 1));
        json_array_append_new(volumes, json_pack("{s:s, s:{s:s}}", "name", "api-credentials",
                                                 "secret", "secretName", o->sa_secret));
    }
    /* The profiler reads the model and the store (both world-readable),
     * talks to the node daemon's socket (open to all) and writes /tmp:
     * nothing a root user or a capability adds. */
    json_t *security = json_pack("{s:b, s:i, s:i, s:b, s:{s:[s]}, s:{s:s}}", "runAsNonRoot", 1,
                                 "runAsUser", JOB_UID, "runAsGroup", JOB_UID,
                                 "allowPrivilegeEscalation", 0, "capabilities", "drop", "ALL",
                                 "seccompProfile", "type", "RuntimeDefault");
    json_t *container = json_pack("{s:s, s:s, s:s, s:[s], s:o, s:o, s:o}", "name", "profiler",
                                  "image", o->image, "imagePullPolicy", "IfNotPresent", "command",
                                  "/usr/local/bin/tetris-profiler", "args", job_args(o),
                                  "volumeMounts", mounts, "securityContext", security);
    /* hostNetwork: the function under test listens on loopback only. */
    json_t *pod = json_pack("{s:s, s:s, s:b, s:[o], s:o}", "serviceAccountName", name,
                            "restartPolicy", "Never", "hostNetwork", 1, "containers", container,
                            "volumes", volumes);
    if (pod != NULL && o->node != NULL)
        json_object_set_new(pod, "nodeSelector",
                            json_pack("{s:s}", "kubernetes.io/hostname", o->node));
    return json_pack("{s:s, s:s, s:o, s:{s:i, s:{s:{s:o}, s:o}}}", "apiVersion", "batch/v1", "kind",
                     "Job", "metadata", metadata(name, o->namespace_, job_labels(o->name)), "spec",
                     "backoffLimit", 0, "template", "metadata", "labels", job_labels(o->name),
                     "spec", pod);
}

/* The Job's own ServiceAccount, Role and RoleBinding (all named like the
 * Job, so that two models' Jobs never share rights), the two ConfigMaps it
 * writes, and the Job. The Role patches those two ConfigMaps by name (all
 * put_configmap does in the Job) and creates none: RBAC cannot limit create to names, and a create
 * grant in the namespace would let the Job make any ConfigMap there, the node daemon's settings
 * among them when those are missing. `kubectl apply` creates the two, empty and without the model
 * label (readers skip them until the Job fills them). */
static json_t *job_objects(const struct job_options *o, const char *obj)
{
    char name[128], manifest[128];
    snprintf(name, sizeof(name), TETRIS_PROFILE_CONFIGMAP_PREFIX "%s", obj);
    snprintf(manifest, sizeof(manifest), TETRIS_MANIFEST_CONFIGMAP_PREFIX "%s", obj);
    json_t *account = json_pack("{s:s, s:s, s:o}", "apiVersion", "v1", "kind", "ServiceAccount",
                                "metadata", metadata(name, o->namespace_, NULL));
    json_t *role = json_pack("{s:s, s:s, s:o, s:[{s:[s], s:[s], s:[s, s], s:[s]}]}", "apiVersion",
                             "rbac.authorization.k8s.io/v1", "kind", "Role", "metadata",
                             metadata(name, o->namespace_, NULL), "rules", "apiGroups", "",
                             "resources", "configmaps", "resourceNames", manifest, name, "verbs",
                             "patch");
    json_t *binding = json_pack("{s:s, s:s, s:o, s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:s}]}",
                                "apiVersion", "rbac.authorization.k8s.io/v1", "kind", "RoleBinding",
                                "metadata", metadata(name, o->namespace_, NULL), "roleRef",
                                "apiGroup", "rbac.authorization.k8s.io", "kind", "Role", "name",
                                name, "subjects", "kind", "ServiceAccount", "name", name,
                                "namespace", o->namespace_);
    json_t *configmaps[2];
    const char *names[2] = {manifest, name};
    for (int i = 0; i < 2; i++)
        configmaps[i] =
            json_pack("{s:s, s:s, s:o}", "apiVersion", "v1", "kind", "ConfigMap", "metadata",
                      metadata(names[i], o->namespace_,
                               json_pack("{s:s}", TETRIS_LABEL_MANAGED_BY, JOB_ACCOUNT)));
    return json_pack("[o, o, o, o, o, o]", account, role, binding, configmaps[0], configmaps[1],
                     job_object(o, obj));
}

int job_write_manifest(FILE *out, const struct job_options *o, tetris_error *err)
{
    char obj[80];
    int r = job_object_name(o->name, obj, sizeof(obj), err);
    if (r < 0)
        return r;
    if (strchr(o->model, '/') != NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "job MODEL '%s' must be a file name in the model directory %s",
                           o->model, o->model_dir);
    json_t *objects = job_objects(o, obj);
    if (objects == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "job manifest");
    fprintf(out,
            "# Profiles %s on a node: `tetris-profiler profile` in a Job, storing the\n"
            "# profile and the tensor manifest as ConfigMaps in %s.\n"
            "# Generated by tetris-profiler %s job.\n",
            o->name, o->namespace_, TETRIS_VERSION);
    r = yaml_write_json_documents(out, objects, err);
    json_decref(objects);
    return r < 0 ? tetris_wrap(err, "job manifest") : 0;
}

/* Merges labels and data into the existing ConfigMap (the Job's Role may
 * only do that: see job_objects), or creates it when there is none. */
static int put_configmap(kube_client *kc, const char *ns, const char *name, const char *label,
                         const char *model, const char *key, const char *value,
                         tetris_error *err)
{
    char path[512];
    json_t *cm = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}}, s:{s:s}}", "apiVersion", "v1",
                           "kind", "ConfigMap", "metadata", "name", name, "namespace", ns, "labels",
                           label, model, TETRIS_LABEL_MANAGED_BY, JOB_ACCOUNT, "data", key, value);
    if (cm == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps/%s", ns, name);
    json_t *patch = json_pack("{s:O, s:O}", "metadata", json_object_get(cm, "metadata"), "data",
                              json_object_get(cm, "data"));
    int r = patch != NULL ? kube_patch(kc, path, KUBE_PATCH_MERGE, patch, NULL, err)
                          : tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    json_decref(patch);
    if (r == -TETRIS_E_NOTFOUND) {
        tetris_error_clear(err);
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps", ns);
        r = kube_create(kc, path, cm, NULL, err);
    }
    json_decref(cm);
    if (r == 0)
        log_info("event=configmap-stored namespace=%s name=%s %s=%s", ns, name, label, model);
    return r < 0 ? tetris_wrap(err, "ConfigMap %s/%s", ns, name) : 0;
}

int job_store_configmaps(const struct configmap_target *t, const char *model,
                         const char *manifest_json, const char *profile_yaml, tetris_error *err)
{
    kube_client *kc = NULL;
    char obj[80], name[128];
    int r = job_object_name(model, obj, sizeof(obj), err);
    if (r < 0)
        return r;
    if (t->kubeconfig != NULL)
        r = kube_client_from_kubeconfig(t->kubeconfig, &kc, err);
    else
        r = kube_client_in_cluster(t->sa_dir, t->server, &kc, err);
    if (r < 0)
        return tetris_wrap(err, "Kubernetes client");
    const char *ns = t->namespace_ != NULL ? t->namespace_ : kube_client_namespace(kc);
    snprintf(name, sizeof(name), TETRIS_MANIFEST_CONFIGMAP_PREFIX "%s", obj);
    r = put_configmap(kc, ns, name, TETRIS_LABEL_MODEL, model, TETRIS_MANIFEST_CONFIGMAP_KEY,
                      manifest_json, err);
    if (r == 0) {
        snprintf(name, sizeof(name), TETRIS_PROFILE_CONFIGMAP_PREFIX "%s", obj);
        r = put_configmap(kc, ns, name, TETRIS_LABEL_PROFILE, model, TETRIS_PROFILE_CONFIGMAP_KEY,
                          profile_yaml, err);
    }
    kube_client_free(kc);
    return r;
}
