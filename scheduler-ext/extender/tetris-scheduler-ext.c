/* tetris-scheduler-ext.c - the kube-scheduler extender that
 * places pods on the node whose tensor store already holds most of their
 * model. Wires the caches (manifests from ConfigMaps, node inventory URLs
 * from Node objects, inventories from the nodes' tetris-reclaimers) to the
 * HTTP server. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "scheduler-ext/extender/extender.h"
#include "common/clock.h"
#include "common/daemon_run.h"
#include "common/httpserver.h"
#include "scheduler-ext/extender/inventory.h"
#include "common/kube.h"
#include "common/log.h"
#include "common/options.h"
#include "scheduler-ext/extender/manifests.h"
#include "scheduler-ext/extender/tensor_ids.h"
#include "protocol/names.h"

typedef struct options {
    const char *listen;
    const char *kubeconfig;
    const char *ns;
    const char *manifest_dir;
    bool standalone;
    int inventory_port;
    const char *inventory_url_ports;
    inventory_url_policy urls;
    inventory_opts inv;
} options;

static const char about[] =
    "kube-scheduler extender: filters out nodes whose tensor store cannot take a pod's\n"
    "model and scores the rest 0-10 by tensor similarity (the share of the model's\n"
    "tensor bytes already in the node's store). Serves POST /filter, POST /prioritize,\n"
    "GET /metrics, GET /healthz.\n";

static const char epilogue[] =
    "A pod names its model with the label or annotation " TETRIS_LABEL_MODEL "; the model's\n"
    "manifest is a ConfigMap labelled " TETRIS_LABEL_MODEL
    "=<model> with key " TETRIS_MANIFEST_CONFIGMAP_KEY ".\n"
    "\n"
    "Exit status: 0 stopped by SIGTERM/SIGINT, 1 runtime failure (cannot listen,\n"
    "no cluster credentials), 2 usage error.\n";

/* 0 to run, -1 after a usage error. */
static int parse_options(int argc, char **argv, options *o)
{
    /* 0: not given, the inventory's defaults stay. */
    int64_t refresh_s = 0, stale_s = 0, fetch_timeout_ms = 0;
    tetris_error err = {0};
    const struct opt_spec specs[] = {
        {.name = "listen",
         .type = OPT_TYPE_STRING,
         .dest = &o->listen,
         .meta = "ADDR:PORT",
         .help = "HTTP address (default " TETRIS_EXTENDER_LISTEN ")"},
        {.name = "kubeconfig",
         .type = OPT_TYPE_STRING,
         .dest = &o->kubeconfig,
         .meta = "FILE",
         .help = "kubeconfig to reach the apiserver (default: in-cluster service account)"},
        {.name = "namespace",
         .type = OPT_TYPE_STRING,
         .dest = &o->ns,
         .meta = "NS",
         .help = "namespace of the manifest ConfigMaps (default: the kubeconfig context's / "
                 "service account's)"},
        {.name = "manifest-dir",
         .type = OPT_TYPE_STRING,
         .dest = &o->manifest_dir,
         .meta = "DIR",
         .help = "also load manifests from DIR/<model>.json"},
        {.name = "standalone",
         .type = OPT_TYPE_FLAG,
         .dest = &o->standalone,
         .help = "no apiserver: manifests from --manifest-dir only, nodes must come as objects "
                 "(nodeCacheCapable: false) whose annotations name their inventory URLs; with "
                 "an apiserver only the Node watch does"},
        {.name = "inventory-port",
         .type = OPT_TYPE_INT,
         .dest = &o->inventory_port,
         .min = 1,
         .max = 65535,
         .meta = "PORT",
         .help = "tetris-reclaimer port on nodes without a " TETRIS_ANNOTATION_INVENTORY_URL
                 " annotation (default " TETRIS_STRINGIFY(TETRIS_RECLAIMER_PORT) ")"},
        {.name = "inventory-url-ports",
         .type = OPT_TYPE_STRING,
         .dest = &o->inventory_url_ports,
         .meta = "LIST",
         .help = "ports an annotation may name, PORT or LO-HI, comma-separated (default: "
                 "--inventory-port); its host must be the node's InternalIP or 127.0.0.1"},
        {.name = "refresh",
         .type = OPT_TYPE_I64,
         .dest = &refresh_s,
         .min = 1,
         .max = 3600,
         .meta = "SECONDS",
         .help = "inventory poll period (default 1)"},
        {.name = "stale-after",
         .type = OPT_TYPE_I64,
         .dest = &stale_s,
         .min = 1,
         .max = 86400,
         .meta = "SECONDS",
         .help = "ignore an inventory not refreshed for this long (default 30)"},
        {.name = "fetch-timeout",
         .type = OPT_TYPE_I64,
         .dest = &fetch_timeout_ms,
         .min = 10,
         .max = 60000,
         .meta = "MS",
         .help = "timeout of one inventory fetch (default 1000)"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-scheduler-ext",
        .about = about,
        .options = specs,
        .epilogue = epilogue,
    };
    int first;

    *o = (options){.listen = TETRIS_EXTENDER_LISTEN, .inventory_port = TETRIS_RECLAIMER_PORT};
    inventory_opts_init(&o->inv);
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return -1;
    if (first < argc)
        return opt_usage_error(&prog, "unexpected argument '%s'", argv[first]);
    if (refresh_s != 0)
        o->inv.refresh_ms = refresh_s * 1000;
    if (stale_s != 0)
        o->inv.stale_ms = stale_s * 1000;
    if (fetch_timeout_ms != 0)
        o->inv.timeout_ms = fetch_timeout_ms;
    inventory_url_policy_init(&o->urls, o->inventory_port);
    if (o->inventory_url_ports != NULL &&
        inventory_url_policy_ports(&o->urls, o->inventory_url_ports, &err) < 0)
        return opt_usage_error(&prog, "--inventory-url-ports: %s", err.msg);
    if (o->standalone && o->kubeconfig != NULL)
        return opt_usage_error(&prog, "--standalone and --kubeconfig exclude each other");
    return 0;
}

/* ---- HTTP handlers ---- */

typedef int (*decide_fn)(extender *x, const char *body, size_t len, char **reply, size_t *reply_len,
                         tetris_error *err);

static void serve_decision(extender *x, const char *verb, decide_fn fn, const http_request *req,
                           http_response *resp)
{
    double t0 = clock_now_ms();
    tetris_error err = {0};
    char *reply = NULL;
    size_t len = 0;
    int r = fn(x, req->body, req->body_len, &reply, &len, &err);
    int status = 200;
    if (r == 0) {
        http_response_take_body(resp, 200, "application/json", reply, len);
    } else {
        status = r == -TETRIS_E_NOMEM ? 500 : 400;
        log_warn("event=bad-request verb=%s msg=%s", verb, LOG_Q(err.msg));
        http_response_error(resp, status, "%s", err.msg);
    }
    extender_observe(x, verb, status, (clock_now_ms() - t0) / 1e3);
}

static void handle_filter(void *ctx, const http_request *req, http_response *resp)
{
    serve_decision(ctx, "filter", extender_filter, req, resp);
}

static void handle_prioritize(void *ctx, const http_request *req, http_response *resp)
{
    serve_decision(ctx, "prioritize", extender_prioritize, req, resp);
}

static void handle_metrics(void *ctx, const http_request *req, http_response *resp)
{
    (void)req;
    size_t len = 0;
    char *text = extender_metrics_text(ctx, &len);
    if (text == NULL) {
        http_response_error(resp, 500, "out of memory");
        return;
    }
    http_response_take_body(resp, 200, "text/plain; version=0.0.4", text, len);
}

static void handle_healthz(void *ctx, const http_request *req, http_response *resp)
{
    (void)ctx, (void)req;
    http_response_set_body(resp, 200, "text/plain", "ok\n", 3);
}

/* ---- Node objects -> inventory URLs (for nodeCacheCapable: true) ---- */

typedef struct node_watch {
    kube_client *kc;
    inventory_cache *inventories;
    const inventory_url_policy *urls;
    volatile bool stop;
    pthread_t thread;
} node_watch;

static void learn_node(node_watch *w, json_t *node)
{
    const char *name = json_string_value(json_object_get(json_object_get(node, "metadata"), "name"));
    char url[1024];
    tetris_error err = {0};
    if (name == NULL)
        return;
    int r = inventory_url_from_node(node, w->urls, url, sizeof url, &err);
    if (r == 0) {
        inventory_cache_set_url(w->inventories, name, url, &err);
        return;
    }
    /* What the node named before is void too. */
    inventory_cache_forget(w->inventories, name);
    if (r == -TETRIS_E_DENIED)
        log_warn("event=inventory-url-refused node=%s msg=%s", LOG_Q(name), LOG_Q(err.msg));
}

static int on_nodes_listed(json_t *items, void *user)
{
    size_t i;
    json_t *node;
    json_array_foreach(items, i, node)
        learn_node(user, node);
    log_info("event=nodes-listed nodes=%zu", json_array_size(items));
    return 0;
}

static int on_node_event(const char *type, json_t *node, void *user)
{
    node_watch *w = user;
    if (strcmp(type, "DELETED") == 0) {
        const char *name =
            json_string_value(json_object_get(json_object_get(node, "metadata"), "name"));
        if (name != NULL)
            inventory_cache_forget(w->inventories, name);
    } else {
        learn_node(w, node);
    }
    return 0;
}

static void *node_watch_thread(void *arg)
{
    node_watch *w = arg;
    tetris_error err = {0};
    if (kube_list_watch(w->kc, "/api/v1/nodes", NULL, on_nodes_listed, on_node_event, w,
                        &w->stop, &err) < 0) {
        log_error("event=node-watch-failed msg=%s", LOG_Q(err.msg));
    }
    return NULL;
}

/* ---- main ---- */

typedef struct program {
    tensor_ids *ids;
    manifest_cache *manifests;
    inventory_cache *inventories;
    extender *x;
    kube_client *kc;
    node_watch nodes;
    bool nodes_watching;
    http_server *http;
} program;

static void program_free(program *p)
{
    http_server_free(p->http);
    if (p->nodes_watching) {
        p->nodes.stop = true;
        pthread_join(p->nodes.thread, NULL);
    }
    extender_free(p->x); /* before the caches: it unhooks itself from them */
    manifest_cache_free(p->manifests);
    inventory_cache_free(p->inventories);
    kube_client_free(p->kc);
    tensor_ids_free(p->ids);
}

static int program_start(program *p, const options *o, tetris_error *err)
{
    p->ids = tensor_ids_new();
    p->manifests = p->ids != NULL ? manifest_cache_new(p->ids) : NULL;
    p->inventories = p->ids != NULL ? inventory_cache_new(p->ids, &o->inv) : NULL;
    p->x = p->manifests != NULL && p->inventories != NULL
               ? extender_new(p->manifests, p->inventories, o->standalone ? &o->urls : NULL)
               : NULL;
    if (p->x == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "start");
    int r = 0;
    if (o->manifest_dir != NULL && (r = manifest_cache_load_dir(p->manifests, o->manifest_dir, err)) < 0)
        return r;
    if (!o->standalone) {
        r = kube_client_new(o->kubeconfig, &p->kc, err);
        if (r < 0)
            return r;
        const char *ns = o->ns != NULL ? o->ns : kube_client_namespace(p->kc);
        r = manifest_cache_watch(p->manifests, p->kc, ns, err);
        if (r < 0)
            return r;
        p->nodes = (node_watch){.kc = p->kc, .inventories = p->inventories, .urls = &o->urls};
        int e = pthread_create(&p->nodes.thread, NULL, node_watch_thread, &p->nodes);
        if (e != 0)
            return tetris_fail(err, TETRIS_E_IO, e, "node watch thread");
        p->nodes_watching = true;
        log_info("event=cluster server=%s manifest_namespace=%s", kube_client_server(p->kc), ns);
    }
    r = inventory_cache_start(p->inventories, err);
    if (r < 0)
        return r;

    struct http_server_options ho;
    http_server_options_init(&ho);
    ho.listen = o->listen;
    ho.max_body_bytes = 64u << 20; /* 5000 full Node objects fit */
    r = http_server_new(&ho, &p->http, err);
    if (r == 0)
        r = http_server_route(p->http, "POST", "/filter", handle_filter, p->x, err);
    if (r == 0)
        r = http_server_route(p->http, "POST", "/prioritize", handle_prioritize, p->x, err);
    if (r == 0)
        r = http_server_route(p->http, "GET", "/metrics", handle_metrics, p->x, err);
    if (r == 0)
        r = http_server_route(p->http, "GET", "/healthz", handle_healthz, p->x, err);
    if (r == 0)
        r = http_server_start(p->http, err);
    if (r == 0)
        log_info("event=listening addr=%s port=%u", o->listen, http_server_port(p->http));
    return r;
}

/* daemon_run's steps. */
struct run {
    program p;
    const options *o;
};

static int run_start(void *ctx, tetris_error *err)
{
    struct run *run = ctx;
    return program_start(&run->p, run->o, err);
}

static void run_stop(void *ctx)
{
    program_free(&((struct run *)ctx)->p);
}

int main(int argc, char **argv)
{
    log_init(argv[0]);
    options o;
    if (parse_options(argc, argv, &o) < 0)
        return 2;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct run run = {.o = &o};
    int rc = daemon_run(&(struct daemon_run){.ctx = &run, .start = run_start, .stop = run_stop});
    curl_global_cleanup();
    return rc;
}
