/* fake-apiserver.c - the few apiserver reads tetris-webhook makes during a
 * review, over plain HTTP on loopback, for its tests without a cluster
 * (tests/webhook/test-webhook.sh): GET /api/v1/namespaces/NS answers a
 * Namespace whose labels the test chose (404 for a namespace it did not
 * name), and listing a namespace's ConfigMaps answers an empty list (no
 * model has a manifest). Anything else gets 404. The real apiserver is
 * exercised by the E2E tier (tests/k8s/test-webhook-k8s.sh).
 *
 * Exit status: 0 stopped by SIGTERM/SIGINT, 1 cannot serve, 2 usage. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/httpserver.h"
#include "common/log.h"

#define MAX_NAMESPACES 32
#define NAMESPACES_PREFIX "/api/v1/namespaces/"

typedef struct fake_namespace {
    const char *name;
    const char *tenant; /* the tetris.io/tenant label; NULL none */
} fake_namespace;

typedef struct fake_api {
    fake_namespace ns[MAX_NAMESPACES];
    size_t n_ns;
} fake_api;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tetris-test-fake-apiserver [--listen ADDR:PORT] [--namespace NS[=TENANT]]...\n"
            "\n"
            "Answers tetris-webhook's namespace and ConfigMap reads over plain HTTP (tests\n"
            "only). NS=TENANT gives the namespace the label tetris.io/tenant=TENANT.\n"
            "Logs event=listening port=N on stderr once it serves.\n"
            "\n"
            "  --listen ADDR:PORT  default 127.0.0.1:0 (a free port)\n"
            "  --namespace NS[=T]  a namespace that exists (repeatable, up to 32)\n"
            "  --help, --version\n"
            "\n"
            "Exit status: 0 stopped by SIGTERM/SIGINT, 1 cannot serve, 2 usage error.\n");
}

static const fake_namespace *find_namespace(const fake_api *api, const char *name, size_t len)
{
    for (size_t i = 0; i < api->n_ns; i++)
        if (strlen(api->ns[i].name) == len && strncmp(api->ns[i].name, name, len) == 0)
            return &api->ns[i];
    return NULL;
}

/* GET /api/v1/namespaces/NS and /api/v1/namespaces/NS/configmaps. */
static void handle_namespaces(void *ctx, const http_request *req, http_response *resp)
{
    const fake_api *api = ctx;
    const char *rest = req->path + strlen(NAMESPACES_PREFIX);
    size_t len = strcspn(rest, "/");
    const char *sub = rest + len;
    const fake_namespace *ns = find_namespace(api, rest, len);
    if (ns == NULL || (sub[0] != '\0' && strcmp(sub, "/configmaps") != 0)) {
        http_response_error(resp, 404, "not found");
        return;
    }
    json_t *doc;
    if (sub[0] != '\0') {
        doc = json_pack("{s:s, s:s, s:{}, s:[]}", "kind", "ConfigMapList", "apiVersion", "v1",
                        "metadata", "items");
    } else {
        json_t *labels = json_pack("{s:s}", "kubernetes.io/metadata.name", ns->name);
        if (labels != NULL && ns->tenant != NULL)
            json_object_set_new(labels, "tetris.io/tenant", json_string(ns->tenant));
        doc = json_pack("{s:s, s:s, s:{s:s, s:o*}}", "kind", "Namespace", "apiVersion", "v1",
                        "metadata", "name", ns->name, "labels", labels);
    }
    if (doc == NULL) {
        http_response_error(resp, 500, "out of memory");
        return;
    }
    http_response_json(resp, 200, doc);
    json_decref(doc);
    log_info("event=served path=%s", req->path);
}

int main(int argc, char **argv)
{
    log_init(argv[0]);
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"namespace", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *listen = "127.0.0.1:0";
    static fake_api api;
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'l': listen = optarg; break;
        case 'n': {
            if (api.n_ns == MAX_NAMESPACES) {
                fprintf(stderr, "tetris-test-fake-apiserver: at most %d namespaces\n",
                        MAX_NAMESPACES);
                return 2;
            }
            char *eq = strchr(optarg, '=');
            if (eq != NULL)
                *eq = '\0';
            api.ns[api.n_ns++] = (fake_namespace){optarg, eq != NULL ? eq + 1 : NULL};
            break;
        }
        case 'h': usage(stdout); return 0;
        case 'V': printf("tetris-test-fake-apiserver %s\n", TETRIS_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tetris-test-fake-apiserver: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }

    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

    struct http_server_options ho;
    http_server_options_init(&ho);
    ho.listen = listen;
    http_server *srv = NULL;
    tetris_error err = {0};
    int r = http_server_new(&ho, &srv, &err);
    if (r == 0)
        r = http_server_route(srv, "GET", NAMESPACES_PREFIX "*", handle_namespaces, &api, &err);
    if (r == 0)
        r = http_server_start(srv, &err);
    if (r < 0) {
        log_error("event=start-failed msg=%s", LOG_Q(err.msg));
        http_server_free(srv);
        return 1;
    }
    log_info("event=listening port=%u namespaces=%zu", http_server_port(srv), api.n_ns);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    http_server_free(srv);
    return 0;
}
