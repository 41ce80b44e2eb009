/* extender.c - filter and prioritize by tensor similarity, and the
 * extender's metrics. See extender.h for the protocol.
 *
 * A pod that mounts a dedicated tenant's store (its tetris-store volume is
 * DIR/tenants/T/public, as tetris-webhook gives it to the pods of T's
 * namespaces) can only use that store on a node, so it is judged against
 * that store's inventory; other pods against the shared store's. The
 * pod's own tetris.io/tenant label decides nothing: any pod may write
 * any tenant there, and scoring it against that tenant's store would
 * tell it on which nodes that tenant's models are resident. What a pod
 * mounts it can read anyway. */
#include "scheduler-ext/extender/extender.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/prom.h"
#include "protocol/names.h"
#include "scheduler-ext/extender/ext_request.h"
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

static void prepare_model(void *user, const model_need *m);
static void prepare_inventory(void *user, node_inventory *inv);

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
    manifest_cache_set_prepare(manifests, prepare_model, x);
    inventory_cache_set_prepare(inventories, prepare_inventory, x);
    return x;
}

void extender_free(extender *x)
{
    if (x == NULL)
        return;
    manifest_cache_set_prepare(x->manifests, NULL, NULL);
    inventory_cache_set_prepare(x->inventories, NULL, NULL);
    pthread_mutex_destroy(&x->stats_lock);
    free(x);
}

/* ---- θ ahead of decisions ---- */

typedef struct prepare_ctx {
    const model_need *m;
    node_inventory *inv;
} prepare_ctx;

static void eval_model_on(void *user, const node_inventory *inv)
{
    node_fit fit;
    similarity_eval(((prepare_ctx *)user)->m, inv, &fit);
}

/* A changed manifest: its θ on every cached inventory. */
static void prepare_model(void *user, const model_need *m)
{
    extender *x = user;
    prepare_ctx p = {.m = m};
    inventory_cache_rdlock(x->inventories);
    inventory_cache_each(x->inventories, eval_model_on, &p);
    inventory_cache_unlock(x->inventories);
}

static void eval_on_inventory(void *user, const model_need *m)
{
    node_fit fit;
    similarity_eval(m, ((prepare_ctx *)user)->inv, &fit);
}

/* A new inventory: every known model's θ on it. */
static void prepare_inventory(void *user, node_inventory *inv)
{
    extender *x = user;
    prepare_ctx p = {.inv = inv};
    manifest_cache_rdlock(x->manifests);
    manifest_cache_each(x->manifests, eval_on_inventory, &p);
    manifest_cache_unlock(x->manifests);
}

/* ---- request parsing ---- */

typedef struct ext_args {
    ext_request rq;
    const char *model;    /* NULL: the pod names no model */
    const char *tenant;   /* NULL: the shared store */
    bool bad_tenant;      /* a tenant no daemon could serve */
    char tenant_buf[INVENTORY_TENANT_MAX + 2]; /* one more: too long */
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

/* The host path of the pod's store volume, NULL without one. */
static const char *store_volume_path(json_t *pod)
{
    size_t i;
    json_t *v;
    json_array_foreach (json_object_get(json_object_get(pod, "spec"), "volumes"), i, v) {
        const char *name = json_string_value(json_object_get(v, "name"));
        if (name != NULL && strcmp(name, TETRIS_VOLUME_STORE) == 0)
            return json_string_value(json_object_get(json_object_get(v, "hostPath"), "path"));
    }
    return NULL;
}

/* The tenant whose store the pod mounts into buf: what follows the last
 * "/tenants/" of its store volume's path, less a trailing "/public" (cut
 * to len - 1 bytes: a name that long is no tenant name, and neither is
 * one with a '/'). NULL when the pod mounts the shared store or none. */
static const char *pod_tenant(json_t *pod, char *buf, size_t len)
{
    static const char tenants[] = "/" TETRIS_TENANTS_SUBDIR "/";
    static const char public_dir[] = "/" TETRIS_STORE_PUBLIC_SUBDIR;
    const char *path = store_volume_path(pod);
    const char *t = NULL;
    for (const char *at = path; at != NULL && (at = strstr(at, tenants)) != NULL; at++)
        t = at + sizeof tenants - 1;
    if (t == NULL)
        return NULL;
    size_t n = strlen(t);
    while (n > 0 && t[n - 1] == '/')
        n--;
    size_t p = sizeof public_dir - 1;
    if (n >= p && memcmp(t + n - p, public_dir, p) == 0)
        n -= p;
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len), t);
    return buf;
}

static int parse_args(const char *body, size_t len, ext_args *a, tetris_error *err)
{
    memset(a, 0, sizeof *a);
    int r = ext_request_parse(body, len, &a->rq, err);
    if (r < 0)
        return r;
    json_t *pod = a->rq.pod;
    a->model = pod_model(pod);
    a->tenant = pod_tenant(pod, a->tenant_buf, sizeof a->tenant_buf);
    a->bad_tenant = a->tenant != NULL && !inventory_tenant_valid(a->tenant);
    a->pod_name = json_string_value(json_object_get(json_object_get(pod, "metadata"), "name"));
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
    const ext_request *rq = &a->rq;
    for (size_t i = 0; x->request_urls != NULL && rq->items != NULL && i < rq->n; i++) {
        char url[1024];
        tetris_error err = {0};
        json_t *node = json_loadb(rq->items[i].text, rq->items[i].len, JSON_DECODE_ANY, NULL);
        int r = node != NULL ? inventory_url_from_node(node, x->request_urls, url, sizeof url, &err)
                             : -TETRIS_E_NOMEM;
        json_decref(node);
        if (r == 0)
            inventory_cache_set_url(x->inventories, rq->names[i], url, &err);
        else if (err.code == TETRIS_E_DENIED)
            log_warn("event=inventory-url-refused node=%s msg=%s", LOG_Q(rq->names[i]),
                     LOG_Q(err.msg));
    }
    inventory_cache_fetch_missing(x->inventories, rq->names, rq->n, a->tenant);
}

/* ---- decisions ---- */

typedef struct decision {
    bool known;  /* model and inventory known */
    node_fit fit;
} decision;

/* Evaluates every node; decisions[i] for names[i]. */
static void decide(extender *x, const ext_args *a, decision *d)
{
    size_t n = a->rq.n;
    memset(d, 0, n * sizeof *d);
    if (a->model == NULL)
        return;
    if (a->bad_tenant) {
        log_debug("event=bad-tenant pod=%s tenant=%s nodes=%zu", a->pod_name, LOG_Q(a->tenant), n);
        pthread_mutex_lock(&x->stats_lock);
        x->node_decisions_no_inventory += n;
        pthread_mutex_unlock(&x->stats_lock);
        return;
    }
    size_t unknown = 0;
    manifest_cache_rdlock(x->manifests);
    const model_need *need = manifest_cache_find(x->manifests, a->model);
    if (need != NULL) {
        inventory_cache_rdlock(x->inventories);
        for (size_t i = 0; i < n; i++) {
            const node_inventory *inv = inventory_cache_find(x->inventories, a->rq.names[i],
                                                             a->tenant);
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
        log_debug("event=unknown-model pod=%s model=%s nodes=%zu", a->pod_name, a->model, n);
}

/* The reply, or TETRIS_E_NOMEM. */
static int take_reply(textbuf *t, char **reply, size_t *reply_len, tetris_error *err)
{
    *reply = textbuf_take(t, reply_len);
    return *reply != NULL ? 0 : tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "extender reply");
}

int extender_filter(extender *x, const char *body, size_t len, char **reply, size_t *reply_len,
                    tetris_error *err)
{
    ext_args a;
    int r = parse_args(body, len, &a, err);
    if (r < 0)
        return r;
    const ext_request *rq = &a.rq;
    prepare_inventories(x, &a);
    decision *d = calloc(rq->n ? rq->n : 1, sizeof *d);
    if (d == NULL) {
        ext_request_clear(&a.rq);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "extender reply");
    }
    decide(x, &a, d);
    /* The passing nodes, then the failed ones: in the Nodes form each
     * passing Node goes back as the scheduler sent it. */
    textbuf t = {0};
    textbuf_reserve(&t, rq->by_name ? rq->n * 24 + 64 : len + 64);
    textbuf_puts(&t, rq->by_name ? "{\"Nodes\":null,\"NodeNames\":[" : "{\"Nodes\":{\"items\":[");
    bool first = true;
    size_t n_failed = 0;
    for (size_t i = 0; i < rq->n; i++) {
        if (d[i].known && !d[i].fit.fits) {
            n_failed++;
            continue;
        }
        if (!first)
            textbuf_append(&t, ",", 1);
        first = false;
        if (rq->by_name)
            ext_json_string(&t, rq->names[i]);
        else
            textbuf_append(&t, rq->items[i].text, rq->items[i].len);
    }
    textbuf_puts(&t,
                 rq->by_name ? "],\"FailedNodes\":{" : "]},\"NodeNames\":null,\"FailedNodes\":{");
    first = true;
    for (size_t i = 0; i < rq->n && n_failed > 0; i++) {
        if (!d[i].known || d[i].fit.fits)
            continue;
        char reason[256];
        snprintf(reason, sizeof reason,
                 "tetris: tensor store cannot take model %s (needs %llu more bytes)", a.model,
                 (unsigned long long)d[i].fit.missing_bytes);
        if (!first)
            textbuf_append(&t, ",", 1);
        first = false;
        ext_json_string(&t, rq->names[i]);
        textbuf_append(&t, ":", 1);
        ext_json_string(&t, reason);
    }
    textbuf_puts(&t, "},\"Error\":\"\"}");
    pthread_mutex_lock(&x->stats_lock);
    x->nodes_filtered_out += n_failed;
    pthread_mutex_unlock(&x->stats_lock);
    if (n_failed > 0)
        log_info("event=filter pod=%s model=%s nodes=%zu failed=%zu", a.pod_name, a.model, rq->n,
                 n_failed);
    free(d);
    ext_request_clear(&a.rq);
    return take_reply(&t, reply, reply_len, err);
}

int extender_prioritize(extender *x, const char *body, size_t len, char **reply, size_t *reply_len,
                        tetris_error *err)
{
    ext_args a;
    int r = parse_args(body, len, &a, err);
    if (r < 0)
        return r;
    const ext_request *rq = &a.rq;
    prepare_inventories(x, &a);
    decision *d = calloc(rq->n ? rq->n : 1, sizeof *d);
    if (d == NULL) {
        ext_request_clear(&a.rq);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "extender reply");
    }
    decide(x, &a, d);
    textbuf t = {0};
    textbuf_reserve(&t, rq->n * 40 + 8);
    textbuf_append(&t, "[", 1);
    for (size_t i = 0; i < rq->n; i++) {
        textbuf_puts(&t, i ? ",{\"Host\":" : "{\"Host\":");
        ext_json_string(&t, rq->names[i]);
        /* No printf per node: scores are 0..10. */
        static const char *const scores[SIMILARITY_MAX_SCORE + 1] =
            {",\"Score\":0}", ",\"Score\":1}", ",\"Score\":2}", ",\"Score\":3}",
             ",\"Score\":4}", ",\"Score\":5}", ",\"Score\":6}", ",\"Score\":7}",
             ",\"Score\":8}", ",\"Score\":9}", ",\"Score\":10}"};
        int score = d[i].known ? d[i].fit.score : 0;
        textbuf_puts(&t, scores[score >= 0 && score <= SIMILARITY_MAX_SCORE ? score : 0]);
    }
    textbuf_append(&t, "]", 1);
    free(d);
    ext_request_clear(&a.rq);
    return take_reply(&t, reply, reply_len, err);
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
    render_one(&t, "tetris_extender_inventory_bytes", "gauge",
               "Bytes the cached node inventories hold (their tensor id sets, memos, entries).",
               is.bytes);
    render_one(&t, "tetris_extender_models", "gauge", "Models with a loaded manifest.",
               manifest_cache_count(x->manifests));
    return textbuf_take(&t, len);
}
