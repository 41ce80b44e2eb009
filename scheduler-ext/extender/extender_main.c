/* extender_main.c - tetris-scheduler-ext: the kube-scheduler extender that
 * places pods on the node whose tensor store already holds most of their
 * model. Wires the caches (manifests from ConfigMaps, node inventory URLs
 * from Node objects, inventories from the nodes' tetris-reclaimers) to the
 * HTTP server. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "scheduler-ext/extender/extender.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/httpserver.h"
#include "scheduler-ext/extender/inventory.h"
#include "common/kube.h"
#include "common/log.h"
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

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tetris-scheduler-ext [OPTIONS]\n"
            "\n"
            "kube-scheduler extender: filters out nodes whose tensor store cannot take a pod's\n"
            "model and scores the rest 0-10 by tensor similarity (the share of the model's\n"
            "tensor bytes already in the node's store). Serves POST /filter, POST /prioritize,\n"
            "GET /metrics, GET /healthz.\n"
            "\n"
            "  --listen ADDR:PORT       HTTP address (default " TETRIS_EXTENDER_LISTEN ")\n"
            "  --kubeconfig FILE        kubeconfig to reach the apiserver (default: in-cluster\n"
            "                           service account)\n"
            "  --namespace NS           namespace of the manifest ConfigMaps (default: the\n"
            "                           kubeconfig context's / service account's)\n"
            "  --manifest-dir DIR       also load manifests from DIR/<model>.json\n"
            "  --standalone             no apiserver: manifests from --manifest-dir only,\n"
            "                           nodes must come as objects (nodeCacheCapable: false)\n"
            "                           whose annotations name their inventory URLs; with\n"
            "                           an apiserver only the Node watch does\n"
            "  --inventory-port PORT    tetris-reclaimer port on nodes without a\n"
            "                           " TETRIS_ANNOTATION_INVENTORY_URL
            " annotation (default %d)\n"
            "  --inventory-url-ports LIST  ports an annotation may name, PORT or LO-HI,\n"
            "                           comma-separated (default: --inventory-port); its\n"
            "                           host must be the node's InternalIP or 127.0.0.1\n"
            "  --refresh SECONDS        inventory poll period (default 1)\n"
            "  --stale-after SECONDS    ignore an inventory not refreshed for this long\n"
            "                           (default 30)\n"
            "  --fetch-timeout MS       timeout of one inventory fetch (default 1000)\n"
            "  --help, --version\n"
            "\n"
            "A pod names its model with the label or annotation " TETRIS_LABEL_MODEL
            "; the model's\n"
            "manifest is a ConfigMap labelled " TETRIS_LABEL_MODEL
            "=<model> with key " TETRIS_MANIFEST_CONFIGMAP_KEY ".\n"
            "\n"
            "Exit status: 0 stopped by SIGTERM/SIGINT, 1 runtime failure (cannot listen,\n"
            "no cluster credentials), 2 usage error.\n",
            TETRIS_RECLAIMER_PORT);
}

/* 0 to run, 1 to exit 0 (help/version), -1 usage error. */
static int parse_options(int argc, char **argv, options *o)
{
    enum {
        OPT_LISTEN = 256,
        OPT_KUBECONFIG,
        OPT_NAMESPACE,
        OPT_MANIFEST_DIR,
        OPT_STANDALONE,
        OPT_INVENTORY_PORT,
        OPT_INVENTORY_URL_PORTS,
        OPT_REFRESH,
        OPT_STALE,
        OPT_FETCH_TIMEOUT,
        OPT_HELP,
        OPT_VERSION
    };
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
        {"namespace", required_argument, NULL, OPT_NAMESPACE},
        {"manifest-dir", required_argument, NULL, OPT_MANIFEST_DIR},
        {"standalone", no_argument, NULL, OPT_STANDALONE},
        {"inventory-port", required_argument, NULL, OPT_INVENTORY_PORT},
        {"inventory-url-ports", required_argument, NULL, OPT_INVENTORY_URL_PORTS},
        {"refresh", required_argument, NULL, OPT_REFRESH},
        {"stale-after", required_argument, NULL, OPT_STALE},
        {"fetch-timeout", required_argument, NULL, OPT_FETCH_TIMEOUT},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    *o = (options){.listen = TETRIS_EXTENDER_LISTEN, .inventory_port = TETRIS_RECLAIMER_PORT};
    inventory_opts_init(&o->inv);
    int ch, r = 0;
    int64_t v;
    tetris_error err = {0};
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case OPT_LISTEN: o->listen = optarg; break;
        case OPT_KUBECONFIG: o->kubeconfig = optarg; break;
        case OPT_NAMESPACE: o->ns = optarg; break;
        case OPT_MANIFEST_DIR: o->manifest_dir = optarg; break;
        case OPT_STANDALONE: o->standalone = true; break;
        case OPT_INVENTORY_PORT:
            if ((r = cli_parse_i64("--inventory-port", optarg, 1, 65535, &v, &err)) == 0)
                o->inventory_port = (int)v;
            break;
        case OPT_INVENTORY_URL_PORTS: o->inventory_url_ports = optarg; break;
        case OPT_REFRESH:
            if ((r = cli_parse_i64("--refresh", optarg, 1, 3600, &v, &err)) == 0)
                o->inv.refresh_ms = v * 1000;
            break;
        case OPT_STALE:
            if ((r = cli_parse_i64("--stale-after", optarg, 1, 86400, &v, &err)) == 0)
                o->inv.stale_ms = v * 1000;
            break;
        case OPT_FETCH_TIMEOUT:
            if ((r = cli_parse_i64("--fetch-timeout", optarg, 10, 60000, &v, &err)) == 0)
                o->inv.timeout_ms = v;
            break;
        case OPT_HELP: usage(stdout); return 1;
        case OPT_VERSION: printf("tetris-scheduler-ext %s\n", TETRIS_VERSION); return 1;
        default: usage(stderr); return -1;
        }
        if (r < 0) {
            fprintf(stderr, "tetris-scheduler-ext: %s\n", err.msg);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tetris-scheduler-ext: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    inventory_url_policy_init(&o->urls, o->inventory_port);
    if (o->inventory_url_ports != NULL &&
        inventory_url_policy_ports(&o->urls, o->inventory_url_ports, &err) < 0) {
        fprintf(stderr, "tetris-scheduler-ext: --inventory-url-ports: %s\n", err.msg);
        return -1;
    }
    if (o->standalone && o->kubeconfig != NULL) {
        fprintf(stderr, "tetris-scheduler-ext: --standalone and --kubeconfig exclude each other\n");
        return -1;
    }
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
        char q[600];
        status = r == -TETRIS_E_NOMEM ? 500 : 400;
        log_warn("event=bad-request verb=%s msg=%s", verb, log_quote(err.msg, q, sizeof q));
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
    char url[1024], qn[300], q[600];
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
        log_warn("event=inventory-url-refused node=%s msg=%s", log_quote(name, qn, sizeof qn),
                 log_quote(err.msg, q, sizeof q));
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
        char q[600];
        log_error("event=node-watch-failed msg=%s", log_quote(err.msg, q, sizeof q));
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

int main(int argc, char **argv)
{
    log_init(argv[0]);
    options o;
    int pr = parse_options(argc, argv, &o);
    if (pr != 0)
        return pr > 0 ? 0 : 2;
    curl_global_init(CURL_GLOBAL_DEFAULT);

    /* Signals are taken synchronously by the main thread only. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    program p = {0};
    tetris_error err = {0};
    int rc = 0;
    if (program_start(&p, &o, &err) < 0) {
        char q[600];
        log_error("event=start-failed msg=%s", log_quote(err.msg, q, sizeof q));
        rc = 1;
    } else {
        int sig = 0;
        sigwait(&stop_signals, &sig);
        log_info("event=stopping signal=%d", sig);
    }
    program_free(&p);
    curl_global_cleanup();
    return rc;
}
