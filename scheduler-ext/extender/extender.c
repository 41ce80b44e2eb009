/* extender.c - filter and prioritize by tensor similarity, and the
 * extender's metrics. See extender.h for the protocol.
 *
 * A pod of a dedicated tenant (label tetris.io/tenant) can only use its
 * tenant's store on a node, so it is judged against that store's
 * inventory; other pods against the shared store's. */
#include "scheduler-ext/extender/extender.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "common/prom.h"
#include "protocol/names.h"
#include "scheduler-ext/extender/similarity.h"

/* Request latency histogram bounds, seconds. */
static const double latency_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                         0.05,   0.1,   0.25,   0.5,   1,    2.5};
#define N_BUCKETS (sizeof latency_buckets / sizeof latency_buckets[0])

enum { VERB_FILTER, VERB_PRIORITIZE, N_VERBS };
static const char *const verb_names[N_VERBS] = {"filter", "prioritize"};

typedef struct verb_stats {
    uint64_t ok, bad_request, other;
    uint64_t buckets[N_BUCKETS + 1]; /* per bucket, the last above every bound */
    double sum;
} verb_stats;

struct extender {
    manifest_cache *manifests;
    inventory_cache *inventories;
    const inventory_url_policy *request_urls; /* NULL: requests name no URL */
    pthread_mutex_t stats_lock;
    verb_stats verbs[N_VERBS];
    uint64_t nodes_filtered_out;
    uint64_t decisions_unknown_model;
    uint64_t node_decisions_no_inventory;
};

extender *extender_new(manifest_cache *manifests, inventory_cache *inventories,
                       const inventory_url_policy *request_urls)
{
    extender *x = calloc(1, sizeof *x);
    if (x == NULL)
        return NULL;
    x->manifests = manifests;
    x->inventories = inventories;
    x->request_urls = request_urls;
    pthread_mutex_init(&x->stats_lock, NULL);
    return x;
}

void extender_free(extender *x)
{
    if (x == NULL)
        return;
    pthread_mutex_destroy(&x->stats_lock);
    free(x);
}

/* ---- request parsing ---- */

/* obj[key], matching the key case-insensitively as Go's decoder does. */
static json_t *get_ci(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (v != NULL)
        return v;
    const char *k;
    json_object_foreach(obj, k, v) {
        if (strcasecmp(k, key) == 0)
            return v;
    }
    return NULL;
}

typedef struct ext_args {
    json_t *pod;
    json_t *items;        /* Node objects when the scheduler sent Nodes */
    size_t n;
    const char **names;   /* n node names (borrowed from the request) */
    bool by_name;         /* the scheduler sent NodeNames */
    const char *model;    /* NULL: the pod names no model */
    const char *tenant;   /* NULL: the shared store */
    bool bad_tenant;      /* a tenant label no daemon could serve */
    const char *pod_name;
} ext_args;

static const char *pod_model(json_t *pod)
{
    json_t *meta = json_object_get(pod, "metadata");
    const char *m = json_string_value(
        json_object_get(json_object_get(meta, "labels"), TETRIS_LABEL_MODEL));
    if (m == NULL)
        m = json_string_value(
            json_object_get(json_object_get(meta, "annotations"), TETRIS_LABEL_MODEL));
    return m != NULL && m[0] != '\0' ? m : NULL;
}

static const char *pod_tenant(json_t *pod)
{
    json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
    const char *t = json_string_value(json_object_get(labels, TETRIS_LABEL_TENANT));
    return t != NULL && t[0] != '\0' ? t : NULL;
}

static int parse_args(json_t *args, ext_args *a, tetris_error *err)
{
    memset(a, 0, sizeof *a);
    if (!json_is_object(args))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "ExtenderArgs must be a JSON object");
    a->pod = get_ci(args, "Pod");
    if (!json_is_object(a->pod))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "ExtenderArgs.Pod must be a Pod object");
    json_t *nodes = get_ci(args, "Nodes");
    json_t *names = get_ci(args, "NodeNames");
    if (nodes != NULL && !json_is_null(nodes)) {
        a->items = get_ci(nodes, "items");
        if (!json_is_object(nodes) || !json_is_array(a->items))
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "ExtenderArgs.Nodes must be a NodeList with items");
        a->n = json_array_size(a->items);
    } else if (names != NULL && !json_is_null(names)) {
        if (!json_is_array(names))
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "ExtenderArgs.NodeNames must be an array of strings");
        a->by_name = true;
        a->n = json_array_size(names);
    } else {
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "ExtenderArgs needs Nodes or NodeNames");
    }
    a->names = calloc(a->n ? a->n : 1, sizeof *a->names);
    if (a->names == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "extender args");
    for (size_t i = 0; i < a->n; i++) {
        const char *name =
            a->by_name ? json_string_value(json_array_get(names, i))
                       : json_string_value(json_object_get(
                             json_object_get(json_array_get(a->items, i), "metadata"), "name"));
        if (name == NULL || name[0] == '\0') {
            free(a->names);
            a->names = NULL;
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "node %zu has no name", i);
        }
        a->names[i] = name;
    }
    a->model = pod_model(a->pod);
    a->tenant = pod_tenant(a->pod);
    a->bad_tenant = a->tenant != NULL && !inventory_tenant_valid(a->tenant);
    a->pod_name = json_string_value(json_object_get(json_object_get(a->pod, "metadata"), "name"));
    if (a->pod_name == NULL)
        a->pod_name = "?";
    return 0;
}

/* Without a cluster, learns inventory URLs from the Node objects in the
 * request (within the policy); then fetches the inventories never seen
 * before. */
static void prepare_inventories(extender *x, const ext_args *a)
{
    if (a->model == NULL || a->bad_tenant)
        return;
    for (size_t i = 0; x->request_urls != NULL && a->items != NULL && i < a->n; i++) {
        char url[1024], qn[300], q[600];
        tetris_error err = {0};
        if (inventory_url_from_node(json_array_get(a->items, i), x->request_urls, url, sizeof url,
                                    &err) == 0)
            inventory_cache_set_url(x->inventories, a->names[i], url, &err);
        else if (err.code == TETRIS_E_DENIED)
            log_warn("event=inventory-url-refused node=%s msg=%s",
                     log_quote(a->names[i], qn, sizeof qn), log_quote(err.msg, q, sizeof q));
    }
    inventory_cache_fetch_missing(x->inventories, a->names, a->n, a->tenant);
}

/* ---- decisions ---- */

typedef struct decision {
    bool known;  /* model and inventory known */
    node_fit fit;
} decision;

/* Evaluates every node; decisions[i] for names[i]. */
static void decide(extender *x, const ext_args *a, decision *d)
{
    memset(d, 0, a->n * sizeof *d);
    if (a->model == NULL)
        return;
    if (a->bad_tenant) {
        char q[300];
        log_debug("event=bad-tenant pod=%s tenant=%s nodes=%zu", a->pod_name,
                  log_quote(a->tenant, q, sizeof q), a->n);
        pthread_mutex_lock(&x->stats_lock);
        x->node_decisions_no_inventory += a->n;
        pthread_mutex_unlock(&x->stats_lock);
        return;
    }
    size_t unknown = 0;
    manifest_cache_rdlock(x->manifests);
    const model_need *need = manifest_cache_find(x->manifests, a->model);
    if (need != NULL) {
        inventory_cache_rdlock(x->inventories);
        for (size_t i = 0; i < a->n; i++) {
            const node_inventory *inv =
                inventory_cache_find(x->inventories, a->names[i], a->tenant);
            if (inv == NULL) {
                unknown++;
                continue;
            }
            d[i].known = true;
            similarity_eval(need, inv, &d[i].fit);
        }
        inventory_cache_unlock(x->inventories);
    }
    manifest_cache_unlock(x->manifests);
    pthread_mutex_lock(&x->stats_lock);
    if (need == NULL)
        x->decisions_unknown_model++;
    x->node_decisions_no_inventory += unknown;
    pthread_mutex_unlock(&x->stats_lock);
    if (need == NULL)
        log_debug("event=unknown-model pod=%s model=%s nodes=%zu", a->pod_name, a->model, a->n);
}

static int nomem(json_t *j, tetris_error *err)
{
    json_decref(j);
    return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "extender reply");
}

int extender_filter(extender *x, json_t *args, json_t **result, tetris_error *err)
{
    ext_args a;
    int r = parse_args(args, &a, err);
    if (r < 0)
        return r;
    prepare_inventories(x, &a);
    decision *d = calloc(a.n ? a.n : 1, sizeof *d);
    json_t *res = json_object();
    json_t *passed = json_array();
    json_t *failed = json_object();
    if (d == NULL || res == NULL || passed == NULL || failed == NULL) {
        free(d);
        free(a.names);
        json_decref(passed);
        json_decref(failed);
        return nomem(res, err);
    }
    decide(x, &a, d);
    size_t n_failed = 0;
    for (size_t i = 0; i < a.n; i++) {
        if (d[i].known && !d[i].fit.fits) {
            char reason[256];
            snprintf(reason, sizeof reason,
                     "tetris: tensor store cannot take model %s (needs %llu more bytes)", a.model,
                     (unsigned long long)d[i].fit.missing_bytes);
            json_object_set_new(failed, a.names[i], json_string(reason));
            n_failed++;
            continue;
        }
        if (a.by_name)
            json_array_append_new(passed, json_string(a.names[i]));
        else
            json_array_append(passed, json_array_get(a.items, i));
    }
    if (a.by_name) {
        json_object_set_new(res, "Nodes", json_null());
        json_object_set_new(res, "NodeNames", passed);
    } else {
        json_object_set_new(res, "Nodes", json_pack("{s:o}", "items", passed));
        json_object_set_new(res, "NodeNames", json_null());
    }
    json_object_set_new(res, "FailedNodes", failed);
    json_object_set_new(res, "Error", json_string(""));
    pthread_mutex_lock(&x->stats_lock);
    x->nodes_filtered_out += n_failed;
    pthread_mutex_unlock(&x->stats_lock);
    if (n_failed > 0)
        log_info("event=filter pod=%s model=%s nodes=%zu failed=%zu", a.pod_name, a.model, a.n,
                 n_failed);
    free(d);
    free(a.names);
    *result = res;
    return 0;
}

int extender_prioritize(extender *x, json_t *args, json_t **result, tetris_error *err)
{
    ext_args a;
    int r = parse_args(args, &a, err);
    if (r < 0)
        return r;
    prepare_inventories(x, &a);
    decision *d = calloc(a.n ? a.n : 1, sizeof *d);
    json_t *list = json_array();
    if (d == NULL || list == NULL) {
        free(d);
        free(a.names);
        return nomem(list, err);
    }
    decide(x, &a, d);
    for (size_t i = 0; i < a.n; i++) {
        int score = d[i].known ? d[i].fit.score : 0;
        if (json_array_append_new(list, json_pack("{s:s,s:i}", "Host", a.names[i], "Score",
                                                  score)) < 0) {
            free(d);
            free(a.names);
            return nomem(list, err);
        }
    }
    free(d);
    free(a.names);
    *result = list;
    return 0;
}

/* ---- metrics ---- */

void extender_observe(extender *x, const char *verb, int status, double seconds)
{
    int v = strcmp(verb, "filter") == 0 ? VERB_FILTER : VERB_PRIORITIZE;
    pthread_mutex_lock(&x->stats_lock);
    verb_stats *s = &x->verbs[v];
    if (status == 200)
        s->ok++;
    else if (status == 400)
        s->bad_request++;
    else
        s->other++;
    s->buckets[prom_bucket(latency_buckets, N_BUCKETS, seconds)]++;
    s->sum += seconds;
    pthread_mutex_unlock(&x->stats_lock);
}

/* One family of a single unlabelled sample. */
static void render_one(textbuf *t, const char *name, const char *type, const char *help,
                       uint64_t value)
{
    prom_header(t, name, type, help);
    prom_sample(t, name, NULL, 0, value);
}

char *extender_metrics_text(extender *x, size_t *len)
{
    static const char requests[] = "tetris_extender_requests_total";
    static const char duration[] = "tetris_extender_request_duration_seconds";
    static const char fetches[] = "tetris_extender_inventory_fetches_total";
    pthread_mutex_lock(&x->stats_lock);
    verb_stats v[N_VERBS];
    memcpy(v, x->verbs, sizeof v);
    uint64_t filtered = x->nodes_filtered_out;
    uint64_t unknown_model = x->decisions_unknown_model;
    uint64_t no_inventory = x->node_decisions_no_inventory;
    pthread_mutex_unlock(&x->stats_lock);
    inventory_stats is;
    inventory_cache_stats(x->inventories, &is);

    textbuf t = {0};
    prom_header(&t, requests, "counter", "Extender requests served, by verb and HTTP status.");
    for (int i = 0; i < N_VERBS; i++) {
        const uint64_t by_code[] = {v[i].ok, v[i].bad_request, v[i].other};
        static const char *const code_names[] = {"200", "400", "500"};
        for (size_t c = 0; c < 3; c++)
            prom_sample(&t, requests,
                        (prom_label[]){{"verb", verb_names[i]}, {"code", code_names[c]}}, 2,
                        by_code[c]);
    }
    prom_header(&t, duration, "histogram", "Time to answer a filter or prioritize request.");
    for (int i = 0; i < N_VERBS; i++)
        prom_histogram(&t, duration, (prom_label[]){{"verb", verb_names[i]}}, 1, latency_buckets,
                       v[i].buckets, N_BUCKETS, v[i].sum, "%.9f");
    render_one(&t, "tetris_extender_nodes_filtered_total", "counter",
               "Nodes failed by the filter because their store cannot take the model.", filtered);
    render_one(&t, "tetris_extender_unknown_model_total", "counter",
               "Requests for a model without a manifest (answered neutrally).", unknown_model);
    render_one(&t, "tetris_extender_no_inventory_total", "counter",
               "Node decisions made without a fresh inventory (answered neutrally).",
               no_inventory);
    prom_header(&t, fetches, "counter", "Inventory polls, by result.");
    prom_sample(&t, fetches, (prom_label[]){{"result", "ok"}}, 1, is.fetch_ok);
    prom_sample(&t, fetches, (prom_label[]){{"result", "not_modified"}}, 1, is.fetch_not_modified);
    prom_sample(&t, fetches, (prom_label[]){{"result", "error"}}, 1, is.fetch_error);
    render_one(&t, "tetris_extender_nodes", "gauge", "Nodes whose inventory URL is known.",
               is.nodes);
    render_one(&t, "tetris_extender_nodes_fresh", "gauge",
               "Nodes with a usable (fresh) inventory.", is.fresh);
    render_one(&t, "tetris_extender_models", "gauge", "Models with a loaded manifest.",
               manifest_cache_count(x->manifests));
    return textbuf_take(&t, len);
}
