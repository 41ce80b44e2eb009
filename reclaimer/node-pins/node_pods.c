/* node_pods.c - pods on a node -> their namespaces' tenants and their
 * models -> the tensor digests to pin in each tenant's store (a manifest is
 * read by model/manifest.h's identities-only decoder). Why the tenant is
 * the namespace's and the manifest the tenant's: node_pods.h. */
#include "reclaimer/node-pins/node_pods.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "model/manifest.h"
#include "protocol/names.h"
#include "tensorstore/store.h"

/* The tenants of the namespaces met in one listing, each read once. */
typedef struct ns_tenant {
    char *ns;
    bool gone;                          /* deleted, or its tenant invalid */
    char tenant[NODE_PODS_TENANT_SIZE]; /* "": the shared store */
} ns_tenant;

typedef struct ns_cache {
    size_t n;
    ns_tenant *items;
} ns_cache;

static void ns_cache_release(ns_cache *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->items[i].ns);
    free(c->items);
}

static const char *label_of(json_t *obj, const char *key)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

static bool pod_is_live(json_t *pod)
{
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    return phase == NULL || (strcmp(phase, "Succeeded") != 0 && strcmp(phase, "Failed") != 0);
}

/* Reads namespace ns's tenant label into *e. Gone or an invalid tenant
 * marks it gone (its pods pin nothing, never in the shared store). */
static int read_namespace(kube_client *kc, const char *ns, ns_tenant *e, tetris_error *err)
{
    char path[512];
    int n = snprintf(path, sizeof path, "/api/v1/namespaces/%s", ns);
    if (n < 0 || (size_t)n >= sizeof path)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "namespace name too long");
    json_t *obj = NULL;
    tetris_error e_get = {0};
    int r = kube_get(kc, path, &obj, &e_get);
    if (r == -TETRIS_E_NOTFOUND) {
        e->gone = true;
        log_warn("event=namespace-gone namespace=%s action=skip-its-pods", ns);
        return 0;
    }
    if (r < 0) {
        *err = e_get;
        return tetris_wrap(err, "namespace %s", ns);
    }
    const char *tenant = label_of(obj, TETRIS_LABEL_TENANT);
    tetris_error e_name = {0};
    if (tenant != NULL && store_tenant_check(tenant, &e_name) < 0) {
        e->gone = true;
        log_warn("event=namespace-tenant-invalid namespace=%s msg=%s action=skip-its-pods", ns,
                 LOG_Q(e_name.msg));
    } else if (tenant != NULL) {
        snprintf(e->tenant, sizeof e->tenant, "%s", tenant);
    }
    json_decref(obj);
    return 0;
}

/* The cached entry of ns, read from the apiserver the first time. */
static int namespace_tenant(kube_client *kc, ns_cache *c, const char *ns, const ns_tenant **out,
                            tetris_error *err)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->items[i].ns, ns) == 0) {
            *out = &c->items[i];
            return 0;
        }
    ns_tenant *items = realloc(c->items, (c->n + 1) * sizeof *items);
    if (items == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "namespaces");
    c->items = items;
    ns_tenant *e = &c->items[c->n];
    *e = (ns_tenant){.ns = strdup(ns)};
    if (e->ns == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "namespaces");
    int r = read_namespace(kc, ns, e, err);
    if (r < 0) {
        free(e->ns);
        return r;
    }
    c->n++;
    *out = e;
    return 0;
}

static bool has_model(const node_models *m, const char *tenant, const char *model)
{
    for (size_t i = 0; i < m->n_models; i++)
        if (strcmp(m->models[i].name, model) == 0 && strcmp(m->models[i].tenant, tenant) == 0)
            return true;
    return false;
}

static int add_model(node_models *m, const char *tenant, const char *model, tetris_error *err)
{
    node_model *models = realloc(m->models, (m->n_models + 1) * sizeof *models);
    if (models == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "node models");
    m->models = models;
    node_model *nm = &m->models[m->n_models];
    snprintf(nm->tenant, sizeof nm->tenant, "%s", tenant);
    if ((nm->name = strdup(model)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "node models");
    m->n_models++;
    return 0;
}

/* Appends the digests of one manifest for tenant's store; FORMAT errors
 * leave m unchanged. */
static int add_manifest_digests(node_models *m, const char *tenant, const char *model,
                                const char *text, tetris_error *err)
{
    char what[300];
    snprintf(what, sizeof what, "manifest of %s", model);
    manifest_digests md;
    int r = manifest_read_digests(text, strlen(text), what, false, &md, err);
    if (r < 0)
        return r;
    node_pin *p = realloc(m->pins, (m->n_pins + md.n + 1) * sizeof *p);
    if (p == NULL) {
        manifest_digests_release(&md);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "node models");
    }
    m->pins = p;
    for (size_t i = 0; i < md.n; i++) {
        node_pin *pin = &m->pins[m->n_pins++];
        snprintf(pin->tenant, sizeof pin->tenant, "%s", tenant);
        pin->digest = md.digests[i];
    }
    manifest_digests_release(&md);
    return 0;
}

/* Whether ConfigMap cm may give tenant's store its digests: in the first
 * pass only one labelled for tenant, in the second only an unlabelled one. */
static bool manifest_is_for(json_t *cm, const char *tenant, bool own_pass)
{
    const char *owner = label_of(cm, TETRIS_LABEL_TENANT);
    if (own_pass)
        return tenant[0] != '\0' && owner != NULL && strcmp(owner, tenant) == 0;
    return owner == NULL;
}

/* The model's manifest for tenant from its ConfigMaps; the first valid one
 * in the order of manifest_is_for's passes wins. */
static int load_model(kube_client *kc, node_models *m, const char *tenant, const char *model,
                      const char *ns, tetris_error *err)
{
    char path[512], selector[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps", ns);
    snprintf(selector, sizeof selector, "%s=%s", TETRIS_LABEL_MODEL, model);
    kube_list_opts opts = {.label_selector = selector};
    json_t *items = NULL;
    int r = kube_list(kc, path, &opts, &items, NULL, err);
    if (r < 0)
        return r;
    bool found = false;
    for (int pass = 0; pass < 2 && !found; pass++) {
        size_t i;
        json_t *cm;
        json_array_foreach (items, i, cm) {
            if (!manifest_is_for(cm, tenant, pass == 0))
                continue;
            const char *text = json_string_value(
                json_object_get(json_object_get(cm, "data"), TETRIS_MANIFEST_CONFIGMAP_KEY));
            tetris_error e = {0};
            if (text != NULL && add_manifest_digests(m, tenant, model, text, &e) == 0) {
                found = true;
                break;
            }
            if (e.code == TETRIS_E_NOMEM) {
                json_decref(items);
                *err = e;
                return -TETRIS_E_NOMEM;
            }
            if (text != NULL) {
                log_warn("event=manifest-invalid model=%s msg=%s", model, LOG_Q(e.msg));
            }
        }
    }
    json_decref(items);
    if (!found) {
        m->n_missing++;
        log_warn("event=manifest-missing model=%s tenant=%s namespace=%s", model,
                 tenant[0] != '\0' ? tenant : "(shared)", ns);
    }
    return 0;
}

static int cmp_pin(const void *a, const void *b)
{
    const node_pin *x = a, *y = b;
    int c = strcmp(x->tenant, y->tenant);
    return c != 0 ? c : memcmp(&x->digest, &y->digest, sizeof x->digest);
}

static void sort_unique(node_models *m)
{
    if (m->n_pins == 0)
        return;
    qsort(m->pins, m->n_pins, sizeof *m->pins, cmp_pin);
    size_t out = 1;
    for (size_t i = 1; i < m->n_pins; i++)
        if (cmp_pin(&m->pins[i], &m->pins[out - 1]) != 0)
            m->pins[out++] = m->pins[i];
    m->n_pins = out;
}

/* One pod's model, pinned for its namespace's tenant. */
static int add_pod(kube_client *kc, node_models *m, ns_cache *namespaces, json_t *pod,
                   const char *manifest_ns, tetris_error *err)
{
    const char *model = label_of(pod, TETRIS_LABEL_MODEL);
    const char *ns = json_string_value(
        json_object_get(json_object_get(pod, "metadata"), "namespace"));
    if (model == NULL || model[0] == '\0' || !pod_is_live(pod))
        return 0;
    if (ns == NULL || ns[0] == '\0') {
        m->n_skipped++;
        return 0;
    }
    const ns_tenant *t = NULL;
    int r = namespace_tenant(kc, namespaces, ns, &t, err);
    if (r < 0)
        return r;
    if (t->gone) {
        m->n_skipped++;
        return 0;
    }
    if (has_model(m, t->tenant, model))
        return 0;
    r = add_model(m, t->tenant, model, err);
    return r < 0 ? r : load_model(kc, m, t->tenant, model, manifest_ns, err);
}

int node_pods_models(kube_client *kc, const char *node, const char *manifest_ns,
                     node_models **out, tetris_error *err)
{
    char field[512];
    int n = snprintf(field, sizeof field, "spec.nodeName=%s", node);
    if (n < 0 || (size_t)n >= sizeof field)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "node name too long");
    kube_list_opts opts = {.label_selector = TETRIS_LABEL_MODEL, .field_selector = field};
    json_t *pods = NULL;
    int r = kube_list(kc, "/api/v1/pods", &opts, &pods, NULL, err);
    if (r < 0)
        return tetris_wrap(err, "pods on node %s", node);
    node_models *m = calloc(1, sizeof *m);
    if (m == NULL) {
        json_decref(pods);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "node models");
    }
    ns_cache namespaces = {0};
    size_t i;
    json_t *pod;
    json_array_foreach(pods, i, pod) {
        r = add_pod(kc, m, &namespaces, pod, manifest_ns, err);
        if (r < 0)
            break;
    }
    ns_cache_release(&namespaces);
    json_decref(pods);
    if (r < 0) {
        node_models_free(m);
        return r;
    }
    sort_unique(m);
    *out = m;
    return 0;
}

void node_models_free(node_models *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_models; i++)
        free(m->models[i].name);
    free(m->models);
    free(m->pins);
    free(m);
}
