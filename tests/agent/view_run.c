/* view_run.c - test helper: runs a model through its model view the way a
 * function in another language does (docs/programs/tetris-agent.md, "Model
 * views"): it knows nothing of the agent or the store, reads only
 * tensors.json, hands ONNX Runtime the graph's bytes with the view's
 * session_options, and runs it on the same seeded inputs as
 * tetris-onnx-run --seed N, printing the same sha256 of the outputs.
 *
 *   tetris-test-view-run [--seed N] [--hold] [--by-path] [VIEW]
 *
 * VIEW defaults to $TETRIS_MODEL_VIEW. --by-path opens the graph by its
 * path instead of from its bytes (ONNX Runtime before 1.24 accepts that;
 * later ones refuse external data that resolves outside the graph's
 * folder). --hold keeps the session until stdin closes, so a test can
 * look at the mappings. Exit status: 0 ok (or --help, --version), 1
 * failure, 2 usage. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "agent/hold.h"
#include "agent/onnx_share.h"
#include "agent/ort_inputs.h"
#include "common/cleanup.h"
#include "common/cli.h"
#include "protocol/names.h"

static const char usage_text[] =
    "usage: tetris-test-view-run [--seed N] [--hold] [--by-path] [VIEW]\n"
    "Runs the model of a model view (default $" TETRIS_ENV_MODEL_VIEW ") on seeded inputs\n"
    "with ONNX Runtime, knowing only tensors.json; prints the outputs' sha256.\n"
    "  -h, --help     this text         --version   the version\n";

static int fail(const char *what, const char *msg)
{
    fprintf(stderr, "tetris-test-view-run: %s: %s\n", what, msg);
    return 1;
}

static int ort_fail(const OrtApi *api, OrtStatus *st, const char *what)
{
    fail(what, api->GetErrorMessage(st));
    api->ReleaseStatus(st);
    return 1;
}

/* The view's session_options: the optimisation level, and every
 * "session.*" key as a config entry. */
static int apply_options(const OrtApi *api, OrtSessionOptions *so, json_t *opts)
{
    const char *key;
    json_t *value;
    OrtStatus *st = NULL;
    json_object_foreach (opts, key, value) {
        if (strcmp(key, "graph_optimization_level") == 0) {
            if (strcmp(json_string_value(value), "disabled") != 0)
                return fail("session_options", "unknown graph_optimization_level");
            st = api->SetSessionGraphOptimizationLevel(so, ORT_DISABLE_ALL);
        } else if (strncmp(key, "session.", 8) == 0 && json_is_string(value)) {
            st = api->AddSessionConfigEntry(so, key, json_string_value(value));
        }
        if (st != NULL)
            return ort_fail(api, st, key);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"seed", required_argument, NULL, 's'},
                                             {"hold", no_argument, NULL, 'H'},
                                             {"by-path", no_argument, NULL, 'p'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'V'},
                                             {NULL, 0, NULL, 0}};
    uint64_t seed = 1;
    bool hold = false, by_path = false;
    tetris_error err = {0};
    int c;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 's' && cli_parse_u64("--seed", optarg, 0, INT64_MAX, &seed, &err) < 0)
            return fail("usage", err.msg) + 1;
        else if (c == 'H')
            hold = true;
        else if (c == 'p')
            by_path = true;
        else if (c == 'h')
            return fputs(usage_text, stdout) == EOF;
        else if (c == 'V')
            return printf("tetris-test-view-run %s\n", TETRIS_VERSION) < 0;
        else if (c == '?')
            return 2;
    }
    const char *view = optind < argc ? argv[optind] : getenv(TETRIS_ENV_MODEL_VIEW);
    if (view == NULL)
        return fail("usage", "no VIEW and no " TETRIS_ENV_MODEL_VIEW) + 1;

    char path[4096];
    json_error_t jerr;
    snprintf(path, sizeof(path), "%s/tensors.json", view);
    json_t *index = json_load_file(path, 0, &jerr);
    if (index == NULL)
        return fail(path, jerr.text);
    const char *graph = json_string_value(json_object_get(index, "graph"));
    json_t *opts = json_object_get(index, "session_options");
    if (graph == NULL || !json_is_object(opts))
        return fail(path, "not an ONNX view (no graph or session_options)");
    if (graph[0] == '/')
        snprintf(path, sizeof(path), "%s", graph);
    else
        snprintf(path, sizeof(path), "%s/%s", view, graph);

    const OrtApi *api = OrtGetApiBase()->GetApi(ORT_API_VERSION);
    OrtEnv *env = NULL;
    OrtSessionOptions *so = NULL;
    OrtStatus *st = api->CreateEnv(ORT_LOGGING_LEVEL_FATAL, "view-run", &env);
    if (st == NULL)
        st = api->CreateSessionOptions(&so);
    if (st == NULL)
        st = api->SetIntraOpNumThreads(so, 1);
    if (st != NULL)
        return ort_fail(api, st, "onnxruntime");
    if (apply_options(api, so, opts) != 0)
        return 1;
    ort_model m = {.api = api};
    if (by_path) {
        st = api->CreateSession(env, path, so, &m.session);
    } else {
        cleanup_free uint8_t *image = NULL;
        size_t len = 0;
        if (onnx_share_read_image(path, &image, &len, &err) < 0)
            return fail(path, err.msg);
        st = api->CreateSessionFromArray(env, image, len, so, &m.session);
    }
    if (st != NULL)
        return ort_fail(api, st, "create session");

    ort_io *io = NULL;
    char hex[65];
    uint64_t out_bytes = 0;
    if (ort_io_describe(&m, ORT_INPUTS_DEFAULT_DYNAMIC_DIM, &io, &err) < 0)
        return fail("inputs", err.msg);
    cleanup_free OrtValue **inputs = calloc(io->n_in + 1, sizeof(*inputs));
    cleanup_free OrtValue **outputs = calloc(io->n_out + 1, sizeof(*outputs));
    if (inputs == NULL || outputs == NULL)
        return fail("run", strerror(ENOMEM));
    if (ort_inputs_make(&m, io, &seed, 1, inputs, &err) < 0 ||
        ort_io_run(&m, io, inputs, outputs, &err) < 0 ||
        ort_outputs_sha256(&m, io, outputs, 1, 0, hex, &out_bytes, &err) < 0)
        return fail("run", err.msg);
    printf("{\"view\":\"%s\",\"graph\":\"%s\",\"seed\":%llu,\"output_bytes\":%llu,"
           "\"sha256\":\"%s\"}\n",
           view, graph, (unsigned long long)seed, (unsigned long long)out_bytes, hex);
    fflush(stdout);
    if (hold)
        hold_until_released();
    ort_values_release(&m, outputs, io->n_out);
    ort_values_release(&m, inputs, io->n_in);
    ort_io_free(io);
    api->ReleaseSession(m.session);
    api->ReleaseSessionOptions(so);
    api->ReleaseEnv(env);
    json_decref(index);
    return 0;
}
