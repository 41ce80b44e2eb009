/* extender_test.c - tetris-scheduler-ext over HTTP, without a cluster
 * (--standalone, manifests from a directory), with node inventories served
 * by fault servers: scores follow θ, a full store is filtered out with a
 * reason, unknown models and dead / slow / garbage / stale inventories stay
 * neutral,
 * inventories are re-polled with If-None-Match, both extender request forms
 * (Nodes and NodeNames) work, bad requests get 400, /metrics counts, a pod
 * that mounts a tenant's store is judged by that tenant's inventories
 * (/inventory?tenant=T), a shared-store pod by the shared ones, and the
 * pod's own tetris.io/tenant label by neither. Also
 * the pure parts (θ rounding, manifest and inventory parsing, the fit with
 * evictable bytes, the digest table shrinking with inventories, inventory
 * URLs confined to the policy and never taken from a request's Node
 * objects in cluster mode, the tree-less request reader's strictness and
 * both forms' replies, θ computed before decisions) in-process. */
#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/lib/faultserver.h"
#include "tests/lib/unit.h"
#include "common/textbuf.h"
#include "scheduler-ext/extender/ext_request.h"
#include "scheduler-ext/extender/extender.h"
#include "scheduler-ext/extender/inventory.h"
#include "scheduler-ext/extender/manifests.h"
#include "scheduler-ext/extender/similarity.h"
#include "scheduler-ext/extender/tensor_ids.h"

extern char **environ;

#define D(c) "sha256:" c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c \
             c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c
/* Model "bert": tensors A (600 bytes), B (300), C (100), A again (shared). */
static const char manifest_bert[] =
    "{\"format\":\"tetris-manifest/1\",\"model\":\"bert.onnx\",\"tensors\":["
    "{\"name\":\"a\",\"digest\":\"" D("a") "\",\"nbytes\":600},"
    "{\"name\":\"b\",\"digest\":\"" D("b") "\",\"nbytes\":300},"
    "{\"name\":\"c\",\"digest\":\"" D("c") "\",\"nbytes\":100},"
    "{\"name\":\"a2\",\"digest\":\"" D("a") "\",\"nbytes\":600}]}";

static const char *tmpdir;
static pid_t ext_pid;
static int ext_port;
enum { NODE_ALL, NODE_HALF, NODE_NONE, NODE_FULL, NODE_SLOW, NODE_GARBAGE, NODE_DIES, N_NODES };
static const char *const node_names[N_NODES] = {"n-all", "n-a", "n-none", "n-full", "n-slow",
                                                "n-garbage", "n-dies"};
static fault_server *inv[N_NODES];

static char *inventory_json(const char *node, int gen, long cap, long resident, const char *tensors)
{
    static char buf[N_NODES][2048];
    static int k;
    char *b = buf[k++ % N_NODES];
    snprintf(b, sizeof buf[0],
             "{\"node\":\"%s\",\"generation\":%d,\"capacity_bytes\":%ld,\"resident_bytes\":%ld,"
             "\"tensors\":[%s]}",
             node, gen, cap, resident, tensors);
    return b;
}

/* ---- node daemons with tenant stores ----
 * The fault servers answer in queue order whatever the path; these answer
 * by request target, as the node daemon does: /inventory for the shared
 * store, /inventory?tenant=T for T's, 404 for a tenant it does not have. */

typedef struct route {
    const char *target;
    const char *body;
} route;

enum { MAX_ROUTES = 4, MAX_SEEN = 256 };

typedef struct route_server {
    int fd, port;
    pthread_t thread;
    route routes[MAX_ROUTES];
    size_t n_routes;
    pthread_mutex_t lock;
    char *seen[MAX_SEEN]; /* request targets, in order */
    size_t n_seen;
} route_server;

static void route_reply(int fd, int status, const char *body)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu"
                     "\r\nETag: \"1\"\r\nConnection: close\r\n\r\n",
                     status, status == 200 ? "OK" : "Not Found", strlen(body));
    if (write(fd, head, (size_t)n) == n)
        (void)!write(fd, body, strlen(body));
}

static void *route_serve(void *arg)
{
    route_server *rs = arg;
    for (;;) {
        int c = accept(rs->fd, NULL, NULL);
        if (c < 0)
            return NULL; /* shut down */
        char req[4096];
        size_t len = 0;
        ssize_t k;
        while (len < sizeof req - 1 && (k = read(c, req + len, sizeof req - 1 - len)) > 0) {
            len += (size_t)k;
            req[len] = '\0';
            if (strstr(req, "\r\n\r\n") != NULL)
                break;
        }
        req[len] = '\0';
        char target[1024] = "";
        sscanf(req, "%*s %1023s", target);
        pthread_mutex_lock(&rs->lock);
        if (rs->n_seen < MAX_SEEN)
            rs->seen[rs->n_seen++] = strdup(target);
        pthread_mutex_unlock(&rs->lock);
        const char *body = NULL;
        for (size_t i = 0; i < rs->n_routes; i++)
            if (strcmp(rs->routes[i].target, target) == 0)
                body = rs->routes[i].body;
        route_reply(c, body != NULL ? 200 : 404,
                    body != NULL ? body : "{\"error\":\"no such tenant store on this node\"}");
        close(c);
    }
}

static void route_server_start(route_server *rs)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    rs->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(rs->fd, 0);
    ck_assert_int_eq(bind(rs->fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(getsockname(rs->fd, (struct sockaddr *)&a, &len), 0);
    ck_assert_int_eq(listen(rs->fd, 16), 0);
    rs->port = ntohs(a.sin_port);
    pthread_mutex_init(&rs->lock, NULL);
    ck_assert_int_eq(pthread_create(&rs->thread, NULL, route_serve, rs), 0);
}

static void route_server_stop(route_server *rs)
{
    shutdown(rs->fd, SHUT_RDWR); /* accept fails: the thread returns */
    pthread_join(rs->thread, NULL);
    close(rs->fd);
    for (size_t i = 0; i < rs->n_seen; i++)
        free(rs->seen[i]);
    pthread_mutex_destroy(&rs->lock);
}

/* How many requests for target rs has seen. */
static size_t route_hits(route_server *rs, const char *target)
{
    size_t n = 0;
    pthread_mutex_lock(&rs->lock);
    for (size_t i = 0; i < rs->n_seen; i++)
        n += strcmp(rs->seen[i], target) == 0;
    pthread_mutex_unlock(&rs->lock);
    return n;
}

/* n-t1: the shared store is empty, alpha's holds all of bert, beta's is
 * full. n-t2: the shared store holds all of bert, alpha's none, no beta. */
enum { TNODE_1, TNODE_2, N_TNODES };
static const char *const tnode_names[N_TNODES] = {"n-t1", "n-t2"};
static route_server tnode[N_TNODES];

static void serve_inventory(int i, const char *json, int delay_ms)
{
    fault_server_push(inv[i], &(fault_reply){.status = 200, .headers = "ETag: \"1\"\r\n",
                                             .body = json, .delay_ms = delay_ms});
    fault_server_push(inv[i], &(fault_reply){.status = 304, .repeat = 100000});
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

typedef struct reply {
    long status;
    char *body;
    size_t len;
} reply;

static size_t collect(char *d, size_t s, size_t n, void *u)
{
    reply *r = u;
    char *b = realloc(r->body, r->len + s * n + 1);
    ck_assert_ptr_nonnull(b);
    memcpy(b + r->len, d, s * n);
    r->len += s * n;
    b[r->len] = '\0';
    r->body = b;
    return s * n;
}

/* method + path with an optional body; the reply body is malloc'd. */
static reply http(const char *method, const char *path, const char *body)
{
    reply r = {0};
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", ext_port, path);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body != NULL)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    curl_easy_cleanup(h);
    return r;
}

static void start_servers(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    tmpdir = unit_scratch_dir("ext-test");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/bert.json", tmpdir);
    unit_write_text(path, manifest_bert);

    for (int i = 0; i < N_NODES; i++) {
        inv[i] = fault_server_start();
        ck_assert_ptr_nonnull(inv[i]);
    }
    const char *abc = "{\"digest\":\"" D("a") "\",\"bytes\":600},{\"digest\":\"" D("b")
                      "\",\"bytes\":300},{\"digest\":\"" D("c") "\",\"bytes\":100}";
    const char *a_only = "{\"digest\":\"" D("a") "\",\"bytes\":600},{\"digest\":\"" D("d")
                         "\",\"bytes\":5000}";
    serve_inventory(NODE_ALL, inventory_json("n-all", 1, 0, 1000, abc), 0);
    serve_inventory(NODE_HALF, inventory_json("n-a", 1, 10000, 5600, a_only), 0);
    serve_inventory(NODE_NONE, inventory_json("n-none", 1, 10000, 0, ""), 0);
    /* 1000 bytes missing, 999 free. */
    serve_inventory(NODE_FULL, inventory_json("n-full", 1, 10000, 9001, ""), 0);
    serve_inventory(NODE_SLOW, inventory_json("n-slow", 1, 0, 0, abc), 1500);
    fault_server_push(inv[NODE_GARBAGE], &(fault_reply){.status = 200, .body = "{\"tensors\":7}",
                                                        .repeat = 100000});
    /* Answers once, then drops every connection: its inventory goes stale. */
    fault_server_push(inv[NODE_DIES], &(fault_reply){.status = 200, .headers = "ETag: \"1\"\r\n",
                                                     .body = inventory_json("n-dies", 1, 0, 0, abc)});
    fault_server_push(inv[NODE_DIES], &(fault_reply){.status = 0, .repeat = 100000});

    static char t_inv[5][512];
    snprintf(t_inv[0], sizeof t_inv[0], "%s", inventory_json("n-t1", 1, 10000, 0, ""));
    snprintf(t_inv[1], sizeof t_inv[1], "%s", inventory_json("n-t1", 1, 0, 1000, abc));
    snprintf(t_inv[2], sizeof t_inv[2], "%s", inventory_json("n-t1", 1, 10000, 9001, ""));
    snprintf(t_inv[3], sizeof t_inv[3], "%s", inventory_json("n-t2", 1, 0, 1000, abc));
    snprintf(t_inv[4], sizeof t_inv[4], "%s", inventory_json("n-t2", 1, 10000, 0, ""));
    tnode[TNODE_1] = (route_server){.n_routes = 3,
                                    .routes = {{"/inventory", t_inv[0]},
                                               {"/inventory?tenant=alpha", t_inv[1]},
                                               {"/inventory?tenant=beta", t_inv[2]}}};
    tnode[TNODE_2] = (route_server){.n_routes = 2,
                                    .routes = {{"/inventory", t_inv[3]},
                                               {"/inventory?tenant=alpha", t_inv[4]}}};
    for (int i = 0; i < N_TNODES; i++)
        route_server_start(&tnode[i]);

    ext_port = free_port();
    char listen[64], bin[PATH_MAX];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", ext_port);
    const char *dir = getenv("TETRIS_BIN");
    snprintf(bin, sizeof bin, "%s/tetris-scheduler-ext", dir != NULL ? dir : "bin");
    /* The fault servers' ports are the kernel's choice. */
    char *argv[] = {bin,
                    "--standalone",
                    "--manifest-dir",
                    (char *)tmpdir,
                    "--listen",
                    listen,
                    "--refresh",
                    "1",
                    "--fetch-timeout",
                    "500",
                    "--stale-after",
                    "3",
                    "--inventory-url-ports",
                    "1024-65535",
                    NULL};
    ck_assert_int_eq(posix_spawn(&ext_pid, bin, NULL, NULL, argv, environ), 0);
    for (int i = 0; i < 200; i++) {
        reply r = http("GET", "/healthz", NULL);
        free(r.body);
        if (r.status == 200)
            return;
        usleep(50 * 1000);
    }
    ck_abort_msg("extender did not come up");
}

static void stop_servers(void)
{
    if (ext_pid > 0) {
        kill(ext_pid, SIGTERM);
        int st = 0;
        ck_assert_int_eq(waitpid(ext_pid, &st, 0), ext_pid);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "extender exit status %d", st);
    }
    for (int i = 0; i < N_NODES; i++)
        fault_server_stop(inv[i]);
    for (int i = 0; i < N_TNODES; i++)
        route_server_stop(&tnode[i]);
    unit_remove_tree(tmpdir);
    curl_global_cleanup();
}

/* ExtenderArgs with full Node objects (nodeCacheCapable: false). */
static char *args_nodes(const char *model_label)
{
    json_t *items = json_array();
    for (int i = 0; i < N_NODES; i++) {
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/inventory", fault_server_port(inv[i]));
        json_array_append_new(items, json_pack("{s:{s:s,s:{s:s}}}", "metadata", "name",
                                               node_names[i], "annotations",
                                               "tetris.io/inventory-url", url));
    }
    json_t *pod = json_pack("{s:{s:s,s:s}}", "metadata", "name", "p1", "namespace", "fns");
    if (model_label != NULL)
        json_object_set_new(json_object_get(pod, "metadata"), "labels",
                            json_pack("{s:s}", "tetris.io/model", model_label));
    json_t *args = json_pack("{s:o,s:{s:o},s:n}", "Pod", pod, "Nodes", "items", items,
                             "NodeNames");
    char *s = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    return s;
}

static char *args_names(const char *model_annotation)
{
    json_t *names = json_array();
    for (int i = 0; i < N_NODES; i++)
        json_array_append_new(names, json_string(node_names[i]));
    json_array_append_new(names, json_string("n-never-seen"));
    json_t *args = json_pack("{s:{s:{s:s,s:{s:s}}},s:n,s:o}", "Pod", "metadata", "name", "p2",
                             "annotations", "tetris.io/model", model_annotation, "Nodes",
                             "NodeNames", names);
    char *s = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    return s;
}

/* ExtenderArgs for the tenant nodes: a bert pod that mounts tenant's store
 * (NULL: the shared one) as tetris-webhook gives it, and says label_tenant
 * in its own tetris.io/tenant label (NULL: nothing), with Node objects or
 * only their names. */
static char *args_pod(const char *tenant, const char *label_tenant, bool by_name)
{
    json_t *labels = json_pack("{s:s}", "tetris.io/model", "bert");
    if (label_tenant != NULL)
        json_object_set_new(labels, "tetris.io/tenant", json_string(label_tenant));
    char store[256];
    if (tenant != NULL)
        snprintf(store, sizeof store, "/dev/shm/tetris/tenants/%s/public", tenant);
    else
        snprintf(store, sizeof store, "/dev/shm/tetris/public");
    json_t *pod = json_pack("{s:{s:s,s:o}, s:{s:[{s:s, s:{s:s, s:s}}]}}", "metadata", "name", "tp",
                            "labels", labels, "spec", "volumes", "name", "tetris-store", "hostPath",
                            "path", store, "type", "Directory");
    json_t *list = json_array();
    for (int i = 0; i < N_TNODES; i++) {
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/inventory", tnode[i].port);
        json_array_append_new(list, by_name ? json_string(tnode_names[i])
                                            : json_pack("{s:{s:s,s:{s:s}}}", "metadata", "name",
                                                        tnode_names[i], "annotations",
                                                        "tetris.io/inventory-url", url));
    }
    json_t *args = by_name ? json_pack("{s:o,s:n,s:o}", "Pod", pod, "Nodes", "NodeNames", list)
                           : json_pack("{s:o,s:{s:o},s:n}", "Pod", pod, "Nodes", "items", list,
                                       "NodeNames");
    char *s = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    return s;
}

static char *args_tenant(const char *tenant, bool by_name)
{
    return args_pod(tenant, tenant, by_name);
}

static json_int_t score_of(json_t *list, const char *host)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "Host")), host) == 0)
            return json_integer_value(json_object_get(e, "Score"));
    }
    ck_abort_msg("no score for %s", host);
    return -1;
}

static json_t *post_json(const char *path, const char *body, long want_status)
{
    reply r = http("POST", path, body);
    ck_assert_msg(r.status == want_status, "%s: status %ld body %s", path, r.status,
                  r.body ? r.body : "");
    json_t *j = json_loads(r.body, 0, NULL);
    ck_assert_ptr_nonnull(j);
    free(r.body);
    return j;
}

START_TEST(prioritize_scores_theta)
{
    char *args = args_nodes("bert");
    json_t *list = post_json("/prioritize", args, 200);
    ck_assert_int_eq(score_of(list, "n-all"), 10);
    ck_assert_int_eq(score_of(list, "n-a"), 6);   /* 600 of 1000 bytes */
    ck_assert_int_eq(score_of(list, "n-none"), 0);
    ck_assert_int_eq(score_of(list, "n-full"), 0);
    ck_assert_int_eq(score_of(list, "n-slow"), 0);    /* timed out: neutral */
    ck_assert_int_eq(score_of(list, "n-garbage"), 0); /* unparsable: neutral */
    ck_assert_int_eq(score_of(list, "n-dies"), 10);   /* still fresh */
    json_decref(list);
    free(args);
}
END_TEST

START_TEST(filter_fails_full_store_with_reason)
{
    char *args = args_nodes("bert");
    json_t *res = post_json("/filter", args, 200);
    json_t *items = json_object_get(json_object_get(res, "Nodes"), "items");
    ck_assert_uint_eq(json_array_size(items), N_NODES - 1);
    json_t *failed = json_object_get(res, "FailedNodes");
    ck_assert_uint_eq(json_object_size(failed), 1);
    const char *reason = json_string_value(json_object_get(failed, "n-full"));
    ck_assert_ptr_nonnull(reason);
    ck_assert_ptr_nonnull(strstr(reason, "needs 1000 more bytes"));
    ck_assert_str_eq(json_string_value(json_object_get(res, "Error")), "");
    json_decref(res);
    free(args);
}
END_TEST

START_TEST(node_names_form_uses_known_urls)
{
    /* The Nodes-form requests above taught the extender each node's URL. */
    char *warm = args_nodes("bert");
    json_decref(post_json("/prioritize", warm, 200));
    free(warm);
    char *args = args_names("bert");
    json_t *res = post_json("/filter", args, 200);
    ck_assert(json_is_null(json_object_get(res, "Nodes")));
    json_t *names = json_object_get(res, "NodeNames");
    ck_assert_uint_eq(json_array_size(names), N_NODES); /* all but n-full, plus n-never-seen */
    ck_assert_ptr_nonnull(json_object_get(json_object_get(res, "FailedNodes"), "n-full"));
    json_decref(res);
    json_t *list = post_json("/prioritize", args, 200);
    ck_assert_int_eq(score_of(list, "n-all"), 10);
    ck_assert_int_eq(score_of(list, "n-never-seen"), 0);
    json_decref(list);
    free(args);
}
END_TEST

START_TEST(unknown_or_missing_model_is_neutral)
{
    const char *models[] = {"no-such-model", NULL};
    for (int m = 0; m < 2; m++) {
        char *args = args_nodes(models[m]);
        json_t *res = post_json("/filter", args, 200);
        ck_assert_uint_eq(json_array_size(json_object_get(json_object_get(res, "Nodes"), "items")),
                          N_NODES);
        ck_assert_uint_eq(json_object_size(json_object_get(res, "FailedNodes")), 0);
        json_decref(res);
        json_t *list = post_json("/prioritize", args, 200);
        for (int i = 0; i < N_NODES; i++)
            ck_assert_int_eq(score_of(list, node_names[i]), 0);
        json_decref(list);
        free(args);
    }
}
END_TEST

START_TEST(inventories_repolled_with_if_none_match)
{
    char *args = args_nodes("bert");
    json_decref(post_json("/prioritize", args, 200));
    free(args);
    /* The poller runs every second; wait for a conditional request. */
    bool seen = false;
    for (int i = 0; i < 100 && !seen; i++) {
        for (size_t k = 0; k < fault_server_count(inv[NODE_ALL]); k++) {
            const fault_request *rq = fault_server_request(inv[NODE_ALL], k);
            if (rq->if_none_match != NULL && strcmp(rq->if_none_match, "\"1\"") == 0)
                seen = true;
        }
        usleep(100 * 1000);
    }
    ck_assert_msg(seen, "no If-None-Match poll seen");
}
END_TEST

START_TEST(bad_requests_get_400)
{
    static const char *const bad[] = {
        "garbage",
        "[]",
        "{}",
        "{\"Pod\":7,\"NodeNames\":[]}",
        "{\"Pod\":{}}",
        "{\"Pod\":{},\"Nodes\":{\"items\":5}}",
        "{\"Pod\":{},\"Nodes\":[]}",
        "{\"Pod\":{},\"NodeNames\":\"n1\"}",
        "{\"Pod\":{},\"NodeNames\":[1,2]}",
        "{\"Pod\":{},\"Nodes\":{\"items\":[{\"metadata\":{}}]}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int v = 0; v < 2; v++) {
            json_t *err = post_json(v ? "/prioritize" : "/filter", bad[i], 400);
            ck_assert_msg(json_string_value(json_object_get(err, "error")) != NULL,
                          "no error for %s", bad[i]);
            json_decref(err);
        }
    }
    reply r = http("GET", "/filter", NULL);
    ck_assert_int_eq(r.status, 405);
    free(r.body);
    /* Lower-case keys are accepted as Go's decoder does. */
    json_t *list = post_json("/prioritize", "{\"pod\":{},\"nodenames\":[\"x\"]}", 200);
    ck_assert_int_eq(score_of(list, "x"), 0);
    json_decref(list);
}
END_TEST

START_TEST(metrics_count_requests)
{
    char *args = args_nodes("bert");
    json_decref(post_json("/filter", args, 200));
    free(args);
    json_decref(post_json("/filter", "nope", 400));
    reply r = http("GET", "/metrics", NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "tetris_extender_requests_total{verb=\"filter\",code=\"200\"} "));
    ck_assert_ptr_null(strstr(r.body, "tetris_extender_requests_total{verb=\"filter\",code=\"400\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "tetris_extender_models 1\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "tetris_extender_request_duration_seconds_count{verb=\"filter\"}"));
    ck_assert_ptr_null(strstr(r.body, "tetris_extender_nodes_filtered_total 0\n"));
    /* promtool, when installed, must accept the exposition. */
    if (system("command -v promtool >/dev/null 2>&1") == 0) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/metrics.txt", tmpdir);
        FILE *f = fopen(path, "w");
        fputs(r.body, f);
        fclose(f);
        char cmd[PATH_MAX + 64];
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
        ck_assert_int_eq(system(cmd), 0);
    }
    free(r.body);
}
END_TEST

START_TEST(mangled_requests_get_200_or_400)
{
    /* Truncated and bit-flipped versions of a valid request: each must get
     * a verdict or a 400, and the extender must stay up. */
    char *valid = args_names("bert");
    size_t len = strlen(valid);
    unsigned seed = 42;
    for (int i = 0; i < 300; i++) {
        char *body = strdup(valid);
        ck_assert_ptr_nonnull(body);
        if (i % 2 == 0) {
            body[rand_r(&seed) % len] = '\0';
        } else {
            for (int k = 0; k < 4; k++)
                body[rand_r(&seed) % len] ^= (char)(1 << (rand_r(&seed) % 7));
        }
        reply r = http("POST", i % 3 ? "/filter" : "/prioritize", body);
        ck_assert_msg(r.status == 200 || r.status == 400, "status %ld for %s", r.status, body);
        free(r.body);
        free(body);
    }
    free(valid);
    reply h = http("GET", "/healthz", NULL);
    ck_assert_int_eq(h.status, 200);
    free(h.body);
}
END_TEST

START_TEST(stale_inventory_becomes_neutral)
{
    /* n-dies stopped answering after its first reply; once its inventory
     * is older than --stale-after (3 s) it must no longer count. */
    char *args = args_nodes("bert");
    json_int_t score = -1;
    for (int i = 0; i < 200 && score != 0; i++) {
        json_t *list = post_json("/prioritize", args, 200);
        score = score_of(list, "n-dies");
        ck_assert_int_eq(score_of(list, "n-all"), 10); /* polled with 304s: fresh */
        json_decref(list);
        if (score != 0)
            usleep(100 * 1000);
    }
    ck_assert_int_eq(score, 0);
    json_t *res = post_json("/filter", args, 200);
    ck_assert_ptr_null(json_object_get(json_object_get(res, "FailedNodes"), "n-dies"));
    json_decref(res);
    free(args);
}
END_TEST

START_TEST(tenant_pod_scored_by_its_tenant_store)
{
    static const char *const tenants[] = {NULL, "alpha"};
    /* n-t1, n-t2: the shared store is empty / whole, alpha's whole / empty */
    static const json_int_t want[2][N_TNODES] = {{0, 10}, {10, 0}};
    for (int t = 0; t < 2; t++) {
        for (int by_name = 0; by_name < 2; by_name++) {
            char *args = args_tenant(tenants[t], by_name);
            json_t *list = post_json("/prioritize", args, 200);
            for (int i = 0; i < N_TNODES; i++)
                ck_assert_msg(score_of(list, tnode_names[i]) == want[t][i],
                              "tenant %s node %s: score %lld, want %lld",
                              tenants[t] ? tenants[t] : "(shared)", tnode_names[i],
                              (long long)score_of(list, tnode_names[i]), (long long)want[t][i]);
            json_decref(list);
            free(args);
        }
    }
    for (int i = 0; i < N_TNODES; i++) {
        ck_assert_uint_gt(route_hits(&tnode[i], "/inventory"), 0);
        ck_assert_uint_gt(route_hits(&tnode[i], "/inventory?tenant=alpha"), 0);
    }
}
END_TEST

/* The pod's own tetris.io/tenant label places nothing: a pod of the
 * shared store that says alpha is scored as a shared pod (alpha's
 * residency stays unknown to it), and a pod mounting alpha's store that
 * says beta is scored by alpha's store. */
START_TEST(tenant_label_alone_places_nothing)
{
    /* n-t1, n-t2: the shared store is empty / whole, alpha's whole / empty */
    static const json_int_t shared[N_TNODES] = {0, 10}, alpha[N_TNODES] = {10, 0};
    static const struct {
        const char *mounts, *says;
        const json_int_t *want;
    } cases[] = {{NULL, "alpha", shared}, {"alpha", "beta", alpha}, {"alpha", NULL, alpha}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char *args = args_pod(cases[c].mounts, cases[c].says, false);
        json_t *list = post_json("/prioritize", args, 200);
        for (int i = 0; i < N_TNODES; i++)
            ck_assert_msg(score_of(list, tnode_names[i]) == cases[c].want[i],
                          "case %zu node %s: score %lld, want %lld", c, tnode_names[i],
                          (long long)score_of(list, tnode_names[i]), (long long)cases[c].want[i]);
        json_decref(list);
        free(args);
    }
}
END_TEST

START_TEST(tenant_store_full_or_absent)
{
    /* beta's store on n-t1 cannot take bert; n-t2 has no beta store (404):
     * neutral, and it passes. */
    char *args = args_tenant("beta", false);
    json_t *res = post_json("/filter", args, 200);
    json_t *failed = json_object_get(res, "FailedNodes");
    ck_assert_uint_eq(json_object_size(failed), 1);
    const char *reason = json_string_value(json_object_get(failed, "n-t1"));
    ck_assert_ptr_nonnull(reason);
    ck_assert_ptr_nonnull(strstr(reason, "needs 1000 more bytes"));
    json_t *items = json_object_get(json_object_get(res, "Nodes"), "items");
    ck_assert_uint_eq(json_array_size(items), 1);
    json_decref(res);
    json_t *list = post_json("/prioritize", args, 200);
    ck_assert_int_eq(score_of(list, "n-t2"), 0);
    json_decref(list);
    free(args);
    ck_assert_uint_gt(route_hits(&tnode[TNODE_2], "/inventory?tenant=beta"), 0);
}
END_TEST

START_TEST(invalid_tenant_is_neutral_and_never_asked_for)
{
    static const char *const bad[] = {"Alpha", "a/b", "..", "a b", "a?x=1",
                                      "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        char *args = args_tenant(bad[b], false);
        json_t *res = post_json("/filter", args, 200);
        ck_assert_uint_eq(json_object_size(json_object_get(res, "FailedNodes")), 0);
        json_decref(res);
        json_t *list = post_json("/prioritize", args, 200);
        for (int i = 0; i < N_TNODES; i++)
            ck_assert_msg(score_of(list, tnode_names[i]) == 0, "tenant '%s' node %s: score %lld",
                          bad[b], tnode_names[i], (long long)score_of(list, tnode_names[i]));
        json_decref(list);
        free(args);
    }
    for (int i = 0; i < N_TNODES; i++) {
        pthread_mutex_lock(&tnode[i].lock);
        for (size_t k = 0; k < tnode[i].n_seen; k++) {
            const char *t = tnode[i].seen[k];
            ck_assert_msg(strcmp(t, "/inventory") == 0 ||
                              strcmp(t, "/inventory?tenant=alpha") == 0 ||
                              strcmp(t, "/inventory?tenant=beta") == 0,
                          "unexpected request %s", t);
        }
        pthread_mutex_unlock(&tnode[i].lock);
    }
}
END_TEST

/* ---- in-process: the pure parts ---- */

START_TEST(theta_and_fit)
{
    tensor_ids *ids = tensor_ids_new();
    model_need *m = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(manifest_need_parse(ids, "bert", manifest_bert, strlen(manifest_bert), &m,
                                         &err),
                     0);
    ck_assert_uint_eq(m->n, 3); /* the repeated tensor counts once */
    ck_assert_uint_eq(m->total_bytes, 1000);
    const char *inv_text = "{\"node\":\"x\",\"generation\":4,\"capacity_bytes\":2000,"
                           "\"resident_bytes\":1950,\"tensors\":[{\"digest\":\"" D("b")
                           "\",\"bytes\":300},{\"digest\":\"" D("c") "\",\"bytes\":100}]}";
    node_inventory *ni = NULL;
    ck_assert_int_eq(inventory_parse(ids, inv_text, strlen(inv_text), &ni, &err), 0);
    ck_assert_uint_eq(ni->generation, 4);
    node_fit fit;
    similarity_eval(m, ni, &fit);
    ck_assert_uint_eq(fit.present_bytes, 400);
    ck_assert_uint_eq(fit.missing_bytes, 600);
    ck_assert_int_eq(fit.score, 4);
    ck_assert(!fit.fits); /* 50 bytes free, 600 missing */
    /* Cold bytes count as room, less the model's own present bytes, which
     * may be among them and are not evicted for it: 2000 + (1000 - 400)
     * - 1950 = 650 free for the 600 missing. */
    ni->evictable_bytes = 1000;
    similarity_eval(m, ni, &fit);
    ck_assert(fit.fits);
    ni->evictable_bytes = 900; /* 550 free */
    similarity_eval(m, ni, &fit);
    ck_assert(!fit.fits);
    ni->evictable_bytes = 300; /* all of it may be the model's */
    similarity_eval(m, ni, &fit);
    ck_assert(!fit.fits);
    ni->evictable_bytes = 0;
    ni->capacity_bytes = 0; /* no limit reported */
    similarity_eval(m, ni, &fit);
    ck_assert(fit.fits);
    ck_assert_uint_eq(tensor_ids_count(ids), 3);
    node_inventory_free(ni);
    model_need_free(m);
    tensor_ids_free(ids);
}
END_TEST

/* "sha256:" and 64 times c. */
static void digest_of(char c, char out[7 + 64 + 1])
{
    memcpy(out, "sha256:", 7);
    memset(out + 7, c, 64);
    out[7 + 64] = '\0';
}

/* A node that must pull is scored by the bytes it lacks: 10 only when it
 * lacks none, 0 only when it holds none, and rounding never lifts a node
 * that lacks 2% (or 1 byte) to 10 nor drops one that holds 1 byte to 0. */
START_TEST(score_by_bytes_lacking)
{
    static const struct {
        char c;
        uint64_t nbytes;
    } tensors[] = {{'a', 9799}, {'b', 200}, {'c', 1}};
    static const struct {
        const char *have; /* the tensors the node holds */
        uint64_t missing;
        int score;
    } cases[] = {
        {"abc", 0, 10},  {"ab", 1, 9},   {"a", 201, 9},  {"ac", 200, 9},
        {"bc", 9799, 1}, {"c", 9999, 1}, {"", 10000, 0},
    };
    char digest[7 + 64 + 1];
    textbuf mt = {0};
    textbuf_puts(&mt, "{\"format\":\"tetris-manifest/1\",\"model\":\"m.onnx\",\"tensors\":[");
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) {
        digest_of(tensors[i].c, digest);
        textbuf_printf(
            &mt, "%s{\"name\":\"%c\",\"source\":\"m.onnx\",\"digest\":\"%s\",\"nbytes\":%llu}",
            i > 0 ? "," : "", tensors[i].c, digest, (unsigned long long)tensors[i].nbytes);
    }
    textbuf_puts(&mt, "]}");
    size_t manifest_len;
    char *manifest = textbuf_take(&mt, &manifest_len);
    ck_assert_ptr_nonnull(manifest);
    tensor_ids *ids = tensor_ids_new();
    model_need *m = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(manifest_need_parse(ids, "m", manifest, manifest_len, &m, &err), 0);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        textbuf t = {0};
        textbuf_puts(&t, "{\"node\":\"x\",\"generation\":1,\"capacity_bytes\":0,"
                         "\"resident_bytes\":0,\"tensors\":[");
        for (const char *c = cases[k].have; *c != '\0'; c++) {
            digest_of(*c, digest);
            textbuf_printf(&t, "%s{\"digest\":\"%s\",\"bytes\":1}", c == cases[k].have ? "" : ",",
                           digest);
        }
        textbuf_puts(&t, "]}");
        size_t len;
        char *text = textbuf_take(&t, &len);
        node_inventory *ni = NULL;
        ck_assert_int_eq(inventory_parse(ids, text, len, &ni, &err), 0);
        node_fit fit;
        similarity_eval(m, ni, &fit);
        ck_assert_msg(fit.missing_bytes == cases[k].missing && fit.score == cases[k].score,
                      "holding \"%s\": missing %llu score %d, want %llu and %d", cases[k].have,
                      (unsigned long long)fit.missing_bytes, fit.score,
                      (unsigned long long)cases[k].missing, cases[k].score);
        node_inventory_free(ni);
        free(text);
    }
    model_need_free(m);
    tensor_ids_free(ids);
    free(manifest);
}
END_TEST

START_TEST(bad_manifests_and_inventories)
{
    tensor_ids *ids = tensor_ids_new();
    static const char *const manifests[] = {
        "", "{}", "{\"format\":\"other\",\"tensors\":[]}",
        "{\"format\":\"tetris-manifest/1\",\"tensors\":[{\"digest\":\"sha256:xyz\",\"nbytes\":1}]}",
        "{\"format\":\"tetris-manifest/1\",\"tensors\":[{\"digest\":\"" D("a") "\",\"nbytes\":-1}]}",
        "{\"format\":\"tetris-manifest/1\",\"tensors\":[{\"nbytes\":1}]}",
    };
    for (size_t i = 0; i < sizeof manifests / sizeof manifests[0]; i++) {
        model_need *m = NULL;
        tetris_error err = {0};
        ck_assert_int_eq(manifest_need_parse(ids, "x", manifests[i], strlen(manifests[i]), &m, &err),
                         -TETRIS_E_FORMAT);
        ck_assert_ptr_nonnull(strstr(err.msg, "manifest of x"));
    }
    static const char *const inventories[] = {
        "[]", "{\"generation\":1,\"capacity_bytes\":0,\"resident_bytes\":0}",
        "{\"generation\":-1,\"capacity_bytes\":0,\"resident_bytes\":0,\"tensors\":[]}",
        "{\"generation\":1,\"capacity_bytes\":0,\"resident_bytes\":0,\"tensors\":[{}]}",
        "{\"generation\":1,\"capacity_bytes\":0,\"resident_bytes\":0,\"tensors\":[{\"digest\":\"" D("a") "0\"}]}",
    };
    for (size_t i = 0; i < sizeof inventories / sizeof inventories[0]; i++) {
        node_inventory *ni = NULL;
        tetris_error err = {0};
        ck_assert_int_eq(inventory_parse(ids, inventories[i], strlen(inventories[i]), &ni, &err),
                         -TETRIS_E_FORMAT);
    }
    tensor_ids_free(ids);
}
END_TEST

/* A node inventory of n digests numbered from first (distinct per number). */
static char *numbered_inventory(unsigned first, unsigned n)
{
    size_t cap = 128 + (size_t)n * 100, len = 0;
    char *b = malloc(cap);
    ck_assert_ptr_nonnull(b);
    len += (size_t)snprintf(b, cap,
                            "{\"node\":\"x\",\"generation\":1,\"capacity_bytes\":0,"
                            "\"resident_bytes\":0,\"tensors\":[");
    for (unsigned i = 0; i < n; i++)
        len += (size_t)snprintf(b + len, cap - len, "%s{\"digest\":\"%056x%08x\",\"bytes\":1}",
                                i ? "," : "", 0u, first + i);
    snprintf(b + len, cap - len, "]}");
    return b;
}

static void put_numbered(inventory_cache *c, tensor_ids *ids, const char *node, unsigned first,
                         unsigned n)
{
    char *text = numbered_inventory(first, n);
    node_inventory *ni = NULL;
    tetris_error err = {0};
    ck_assert_msg(inventory_parse(ids, text, strlen(text), &ni, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(inventory_cache_put(c, node, ni, &err), 0);
    free(text);
}

/* The digest table holds what inventories and manifests hold now, not
 * every digest a node ever reported: nodes that churn through new tensors
 * (or lie about them) cannot grow the extender without bound. */
START_TEST(id_table_shrinks_with_inventories)
{
    enum { NODES = 40, PER_NODE = 250 };
    tensor_ids *ids = tensor_ids_new();
    inventory_cache *c = inventory_cache_new(ids, NULL);
    char node[32];
    for (unsigned round = 0; round < 3; round++) {
        for (unsigned i = 0; i < NODES; i++) {
            snprintf(node, sizeof node, "n%u", i);
            /* Every round, every node reports digests never seen before. */
            put_numbered(c, ids, node, (round * NODES + i) * PER_NODE, PER_NODE);
        }
        ck_assert_uint_eq(tensor_ids_count(ids), NODES * PER_NODE);
    }
    /* The cache counts what the inventories hold: at least 2 bytes an id. */
    inventory_stats st;
    inventory_cache_stats(c, &st);
    ck_assert_uint_ge(st.bytes, (size_t)NODES * PER_NODE * 2);
    size_t held = st.bytes;
    size_t big = tensor_ids_slots(ids);
    ck_assert_uint_ge(big, 2 * NODES * PER_NODE);
    /* The inventories shrink to the same 3 tensors... */
    for (unsigned i = 0; i < NODES; i++) {
        snprintf(node, sizeof node, "n%u", i);
        put_numbered(c, ids, node, 7, 3);
    }
    ck_assert_uint_eq(tensor_ids_count(ids), 3);
    ck_assert_uint_lt(tensor_ids_slots(ids), big / 8);
    inventory_cache_stats(c, &st);
    ck_assert_uint_lt(st.bytes, held / 3);
    /* ...which still match a manifest (the index survived the removals). */
    model_need *m = NULL;
    tetris_error err = {0};
    char manifest[512];
    snprintf(manifest, sizeof manifest,
             "{\"format\":\"tetris-manifest/1\",\"tensors\":["
             "{\"digest\":\"sha256:%056x%08x\",\"nbytes\":1},"
             "{\"digest\":\"sha256:%056x%08x\",\"nbytes\":1},"
             "{\"digest\":\"sha256:%056x%08x\",\"nbytes\":1}]}",
             0u, 8u, 0u, 8u, 0u, 100000u);
    ck_assert_int_eq(manifest_need_parse(ids, "m", manifest, strlen(manifest), &m, &err), 0);
    ck_assert_uint_eq(m->n, 2);
    ck_assert_uint_eq(tensor_ids_count(ids), 4);
    inventory_cache_rdlock(c);
    node_fit fit;
    similarity_eval(m, inventory_cache_find(c, "n0", NULL), &fit);
    inventory_cache_unlock(c);
    ck_assert_uint_eq(fit.present_bytes, 1);
    /* Nodes gone, manifest gone: nothing left. */
    for (unsigned i = 0; i < NODES; i++) {
        snprintf(node, sizeof node, "n%u", i);
        inventory_cache_forget(c, node);
    }
    inventory_cache_stats(c, &st);
    ck_assert_uint_eq(st.bytes, 0);
    ck_assert_uint_eq(tensor_ids_count(ids), 2);
    model_need_free(m);
    ck_assert_uint_eq(tensor_ids_count(ids), 0);
    inventory_cache_free(c);
    tensor_ids_free(ids);
}
END_TEST

/* Interning and releasing in a random order keeps every live digest at
 * its id (deletions from the open-addressing index keep probe runs). */
START_TEST(id_table_survives_churn)
{
    enum { DIGESTS = 3000, OPS = 60000 };
    tensor_ids *ids = tensor_ids_new();
    static uint32_t id_of[DIGESTS], refs[DIGESTS];
    memset(refs, 0, sizeof refs);
    uint64_t x = 88172645463325252ull;
    tetris_error err = {0};
    for (int op = 0; op < OPS; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned k = (unsigned)(x % DIGESTS);
        tensor_digest d = {{0}};
        /* Digests that share their first 8 bytes collide in the index. */
        d.bytes[0] = (uint8_t)(k % 7);
        memcpy(d.bytes + 8, &k, sizeof k);
        if (refs[k] > 0 && (x >> 32) % 2 == 0) {
            tensor_ids_release(ids, &id_of[k], 1);
            refs[k]--;
            continue;
        }
        uint32_t id;
        ck_assert_int_eq(tensor_ids_intern_digest(ids, &d, &id, &err), 0);
        if (refs[k] > 0)
            ck_assert_uint_eq(id, id_of[k]);
        id_of[k] = id;
        refs[k]++;
    }
    size_t live = 0;
    for (unsigned k = 0; k < DIGESTS; k++)
        live += refs[k] > 0;
    ck_assert_uint_eq(tensor_ids_count(ids), live);
    tensor_ids_free(ids);
}
END_TEST

static json_t *node_with(const char *name, const char *internal_ip, const char *url)
{
    json_t *n = json_pack("{s:{s:s,s:{}},s:{s:[]}}", "metadata", "name", name, "annotations",
                          "status", "addresses");
    if (internal_ip != NULL)
        json_array_append_new(json_object_get(json_object_get(n, "status"), "addresses"),
                              json_pack("{s:s,s:s}", "type", "InternalIP", "address", internal_ip));
    if (url != NULL)
        json_object_set_new(json_object_get(json_object_get(n, "metadata"), "annotations"),
                            "tetris.io/inventory-url", json_string(url));
    return n;
}

/* Whoever can annotate a Node (its kubelet) cannot point the extender at
 * another host, port, scheme or path. */
START_TEST(inventory_urls_are_confined)
{
    static const struct {
        const char *ip, *url;
        int rc;
        const char *want;
    } cases[] = {
        {"10.1.2.3", NULL, 0, "http://10.1.2.3:9464/inventory"},
        {"fd00::1", NULL, 0, "http://[fd00::1]:9464/inventory"},
        {"10.1.2.3", "http://10.1.2.3:9464/inventory", 0, "http://10.1.2.3:9464/inventory"},
        {"10.1.2.3", "http://127.0.0.1:9464/inventory", 0, "http://127.0.0.1:9464/inventory"},
        {"fd00::1", "http://[fd00::1]:9464/inventory", 0, "http://[fd00::1]:9464/inventory"},
        {"10.1.2.3", "http://127.0.0.1:9201/inventory", -TETRIS_E_DENIED, "port 9201"},
        {"10.1.2.3", "http://10.9.9.9:9464/inventory", -TETRIS_E_DENIED, "InternalIP"},
        {"10.1.2.3", "http://169.254.169.254:9464/inventory", -TETRIS_E_DENIED, "InternalIP"},
        {"10.1.2.3", "http://metadata.internal:9464/inventory", -TETRIS_E_DENIED, "IP address"},
        {"10.1.2.3", "https://10.1.2.3:9464/inventory", -TETRIS_E_DENIED, "http://"},
        {"10.1.2.3", "http://u@10.1.2.3:9464/inventory", -TETRIS_E_DENIED, "HOST:PORT"},
        {"10.1.2.3", "http://10.1.2.3:9464@10.9.9.9:9464/inventory", -TETRIS_E_DENIED, "HOST"},
        {"10.1.2.3", "http://10.1.2.3:9464/inventory?x=1", -TETRIS_E_DENIED, "want http"},
        {"10.1.2.3", "http://10.1.2.3:9464/metrics", -TETRIS_E_DENIED, "want http"},
        {"10.1.2.3", "http://10.1.2.3/inventory", -TETRIS_E_DENIED, "HOST:PORT"},
        {"10.1.2.3", "http://10.1.2.3:+9464/inventory", -TETRIS_E_DENIED, "want http"},
        {"10.1.2.3", "http://[10.1.2.3]:9464/inventory", -TETRIS_E_DENIED, "IP address"},
        {"10.1.2.3", "http://0x0a.1.2.3:9464/inventory", -TETRIS_E_DENIED, "IP address"},
        {"evil.example/x?", NULL, -TETRIS_E_NOTFOUND, "InternalIP"},
        {NULL, NULL, -TETRIS_E_NOTFOUND, "InternalIP"},
    };
    inventory_url_policy p;
    inventory_url_policy_init(&p, 9464);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *n = node_with("n", cases[i].ip, cases[i].url);
        char url[256] = "";
        tetris_error err = {0};
        int rc = inventory_url_from_node(n, &p, url, sizeof url, &err);
        ck_assert_msg(rc == cases[i].rc, "case %zu: rc %d: %s", i, rc, err.msg);
        ck_assert_msg(strstr(rc == 0 ? url : err.msg, cases[i].want) != NULL, "case %zu: %s / %s",
                      i, url, err.msg);
        json_decref(n);
    }
    /* The local cluster's API-only nodes serve on 127.0.0.1:92xx. */
    tetris_error err = {0};
    ck_assert_int_eq(inventory_url_policy_ports(&p, "9464,9200-9299", &err), 0);
    json_t *n = node_with("n", "10.1.2.3", "http://127.0.0.1:9201/inventory");
    char url[256];
    ck_assert_int_eq(inventory_url_from_node(n, &p, url, sizeof url, &err), 0);
    json_decref(n);
    static const char *const bad[] = {"",     "0",     "65536", "9300-9200",
                                      "a",    "9464,", "-5",    "1,2,3,4,5,6,7,8,9",
                                      "9464 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(inventory_url_policy_ports(&p, bad[i], &err) == -TETRIS_E_INVAL, "%s",
                      bad[i]);
}
END_TEST

/* With a cluster, only the Node watch says where inventories are: a
 * request's Node objects, whatever they carry, fetch nothing. */
START_TEST(request_nodes_name_no_url)
{
    tensor_ids *ids = tensor_ids_new();
    manifest_cache *mc = manifest_cache_new(ids);
    inventory_opts o;
    inventory_opts_init(&o);
    inventory_cache *c = inventory_cache_new(ids, &o);
    tetris_error err = {0};
    ck_assert_int_eq(manifest_cache_put(mc, "bert", manifest_bert, strlen(manifest_bert), &err), 0);
    fault_server *real = fault_server_start(), *attacker = fault_server_start();
    const char *abc = "{\"digest\":\"" D("a") "\",\"bytes\":600},{\"digest\":\"" D(
        "b") "\",\"bytes\":300},{\"digest\":\"" D("c") "\",\"bytes\":100}";
    fault_server_push(real, &(fault_reply){.status = 200,
                                           .headers = "ETag: \"1\"\r\n",
                                           .body = inventory_json("n1", 1, 0, 1000, abc)});
    fault_server_push(attacker, &(fault_reply){.status = 200,
                                               .repeat = 100,
                                               .body = inventory_json("n1", 1, 0, 0, "")});
    char url[128], evil[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/inventory", fault_server_port(real));
    snprintf(evil, sizeof evil, "http://127.0.0.1:%d/inventory", fault_server_port(attacker));
    ck_assert_int_ge(inventory_cache_set_url(c, "n1", url, &err), 0); /* the watch's view */

    json_t *pod = json_pack("{s:{s:s,s:{s:s}}}", "metadata", "name", "p", "labels",
                            "tetris.io/model", "bert");
    json_t *args = json_pack("{s:o,s:{s:[o]},s:n}", "Pod", pod, "Nodes", "items",
                             node_with("n1", "127.0.0.1", evil), "NodeNames");
    char *body = json_dumps(args, JSON_COMPACT);
    extender *x = extender_new(mc, c, NULL);
    char *out = NULL;
    size_t len = 0;
    ck_assert_int_eq(extender_prioritize(x, body, strlen(body), &out, &len, &err), 0);
    json_t *res = json_loadb(out, len, 0, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(res, 0), "Score")), 10);
    json_decref(res);
    free(out);
    ck_assert_uint_eq(fault_server_count(attacker), 0);
    ck_assert_uint_eq(fault_server_count(real), 1);
    extender_free(x);

    /* Standalone (no watch): the request names URLs, within the policy. */
    inventory_url_policy p;
    inventory_url_policy_init(&p, fault_server_port(real));
    x = extender_new(mc, c, &p);
    ck_assert_int_eq(extender_prioritize(x, body, strlen(body), &out, &len, &err), 0);
    free(out);
    ck_assert_uint_eq(fault_server_count(attacker), 0); /* its port is not allowed */
    extender_free(x);
    free(body);

    json_decref(args);
    fault_server_stop(real);
    fault_server_stop(attacker);
    inventory_cache_free(c);
    manifest_cache_free(mc);
    tensor_ids_free(ids);
}
END_TEST

/* ---- the request reader (ext_request.h) ---- */

START_TEST(request_reader_is_strict_json)
{
    /* What jansson refuses, the reader refuses; each with a reason. */
    static const char *const bad[] = {
        "{\"Pod\":{},\"NodeNames\":[\"a\",]}",           /* trailing comma */
        "{\"Pod\":{},\"NodeNames\":[\"a\"]",             /* unterminated */
        "{\"Pod\":{},\"NodeNames\":[\"a\"]} x",          /* trailing text */
        "{\"Pod\":{},\"NodeNames\":[\"\\ud800\"]}",      /* lone surrogate */
        "{\"Pod\":{},\"NodeNames\":[\"a\\u0000b\"]}",    /* NUL */
        "{\"Pod\":{},\"NodeNames\":[\"\xc0\xaf\"]}",     /* overlong UTF-8 */
        "{\"Pod\":{},\"NodeNames\":[\"\xed\xa0\x80\"]}", /* UTF-8 surrogate */
        "{\"Pod\":{},\"NodeNames\":[\"a\tb\"]}",         /* raw control byte */
        "{\"Pod\":{},\"NodeNames\":[\"a\\x\"]}",         /* bad escape */
        "{\"Pod\":{\"a\":01},\"NodeNames\":[]}",         /* leading zero */
        "{\"Pod\":{\"a\":1.},\"NodeNames\":[]}",
        "{\"Pod\":{\"a\":-},\"NodeNames\":[]}",
        "{\"Pod\":{\"a\":tru},\"NodeNames\":[]}",
        "{\"Pod\":{},\"NodeNames\":[\"\"]}", /* empty name */
        "{\"Pod\":{},\"Nodes\":{\"items\":[{\"metadata\":{\"name\":7}}]}}",
        "{\"Pod\":{},\"Nodes\":{\"items\":[\"n1\"]}}",
        "{\"Pod\":{},\"NodeNames\":null,\"Nodes\":null}",
        "",
        "   ",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ext_request r;
        tetris_error err = {0};
        ck_assert_msg(ext_request_parse(bad[i], strlen(bad[i]), &r, &err) == -TETRIS_E_FORMAT,
                      "accepted %s", bad[i]);
        ck_assert_msg(err.msg[0] != '\0', "no reason for %s", bad[i]);
    }
    /* Nesting deeper than the reader's limit is refused, not recursed into. */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 64);
    ck_assert_ptr_nonnull(deep);
    int n = sprintf(deep, "{\"Pod\":{\"x\":");
    memset(deep + n, '[', depth);
    memset(deep + n + depth, ']', depth);
    strcpy(deep + n + 2 * depth, "},\"NodeNames\":[]}");
    ext_request r;
    tetris_error err = {0};
    ck_assert_int_eq(ext_request_parse(deep, strlen(deep), &r, &err), -TETRIS_E_FORMAT);
    free(deep);
}
END_TEST

START_TEST(request_reader_keys_and_names)
{
    /* Exact keys beat case-insensitive ones, the last duplicate wins, names
     * are unescaped, and a Node's text is kept as sent. */
    static const char body[] =
        " {\"nodes\":null,\"pod\":{\"metadata\":{\"name\":\"lower\"}},"
        "\"Pod\":{\"metadata\":{\"name\":\"exact\"}},"
        "\"NODES\":{\"items\":[{\"metadata\":{\"name\":\"x\"}}]},"
        "\"Nodes\":{\"Items\":[],\"items\":[{\"metadata\":{\"name\":\"old\"},"
        "\"metadata\":{\"name\":\"n\\u00e9\\\"1\",\"name\":\"n\\u00e9\\\"2\"}} ,"
        "{\"metadata\":{\"name\":\"\\ud83d\\ude00\"}}]}} ";
    ext_request r;
    tetris_error err = {0};
    ck_assert_msg(ext_request_parse(body, strlen(body), &r, &err) == 0, "%s", err.msg);
    ck_assert(!r.by_name);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(r.pod, "metadata"), "name")),
                     "exact");
    ck_assert_uint_eq(r.n, 2);
    ck_assert_str_eq(r.names[0], "n\xc3\xa9\"2");
    ck_assert_str_eq(r.names[1], "\xf0\x9f\x98\x80");
    ck_assert_uint_eq(r.items[1].len, strlen("{\"metadata\":{\"name\":\"\\ud83d\\ude00\"}}"));
    ck_assert(strncmp(r.items[1].text, "{\"metadata\"", 11) == 0);
    /* A name that needs escaping goes back out as valid JSON. */
    textbuf t = {0};
    ext_json_string(&t, r.names[0]);
    ext_json_string(&t, "a\x01\\b");
    char *text = textbuf_take(&t, NULL);
    ck_assert_str_eq(text, "\"n\xc3\xa9\\\"2\"\"a\\u0001\\\\b\"");
    free(text);
    ext_request_clear(&r);
}
END_TEST

/* Both forms give the same decisions; the Nodes form's filter reply echoes
 * the passing Node objects as sent, and the replies are JSON. */
START_TEST(request_forms_agree)
{
    tensor_ids *ids = tensor_ids_new();
    manifest_cache *mc = manifest_cache_new(ids);
    inventory_cache *c = inventory_cache_new(ids, NULL);
    extender *x = extender_new(mc, c, NULL);
    tetris_error err = {0};
    ck_assert_int_eq(manifest_cache_put(mc, "bert", manifest_bert, strlen(manifest_bert), &err), 0);
    /* "full\"q": its store cannot take the missing 600 bytes. */
    const char *inv_full = "{\"node\":\"x\",\"generation\":1,\"capacity_bytes\":1000,"
                           "\"resident_bytes\":900,\"tensors\":[{\"digest\":\"" D(
                               "b") "\",\"bytes\":300},{\"digest\":\"" D("c") "\",\"bytes\":100}]}";
    node_inventory *ni = NULL;
    ck_assert_int_eq(inventory_parse(ids, inv_full, strlen(inv_full), &ni, &err), 0);
    ck_assert_int_eq(inventory_cache_put(c, "full\"q", ni, &err), 0);
    static const char *const forms[] = {
        "{\"Pod\":{\"metadata\":{\"labels\":{\"tetris.io/model\":\"bert\"}}},"
        "\"NodeNames\":[\"free\",\"full\\\"q\"]}",
        "{\"Pod\":{\"metadata\":{\"labels\":{\"tetris.io/model\":\"bert\"}}},\"Nodes\":{\"items\":["
        "{\"metadata\":{\"name\":\"free\"},\"status\":{\"x\":[1,2.5e3,true,null]}},"
        "{\"metadata\":{\"name\":\"full\\\"q\"}}]}}",
    };
    for (int f = 0; f < 2; f++) {
        char *out = NULL;
        size_t len = 0;
        ck_assert_int_eq(extender_filter(x, forms[f], strlen(forms[f]), &out, &len, &err), 0);
        json_t *res = json_loadb(out, len, 0, NULL);
        ck_assert_msg(res != NULL, "filter reply is not JSON: %s", out);
        ck_assert_ptr_nonnull(json_object_get(json_object_get(res, "FailedNodes"), "full\"q"));
        json_t *passed = f == 0 ? json_object_get(res, "NodeNames")
                                : json_object_get(json_object_get(res, "Nodes"), "items");
        ck_assert_uint_eq(json_array_size(passed), 1);
        if (f == 0)
            ck_assert_str_eq(json_string_value(json_array_get(passed, 0)), "free");
        else
            ck_assert_ptr_nonnull(strstr(out, "{\"metadata\":{\"name\":\"free\"},\"status\":"
                                              "{\"x\":[1,2.5e3,true,null]}}"));
        json_decref(res);
        free(out);
        ck_assert_int_eq(extender_prioritize(x, forms[f], strlen(forms[f]), &out, &len, &err), 0);
        res = json_loadb(out, len, 0, NULL);
        ck_assert_msg(res != NULL, "prioritize reply is not JSON: %s", out);
        ck_assert_uint_eq(json_array_size(res), 2);
        ck_assert_str_eq(json_string_value(json_object_get(json_array_get(res, 1), "Host")),
                         "full\"q");
        ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(res, 1), "Score")), 4);
        ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(res, 0), "Score")), 0);
        json_decref(res);
        free(out);
    }
    extender_free(x);
    inventory_cache_free(c);
    manifest_cache_free(mc);
    tensor_ids_free(ids);
}
END_TEST

/* θ is computed when a manifest or an inventory changes, before either is
 * published: a decision finds it ready. A model's new version is new θ. */
START_TEST(theta_ready_before_decisions)
{
    tensor_ids *ids = tensor_ids_new();
    manifest_cache *mc = manifest_cache_new(ids);
    inventory_cache *c = inventory_cache_new(ids, NULL);
    extender *x = extender_new(mc, c, NULL);
    tetris_error err = {0};
    const char *inv_text = "{\"node\":\"x\",\"generation\":1,\"capacity_bytes\":0,"
                           "\"resident_bytes\":0,\"tensors\":[{\"digest\":\"" D(
                               "a") "\",\"bytes\":600}]}";
    node_inventory *ni = NULL;
    ck_assert_int_eq(inventory_parse(ids, inv_text, strlen(inv_text), &ni, &err), 0);
    ck_assert_int_eq(inventory_cache_put(c, "n1", ni, &err), 0);
    ck_assert_uint_eq(ni->n_memo, 0); /* no model yet */
    /* A new manifest: θ on the cached inventory. */
    ck_assert_int_eq(manifest_cache_put(mc, "bert", manifest_bert, strlen(manifest_bert), &err), 0);
    manifest_cache_rdlock(mc);
    const model_need *m = manifest_cache_find(mc, "bert");
    ck_assert_uint_gt(ni->n_memo, m->slot);
    ck_assert_uint_eq(ni->memo[m->slot].version, m->version);
    ck_assert_uint_eq(ni->memo[m->slot].present, 600);
    size_t slot = m->slot;
    manifest_cache_unlock(mc);
    /* A new inventory: θ of every model on it. */
    node_inventory *ni2 = NULL;
    ck_assert_int_eq(inventory_parse(ids, inv_text, strlen(inv_text), &ni2, &err), 0);
    ck_assert_int_eq(inventory_cache_put(c, "n2", ni2, &err), 0);
    ck_assert_uint_gt(ni2->n_memo, slot);
    ck_assert_uint_eq(ni2->memo[slot].present, 600);
    /* A second model takes another slot; a removed one's slot is reused
     * and the stale entry is not mistaken for the new model's. */
    ck_assert_int_eq(manifest_cache_put(mc, "other", manifest_bert, strlen(manifest_bert), &err),
                     0);
    manifest_cache_rdlock(mc);
    size_t other = manifest_cache_find(mc, "other")->slot;
    manifest_cache_unlock(mc);
    ck_assert_uint_ne(other, slot);
    manifest_cache_remove(mc, "bert");
    static const char manifest_c[] = "{\"format\":\"tetris-manifest/1\",\"tensors\":["
                                     "{\"name\":\"c\",\"digest\":\"" D("c") "\",\"nbytes\":100}]}";
    extender_free(x); /* no hooks now: the next decision computes θ itself */
    ck_assert_int_eq(manifest_cache_put(mc, "third", manifest_c, strlen(manifest_c), &err), 0);
    manifest_cache_rdlock(mc);
    m = manifest_cache_find(mc, "third");
    ck_assert_uint_eq(m->slot, slot);
    node_fit fit;
    similarity_eval(m, ni, &fit);
    ck_assert_uint_eq(fit.present_bytes, 0);
    manifest_cache_unlock(mc);
    inventory_cache_free(c);
    manifest_cache_free(mc);
    tensor_ids_free(ids);
}
END_TEST

static const char usage_text[] =
    "usage: extender-test [-h | --help | --version]\n"
    "\n"
    "Runs the scheduler extender's Check suite: tetris-scheduler-ext over HTTP\n"
    "against fault-serving node inventories, and its pure parts in-process.\n"
    "CK_RUN_CASE=pure|http and CK_RUN_SUITE select a part (Check's variables).\n"
    "\n"
    "Exit status: 0 every test passed; 1 a test failed; 2 usage.\n";

int main(int argc, char **argv)
{
    int status = fault_test_args(argc, argv, "extender-test", usage_text);
    if (status >= 0)
        return status;
    Suite *s = suite_create("scheduler-extender");
    TCase *pure = tcase_create("pure");
    tcase_add_test(pure, theta_and_fit);
    tcase_add_test(pure, score_by_bytes_lacking);
    tcase_add_test(pure, bad_manifests_and_inventories);
    tcase_add_test(pure, id_table_shrinks_with_inventories);
    tcase_add_test(pure, id_table_survives_churn);
    tcase_add_test(pure, inventory_urls_are_confined);
    tcase_add_test(pure, request_nodes_name_no_url);
    tcase_add_test(pure, request_reader_is_strict_json);
    tcase_add_test(pure, request_reader_keys_and_names);
    tcase_add_test(pure, request_forms_agree);
    tcase_add_test(pure, theta_ready_before_decisions);
    suite_add_tcase(s, pure);
    TCase *tc = tcase_create("http");
    tcase_add_unchecked_fixture(tc, start_servers, stop_servers);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, prioritize_scores_theta);
    tcase_add_test(tc, filter_fails_full_store_with_reason);
    tcase_add_test(tc, node_names_form_uses_known_urls);
    tcase_add_test(tc, unknown_or_missing_model_is_neutral);
    tcase_add_test(tc, inventories_repolled_with_if_none_match);
    tcase_add_test(tc, bad_requests_get_400);
    tcase_add_test(tc, mangled_requests_get_200_or_400);
    tcase_add_test(tc, metrics_count_requests);
    tcase_add_test(tc, tenant_pod_scored_by_its_tenant_store);
    tcase_add_test(tc, tenant_store_full_or_absent);
    tcase_add_test(tc, tenant_label_alone_places_nothing);
    tcase_add_test(tc, invalid_tenant_is_neutral_and_never_asked_for);
    tcase_add_test(tc, stale_inventory_becomes_neutral);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    /* One extender process and the fault servers' threads serve every test. */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
