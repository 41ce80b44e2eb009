/* http_api.c - the daemon's HTTP endpoints:
 *   GET /metrics    Prometheus text format (version 0.0.4)
 *   GET /inventory  resident tensors for the scheduler extender:
 *                   {"node","generation","capacity_bytes","resident_bytes",
 *                    "tensors":[{"digest":HEX,"bytes":N},...]}
 *                   with ETag "G"; If-None-Match "G" -> 304
 *   GET /healthz    {"status":"ok"|"failing",...}
 *
 * /inventory is built once per generation and shared by reference between
 * concurrent replies, so polling it with 100k resident tensors costs one
 * render per change, not one per request. */
#include "daemon.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "httpserver.h"
#include "log.h"

struct inventory_body {
    atomic_int refs;
    uint64_t generation;
    char etag[32];
    char *text;
    size_t len;
};

struct http_api {
    struct daemon *d;
    http_server *server;
    pthread_mutex_t lock;
    struct inventory_body *inventory; /* the cached one (holds a reference) */
};

/* ---- text buffer ---- */

struct buf {
    char *p;
    size_t len;
    size_t cap;
    bool failed;
};

static void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(struct buf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap - b->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* ---- /metrics ---- */

static void metric(struct buf *b, const char *name, const char *type, const char *help,
                   uint64_t value)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type, name,
               value);
}

/* A Prometheus label value: backslash, quote and newline escaped (labels
 * come from clients; control characters were refused at ingest). */
static void label_value(char *out, size_t len, const char *in)
{
    size_t o = 0;
    for (; *in != '\0' && o + 3 < len; in++) {
        if (*in == '\\' || *in == '"')
            out[o++] = '\\';
        if (*in == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
            continue;
        }
        out[o++] = *in;
    }
    out[o] = '\0';
}

static void render_models(struct buf *b, const struct model_usage *m, size_t n)
{
    /* The "other" row, when used, sits after the named ones. */
    size_t rows = n + (n == MODEL_LABELS_MAX && m[MODEL_LABELS_MAX].holders > 0);
    buf_printf(b, "# HELP tetris_model_holders Live holders per model (holder label).\n"
                  "# TYPE tetris_model_holders gauge\n");
    for (size_t i = 0; i < rows; i++) {
        char v[300];
        label_value(v, sizeof(v), m[i].label);
        buf_printf(b, "tetris_model_holders{model=\"%s\"} %" PRIu64 "\n", v, m[i].holders);
    }
    buf_printf(b, "# HELP tetris_model_logical_bytes Tensor bytes live holders of a model map, "
                  "counted once per holder.\n"
                  "# TYPE tetris_model_logical_bytes gauge\n");
    for (size_t i = 0; i < rows; i++) {
        char v[300];
        label_value(v, sizeof(v), m[i].label);
        buf_printf(b, "tetris_model_logical_bytes{model=\"%s\"} %" PRIu64 "\n", v,
                   m[i].logical_bytes);
    }
}

static uint64_t load(atomic_uint_least64_t *v)
{
    return atomic_load(v);
}

char *daemon_render_metrics(struct daemon *d, size_t *len)
{
    pthread_mutex_lock(&d->index_lock);
    uint64_t resident = d->resident_bytes;
    uint64_t tensors = tensor_index_count(d->index);
    uint64_t holders = d->holders;
    uint64_t logical = d->logical_bytes;
    uint64_t warm = d->warm_bytes;
    uint64_t generation = d->generation;
    int64_t last_pass_ms = d->last_pass_ms;
    int64_t last_pass_us = d->last_pass_us;
    int64_t last_locked_us = d->last_locked_us;
    struct model_usage models[MODEL_LABELS_MAX + 1];
    memcpy(models, d->models, sizeof(models));
    size_t n_models = d->n_models;
    pthread_mutex_unlock(&d->index_lock);
    pthread_mutex_lock(&d->cfg_lock);
    uint64_t capacity = d->cfg.capacity_bytes;
    pthread_mutex_unlock(&d->cfg_lock);
    struct daemon_counters *c = &d->counters;

    struct buf b = {0};
    metric(&b, "tetris_store_resident_bytes", "gauge",
           "Bytes of tensor files resident in the node's store.", resident);
    metric(&b, "tetris_store_capacity_bytes", "gauge",
           "Configured store capacity in bytes (0 = unlimited).", capacity);
    metric(&b, "tetris_store_logical_bytes", "gauge",
           "Tensor bytes mapped by live holders, counted once per holder.", logical);
    metric(&b, "tetris_store_saved_bytes", "gauge",
           "Logical bytes minus the resident bytes of the tensors holders reference: "
           "memory that private copies would have cost on top.",
           logical > warm ? logical - warm : 0);
    render_models(&b, models, n_models);
    metric(&b, "tetris_store_tensors", "gauge", "Tensors resident in the store.", tensors);
    metric(&b, "tetris_store_holders", "gauge", "Live holders (model instances) of the store.",
           holders);
    metric(&b, "tetris_store_generation", "gauge",
           "Inventory generation; changes whenever the resident set changes.", generation);
    metric(&b, "tetris_ingest_connections", "gauge", "Open ingest connections.",
           load(&c->connections));
    metric(&b, "tetris_ingest_requests_total", "counter", "Ingest requests served.",
           load(&c->ingest_requests));
    metric(&b, "tetris_ingest_errors_total", "counter",
           "Ingest requests refused as malformed or failed.", load(&c->ingest_errors));
    metric(&b, "tetris_ingest_tensors_total", "counter", "Tensors published by ingests.",
           load(&c->ingest_tensors));
    metric(&b, "tetris_ingest_bytes_total", "counter", "Tensor bytes published by ingests.",
           load(&c->ingest_bytes));
    metric(&b, "tetris_ingest_rejected_tensors_total", "counter",
           "Tensors an ingest refused (digest mismatch, store full, unreadable).",
           load(&c->ingest_rejected));

    buf_printf(&b, "# HELP tetris_ingest_duration_seconds Time to serve one ingest request.\n"
                   "# TYPE tetris_ingest_duration_seconds histogram\n");
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= INGEST_DURATION_BUCKETS; i++) {
        cumulative += load(&c->ingest_duration_bucket[i]);
        if (i < INGEST_DURATION_BUCKETS)
            buf_printf(&b, "tetris_ingest_duration_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
                       ingest_duration_bounds[i], cumulative);
        else
            buf_printf(&b, "tetris_ingest_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n",
                       cumulative);
    }
    buf_printf(&b, "tetris_ingest_duration_seconds_sum %.6f\n",
               (double)load(&c->ingest_duration_us) / 1e6);
    buf_printf(&b, "tetris_ingest_duration_seconds_count %" PRIu64 "\n", cumulative);

    metric(&b, "tetris_agent_fallbacks_total", "counter",
           "Agents that reported falling back to a private load.", load(&c->fallbacks));
    metric(&b, "tetris_reclaim_passes_total", "counter", "Reclaim passes completed.",
           load(&c->reclaim_passes));
    metric(&b, "tetris_reclaims_total", "counter",
           "Cold tensors freed after their keep-alive expired.", load(&c->reclaims));
    metric(&b, "tetris_evictions_total", "counter",
           "Cold tensors evicted (least recently used) to get under capacity.",
           load(&c->evictions));
    metric(&b, "tetris_reclaimed_bytes_total", "counter",
           "Bytes freed by reclaims and evictions.", load(&c->reclaimed_bytes));
    metric(&b, "tetris_scrubbed_bytes_total", "counter", "Tensor bytes whose CRC32 was re-checked.",
           load(&c->scrubbed_bytes));
    metric(&b, "tetris_scrub_errors_total", "counter",
           "Tensors that failed a CRC32 scrub and were quarantined.", load(&c->scrub_errors));
    metric(&b, "tetris_repaired_holders_total", "counter",
           "Dead holders whose references repair released.", load(&c->repaired_holders));
    metric(&b, "tetris_repaired_temp_files_total", "counter",
           "Orphaned temporary ingest files repair removed.", load(&c->repaired_temp_files));
    metric(&b, "tetris_repaired_tensors_total", "counter",
           "Inconsistent tensor files repair removed.", load(&c->repaired_bad_tensors));
    metric(&b, "tetris_adopted_holders_total", "counter",
           "Holders re-held at start-up for clients that outlived a previous daemon.",
           load(&c->adopted_holders));
    buf_printf(&b,
               "# HELP tetris_last_reclaim_timestamp_seconds Unix time of the last completed "
               "reclaim pass.\n# TYPE tetris_last_reclaim_timestamp_seconds gauge\n"
               "tetris_last_reclaim_timestamp_seconds %.3f\n",
               (double)last_pass_ms / 1000.0);
    buf_printf(&b,
               "# HELP tetris_reclaim_pass_duration_seconds How long the last reclaim pass held "
               "the store (repair, reconcile, free).\n"
               "# TYPE tetris_reclaim_pass_duration_seconds gauge\n"
               "tetris_reclaim_pass_duration_seconds %.6f\n",
               (double)last_pass_us / 1e6);
    buf_printf(&b,
               "# HELP tetris_reclaim_pass_locked_seconds How long the last reclaim pass held "
               "the store's use lock (ingests and loaders wait that long).\n"
               "# TYPE tetris_reclaim_pass_locked_seconds gauge\n"
               "tetris_reclaim_pass_locked_seconds %.6f\n",
               (double)last_locked_us / 1e6);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

static void handle_metrics(void *ctx, const http_request *req, http_response *resp)
{
    (void)req;
    http_api *a = ctx;
    size_t len;
    char *text = daemon_render_metrics(a->d, &len);
    if (text == NULL) {
        http_response_error(resp, 500, "out of memory");
        return;
    }
    http_response_take_body(resp, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

/* ---- /inventory ---- */

static void inventory_release(void *ctx)
{
    struct inventory_body *inv = ctx;
    if (atomic_fetch_sub(&inv->refs, 1) == 1) {
        free(inv->text);
        free(inv);
    }
}

struct inv_item {
    tensor_digest digest;
    uint64_t bytes;
};

static struct inventory_body *render_inventory(struct daemon *d)
{
    pthread_mutex_lock(&d->index_lock);
    size_t n = tensor_index_count(d->index);
    uint64_t generation = d->generation;
    uint64_t resident = d->resident_bytes;
    struct inv_item *items = malloc((n ? n : 1) * sizeof(*items));
    if (items != NULL) {
        size_t c = 0, k = 0;
        struct index_entry *e;
        while ((e = tensor_index_next(d->index, &c)) != NULL)
            items[k++] = (struct inv_item){e->digest, e->bytes};
    }
    pthread_mutex_unlock(&d->index_lock);
    pthread_mutex_lock(&d->cfg_lock);
    uint64_t capacity = d->cfg.capacity_bytes;
    char node[sizeof(d->cfg.node_name)];
    memcpy(node, d->cfg.node_name, sizeof(node));
    pthread_mutex_unlock(&d->cfg_lock);
    struct inventory_body *inv = calloc(1, sizeof(*inv));
    if (items == NULL || inv == NULL) {
        free(items);
        free(inv);
        return NULL;
    }
    json_t *jnode = json_string(node);
    char *node_json = jnode ? json_dumps(jnode, JSON_ENCODE_ANY) : NULL;
    json_decref(jnode);
    struct buf b = {0};
    b.cap = 128 + n * 96;
    b.p = malloc(b.cap);
    b.failed = b.p == NULL || node_json == NULL;
    buf_printf(&b,
               "{\"node\":%s,\"generation\":%" PRIu64 ",\"capacity_bytes\":%" PRIu64
               ",\"resident_bytes\":%" PRIu64 ",\"tensors\":[",
               node_json ? node_json : "\"\"", generation, capacity, resident);
    for (size_t i = 0; i < n; i++) {
        char hex[TENSOR_DIGEST_HEX_LEN + 1];
        tensor_digest_to_hex(&items[i].digest, hex);
        buf_printf(&b, "%s{\"digest\":\"%s\",\"bytes\":%" PRIu64 "}", i ? "," : "", hex,
                   items[i].bytes);
    }
    buf_printf(&b, "]}\n");
    free(items);
    free(node_json);
    if (b.failed) {
        free(b.p);
        free(inv);
        return NULL;
    }
    atomic_init(&inv->refs, 1);
    inv->generation = generation;
    snprintf(inv->etag, sizeof(inv->etag), "\"%" PRIu64 "\"", generation);
    inv->text = b.p;
    inv->len = b.len;
    return inv;
}

/* The cached inventory for the current generation, with a reference. */
static struct inventory_body *current_inventory(http_api *a)
{
    pthread_mutex_lock(&a->d->index_lock);
    uint64_t generation = a->d->generation;
    pthread_mutex_unlock(&a->d->index_lock);
    pthread_mutex_lock(&a->lock);
    if (a->inventory == NULL || a->inventory->generation != generation) {
        struct inventory_body *fresh = render_inventory(a->d);
        if (fresh != NULL) {
            if (a->inventory != NULL)
                inventory_release(a->inventory);
            a->inventory = fresh;
        }
    }
    struct inventory_body *inv = a->inventory;
    if (inv != NULL)
        atomic_fetch_add(&inv->refs, 1);
    pthread_mutex_unlock(&a->lock);
    return inv;
}

static void handle_inventory(void *ctx, const http_request *req, http_response *resp)
{
    http_api *a = ctx;
    struct inventory_body *inv = current_inventory(a);
    if (inv == NULL) {
        http_response_error(resp, 500, "out of memory");
        return;
    }
    const char *inm = http_request_header(req, "If-None-Match");
    if (inm != NULL && strcmp(inm, inv->etag) == 0) {
        http_response_empty(resp, 304);
        http_response_add_header(resp, "ETag", inv->etag);
        inventory_release(inv);
        return;
    }
    http_response_add_header(resp, "ETag", inv->etag);
    http_response_set_shared(resp, 200, "application/json", inv->text, inv->len,
                             inventory_release, inv);
}

/* ---- /healthz ---- */

static void handle_healthz(void *ctx, const http_request *req, http_response *resp)
{
    (void)req;
    http_api *a = ctx;
    pthread_mutex_lock(&a->d->index_lock);
    bool ok = a->d->last_pass_ok;
    int64_t last = a->d->last_pass_ms;
    pthread_mutex_unlock(&a->d->index_lock);
    json_t *j = json_pack("{s:s, s:f}", "status", ok ? "ok" : "failing",
                          "last_reclaim_age_seconds",
                          last ? (double)(wall_ms() - last) / 1000.0 : -1.0);
    if (j == NULL) {
        http_response_error(resp, 500, "out of memory");
        return;
    }
    http_response_json(resp, ok ? 200 : 503, j);
    json_decref(j);
}

int http_api_start(struct daemon *d, http_api **out, tetris_error *err)
{
    http_api *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "http api");
    a->d = d;
    pthread_mutex_init(&a->lock, NULL);
    struct http_server_options o;
    http_server_options_init(&o);
    o.listen = d->cfg.listen;
    o.max_body_bytes = 4096; /* GET only */
    o.threads = 2;
    int rc = http_server_new(&o, &a->server, err);
    if (rc == 0)
        rc = http_server_route(a->server, "GET", "/metrics", handle_metrics, a, err);
    if (rc == 0)
        rc = http_server_route(a->server, "GET", "/inventory", handle_inventory, a, err);
    if (rc == 0)
        rc = http_server_route(a->server, "GET", "/healthz", handle_healthz, a, err);
    if (rc == 0)
        rc = http_server_start(a->server, err);
    if (rc < 0) {
        http_api_stop(a);
        return rc;
    }
    log_info("event=http-listening addr=%s port=%u", d->cfg.listen, http_server_port(a->server));
    *out = a;
    return 0;
}

uint16_t http_api_port(const http_api *a)
{
    return http_server_port(a->server);
}

void http_api_stop(http_api *a)
{
    if (a == NULL)
        return;
    http_server_free(a->server);
    if (a->inventory != NULL)
        inventory_release(a->inventory);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
