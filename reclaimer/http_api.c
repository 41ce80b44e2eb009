/* http_api.c - the daemon's HTTP endpoints:
 *   GET /metrics    Prometheus text format (version 0.0.4)
 *   GET /inventory  resident tensors for the scheduler extender (the
 *                   document, ETag/304 and ?tenant=T: protocol/inventory.h)
 *   GET /healthz    {"status":"ok"|"failing",...}; 503 also when the main
 *                   loop has not completed a pass within its deadline
 *
 * Two faces serve them. --listen is reachable by whoever reaches the node,
 * function pods of every tenant included: it shows the shared store and
 * the node only. --tenant-listen (an address only trusted clients reach)
 * also shows tenants' stores: their inventories and tenant-labelled
 * series, which would tell one tenant what another runs.
 *
 * /inventory is built once per generation and shared by reference between
 * concurrent replies, so polling it with 100k resident tensors costs one
 * render per change, not one per request. */
#include "reclaimer/daemon.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/httpserver.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/textbuf.h"
#include "protocol/inventory.h"

struct inventory_body {
    atomic_int refs;
    uint64_t generation;
    char etag[INVENTORY_ETAG_MAX];
    char *text;
    size_t len;
};

struct http_api;

/* One listening address and what it may reveal. */
struct http_face {
    struct http_api *a;
    bool tenants; /* serves tenants' detail */
    http_server *server;
};

struct http_api {
    struct daemon *d;
    struct http_face faces[2]; /* --listen, --tenant-listen */
    pthread_mutex_t lock;
    /* The cached inventory of each store, by its index in d->stores
     * (holds a reference). */
    struct inventory_body *inventory[1 + RECLAIMER_TENANTS_MAX];
};

/* ---- /metrics ----
 * Per-store series carry a tenant label; the shared store's have none
 * (an empty label is no label to Prometheus), so sum() over a metric is
 * the node and {tenant=""} selects the shared store. The number of
 * tenants is capped by --max-tenants. */

/* What /metrics shows of one store, copied under its lock. */
struct store_snapshot {
    const char *tenant;
    uint64_t resident, logical, saved, tensors, holders, generation, unverified;
    uint64_t claims_failed, claims_backed_off, derived_forms, derive_failures;
    uint64_t connections, ingests_active, connections_refused, ingest_over_budget, ingest_requests,
        ingest_errors, ingest_tensors, ingest_bytes, ingest_rejected, fallbacks, reclaims,
        evictions, reclaimed_bytes, scrubbed_bytes, scrub_errors, repaired_holders,
        repaired_temp_files, repaired_tensors, adopted_holders;
    uint64_t duration_us;
    uint64_t duration_bucket[INGEST_DURATION_BUCKETS + 1];
    struct model_usage models[MODEL_LABELS_MAX + 1];
    size_t n_models;
    struct start_row starts[MODEL_LABELS_MAX + 1];
    size_t n_starts;
    uint64_t start_bucket[START_RESULTS][INGEST_DURATION_BUCKETS + 1];
    uint64_t start_us[START_RESULTS];
};

static void snapshot_store(struct served_store *ss, struct store_snapshot *out)
{
    pthread_mutex_lock(&ss->index_lock);
    out->tenant = ss->tenant;
    out->resident = ss->resident_bytes;
    out->tensors = tensor_index_count(ss->index);
    out->holders = ss->holders;
    out->logical = ss->logical_bytes;
    out->saved = ss->logical_bytes > ss->warm_bytes ? ss->logical_bytes - ss->warm_bytes : 0;
    out->generation = ss->generation;
    out->unverified = ss->reserved_bytes;
    memcpy(out->models, ss->models, sizeof(out->models));
    out->n_models = ss->n_models;
    pthread_mutex_unlock(&ss->index_lock);
    pthread_mutex_lock(&ss->starts.lock);
    memcpy(out->starts, ss->starts.rows, sizeof(out->starts));
    out->n_starts = ss->starts.n_rows;
    memcpy(out->start_bucket, ss->starts.duration_bucket, sizeof(out->start_bucket));
    memcpy(out->start_us, ss->starts.duration_us, sizeof(out->start_us));
    pthread_mutex_unlock(&ss->starts.lock);
    struct store_counters *c = &ss->counters;
    out->connections = atomic_load(&c->connections);
    out->ingests_active = atomic_load(&c->ingests_active);
    out->connections_refused = atomic_load(&c->connections_refused);
    out->ingest_over_budget = atomic_load(&c->ingest_over_budget);
    out->claims_failed = atomic_load(&c->claims_failed);
    out->claims_backed_off = atomic_load(&c->claims_backed_off);
    out->derived_forms = atomic_load(&c->derived_forms);
    out->derive_failures = atomic_load(&c->derive_failures);
    out->ingest_requests = atomic_load(&c->ingest_requests);
    out->ingest_errors = atomic_load(&c->ingest_errors);
    out->ingest_tensors = atomic_load(&c->ingest_tensors);
    out->ingest_bytes = atomic_load(&c->ingest_bytes);
    out->ingest_rejected = atomic_load(&c->ingest_rejected);
    out->fallbacks = atomic_load(&c->fallbacks);
    out->reclaims = atomic_load(&c->reclaims);
    out->evictions = atomic_load(&c->evictions);
    out->reclaimed_bytes = atomic_load(&c->reclaimed_bytes);
    out->scrubbed_bytes = atomic_load(&c->scrubbed_bytes);
    out->scrub_errors = atomic_load(&c->scrub_errors);
    out->repaired_holders = atomic_load(&c->repaired_holders);
    out->repaired_temp_files = atomic_load(&c->repaired_temp_files);
    out->repaired_tensors = atomic_load(&c->repaired_bad_tensors);
    out->adopted_holders = atomic_load(&c->adopted_holders);
    out->duration_us = atomic_load(&c->ingest_duration_us);
    for (size_t i = 0; i <= INGEST_DURATION_BUCKETS; i++)
        out->duration_bucket[i] = atomic_load(&c->ingest_duration_bucket[i]);
}

#define SNAP(field) offsetof(struct store_snapshot, field)

static const struct store_family {
    const char *name, *type, *help;
    size_t offset; /* of a uint64_t in struct store_snapshot */
} store_families[] = {
    {"tetris_store_resident_bytes", "gauge",
     "Bytes the store's resident tensors are charged against the capacity: each file rounded "
     "up to pages, plus an inode.",
     SNAP(resident)},
    {"tetris_store_logical_bytes", "gauge",
     "Tensor bytes mapped by live holders, counted once per holder.", SNAP(logical)},
    {"tetris_store_saved_bytes", "gauge",
     "Logical bytes minus the resident bytes of the tensors holders reference: memory that "
     "private copies would have cost on top.",
     SNAP(saved)},
    {"tetris_store_tensors", "gauge", "Tensors resident in the store.", SNAP(tensors)},
    {"tetris_store_holders", "gauge", "Live holders (model instances) of the store.",
     SNAP(holders)},
    {"tetris_store_generation", "gauge",
     "Inventory generation; changes whenever the resident set changes.", SNAP(generation)},
    {"tetris_ingest_connections", "gauge", "Open ingest connections.", SNAP(connections)},
    {"tetris_ingest_active", "gauge", "Ingest requests being processed.", SNAP(ingests_active)},
    {"tetris_ingest_connections_refused_total", "counter",
     "Ingest connections refused at a connection limit (node, peer uid or peer pid).",
     SNAP(connections_refused)},
    {"tetris_ingest_over_budget_total", "counter",
     "Ingest requests refused or cut short by a budget (request bytes, references, time).",
     SNAP(ingest_over_budget)},
    {"tetris_ingest_unverified_bytes", "gauge",
     "Bytes reserved by claims being read and verified (bounded by --max-unverified-bytes).",
     SNAP(unverified)},
    {"tetris_ingest_claims_failed_total", "counter",
     "Claims whose bytes failed verification (their uid backs off).", SNAP(claims_failed)},
    {"tetris_ingest_claims_backed_off_total", "counter",
     "Claims refused unread because their uid backs off after failed ones.",
     SNAP(claims_backed_off)},
    {"tetris_derived_forms_total", "counter",
     "Derived forms (optimised graph and pre-packed weights) made and indexed.",
     SNAP(derived_forms)},
    {"tetris_derive_failures_total", "counter",
     "Derivations that failed (refused graph, full store, timeout).", SNAP(derive_failures)},
    {"tetris_ingest_requests_total", "counter", "Ingest requests served.", SNAP(ingest_requests)},
    {"tetris_ingest_errors_total", "counter", "Ingest requests refused as malformed or failed.",
     SNAP(ingest_errors)},
    {"tetris_ingest_tensors_total", "counter", "Tensors published by ingests.",
     SNAP(ingest_tensors)},
    {"tetris_ingest_bytes_total", "counter", "Tensor bytes published by ingests.",
     SNAP(ingest_bytes)},
    {"tetris_ingest_rejected_tensors_total", "counter",
     "Tensors an ingest refused (digest mismatch, store full, unreadable).", SNAP(ingest_rejected)},
    {"tetris_agent_fallbacks_total", "counter",
     "Agents that reported falling back to a private load.", SNAP(fallbacks)},
    {"tetris_reclaims_total", "counter", "Cold tensors freed after their keep-alive expired.",
     SNAP(reclaims)},
    {"tetris_evictions_total", "counter",
     "Cold tensors evicted (least recently used) to get under capacity.", SNAP(evictions)},
    {"tetris_reclaimed_bytes_total", "counter", "Bytes freed by reclaims and evictions.",
     SNAP(reclaimed_bytes)},
    {"tetris_scrubbed_bytes_total", "counter", "Tensor bytes whose CRC32 was re-checked.",
     SNAP(scrubbed_bytes)},
    {"tetris_scrub_errors_total", "counter",
     "Tensors that failed a CRC32 scrub and were quarantined.", SNAP(scrub_errors)},
    {"tetris_repaired_holders_total", "counter", "Dead holders whose references repair released.",
     SNAP(repaired_holders)},
    {"tetris_repaired_temp_files_total", "counter",
     "Orphaned temporary ingest files repair removed.", SNAP(repaired_temp_files)},
    {"tetris_repaired_tensors_total", "counter", "Inconsistent tensor files repair removed.",
     SNAP(repaired_tensors)},
    {"tetris_adopted_holders_total", "counter",
     "Holders re-held at start-up for clients that outlived a previous daemon.",
     SNAP(adopted_holders)},
};

/* The tenant label of a store's series: none for the shared store. */
static size_t tenant_label(prom_label *l, const char *tenant)
{
    if (tenant[0] == '\0')
        return 0;
    l[0] = (prom_label){"tenant", tenant};
    return 1;
}

static void render_models(textbuf *t, const struct store_snapshot *snap, size_t n_snap)
{
    static const char *const names[] = {"tetris_model_holders", "tetris_model_logical_bytes"};
    static const char *const helps[] = {
        "Live holders per model (holder label).",
        "Tensor bytes live holders of a model map, counted once per holder.",
    };
    for (size_t f = 0; f < 2; f++) {
        prom_header(t, names[f], "gauge", helps[f]);
        for (size_t s = 0; s < n_snap; s++) {
            const struct model_usage *m = snap[s].models;
            size_t n = snap[s].n_models;
            /* The "other" row, when used, sits after the named ones. */
            size_t rows = n + (n == MODEL_LABELS_MAX && m[MODEL_LABELS_MAX].holders > 0);
            for (size_t i = 0; i < rows; i++) {
                prom_label l[2];
                size_t n_l = tenant_label(l, snap[s].tenant);
                l[n_l++] = (prom_label){"model", m[i].label};
                prom_sample(t, names[f], l, n_l, f == 0 ? m[i].holders : m[i].logical_bytes);
            }
        }
    }
}

static void render_durations(textbuf *t, const struct store_snapshot *snap, size_t n_snap)
{
    static const char name[] = "tetris_ingest_duration_seconds";
    prom_header(t, name, "histogram", "Time to serve one ingest request.");
    for (size_t s = 0; s < n_snap; s++) {
        prom_label l[1];
        size_t n_l = tenant_label(l, snap[s].tenant);
        prom_histogram(t, name, l, n_l, ingest_duration_bounds, snap[s].duration_bucket,
                       INGEST_DURATION_BUCKETS, (double)snap[s].duration_us / 1e6, "%.6f");
    }
}

/* Registrations by what the store held (starts.c): per model, and the
 * daemon's time to answer them. */
static void render_starts(textbuf *t, const struct store_snapshot *snap, size_t n_snap)
{
    static const char starts[] = "tetris_model_starts_total";
    static const char seconds[] = "tetris_start_register_seconds";
    prom_header(t, starts, "counter",
                "Instances that registered a model (holder label) with the node daemon, by what "
                "the store held of its tensors: all (hit), some (partial) or none (miss). "
                "Re-registrations after a daemon restart count too.");
    for (size_t s = 0; s < n_snap; s++) {
        const struct start_row *row = snap[s].starts;
        size_t n = snap[s].n_starts;
        /* The "other" row, when used, sits after the named ones. */
        bool other = false;
        for (size_t r = 0; n == MODEL_LABELS_MAX && r < START_RESULTS; r++)
            other |= row[MODEL_LABELS_MAX].count[r] > 0;
        for (size_t i = 0; i < n + other; i++)
            for (size_t r = 0; r < START_RESULTS; r++) {
                prom_label l[3];
                size_t n_l = tenant_label(l, snap[s].tenant);
                l[n_l++] = (prom_label){"model", row[i].label};
                l[n_l++] = (prom_label){"store", start_result_name((enum start_result)r)};
                prom_sample(t, starts, l, n_l, row[i].count[r]);
            }
    }
    prom_header(t, seconds, "histogram",
                "Time the node daemon took to answer a registration (references held, missing "
                "tensors published), by what the store held.");
    for (size_t s = 0; s < n_snap; s++)
        for (size_t r = 0; r < START_RESULTS; r++) {
            prom_label l[2];
            size_t n_l = tenant_label(l, snap[s].tenant);
            l[n_l++] = (prom_label){"store", start_result_name((enum start_result)r)};
            prom_histogram(t, seconds, l, n_l, ingest_duration_bounds, snap[s].start_bucket[r],
                           INGEST_DURATION_BUCKETS, (double)snap[s].start_us[r] / 1e6, "%.6f");
        }
}

/* Pulls from registries, node-wide (pull.h). */
static void render_pulls(textbuf *t, struct daemon *d)
{
    struct pull_counters *p = &d->pull;
    prom_header(t, "tetris_pull_tensors_total", "counter",
                "Tensor layers pulled from registries and published.");
    prom_sample(t, "tetris_pull_tensors_total", NULL, 0, atomic_load(&p->tensors));
    prom_header(t, "tetris_pull_bytes_total", "counter",
                "Bytes of the tensor layers pulled from registries.");
    prom_sample(t, "tetris_pull_bytes_total", NULL, 0, atomic_load(&p->bytes));
    prom_header(t, "tetris_pull_skipped_bytes_total", "counter",
                "Bytes of tensor layers not pulled because the store held them.");
    prom_sample(t, "tetris_pull_skipped_bytes_total", NULL, 0, atomic_load(&p->skipped_bytes));
    prom_header(t, "tetris_pull_withdrawn_tensors_total", "counter",
                "Tensors published by pulls that then failed, removed again.");
    prom_sample(t, "tetris_pull_withdrawn_tensors_total", NULL, 0,
                atomic_load(&p->withdrawn_tensors));
    static const char failures[] = "tetris_pull_failures_total";
    prom_header(t, failures, "counter", "Pulls that failed, by reason.");
    for (size_t r = 0; r < PULL_FAIL_REASONS; r++) {
        prom_label l = {"reason", pull_failure_name((enum pull_failure)r)};
        prom_sample(t, failures, &l, 1, atomic_load(&p->failures[r]));
    }
    uint64_t buckets[PULL_DURATION_BUCKETS + 1];
    for (size_t b = 0; b <= PULL_DURATION_BUCKETS; b++)
        buckets[b] = atomic_load(&p->duration_bucket[b]);
    static const char seconds[] = "tetris_pull_duration_seconds";
    prom_header(t, seconds, "histogram", "Time to serve a pull that succeeded.");
    prom_histogram(t, seconds, NULL, 0, pull_duration_bounds, buckets, PULL_DURATION_BUCKETS,
                   (double)atomic_load(&p->duration_us) / 1e6, "%.6f");
}

char *daemon_render_metrics(struct daemon *d, bool tenants, size_t *len)
{
    size_t n_all = daemon_store_count(d), n = 0, n_tenants = 0;
    struct store_snapshot *snap = calloc(n_all, sizeof(*snap));
    if (snap == NULL)
        return NULL;
    for (size_t i = 0; i < n_all; i++) {
        if (atomic_load(&d->stores[i]->retired))
            continue;
        n_tenants += i > 0;
        if (i == 0 || tenants)
            snapshot_store(d->stores[i], &snap[n++]);
    }
    pthread_mutex_lock(&d->pass_lock);
    int64_t last_pass_ms = d->last_pass_ms;
    int64_t last_pass_us = d->last_pass_us;
    int64_t last_locked_us = d->last_locked_us;
    pthread_mutex_unlock(&d->pass_lock);
    pthread_mutex_lock(&d->cfg_lock);
    uint64_t capacity = d->cfg.capacity_bytes;
    pthread_mutex_unlock(&d->cfg_lock);

    textbuf t = {0};
    prom_header(&t, "tetris_store_tmpfs_fallback", "gauge",
                "1 when the store was to be on a tmpfs of its own (--store-tmpfs) and is not: "
                "its directory held files first, or the mount was refused (see /healthz).");
    prom_sample(&t, "tetris_store_tmpfs_fallback", NULL, 0, store_tmpfs_fallback(d));
    prom_header(&t, "tetris_store_capacity_bytes", "gauge",
                "Configured capacity in bytes for all stores of the node (0 = unlimited).");
    prom_sample(&t, "tetris_store_capacity_bytes", NULL, 0, capacity);
    prom_header(&t, "tetris_store_tenants", "gauge", "Tenant stores the daemon serves.");
    prom_sample(&t, "tetris_store_tenants", NULL, 0, n_tenants);
    for (size_t f = 0; f < sizeof(store_families) / sizeof(store_families[0]); f++) {
        const struct store_family *fam = &store_families[f];
        prom_header(&t, fam->name, fam->type, fam->help);
        for (size_t i = 0; i < n; i++) {
            prom_label l[1];
            uint64_t v;
            memcpy(&v, (const char *)&snap[i] + fam->offset, sizeof(v));
            prom_sample(&t, fam->name, l, tenant_label(l, snap[i].tenant), v);
        }
    }
    render_models(&t, snap, n);
    render_durations(&t, snap, n);
    render_starts(&t, snap, n);
    render_pulls(&t, d);
    free(snap);
    gpu_pool_render_metrics(daemon_gpu_pool(), &t);
    prom_header(&t, "tetris_reclaim_passes_total", "counter",
                "Reclaim passes completed (each covers every store).");
    prom_sample(&t, "tetris_reclaim_passes_total", NULL, 0, atomic_load(&d->reclaim_passes));
    prom_header(&t, "tetris_last_reclaim_timestamp_seconds", "gauge",
                "Unix time of the last completed reclaim pass.");
    prom_sample_double(&t, "tetris_last_reclaim_timestamp_seconds", NULL, 0, "%.3f",
                       (double)last_pass_ms / 1000.0);
    prom_header(&t, "tetris_reclaim_pass_duration_seconds", "gauge",
                "How long the last reclaim pass took over all stores (repair, reconcile, "
                "free).");
    prom_sample_double(&t, "tetris_reclaim_pass_duration_seconds", NULL, 0, "%.6f",
                       (double)last_pass_us / 1e6);
    prom_header(&t, "tetris_reclaim_pass_locked_seconds", "gauge",
                "How long the last reclaim pass held one store's use lock at most (that "
                "store's ingests and loaders wait that long).");
    prom_sample_double(&t, "tetris_reclaim_pass_locked_seconds", NULL, 0, "%.6f",
                       (double)last_locked_us / 1e6);
    return textbuf_take(&t, len);
}

static void handle_metrics(void *ctx, const http_request *req, http_response *resp)
{
    (void)req;
    struct http_face *f = ctx;
    size_t len;
    char *text = daemon_render_metrics(f->a->d, f->tenants, &len);
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

static struct inventory_body *render_inventory(struct daemon *d, struct served_store *ss)
{
    pthread_mutex_lock(&ss->index_lock);
    size_t n = tensor_index_count(ss->index);
    inventory_doc doc = {.tenant = ss->tenant, .generation = ss->generation,
                         .resident_bytes = ss->resident_bytes, .n_tensors = n};
    /* A tensor removed since the last pass may have been cold. */
    doc.evictable_bytes = ss->evictable_bytes < ss->resident_bytes ? ss->evictable_bytes
                                                                   : ss->resident_bytes;
    doc.tensors = malloc((n ? n : 1) * sizeof(*doc.tensors));
    if (doc.tensors != NULL) {
        size_t c = 0, k = 0;
        struct index_entry *e;
        while ((e = tensor_index_next(ss->index, &c)) != NULL)
            doc.tensors[k++] = (inventory_tensor){e->digest, e->bytes};
    }
    pthread_mutex_unlock(&ss->index_lock);
    pthread_mutex_lock(&d->cfg_lock);
    doc.capacity_bytes = d->cfg.capacity_bytes;
    char node[sizeof(d->cfg.node_name)];
    memcpy(node, d->cfg.node_name, sizeof(node));
    pthread_mutex_unlock(&d->cfg_lock);
    doc.node = node;
    struct inventory_body *inv = calloc(1, sizeof(*inv));
    tetris_error err;
    if (doc.tensors == NULL || inv == NULL ||
        (inv->text = inventory_encode(&doc, &inv->len, &err)) == NULL) {
        free(doc.tensors);
        free(inv);
        return NULL;
    }
    free(doc.tensors);
    atomic_init(&inv->refs, 1);
    inv->generation = doc.generation;
    inventory_etag(doc.generation, inv->etag);
    return inv;
}

/* The cached inventory of store i for its current generation, with a
 * reference. */
static struct inventory_body *current_inventory(http_api *a, size_t i)
{
    struct served_store *ss = a->d->stores[i];
    pthread_mutex_lock(&ss->index_lock);
    uint64_t generation = ss->generation;
    pthread_mutex_unlock(&ss->index_lock);
    pthread_mutex_lock(&a->lock);
    if (a->inventory[i] == NULL || a->inventory[i]->generation != generation) {
        struct inventory_body *fresh = render_inventory(a->d, ss);
        if (fresh != NULL) {
            if (a->inventory[i] != NULL)
                inventory_release(a->inventory[i]);
            a->inventory[i] = fresh;
        }
    }
    struct inventory_body *inv = a->inventory[i];
    if (inv != NULL)
        atomic_fetch_add(&inv->refs, 1);
    pthread_mutex_unlock(&a->lock);
    return inv;
}

/* ?tenant=T picks a tenant's store; none (or empty) the shared one. The
 * public face answers every tenant alike, served or not: it must not tell
 * which tenants this node has. */
static void handle_inventory(void *ctx, const http_request *req, http_response *resp)
{
    struct http_face *f = ctx;
    http_api *a = f->a;
    const char *tenant = http_request_query(req, INVENTORY_TENANT_PARAM);
    if (tenant == NULL)
        tenant = "";
    if (tenant[0] != '\0' && !f->tenants) {
        http_response_error(resp, 403,
                            "tenant inventories are served on the tenant listen "
                            "address only");
        return;
    }
    size_t n = daemon_store_count(a->d), i = 0;
    while (i < n && (atomic_load(&a->d->stores[i]->retired) ||
                     strcmp(a->d->stores[i]->tenant, tenant) != 0))
        i++;
    if (i == n) {
        bool plain = strlen(tenant) < 64 &&
                     strspn(tenant, "abcdefghijklmnopqrstuvwxyz0123456789._-") == strlen(tenant);
        http_response_error(resp, plain ? 404 : 400,
                            plain ? "no such tenant store on this node"
                                  : "tenant names are 1-63 characters of [a-z0-9._-]");
        return;
    }
    struct inventory_body *inv = current_inventory(a, i);
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

/* What the store is on: its state, and why when it is not the tmpfs of its
 * own that was asked for. Still healthy: the daemon serves, on 4 KiB pages
 * (a restart would not change it). */
static json_t *tmpfs_detail(const struct daemon *d)
{
    const struct store_tmpfs_outcome *o = &d->tmpfs;
    json_t *j = json_pack("{s:s, s:b, s:s, s:b}", "state", store_tmpfs_state_name(o->state),
                          "tmpfs", o->on_tmpfs, "huge", o->huge[0] != '\0' ? o->huge : "-",
                          "fallback", store_tmpfs_fallback(d));
    if (j != NULL && o->reason[0] != '\0')
        json_object_set_new(j, "reason", json_string(o->reason));
    return j;
}

/* Failing when the last pass failed, or when none has completed for an
 * interval plus the deadline: a main loop stuck on something (a lock, a
 * file) answers no signal and runs no pass, and only this tells. */
static void handle_healthz(void *ctx, const http_request *req, http_response *resp)
{
    (void)req;
    struct http_face *f = ctx;
    struct daemon *d = f->a->d;
    pthread_mutex_lock(&d->cfg_lock);
    double deadline_s = d->cfg.interval_s + d->cfg.health_deadline_s;
    pthread_mutex_unlock(&d->cfg_lock);
    pthread_mutex_lock(&d->pass_lock);
    bool ok = d->last_pass_ok;
    int64_t last = d->last_pass_ms;
    double age_s = (double)(clock_mono_ms() - d->last_pass_mono_ms) / 1000.0;
    pthread_mutex_unlock(&d->pass_lock);
    bool late = age_s > deadline_s;
    json_t *j = json_pack("{s:s, s:f, s:b, s:o*}", "status", ok && !late ? "ok" : "failing",
                          "last_reclaim_age_seconds",
                          last ? (double)(clock_wall_ms() - last) / 1000.0 : -1.0, "pass_overdue",
                          late, "store_tmpfs", tmpfs_detail(d));
    if (j == NULL) {
        http_response_error(resp, 500, "out of memory");
        return;
    }
    http_response_json(resp, ok && !late ? 200 : 503, j);
    json_decref(j);
}

/* A slow or stalled client holds a slot until the idle timeout; the
 * per-address limit keeps one pod from holding all of them. */
#define HTTP_IDLE_TIMEOUT_S 10
#define HTTP_MAX_PER_ADDRESS 8

static int face_start(http_api *a, struct http_face *f, const char *listen, bool tenants,
                      tetris_error *err)
{
    f->a = a;
    f->tenants = tenants;
    struct http_server_options o;
    http_server_options_init(&o);
    o.listen = listen;
    o.max_body_bytes = 4096; /* GET only */
    o.threads = 2;           /* polling: a slow client holds a slot, not a thread */
    o.timeout_s = HTTP_IDLE_TIMEOUT_S;
    o.max_per_address = HTTP_MAX_PER_ADDRESS;
    int rc = http_server_new(&o, &f->server, err);
    if (rc == 0)
        rc = http_server_route(f->server, "GET", "/metrics", handle_metrics, f, err);
    if (rc == 0)
        rc = http_server_route(f->server, "GET", INVENTORY_PATH, handle_inventory, f, err);
    if (rc == 0)
        rc = http_server_route(f->server, "GET", "/healthz", handle_healthz, f, err);
    if (rc == 0)
        rc = http_server_start(f->server, err);
    if (rc == 0)
        log_info("event=http-listening addr=%s tenants=%d port=%u", listen, tenants,
                 http_server_port(f->server));
    return rc;
}

int http_api_start(struct daemon *d, http_api **out, tetris_error *err)
{
    http_api *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "http api");
    a->d = d;
    pthread_mutex_init(&a->lock, NULL);
    int rc = 0;
    if (d->cfg.listen[0] != '\0')
        rc = face_start(a, &a->faces[0], d->cfg.listen, false, err);
    if (rc == 0 && d->cfg.tenant_listen[0] != '\0')
        rc = face_start(a, &a->faces[1], d->cfg.tenant_listen, true, err);
    if (rc < 0) {
        http_api_stop(a);
        return rc;
    }
    *out = a;
    return 0;
}

void http_api_stop(http_api *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i < sizeof(a->faces) / sizeof(a->faces[0]); i++)
        http_server_free(a->faces[i].server);
    for (size_t i = 0; i < sizeof(a->inventory) / sizeof(a->inventory[0]); i++)
        if (a->inventory[i] != NULL)
            inventory_release(a->inventory[i]);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
