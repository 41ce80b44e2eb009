/* tetris-bench-extender.c - latency of the scheduler
 * extender's decisions for clusters of 10..5000 nodes holding 10k tensors
 * each.
 *
 * The inventories are generated (a pool of models, each node holding a
 * random selection of them) and installed into the extender's cache as if
 * fetched; a request is the JSON kube-scheduler sends, in both forms
 * (NodeNames and full Node objects). Each sample is what one scheduling
 * cycle costs the extender: parse the request, decide, serialise the reply,
 * for /filter and for /prioritize. HTTP transport is not included.
 * Cold: the model's manifest was just reloaded (a new version); the
 * extender computes every node's θ when it is loaded, which the "manifest
 * change" column times apart. Warm: the next pod of the same model with
 * nothing changed. "Inventory change CPU" is what the poller spends on one
 * changed inventory of node 0 (decode, intern, θ of every loaded model),
 * HTTP excluded. The CPU columns are the thread's CPU time for the cold
 * cycle: on a shared machine wall time also counts waiting for a core.
 *
 * usage: tetris-bench-extender [--nodes N,N,...] [--tensors-per-node N]
 *                              [--model-tensors N] [--samples N]
 * Prints a Markdown table on stdout. Exit status: 0 ok, 1 failure, 2 usage. */
#include <inttypes.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "scheduler-ext/extender/extender.h"
#include "scheduler-ext/extender/inventory.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/httpserver.h"
#include "common/log.h"
#include "common/options.h"
#include "common/textbuf.h"
#include "protocol/names.h"
#include "scheduler-ext/extender/manifests.h"
#include "scheduler-ext/extender/similarity.h"
#include "scheduler-ext/extender/tensor_ids.h"

typedef struct bench_opts {
    size_t nodes[16];
    size_t n_sizes;
    size_t tensors_per_node;
    size_t model_tensors;
    size_t samples; /* 0: chosen per size */
} bench_opts;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    /* splitmix64: deterministic, so every run measures the same cluster. */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void random_hex(char out[65])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 4; i++) {
        uint64_t v = rng();
        for (int j = 0; j < 16; j++, v >>= 4)
            out[i * 16 + j] = hex[v & 15];
    }
    out[64] = '\0';
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %ld", &kb) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kb;
}

/* A cluster: the models are slices of one digest pool; a node holds
 * tensors_per_node / model_tensors whole models picked at random. */
typedef struct cluster {
    char *manifest; /* model 0's manifest, re-installed to start a cold cycle */
    size_t manifest_len;
    tensor_ids *ids;
    manifest_cache *manifests;
    inventory_cache *inventories;
    extender *x;
    size_t n_models;
    uint32_t *pool; /* n_models * model_tensors ids */
    char (*hex)[65]; /* the pool's digests */
    size_t *node0;   /* the models node 0 holds, per_node of them */
    size_t heap_bytes; /* heap in use (mallinfo2) grown by building the inventories */
    long rss_grown_kb; /* RSS grown by the same */
} cluster;

static int make_cluster(cluster *c, size_t nodes, const bench_opts *o, tetris_error *err)
{
    memset(c, 0, sizeof *c);
    c->ids = tensor_ids_new();
    c->manifests = c->ids ? manifest_cache_new(c->ids) : NULL;
    /* Every refresh polls every node with a URL (the poll benchmark),
     * and a loaded machine (or a sanitizer build) does not time out. */
    inventory_opts io;
    inventory_opts_init(&io);
    io.refresh_ms = 0;
    io.timeout_ms = 60000;
    c->inventories = c->ids ? inventory_cache_new(c->ids, &io) : NULL;
    c->x = c->manifests && c->inventories ? extender_new(c->manifests, c->inventories, NULL) : NULL;
    if (c->x == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "bench cluster");
    size_t per_node = o->tensors_per_node / o->model_tensors;
    c->n_models = per_node * 4 > 64 ? per_node * 4 : 64;
    c->pool = malloc(c->n_models * o->model_tensors * sizeof *c->pool);
    c->hex = malloc(c->n_models * o->model_tensors * sizeof *c->hex);
    c->node0 = malloc(per_node * sizeof *c->node0);
    if (c->pool == NULL || c->hex == NULL || c->node0 == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "bench pool");

    /* Model 0's manifest is what the benchmarked pod runs. */
    size_t cap = o->model_tensors * 120 + 256;
    char *manifest = malloc(cap);
    if (manifest == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "bench manifest");
    size_t len = (size_t)snprintf(manifest, cap, "{\"format\":\"tetris-manifest/1\",\"tensors\":[");
    for (size_t m = 0; m < c->n_models; m++) {
        for (size_t t = 0; t < o->model_tensors; t++) {
            char *hex = c->hex[m * o->model_tensors + t];
            random_hex(hex);
            int r = tensor_ids_intern(c->ids, hex, &c->pool[m * o->model_tensors + t], err);
            if (r < 0) {
                free(manifest);
                return r;
            }
            if (m == 0)
                len += (size_t)snprintf(manifest + len, cap - len,
                                        "%s{\"digest\":\"sha256:%s\",\"nbytes\":%" PRIu64 "}",
                                        t ? "," : "", hex, 4096 + rng() % (1u << 20));
        }
    }
    len += (size_t)snprintf(manifest + len, cap - len, "]}");
    c->manifest = manifest;
    c->manifest_len = len;
    int r = manifest_cache_put(c->manifests, "bench-model", manifest, len, err);
    if (r < 0)
        return r;

    uint32_t *scratch = malloc(per_node * o->model_tensors * sizeof *scratch);
    if (scratch == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "bench inventory");
    /* What the inventories take: the heap in use around building them
     * (their sets, entries, the map; the scratch array is allocated
     * before), and the RSS, which also moves with the allocator's caching. */
    size_t heap0 = mallinfo2().uordblks;
    long rss0 = rss_kb();
    for (size_t n = 0; n < nodes; n++) {
        node_inventory *inv = node_inventory_new();
        if (inv == NULL) {
            free(scratch);
            return tetris_fail(err, TETRIS_E_NOMEM, 0, "bench inventory");
        }
        for (size_t k = 0; k < per_node; k++) {
            size_t m = (size_t)(rng() % c->n_models);
            if (n == 0)
                c->node0[k] = m;
            memcpy(scratch + k * o->model_tensors, c->pool + m * o->model_tensors,
                   o->model_tensors * sizeof *scratch);
        }
        r = node_inventory_set_ids(inv, NULL, scratch, per_node * o->model_tensors, err);
        if (r < 0) {
            node_inventory_free(inv);
            free(scratch);
            return r;
        }
        inv->generation = 1;
        inv->capacity_bytes = 64ull << 30;
        inv->resident_bytes = (uint64_t)(rng() % (64ull << 30));
        char name[32];
        snprintf(name, sizeof name, "node-%05zu", n);
        r = inventory_cache_put(c->inventories, name, inv, err);
        if (r < 0)
            break;
    }
    c->heap_bytes = mallinfo2().uordblks - heap0;
    c->rss_grown_kb = rss_kb() - rss0;
    free(scratch);
    return r;
}

static void free_cluster(cluster *c)
{
    extender_free(c->x);
    manifest_cache_free(c->manifests);
    inventory_cache_free(c->inventories);
    tensor_ids_free(c->ids);
    free(c->pool);
    free(c->hex);
    free(c->node0);
    free(c->manifest);
}

/* The ExtenderArgs kube-scheduler sends for one pod. */
static char *make_request(size_t nodes, bool by_name)
{
    json_t *list = json_array();
    for (size_t n = 0; n < nodes; n++) {
        char name[32];
        snprintf(name, sizeof name, "node-%05zu", n);
        if (by_name)
            json_array_append_new(list, json_string(name));
        else
            /* A Node roughly as big as a real one's interesting parts, but
             * without addresses: the benchmark must not poll anything. */
            json_array_append_new(
                list, json_pack("{s:{s:s,s:{s:s,s:s,s:s},s:{s:s}},s:{s:{s:s,s:s,s:s},s:{s:s,s:s,s:s}}}",
                                "metadata", "name", name, "labels", "kubernetes.io/hostname", name,
                                "kubernetes.io/os", "linux", "node.kubernetes.io/instance-type",
                                "m5.2xlarge", "annotations", "node.alpha.kubernetes.io/ttl", "0",
                                "status", "allocatable", "cpu", "8", "memory", "32Gi", "pods",
                                "110", "capacity", "cpu", "8", "memory", "32Gi", "pods", "110"));
    }
    json_t *args = json_pack("{s:{s:{s:s,s:s,s:{s:s}}}}", "Pod", "metadata", "name", "fn-1",
                             "namespace", "fns", "labels", TETRIS_LABEL_MODEL, "bench-model");
    json_object_set_new(args, by_name ? "NodeNames" : "Nodes",
                        by_name ? list : json_pack("{s:o}", "items", list));
    json_object_set_new(args, by_name ? "Nodes" : "NodeNames", json_null());
    char *s = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    return s;
}

typedef int (*decide_fn)(extender *x, const char *body, size_t len, char **reply, size_t *reply_len,
                         tetris_error *err);

/* One request as the HTTP handler serves it: read, decide, write. */
static int serve_once(extender *x, decide_fn fn, const char *request, tetris_error *err)
{
    char *reply = NULL;
    size_t len = 0;
    int r = fn(x, request, strlen(request), &reply, &len, err);
    free(reply);
    return r;
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Node 0's /inventory document (per_node models' tensors). */
static char *node0_doc(const cluster *c, const bench_opts *o, size_t *len)
{
    size_t per_node = o->tensors_per_node / o->model_tensors;
    textbuf t = {0};
    textbuf_printf(&t,
                   "{\"node\":\"node-00000\",\"generation\":2,"
                   "\"capacity_bytes\":%llu,\"resident_bytes\":%llu,\"tensors\":[",
                   64ull << 30, 1ull << 30);
    for (size_t k = 0; k < per_node; k++)
        for (size_t i = 0; i < o->model_tensors; i++)
            textbuf_printf(&t, "%s{\"digest\":\"sha256:%s\",\"bytes\":%u}", k + i ? "," : "",
                           c->hex[c->node0[k] * o->model_tensors + i], 4096u + (unsigned)i);
    textbuf_puts(&t, "]}");
    return textbuf_take(&t, len);
}

/* What a changed inventory costs the poller (CPU of the thread): decode
 * node 0's document, intern its digests, θ of every loaded model; the
 * HTTP exchange is not included. Median of reps, in ms. */
static double inventory_change_ms(cluster *c, const char *doc, size_t len, size_t reps,
                                  tetris_error *err)
{
    double *v = malloc(reps * sizeof *v), med = -1;
    int r = v != NULL ? 0 : tetris_fail(err, TETRIS_E_NOMEM, 0, "bench inventory");
    for (size_t i = 0; r == 0 && i < reps; i++) {
        node_inventory *inv = NULL;
        double a = cpu_ms();
        r = inventory_parse(c->ids, doc, len, &inv, err);
        if (r == 0)
            r = inventory_cache_put(c->inventories, "node-00000", inv, err);
        v[i] = cpu_ms() - a;
    }
    if (r == 0)
        med = percentile(v, reps, 0.5);
    free(v);
    return med;
}

/* ---- the inventory poll over HTTP ---- */

/* A node daemon's /inventory as tetris-reclaimer serves it (a document
 * rendered once per generation, ETag "G", 304 to a matching If-None-Match,
 * two polling threads), one document for every node. changing: each reply
 * is a new generation, so every poll is a 200 and a parse. */
typedef struct inventory_server {
    const char *doc;
    size_t len;
    atomic_bool changing;
    atomic_uint_least64_t generation;
} inventory_server;

static void no_release(void *ctx)
{
    (void)ctx;
}

static void serve_inventory(void *ctx, const http_request *req, http_response *resp)
{
    inventory_server *s = ctx;
    char etag[INVENTORY_ETAG_MAX];
    uint64_t g = atomic_load(&s->changing) ? atomic_fetch_add(&s->generation, 1) + 1
                                           : atomic_load(&s->generation);
    inventory_etag(g, etag);
    const char *inm = http_request_header(req, "If-None-Match");
    if (inm != NULL && strcmp(inm, etag) == 0) {
        http_response_empty(resp, 304);
        http_response_add_header(resp, "ETag", etag);
        return;
    }
    http_response_add_header(resp, "ETag", etag);
    http_response_set_shared(resp, 200, "application/json", s->doc, s->len, no_release, NULL);
}

typedef struct poll_cost {
    size_t polled;            /* nodes polled per round */
    double unchanged_self_us; /* per 304 poll: the polling thread's CPU */
    double unchanged_all_us;  /* ... and the serving threads' */
    double changed_self_ms;   /* per 200 poll of a changed inventory */
    double changed_all_ms;
} poll_cost;

static double process_cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* rounds of inventory_cache_refresh; CPU of this thread and of the process
 * per poll, checking that each poll had the expected result. */
static int poll_rounds(cluster *c, size_t polled, size_t rounds, bool want_304, double *self_ms,
                       double *all_ms, tetris_error *err)
{
    inventory_stats before, after;
    inventory_cache_stats(c->inventories, &before);
    double t0 = cpu_ms(), p0 = process_cpu_ms();
    for (size_t i = 0; i < rounds; i++)
        inventory_cache_refresh(c->inventories);
    double t1 = cpu_ms(), p1 = process_cpu_ms();
    inventory_cache_stats(c->inventories, &after);
    uint64_t ok = after.fetch_ok - before.fetch_ok;
    uint64_t not_modified = after.fetch_not_modified - before.fetch_not_modified;
    uint64_t want = (uint64_t)(polled * rounds);
    if ((want_304 ? not_modified : ok) != want || after.fetch_error != before.fetch_error)
        return tetris_fail(err, TETRIS_E_IO, 0,
                           "inventory poll: %" PRIu64 " ok, %" PRIu64 " not modified, %" PRIu64
                           " errors where %" PRIu64 " %s were expected",
                           ok, not_modified, after.fetch_error - before.fetch_error, want,
                           want_304 ? "304s" : "200s");
    *self_ms = (t1 - t0) / (double)want;
    *all_ms = (p1 - p0) / (double)want;
    return 0;
}

/* The poll's CPU over HTTP on loopback: the first `polled` nodes point at
 * one local daemon-like server; an unchanged inventory (304) and a changed
 * one (200, decode, intern, θ). Replaces those nodes' inventories with
 * node 0's, so it runs after the decisions. */
static int poll_cost_of(cluster *c, size_t nodes, const char *doc, size_t len, poll_cost *out,
                        tetris_error *err)
{
    inventory_server srv = {.doc = doc, .len = len};
    atomic_init(&srv.changing, true);
    atomic_init(&srv.generation, 1);
    struct http_server_options so;
    http_server_options_init(&so);
    so.listen = "127.0.0.1:0";
    so.threads = 2; /* as tetris-reclaimer */
    http_server *hs = NULL;
    int r = http_server_new(&so, &hs, err);
    if (r == 0)
        r = http_server_route(hs, "GET", INVENTORY_PATH, serve_inventory, &srv, err);
    if (r == 0)
        r = http_server_start(hs, err);
    out->polled = nodes < 100 ? nodes : 100;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u" INVENTORY_PATH,
             (unsigned)(hs != NULL ? http_server_port(hs) : 0));
    for (size_t i = 0; r == 0 && i < out->polled; i++) {
        char name[32];
        snprintf(name, sizeof name, "node-%05zu", i);
        r = inventory_cache_set_url(c->inventories, name, url, err);
    }
    /* Changed: every poll a new generation. */
    if (r == 0)
        r = poll_rounds(c, out->polled, 3, false, &out->changed_self_ms, &out->changed_all_ms, err);
    /* Unchanged: a new generation, one round to learn its ETag, then 304s. */
    atomic_store(&srv.changing, false);
    atomic_fetch_add(&srv.generation, 1);
    double ignored_self, ignored_all;
    if (r == 0)
        r = poll_rounds(c, out->polled, 1, false, &ignored_self, &ignored_all, err);
    if (r == 0)
        r = poll_rounds(c, out->polled, 20, true, &out->unchanged_self_us, &out->unchanged_all_us,
                        err);
    out->unchanged_self_us *= 1e3;
    out->unchanged_all_us *= 1e3;
    http_server_free(hs);
    return r;
}

static const char *change_text(double ms)
{
    static char buf[32];
    if (ms < 0)
        return "-";
    snprintf(buf, sizeof buf, "%.2f", ms);
    return buf;
}

/* What one cluster size measured beside the decisions. */
typedef struct size_result {
    size_t nodes;
    size_t counted;   /* inventory_stats.bytes */
    size_t sets;      /* of which the id sets */
    size_t as_arrays; /* the same ids as sorted uint32 arrays */
    size_t id_table;  /* tensor_ids_bytes */
    size_t heap;      /* cluster.heap_bytes */
    long rss_kb;      /* cluster.rss_grown_kb */
    poll_cost poll;
} size_result;

static void count_sets(void *user, const node_inventory *inv)
{
    size_result *res = user;
    if (inv->ids == NULL)
        return;
    res->sets += id_set_bytes(inv->ids);
    res->as_arrays += id_set_count(inv->ids) * sizeof(uint32_t);
}

static void measure_memory(cluster *c, size_result *res)
{
    inventory_stats st;
    inventory_cache_stats(c->inventories, &st);
    res->counted = st.bytes;
    inventory_cache_rdlock(c->inventories);
    inventory_cache_each(c->inventories, count_sets, res);
    inventory_cache_unlock(c->inventories);
    res->id_table = tensor_ids_bytes(c->ids);
    res->heap = c->heap_bytes;
    res->rss_kb = c->rss_grown_kb;
}

static int bench_size(size_t nodes, const bench_opts *o, size_result *res, tetris_error *err)
{
    cluster c;
    long rss0 = rss_kb();
    double t0 = clock_now_ms();
    int r = make_cluster(&c, nodes, o, err);
    double build_s = (clock_now_ms() - t0) / 1e3;
    long rss1 = rss_kb();
    *res = (size_result){.nodes = nodes};
    if (r == 0)
        measure_memory(&c, res);
    size_t doc_len = 0;
    char *doc = r == 0 ? node0_doc(&c, o, &doc_len) : NULL;
    if (r == 0 && doc == NULL)
        r = tetris_fail(err, TETRIS_E_NOMEM, 0, "bench inventory");
    size_t samples = o->samples ? o->samples
                                : (nodes <= 100 ? 1000 : nodes <= 1000 ? 200 : 50);
    for (int form = 0; r == 0 && form < 2; form++) {
        bool by_name = form == 0;
        char *request = make_request(nodes, by_name);
        double *f = malloc(samples * sizeof *f), *p = malloc(samples * sizeof *p),
               *fp = malloc(samples * sizeof *fp), *warm = malloc(samples * sizeof *warm),
               *put = malloc(samples * sizeof *put), *cpu = malloc(samples * sizeof *cpu);
        if (request == NULL || f == NULL || p == NULL || fp == NULL || warm == NULL ||
            put == NULL || cpu == NULL)
            r = tetris_fail(err, TETRIS_E_NOMEM, 0, "bench samples");
        /* Cold cycle: the model's manifest was just (re)loaded, as a new
         * version: the θ of every node is computed when it is loaded (put,
         * timed apart), or by the first decision that finds it missing. */
        for (size_t i = 0; r == 0 && i < samples; i++) {
            double a = clock_now_ms();
            r = manifest_cache_put(c.manifests, "bench-model", c.manifest, c.manifest_len, err);
            put[i] = clock_now_ms() - a;
            double cpu0 = cpu_ms();
            a = clock_now_ms();
            if (r == 0)
                r = serve_once(c.x, extender_filter, request, err);
            double b = clock_now_ms();
            if (r == 0)
                r = serve_once(c.x, extender_prioritize, request, err);
            double d = clock_now_ms();
            cpu[i] = cpu_ms() - cpu0;
            f[i] = b - a;
            p[i] = d - b;
            fp[i] = d - a;
        }
        /* Warm cycle: another pod of the same model, nothing changed. */
        for (size_t i = 0; r == 0 && i < samples; i++) {
            double a = clock_now_ms();
            r = serve_once(c.x, extender_filter, request, err);
            if (r == 0)
                r = serve_once(c.x, extender_prioritize, request, err);
            warm[i] = clock_now_ms() - a;
        }
        double change = r == 0 && form == 0 ? inventory_change_ms(&c, doc, doc_len, 20, err) : -1;
        if (r == 0 && form == 0 && change < 0)
            r = -1;
        if (r == 0)
            printf("| %zu | %zu | %s | %zu | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f "
                   "| %.3f | %.3f | %.1f | %s | %.0f | %.1f |\n",
                   nodes, o->tensors_per_node, by_name ? "NodeNames" : "Nodes", samples,
                   percentile(f, samples, 0.5), percentile(f, samples, 0.99),
                   percentile(p, samples, 0.5), percentile(p, samples, 0.99),
                   percentile(fp, samples, 0.5), percentile(fp, samples, 0.99),
                   percentile(cpu, samples, 0.5), percentile(cpu, samples, 0.99),
                   percentile(warm, samples, 0.5), percentile(warm, samples, 0.99),
                   percentile(put, samples, 0.5), change_text(change),
                   (double)(rss1 - rss0) / 1024.0, build_s);
        fflush(stdout);
        free(request);
        free(f);
        free(p);
        free(fp);
        free(warm);
        free(put);
        free(cpu);
    }
    if (r == 0)
        r = poll_cost_of(&c, nodes, doc, doc_len, &res->poll, err);
    free(doc);
    free_cluster(&c);
    return r;
}

/* --nodes N,N,...: up to 16 cluster sizes, each > 0. */
static int parse_nodes(const struct opt_spec *spec, const char *label, const char *value,
                       tetris_error *err)
{
    bench_opts *o = spec->dest;
    char *end = NULL;
    o->n_sizes = 0;
    for (const char *s = value; *s && o->n_sizes < 16; s = *end ? end + 1 : end) {
        o->nodes[o->n_sizes] = strtoul(s, &end, 10);
        if (end == s || o->nodes[o->n_sizes] == 0 || (*end != ',' && *end != '\0'))
            return tetris_fail(err, TETRIS_E_INVAL, 0, "bad %s '%s'", label, value);
        o->n_sizes++;
    }
    return 0;
}

/* A count into a size_t. */
static int parse_size(const struct opt_spec *spec, const char *label, const char *value,
                      tetris_error *err)
{
    uint64_t v;
    int r = cli_parse_u64(label, value, 0, SIZE_MAX, &v, err);
    if (r == 0)
        *(size_t *)spec->dest = (size_t)v;
    return r;
}

int main(int argc, char **argv)
{
    bench_opts o = {.nodes = {10, 100, 1000, 5000}, .n_sizes = 4, .tensors_per_node = 10000,
                    .model_tensors = 1000};
    const struct opt_spec specs[] = {
        {.name = "nodes",
         .type = OPT_TYPE_CUSTOM,
         .dest = &o,
         .parse = parse_nodes,
         .meta = "N,N,...",
         .help = "cluster sizes, up to 16 (default 10,100,1000,5000)"},
        {.name = "tensors-per-node",
         .type = OPT_TYPE_CUSTOM,
         .dest = &o.tensors_per_node,
         .parse = parse_size,
         .meta = "N",
         .help = "tensors in each node's store (default 10000)"},
        {.name = "model-tensors",
         .type = OPT_TYPE_CUSTOM,
         .dest = &o.model_tensors,
         .parse = parse_size,
         .meta = "N",
         .help = "tensors of the pod's model, 0 < N <= --tensors-per-node (default 1000)"},
        {.name = "samples",
         .type = OPT_TYPE_CUSTOM,
         .dest = &o.samples,
         .parse = parse_size,
         .meta = "N",
         .help = "decisions timed per size (default 1000 up to 100 nodes, 200 up to 1000, 50 "
                 "beyond)"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-bench-extender",
        .synopsis = "[--nodes N,N,...] [--tensors-per-node N]\n[--model-tensors N] [--samples N]",
        .about = "Latency of the scheduler extender's filter + prioritize decisions (no HTTP)\n"
                 "for generated clusters. Markdown table on stdout.\n",
        .options = specs,
        .epilogue = "Exit status: 0 ok, 1 failure, 2 usage.\n",
    };
    int first;

    log_init(argv[0]);
    log_set_level(LOG_LEVEL_WARN);
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return 2;
    if (first != argc)
        return opt_usage_error(&prog, "unexpected argument '%s'", argv[first]), 2;
    if (o.model_tensors == 0 || o.tensors_per_node < o.model_tensors)
        return opt_usage_error(&prog, "need 0 < --model-tensors <= --tensors-per-node"), 2;
    printf("| nodes | tensors/node | request form | samples | cold: filter p50 ms | p99 ms | "
           "cold: prioritize p50 ms | p99 ms | cold: filter+prioritize p50 ms | p99 ms | "
           "cold: filter+prioritize CPU p50 ms | p99 ms | "
           "warm: filter+prioritize p50 ms | p99 ms | manifest change p50 ms | "
           "inventory change CPU ms | build RSS Δ (MiB) | setup s |\n");
    printf("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|--"
           "-:|\n");
    size_result res[16];
    for (size_t i = 0; i < o.n_sizes; i++) {
        tetris_error err = {0};
        if (bench_size(o.nodes[i], &o, &res[i], &err) < 0) {
            fprintf(stderr, "tetris-bench-extender: %s\n", err.msg);
            return 1;
        }
    }
    const double mib = 1024.0 * 1024.0;
    printf("\n| nodes | tensors/node | inventories counted (MiB) | of which id sets (MiB) | "
           "same ids as uint32 arrays (MiB) | digest table counted (MiB) | "
           "inventories heap Δ (MiB) | inventories RSS Δ (MiB) |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < o.n_sizes; i++)
        printf("| %zu | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", res[i].nodes,
               o.tensors_per_node, (double)res[i].counted / mib, (double)res[i].sets / mib,
               (double)res[i].as_arrays / mib, (double)res[i].id_table / mib,
               (double)res[i].heap / mib, (double)res[i].rss_kb / 1024.0);
    /* Per node per minute at the extender's default poll period. */
    inventory_opts dflt;
    inventory_opts_init(&dflt);
    double per_min = 60000.0 / (double)dflt.refresh_ms;
    printf("\n| nodes | nodes polled | poll period s | unchanged (304): poller CPU µs/poll | "
           "poller + daemon CPU µs/poll | CPU per node per minute ms (poller / both) | "
           "changed (200): poller CPU ms/poll | poller + daemon CPU ms/poll | "
           "CPU per node per minute ms (poller / both) |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < o.n_sizes; i++) {
        const poll_cost *p = &res[i].poll;
        printf("| %zu | %zu | %.0f | %.1f | %.1f | %.2f / %.2f | %.2f | %.2f | %.0f / %.0f |\n",
               res[i].nodes, p->polled, (double)dflt.refresh_ms / 1e3, p->unchanged_self_us,
               p->unchanged_all_us, p->unchanged_self_us * per_min / 1e3,
               p->unchanged_all_us * per_min / 1e3, p->changed_self_ms, p->changed_all_ms,
               p->changed_self_ms * per_min, p->changed_all_ms * per_min);
    }
    return 0;
}
