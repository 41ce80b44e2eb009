/* tetris-node-pins.c - keeps a node daemon's pin file in
 * step with the cluster. Every interval it asks the apiserver which model
 * pods are on this node, in which tenant's namespace (node_pods.h), and
 * rewrites the file that `tetris-reclaimer --pin-file` reads: one hex
 * digest per line, followed by the tenant whose store it is pinned in
 * (none: the shared store), replaced atomically (write a temporary file,
 * then rename) and only when it changed. Runs next to the daemon (a
 * sidecar in its DaemonSet pod). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/cleanup.h"
#include "common/daemon_run.h"
#include "common/fileio.h"
#include "common/kube.h"
#include "common/log.h"
#include "common/options.h"
#include "protocol/names.h"
#include "reclaimer/node-pins/node_pods.h"

/* The pin file's new contents (malloc'd). */
static char *render(const node_models *m)
{
    size_t line_max = TENSOR_DIGEST_HEX_LEN + 1 + NODE_PODS_TENANT_SIZE;
    char *text = malloc(m->n_pins * line_max + 1);
    if (text == NULL)
        return NULL;
    size_t len = 0;
    for (size_t i = 0; i < m->n_pins; i++) {
        tensor_digest_to_hex(&m->pins[i].digest, text + len);
        len += TENSOR_DIGEST_HEX_LEN;
        if (m->pins[i].tenant[0] != '\0')
            len += (size_t)sprintf(text + len, " %s", m->pins[i].tenant);
        text[len++] = '\n';
    }
    text[len] = '\0';
    return text;
}

/* One refresh; *last is the file's current contents (updated). */
static int refresh(kube_client *kc, const char *node, const char *ns, const char *path,
                   char **last, tetris_error *err)
{
    node_models *m = NULL;
    int r = node_pods_models(kc, node, ns, &m, err);
    if (r < 0)
        return r;
    char *text = render(m);
    size_t n_models = m->n_models, n_missing = m->n_missing, n_skipped = m->n_skipped,
           n_pins = m->n_pins;
    node_models_free(m);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "pin file");
    if (*last != NULL && strcmp(*last, text) == 0) {
        free(text);
        return 0;
    }
    r = file_replace(path, text, strlen(text), 0644, err);
    if (r < 0) {
        free(text);
        return r;
    }
    free(*last);
    *last = text;
    log_info("event=pins-written node=%s models=%zu models_without_manifest=%zu "
             "pods_skipped=%zu pins=%zu file=%s",
             node, n_models, n_missing, n_skipped, n_pins, path);
    return 0;
}

/* The sidecar's run: its settings, and its client and the file's current
 * contents once started; daemon_run's steps below take it. */
struct pins_run {
    const char *node, *path, *ns, *kubeconfig;
    int64_t interval_s;
    bool once;
    kube_client *kc;
    char *last;     /* the pin file's current contents */
    bool refreshed; /* a refresh ran: the next waits one interval */
};

static int run_start(void *ctx, tetris_error *err)
{
    struct pins_run *run = ctx;
    int r = kube_client_new(run->kubeconfig, &run->kc, err);
    if (r == 0 && run->ns == NULL)
        run->ns = kube_client_namespace(run->kc);
    return r;
}

static void run_stop(void *ctx)
{
    struct pins_run *run = ctx;
    free(run->last);
    kube_client_free(run->kc);
}

/* The first refresh at once, the next one interval after the last. */
static double run_tick_wait_s(void *ctx)
{
    const struct pins_run *run = ctx;
    return run->refreshed ? (double)run->interval_s : 0;
}

/* One refresh; a failed one keeps the previous file (and fails --once). */
static int run_tick(void *ctx)
{
    struct pins_run *run = ctx;
    tetris_error err = {0};
    int status = 0;
    run->refreshed = true;
    if (refresh(run->kc, run->node, run->ns, run->path, &run->last, &err) < 0) {
        log_warn("event=pins-refresh-failed node=%s msg=%s action=keep-previous-file", run->node,
                 LOG_Q(err.msg));
        status = 1;
    }
    return run->once ? status : DAEMON_RUN_CONTINUE;
}

int main(int argc, char **argv)
{
    struct pins_run run = {.interval_s = 30};
    const struct opt_spec specs[] = {
        {.name = "node",
         .type = OPT_TYPE_STRING,
         .dest = &run.node,
         .env = TETRIS_ENV_NODE_NAME,
         .meta = "NAME",
         .help = "this node (required)"},
        {.name = "pin-file",
         .type = OPT_TYPE_STRING,
         .dest = &run.path,
         .meta = "FILE",
         .help = "the file to keep up to date (required)"},
        {.name = "namespace",
         .type = OPT_TYPE_STRING,
         .dest = &run.ns,
         .meta = "NS",
         .help = "namespace of the manifest ConfigMaps (default: the kubeconfig context's / "
                 "service account's)"},
        {.name = "kubeconfig",
         .type = OPT_TYPE_STRING,
         .dest = &run.kubeconfig,
         .meta = "FILE",
         .help = "default: in-cluster service account"},
        {.name = "interval",
         .type = OPT_TYPE_I64,
         .dest = &run.interval_s,
         .min = 1,
         .max = 86400,
         .meta = "SECONDS",
         .help = "between refreshes (default 30)"},
        {.name = "once", .type = OPT_TYPE_FLAG, .dest = &run.once, .help = "refresh once and exit"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-node-pins",
        .synopsis = "--node NAME --pin-file FILE [OPTION]...",
        .about = "Writes the tensor digests of the models of the pods scheduled to NAME (pods\n"
                 "labelled " TETRIS_LABEL_MODEL
                 ", manifests in ConfigMaps labelled " TETRIS_LABEL_MODEL ")\n"
                 "to FILE for tetris-reclaimer --pin-file: one hex digest per line, then the\n"
                 "tenant whose store keeps it. A pod's tenant is its namespace's label\n"
                 "tetris.io/tenant (none: the shared store), never the pod's own; its\n"
                 "model's manifest must be labelled for that tenant or for none.\n",
        .options = specs,
        .epilogue = "A failed refresh keeps the previous file (pins are never dropped because the\n"
                    "apiserver is unreachable).\n"
                    "Exit status: 0 stopped by SIGTERM/SIGINT or --once done, 1 failure (--once\n"
                    "refresh failed, no credentials), 2 usage error.\n",
    };
    int first, status;

    log_init(argv[0]);
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return 2;
    if (first < argc)
        return opt_usage_error(&prog, "unexpected argument '%s'", argv[first]), 2;
    if (run.node == NULL || run.path == NULL)
        return opt_usage_error(&prog,
                               "--node (or $" TETRIS_ENV_NODE_NAME ") and --pin-file are required"),
               2;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    status = daemon_run(&(struct daemon_run){.ctx = &run,
                                             .start = run_start,
                                             .stop = run_stop,
                                             .tick = run_tick,
                                             .tick_wait_s = run_tick_wait_s});
    curl_global_cleanup();
    return status;
}
