/* tetris-webhook.c - options, the facts about a pod only the
 * API knows (its namespace's tenant, its model's manifest), POST /mutate
 * over TLS, and keeping the MutatingWebhookConfiguration's caBundle equal
 * to the CA this process made (certs.c says why it makes its own). */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "common/daemon_run.h"
#include "common/httpserver.h"
#include "common/kube.h"
#include "common/log.h"
#include "common/options.h"
#include "model/manifest.h"
#include "model/model.h"
#include "protocol/names.h"
#include "scheduler-ext/webhook/webhook.h"
#include "tensorstore/store.h"

#define MAX_NAMESPACES 64
/* As many as a node daemon serves (reclaimer/config.h). */
#define MAX_TENANTS 256
#define MAX_CERT_NAMES 16
/* How often the caBundle is checked: until it is first set (the chart may
 * create the configuration after this pod starts), then afterwards (a
 * `helm upgrade` puts the template's empty caBundle back). */
#define CA_RETRY_S 5
#define CA_RECHECK_S 60

typedef struct options {
    const char *listen;
    const char *kubeconfig;
    bool no_api;
    struct webhook_config cfg;
    const char *namespaces[MAX_NAMESPACES];
    const char *tenants[MAX_TENANTS];
    const char *manifest_ns;
    bool csi;
    const char *csi_driver;
    const char *service, *service_ns;
    const char *cert_names[MAX_CERT_NAMES];
    size_t n_cert_names;
    const char *ca_out;
    const char *configuration;
    int cert_days;
    int64_t api_timeout_ms;
} options;

static const char about[] =
    "MutatingAdmissionWebhook for pods: gives the pods of OpenFaaS functions "
    "(label\n" TETRIS_LABEL_FUNCTION ") and pods annotated " TETRIS_LABEL_MODEL
    " the node's tensor store (read-only\n"
    "hostPath), their model's manifest, the " TETRIS_LABEL_MODEL
    " label and the tetris scheduler; or, with\n"
    "--volume csi, their model view as an inline CSI volume, in a pod made to pass\n"
    "Pod Security \"restricted\".\n"
    "Serves POST " TETRIS_WEBHOOK_PATH
    " (admission.k8s.io/v1 and v1beta1) and GET /healthz over TLS\n"
    "with a CA and certificate it makes at start, and writes that CA into its\n"
    "MutatingWebhookConfiguration's caBundle.\n";

static const char epilogue[] =
    "A pod's tenant is its namespace's label " TETRIS_LABEL_TENANT
    " (set by the cluster's admin),\n"
    "never the pod's own: a pod whose label or annotation " TETRIS_LABEL_TENANT " says another\n"
    "tenant is denied, and so is a pod whose namespace names a tenant not given\n"
    "with --tenant. A pod whose namespace cannot be read is let through unchanged.\n"
    "Logs key=value lines on stderr.\n"
    "\n"
    "Exit status: 0 stopped by SIGTERM/SIGINT, 1 runtime failure (cannot listen,\n"
    "no cluster credentials, cannot write --ca-out), 2 usage error.\n";

/* --namespace, --tenant, --cert-name: one more, up to their arrays' size
 * (spec->dest is the options). */
static int parse_namespace(const struct opt_spec *spec, const char *label, const char *value,
                           tetris_error *err)
{
    options *o = spec->dest;
    if (o->cfg.n_namespaces == MAX_NAMESPACES)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: at most %d", label, MAX_NAMESPACES);
    o->namespaces[o->cfg.n_namespaces++] = value;
    return 0;
}

static int parse_tenant(const struct opt_spec *spec, const char *label, const char *value,
                        tetris_error *err)
{
    options *o = spec->dest;
    int r;
    if (o->cfg.n_tenants == MAX_TENANTS)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: at most %d", label, MAX_TENANTS);
    if ((r = store_tenant_check(value, err)) < 0)
        return r;
    o->tenants[o->cfg.n_tenants++] = value;
    return 0;
}

/* --volume: how a pod gets its model (see webhook.h). */
static int parse_volume(const struct opt_spec *spec, const char *label, const char *value,
                        tetris_error *err)
{
    options *o = spec->dest;
    if (strcmp(value, "host-path") == 0)
        o->csi = false;
    else if (strcmp(value, "csi") == 0)
        o->csi = true;
    else
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: '%s' is neither host-path nor csi", label,
                           value);
    return 0;
}

static int parse_cert_name(const struct opt_spec *spec, const char *label, const char *value,
                           tetris_error *err)
{
    options *o = spec->dest;
    /* make_certs adds the Service's own names. */
    if (o->n_cert_names == MAX_CERT_NAMES - 4)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: at most %d", label, MAX_CERT_NAMES - 4);
    o->cert_names[o->n_cert_names++] = value;
    return 0;
}

/* 0 to run, -1 after a usage error. */
static int parse_options(int argc, char **argv, options *o)
{
    const struct opt_spec specs[] = {
        {.name = "listen",
         .type = OPT_TYPE_STRING,
         .dest = &o->listen,
         .meta = "ADDR:PORT",
         .help = "HTTPS address (default " TETRIS_WEBHOOK_LISTEN ")"},
        {.name = "store",
         .type = OPT_TYPE_STRING,
         .dest = &o->cfg.store_dir,
         .meta = "DIR",
         .help = "the nodes' store, TETRIS_STORE (default " TETRIS_STORE_DIR ")"},
        {.name = "store-subdir",
         .type = OPT_TYPE_STRING,
         .dest = &o->cfg.store_subdir,
         .meta = "SUB",
         .help = "what a shared pod mounts: DIR/SUB (default " TETRIS_STORE_PUBLIC_SUBDIR
                 "; empty: all of DIR); a tenant's pod mounts DIR/" TETRIS_TENANTS_SUBDIR
                 "/T/" TETRIS_STORE_PUBLIC_SUBDIR " only"},
        {.name = "scheduler",
         .type = OPT_TYPE_STRING,
         .dest = &o->cfg.scheduler_name,
         .meta = "NAME",
         .help = "for pods that asked for the default scheduler (default " TETRIS_SCHEDULER_NAME
                 "; empty: leave it)"},
        {.name = "volume",
         .type = OPT_TYPE_CUSTOM,
         .dest = o,
         .parse = parse_volume,
         .meta = "WAY",
         .help = "host-path (default): the store as a read-only hostPath volume; csi: the "
                 "model view as an inline CSI volume and the pod made to pass Pod Security "
                 "\"restricted\""},
        {.name = "csi-driver",
         .type = OPT_TYPE_STRING,
         .dest = &o->csi_driver,
         .meta = "NAME",
         .help = "the CSI driver of --volume csi (default " TETRIS_CSI_DRIVER ")"},
        {.name = "namespace",
         .type = OPT_TYPE_CUSTOM,
         .dest = o,
         .parse = parse_namespace,
         .meta = "NS",
         .help = "serve pods in NS (repeatable; default: every namespace the configuration "
                 "sends)"},
        {.name = "tenant",
         .type = OPT_TYPE_CUSTOM,
         .dest = o,
         .parse = parse_tenant,
         .meta = "T",
         .help = "a tenant the node daemons serve (repeatable): a namespace "
                 "labelled " TETRIS_LABEL_TENANT
                 "=T gets T's store; one naming another tenant is refused"},
        {.name = "manifest-namespace",
         .type = OPT_TYPE_STRING,
         .dest = &o->manifest_ns,
         .meta = "NS",
         .help = "where `tetris-profiler job` stores manifests (default: the webhook's own "
                 "namespace)"},
        {.name = "service",
         .type = OPT_TYPE_STRING,
         .dest = &o->service,
         .meta = "NAME",
         .help = "the webhook's Service (default " TETRIS_WEBHOOK_SERVICE ")"},
        {.name = "service-namespace",
         .type = OPT_TYPE_STRING,
         .dest = &o->service_ns,
         .meta = "NS",
         .help = "its namespace (default: the webhook's own)"},
        {.name = "cert-name",
         .type = OPT_TYPE_CUSTOM,
         .dest = o,
         .parse = parse_cert_name,
         .meta = "NAME",
         .help = "one more name (or IP) for the certificate (repeatable)"},
        {.name = "cert-days",
         .type = OPT_TYPE_INT,
         .dest = &o->cert_days,
         .min = 1,
         .max = 3650,
         .meta = "N",
         .help = "certificate lifetime (default 365)"},
        {.name = "ca-out",
         .type = OPT_TYPE_STRING,
         .dest = &o->ca_out,
         .meta = "FILE",
         .help = "also write the CA certificate (PEM) to FILE"},
        {.name = "webhook-configuration",
         .type = OPT_TYPE_STRING,
         .dest = &o->configuration,
         .meta = "N",
         .help = "MutatingWebhookConfiguration whose caBundle to set "
                 "(default " TETRIS_WEBHOOK_CONFIGURATION "; empty: none)"},
        {.name = "kubeconfig",
         .type = OPT_TYPE_STRING,
         .dest = &o->kubeconfig,
         .meta = "FILE",
         .help = "kubeconfig (default: in-cluster service account)"},
        {.name = "api-timeout-ms",
         .type = OPT_TYPE_I64,
         .dest = &o->api_timeout_ms,
         .min = 100,
         .max = 30000,
         .meta = "MS",
         .help = "per API request during a review (default 2000)"},
        {.name = "no-api",
         .type = OPT_TYPE_FLAG,
         .dest = &o->no_api,
         .help = "no apiserver: no namespace tenants, no manifests, no caBundle (tests, or a "
                 "static configuration)"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-webhook",
        .about = about,
        .options = specs,
        .epilogue = epilogue,
    };
    int first;

    *o = (options){
        .listen = TETRIS_WEBHOOK_LISTEN,
        .cfg = {.store_dir = TETRIS_STORE_DIR,
                .store_subdir = TETRIS_STORE_PUBLIC_SUBDIR,
                .scheduler_name = TETRIS_SCHEDULER_NAME},
        .csi_driver = TETRIS_CSI_DRIVER,
        .service = TETRIS_WEBHOOK_SERVICE,
        .configuration = TETRIS_WEBHOOK_CONFIGURATION,
        .cert_days = 365,
        .api_timeout_ms = 2000,
    };
    o->cfg.namespaces = o->namespaces;
    o->cfg.tenants = o->tenants;
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return -1;
    if (first < argc)
        return opt_usage_error(&prog, "unexpected argument '%s'", argv[first]);
    if (o->no_api && o->kubeconfig != NULL)
        return opt_usage_error(&prog, "--no-api and --kubeconfig exclude each other");
    if (o->csi && !names_label_value_valid(o->csi_driver))
        return opt_usage_error(&prog, "--csi-driver must be a driver name (a DNS-like name of "
                                      "at most 63 characters)");
    o->cfg.csi_driver = o->csi ? o->csi_driver : NULL;
    if (o->cfg.store_dir[0] != '/' || strstr(o->cfg.store_subdir, "..") != NULL ||
        o->cfg.store_subdir[0] == '/')
        return opt_usage_error(&prog, "--store must be absolute and --store-subdir a relative "
                                      "path without '..'");
    return 0;
}

/* ---- what the API knows about a pod ---- */

typedef struct program {
    options *o;
    kube_client *kc; /* NULL with --no-api */
    const char *own_ns;
    http_server *http;
    char *ca_bundle; /* base64 of the CA's PEM */
    pthread_t ca_thread;
    bool ca_thread_running;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
} program;

typedef struct pod_facts {
    webhook_pod_facts f;
    char *tenant, *configmap;
    model *manifest;
} pod_facts;

static void pod_facts_release(pod_facts *pf)
{
    free(pf->tenant);
    free(pf->configmap);
    model_free(pf->manifest);
}

/* The namespace's tenant label into *tenant (NULL: none, or empty). A
 * namespace we cannot read fails: a tenant's pod must never get the
 * shared store. */
static int namespace_tenant(program *p, const char *ns, char **tenant, tetris_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s", ns);
    json_t *obj = NULL;
    int r = kube_get(p->kc, path, &obj, err);
    if (r < 0)
        return tetris_wrap(err, "namespace %s", ns);
    const char *t = json_string_value(
        json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"),
                        TETRIS_LABEL_TENANT));
    if (t != NULL && t[0] == '\0')
        t = NULL;
    *tenant = t != NULL ? strdup(t) : NULL;
    json_decref(obj);
    return t != NULL && *tenant == NULL ? tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory") : 0;
}

/* The model's manifest ConfigMap in the manifest namespace: *cm (NULL:
 * none) and its manifest text (borrowed from *cm). */
static int find_manifest(program *p, const char *model_name, json_t **cm, const char **text,
                         tetris_error *err)
{
    char path[512], selector[128];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps", p->o->manifest_ns);
    snprintf(selector, sizeof selector, TETRIS_LABEL_MODEL "=%s", model_name);
    kube_list_opts lo = {.label_selector = selector};
    json_t *items = NULL;
    int r = kube_list(p->kc, path, &lo, &items, NULL, err);
    if (r < 0)
        return tetris_wrap(err, "manifest ConfigMaps in %s", p->o->manifest_ns);
    *cm = NULL;
    size_t i;
    json_t *item;
    json_array_foreach (items, i, item) {
        const char *t = json_string_value(
            json_object_get(json_object_get(item, "data"), TETRIS_MANIFEST_CONFIGMAP_KEY));
        if (t != NULL) {
            *cm = json_incref(item);
            *text = t;
            break;
        }
    }
    json_decref(items);
    return 0;
}

/* The ownerReference a manifest copy gets from a pod's controller. No
 * blockOwnerDeletion: deleting a function never waits for its copy. */
static json_t *owner_reference(const webhook_owner *o)
{
    return json_pack("{s:s, s:s, s:s, s:s}", "apiVersion", o->api_version, "kind", o->kind, "name",
                     o->name, "uid", o->uid);
}

static bool owned_by(const json_t *obj, const char *uid)
{
    size_t i;
    const json_t *ref;
    json_array_foreach (json_object_get(json_object_get(obj, "metadata"), "ownerReferences"), i,
                        ref) {
        const char *u = json_string_value(json_object_get(ref, "uid"));
        if (u != NULL && strcmp(u, uid) == 0)
            return true;
    }
    return false;
}

/* One read and at most one write of the copy; -TETRIS_E_CONFLICT when it
 * changed in between. */
static int copy_manifest_once(program *p, const char *ns, const char *name, const char *model_name,
                              const char *text, const webhook_owner *owner, bool dry_run,
                              tetris_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps/%s", ns, name);
    const char *owner_kind = owner->uid != NULL ? owner->kind : "-";
    const char *owner_name = owner->uid != NULL ? owner->name : "-";
    json_t *have = NULL;
    int r = kube_get(p->kc, path, &have, err);
    if (r == 0) {
        const char *t = json_string_value(
            json_object_get(json_object_get(have, "data"), TETRIS_MANIFEST_CONFIGMAP_KEY));
        bool current = t != NULL && strcmp(t, text) == 0;
        /* A ConfigMap of that name we did not make is never given owners:
         * the garbage collector would delete someone else's object. */
        const char *by = json_string_value(
            json_object_get(json_object_get(json_object_get(have, "metadata"), "labels"),
                            TETRIS_LABEL_MANAGED_BY));
        bool ours = by != NULL && strcmp(by, TETRIS_WEBHOOK_MANAGED_BY) == 0;
        bool owned = owner->uid == NULL || !ours || owned_by(have, owner->uid);
        json_decref(have);
        if ((current && owned) || dry_run)
            return 0;
        json_t *patch = json_object();
        if (!current)
            json_object_set_new(patch, "data",
                                json_pack("{s:s}", TETRIS_MANIFEST_CONFIGMAP_KEY, text));
        if (!owned)
            json_object_set_new(patch, "metadata",
                                json_pack("{s:[o]}", "ownerReferences", owner_reference(owner)));
        r = kube_patch(p->kc, path, KUBE_PATCH_STRATEGIC, patch, NULL, err);
        json_decref(patch);
        if (r == -TETRIS_E_NOTFOUND)
            return -TETRIS_E_CONFLICT;
        if (r < 0)
            return tetris_wrap(err, "update ConfigMap %s/%s", ns, name);
        log_info("event=manifest-copy action=updated namespace=%s configmap=%s owner=%s/%s "
                 "data_changed=%d",
                 ns, name, owner_kind, owner_name, !current);
        return 0;
    }
    if (r != -TETRIS_E_NOTFOUND)
        return tetris_wrap(err, "ConfigMap %s/%s", ns, name);
    if (dry_run)
        return 0;
    tetris_error_clear(err);
    json_t *cm = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}}, s:{s:s}}", "apiVersion", "v1",
                           "kind", "ConfigMap", "metadata", "name", name, "namespace", ns, "labels",
                           TETRIS_LABEL_MODEL, model_name, TETRIS_LABEL_MANAGED_BY,
                           TETRIS_WEBHOOK_MANAGED_BY, "data", TETRIS_MANIFEST_CONFIGMAP_KEY, text);
    if (owner->uid != NULL)
        json_object_set_new(json_object_get(cm, "metadata"), "ownerReferences",
                            json_pack("[o]", owner_reference(owner)));
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps", ns);
    r = kube_create(p->kc, path, cm, NULL, err);
    json_decref(cm);
    if (r == -TETRIS_E_CONFLICT)
        return -TETRIS_E_CONFLICT;
    if (r < 0)
        return tetris_wrap(err, "create ConfigMap %s/%s", ns, name);
    log_info("event=manifest-copy action=created namespace=%s configmap=%s owner=%s/%s", ns, name,
             owner_kind, owner_name);
    return 0;
}

/* A ConfigMap volume must be in the pod's namespace: the manifest is
 * copied there (labelled as ours) unless that copy is already current.
 * The copy's owners are the controllers (ReplicaSets) of the pods that
 * use it, each added by the first of its pods: the garbage collector
 * deletes the copy when the last of them is gone, and keeps it while
 * another function of the same model still runs. A strategic merge patch
 * merges ownerReferences by uid, so two reviews adding owners at once
 * both count. A pod without a controller adds no owner (see
 * docs/programs/tetris-webhook.md). */
static int copy_manifest(program *p, const char *ns, const char *name, const char *model_name,
                         const char *text, const webhook_owner *owner, bool dry_run,
                         tetris_error *err)
{
    /* A copy made by a concurrent review (create conflicts), or collected
     * between our read and our patch (patch finds none), is read again. */
    for (int attempt = 1;; attempt++) {
        int r = copy_manifest_once(p, ns, name, model_name, text, owner, dry_run, err);
        if (r != -TETRIS_E_CONFLICT)
            return r;
        if (attempt == 3)
            return tetris_fail(err, TETRIS_E_CONFLICT, 0,
                               "ConfigMap %s/%s changed under every one of %d attempts", ns, name,
                               attempt);
        tetris_error_clear(err);
    }
}

/* The manifest, when the model has one: its ConfigMap in the pod's
 * namespace and the model file it describes. Without one the pod still
 * gets the store (the agent then hashes the model file first). */
static void resolve_manifest(program *p, const webhook_review *rv, const webhook_selection *sel,
                             pod_facts *pf)
{
    tetris_error err = {0};
    json_t *cm = NULL;
    const char *text = NULL;
    const char *model_name = pf->f.model;
    int r = find_manifest(p, model_name, &cm, &text, &err);
    if (r == 0 && cm == NULL) {
        log_info("event=no-manifest model=%s namespace=%s", model_name, p->o->manifest_ns);
        return;
    }
    if (r == 0)
        r = manifest_parse(text, strlen(text), &pf->manifest, &err);
    const char *name = json_string_value(json_object_get(json_object_get(cm, "metadata"), "name"));
    if (r == 0 && name == NULL)
        r = tetris_fail(&err, TETRIS_E_FORMAT, 0, "manifest ConfigMap without a name");
    if (r == 0 && strcmp(rv->namespace_, p->o->manifest_ns) != 0)
        r = copy_manifest(p, rv->namespace_, name, model_name, text, &sel->controller, rv->dry_run,
                          &err);
    if (r == 0 && (pf->configmap = strdup(name)) == NULL)
        r = tetris_fail(&err, TETRIS_E_NOMEM, 0, "out of memory");
    json_decref(cm);
    if (r < 0) {
        log_warn("event=manifest-skipped model=%s msg=%s", model_name, LOG_Q(err.msg));
        model_free(pf->manifest);
        pf->manifest = NULL;
        return;
    }
    pf->f.manifest_configmap = pf->configmap;
    pf->f.model_path = pf->manifest->path;
}

/* -TETRIS_E_DENIED: the pod is refused (webhook_tenant_decide); any other
 * failure lets it through unchanged. Without an apiserver no namespace
 * names a tenant. */
static int resolve_facts(program *p, const webhook_review *rv, const webhook_selection *sel,
                         pod_facts *pf, tetris_error *err)
{
    pf->f.model = sel->model;
    pf->f.model_ref = sel->model_ref;
    pf->f.derived = sel->derived;
    pf->f.runtime = sel->runtime;
    if (p->kc != NULL) {
        int r = namespace_tenant(p, rv->namespace_, &pf->tenant, err);
        if (r < 0)
            return r;
    }
    int r = webhook_tenant_decide(&p->o->cfg, sel, pf->tenant, &pf->f.tenant, err);
    if (r < 0 || p->kc == NULL)
        return r;
    if (sel->model != NULL && !names_label_value_valid(sel->model))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "model name '%.64s' is not a label value",
                           sel->model);
    if (sel->model != NULL)
        resolve_manifest(p, rv, sel, pf);
    return 0;
}

/* ---- HTTP ---- */

/* Allowed with patch, or denied with deny_message when it is not NULL. */
static void answer(const webhook_review *rv, const json_t *patch, const char *deny_message,
                   http_response *resp)
{
    size_t len = 0;
    char *text = deny_message != NULL ? webhook_response_deny(rv, deny_message, &len)
                                      : webhook_response_encode(rv, patch, &len);
    if (text == NULL)
        http_response_error(resp, 500, "out of memory");
    else
        http_response_take_body(resp, 200, "application/json", text, len);
}

static const char *pod_name(const json_t *pod)
{
    const json_t *meta = json_object_get(pod, "metadata");
    const char *n = json_string_value(json_object_get(meta, "name"));
    if (n == NULL || n[0] == '\0')
        n = json_string_value(json_object_get(meta, "generateName"));
    return n != NULL ? n : "";
}

static void handle_mutate(void *ctx, const http_request *req, http_response *resp)
{
    program *p = ctx;
    char qn[300];
    tetris_error err = {0};
    webhook_review rv;
    if (webhook_review_parse(req->body, req->body_len, &rv, &err) < 0) {
        log_warn("event=bad-review msg=%s", LOG_Q(err.msg));
        http_response_error(resp, err.code == TETRIS_E_NOMEM ? 500 : 400, "%s", err.msg);
        return;
    }
    webhook_selection sel;
    webhook_select(&p->o->cfg, &rv, &sel);
    if (!sel.selected) {
        log_debug("event=not-selected uid=%s reason=%s", rv.uid, sel.reason);
        answer(&rv, NULL, NULL, resp);
        webhook_review_release(&rv);
        return;
    }
    pod_facts pf = {0};
    json_t *patch = NULL;
    int r = resolve_facts(p, &rv, &sel, &pf, &err);
    if (r == 0)
        r = webhook_patch_build(&p->o->cfg, &rv, &pf.f, &patch, &err);
    log_quote(pod_name(rv.pod), qn, sizeof qn);
    bool denied = r == -TETRIS_E_DENIED;
    if (denied)
        log_warn("event=denied namespace=%s pod=%s dry_run=%d msg=%s", rv.namespace_, qn,
                 rv.dry_run, LOG_Q(err.msg));
    else if (r < 0)
        log_warn("event=not-mutated namespace=%s pod=%s msg=%s", rv.namespace_, qn, LOG_Q(err.msg));
    else
        log_info("event=mutated namespace=%s pod=%s model=%s tenant=%s manifest=%s ops=%zu "
                 "dry_run=%d",
                 rv.namespace_, qn, pf.f.model ? pf.f.model : "-", pf.f.tenant ? pf.f.tenant : "-",
                 pf.f.manifest_configmap ? pf.f.manifest_configmap : "-", json_array_size(patch),
                 rv.dry_run);
    answer(&rv, patch, denied ? err.msg : NULL, resp);
    json_decref(patch);
    pod_facts_release(&pf);
    webhook_review_release(&rv);
}

static void handle_healthz(void *ctx, const http_request *req, http_response *resp)
{
    (void)ctx, (void)req;
    http_response_set_body(resp, 200, "text/plain", "ok\n", 3);
}

/* ---- the caBundle ---- */

/* Sets caBundle on every webhook of the configuration that lacks it;
 * *changed says whether anything was patched. */
static int sync_ca_bundle(program *p, bool *changed, tetris_error *err)
{
    char path[512];
    snprintf(path, sizeof path,
             "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/%s",
             p->o->configuration);
    json_t *conf = NULL;
    int r = kube_get(p->kc, path, &conf, err);
    if (r < 0)
        return r;
    json_t *patch = json_array();
    size_t i;
    json_t *wh;
    json_array_foreach (json_object_get(conf, "webhooks"), i, wh) {
        const char *name = json_string_value(json_object_get(wh, "name"));
        const char *have = json_string_value(
            json_object_get(json_object_get(wh, "clientConfig"), "caBundle"));
        if (name == NULL || (have != NULL && strcmp(have, p->ca_bundle) == 0))
            continue;
        char at[64], bundle[96];
        snprintf(at, sizeof at, "/webhooks/%zu/name", i);
        snprintf(bundle, sizeof bundle, "/webhooks/%zu/clientConfig/caBundle", i);
        /* test: the list may have been edited since we read it */
        json_array_append_new(patch, json_pack("{s:s, s:s, s:s}", "op", "test", "path", at, "value",
                                               name));
        json_array_append_new(patch, json_pack("{s:s, s:s, s:s}", "op", "add", "path", bundle,
                                               "value", p->ca_bundle));
    }
    json_decref(conf);
    *changed = json_array_size(patch) > 0;
    if (*changed)
        r = kube_patch(p->kc, path, KUBE_PATCH_JSON, patch, NULL, err);
    json_decref(patch);
    return r;
}

static void *ca_bundle_thread(void *arg)
{
    program *p = arg;
    bool logged_failure = false;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        pthread_mutex_unlock(&p->lock);
        tetris_error err = {0};
        bool changed = false;
        int r = sync_ca_bundle(p, &changed, &err);
        if (r < 0 && !logged_failure) {
            log_warn("event=ca-bundle-not-set configuration=%s retry_s=%d msg=%s",
                     p->o->configuration, CA_RETRY_S, LOG_Q(err.msg));
            logged_failure = true;
        } else if (r == 0 && changed) {
            log_info("event=ca-bundle-set configuration=%s", p->o->configuration);
            logged_failure = false;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += r < 0 ? CA_RETRY_S : CA_RECHECK_S;
        pthread_mutex_lock(&p->lock);
        while (!p->stop && pthread_cond_timedwait(&p->wake, &p->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ---- main ---- */

static int write_ca(const char *path, const char *pem, tetris_error *err)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "--ca-out %s", path);
    bool ok = fputs(pem, f) != EOF;
    int e = errno;
    if (fclose(f) != 0 || !ok)
        return tetris_fail(err, TETRIS_E_IO, ok ? errno : e, "write %s", path);
    return 0;
}

static int make_certs(program *p, webhook_certs *certs, tetris_error *err)
{
    const options *o = p->o;
    const char *ns = o->service_ns != NULL ? o->service_ns : p->own_ns;
    char dns[4][512];
    snprintf(dns[0], sizeof dns[0], "%s.%s.svc", o->service, ns);
    snprintf(dns[1], sizeof dns[1], "%s", o->service);
    snprintf(dns[2], sizeof dns[2], "%s.%s", o->service, ns);
    snprintf(dns[3], sizeof dns[3], "%s.%s.svc.cluster.local", o->service, ns);
    const char *names[MAX_CERT_NAMES];
    size_t n = 0;
    for (size_t i = 0; i < 4; i++)
        names[n++] = dns[i];
    for (size_t i = 0; i < o->n_cert_names; i++)
        names[n++] = o->cert_names[i];
    int r = webhook_certs_make(names, n, o->cert_days, certs, err);
    if (r == 0 && o->ca_out != NULL)
        r = write_ca(o->ca_out, certs->ca_pem, err);
    if (r < 0)
        return r;
    p->ca_bundle = webhook_base64(certs->ca_pem, strlen(certs->ca_pem));
    if (p->ca_bundle == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    log_info("event=certificates-made subject=%s names=%zu days=%d", dns[0], n, o->cert_days);
    return 0;
}

static int program_start(program *p, tetris_error *err)
{
    const options *o = p->o;
    p->own_ns = TETRIS_NAMESPACE;
    if (!o->no_api) {
        int r = kube_client_new(o->kubeconfig, &p->kc, err);
        if (r < 0)
            return r;
        /* A review waits for us: fail fast, the pod starts without the
         * store rather than not at all. */
        kube_client_set_timeouts(p->kc, o->api_timeout_ms / 2, o->api_timeout_ms);
        kube_client_set_retries(p->kc, 1, 0, 0);
        p->own_ns = kube_client_namespace(p->kc);
        log_info("event=cluster server=%s namespace=%s", kube_client_server(p->kc), p->own_ns);
    }
    if (p->o->manifest_ns == NULL)
        p->o->manifest_ns = p->own_ns;
    webhook_certs certs;
    int r = make_certs(p, &certs, err);
    if (r < 0)
        return r;
    struct http_server_options ho;
    http_server_options_init(&ho);
    ho.listen = o->listen;
    ho.max_body_bytes = WEBHOOK_MAX_REVIEW_BYTES;
    ho.threads = 2;
    ho.timeout_s = 10;
    ho.tls_cert_pem = certs.cert_pem;
    ho.tls_key_pem = certs.key_pem;
    r = http_server_new(&ho, &p->http, err);
    webhook_certs_release(&certs);
    if (r == 0)
        r = http_server_route(p->http, "POST", TETRIS_WEBHOOK_PATH, handle_mutate, p, err);
    if (r == 0)
        r = http_server_route(p->http, "GET", "/healthz", handle_healthz, p, err);
    if (r == 0)
        r = http_server_start(p->http, err);
    if (r < 0)
        return r;
    log_info("event=listening addr=%s port=%u volume=%s csi_driver=%s store=%s store_subdir=%s "
             "scheduler=%s namespaces=%zu tenants=%zu",
             o->listen, http_server_port(p->http), o->csi ? "csi" : "host-path",
             o->csi ? o->csi_driver : "-", o->cfg.store_dir,
             o->cfg.store_subdir[0] ? o->cfg.store_subdir : "-",
             o->cfg.scheduler_name[0] ? o->cfg.scheduler_name : "-", o->cfg.n_namespaces,
             o->cfg.n_tenants);
    if (p->kc != NULL && o->configuration[0] != '\0') {
        int e = pthread_create(&p->ca_thread, NULL, ca_bundle_thread, p);
        if (e != 0)
            return tetris_fail(err, TETRIS_E_IO, e, "caBundle thread");
        p->ca_thread_running = true;
    }
    return 0;
}

static void program_free(program *p)
{
    if (p->ca_thread_running) {
        pthread_mutex_lock(&p->lock);
        p->stop = true;
        pthread_cond_signal(&p->wake);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->ca_thread, NULL);
    }
    http_server_free(p->http);
    kube_client_free(p->kc);
    free(p->ca_bundle);
}

/* daemon_run's steps. */
static int run_start(void *ctx, tetris_error *err)
{
    return program_start(ctx, err);
}

static void run_stop(void *ctx)
{
    program_free(ctx);
}

int main(int argc, char **argv)
{
    log_init(argv[0]);
    options o;
    if (parse_options(argc, argv, &o) < 0)
        return 2;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    program p = {.o = &o, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};
    int rc = daemon_run(&(struct daemon_run){.ctx = &p, .start = run_start, .stop = run_stop});
    curl_global_cleanup();
    return rc;
}
