/* tetris-derive - the node daemon's derivation child: optimises one
 * model's share image (protocol/derived.h) with ONNX Runtime at level
 * `all`, with MLAS pre-packing, and writes the optimised graph and one
 * external data file holding its initializers and their pre-packed forms,
 * which the daemon then publishes into the store as a derived form.
 *
 * Why a program of its own: the graph comes from a pod, and ONNX Runtime
 * is a large parser and optimiser. tetris-reclaimer runs this with bounded
 * resources (address space, CPU time, file size, descriptors), no new
 * privileges and a deadline (reclaimer/derive.c), so a hostile graph can at
 * worst fail its own derivation; the daemon names the result by the digest
 * of the bytes it handed over, not by anything this program says. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/options.h"
#include "agent/ort_adapter.h"
#include "protocol/derived.h"
#include "protocol/ingest.h"

enum exit_code { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2, EXIT_BAD_INPUT = 3 };

struct derive_options {
    int graph_fd;
    const char *external_dir;
    const char *out_dir;
    int threads;
};

static const char about[] =
    "Optimises the ONNX graph read from --graph-fd at level all with pre-packing\n"
    "and writes DIR/graph.onnx and DIR/" DERIVED_DATA_LOCATION " (initializers of\n"
    "128 bytes or more and their pre-packed forms). Prints one JSON line with\n"
    "the runtime that made them. Run by tetris-reclaimer, not by hand.\n";

static const char epilogue[] =
    "Exit status: 0 ok, 1 the runtime failed, 2 usage, 3 the graph is not one\n"
    "the runtime accepts.\n";

static int read_image(int fd, uint8_t **out, size_t *len, tetris_error *err)
{
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    if (buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "graph");
    for (;;) {
        if (n == cap) {
            if (cap >= INGEST_MAX_DERIVE_IMAGE) {
                free(buf);
                return tetris_fail(err, TETRIS_E_FORMAT, 0, "graph larger than %u bytes",
                                   INGEST_MAX_DERIVE_IMAGE);
            }
            uint8_t *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "graph");
            }
            buf = bigger;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            return tetris_fail(err, TETRIS_E_IO, errno, "read the graph");
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *out = buf;
    *len = n;
    return 0;
}

static int derive(const OrtApi *api, const struct derive_options *o, const uint8_t *image,
                  size_t len, tetris_error *err)
{
    char graph[4096];
    char min_size[16];
    OrtEnv *env = NULL;
    OrtSessionOptions *so = NULL;
    OrtSession *session = NULL;
    snprintf(graph, sizeof(graph), "%s/graph.onnx", o->out_dir);
    snprintf(min_size, sizeof(min_size), "%d", DERIVED_MIN_EXTERNAL_BYTES);
    int r = ort_check(api, api->CreateEnv(ORT_LOGGING_LEVEL_ERROR, "tetris-derive", &env),
                      "create environment", err);
    if (r == 0)
        r = ort_check(api, api->CreateSessionOptions(&so), "create session options", err);
    if (r == 0)
        r = ort_check(api, api->SetIntraOpNumThreads(so, o->threads), "set threads", err);
    if (r == 0)
        r = ort_check(api, api->SetSessionGraphOptimizationLevel(so, ORT_ENABLE_ALL),
                      "set graph optimization", err);
    if (r == 0)
        r = ort_check(api, api->SetOptimizedModelFilePath(so, graph), "set the output", err);
    const char *entries[][2] = {
        {"session.model_external_initializers_file_folder_path", o->external_dir},
        {"session.optimized_model_external_initializers_file_name", DERIVED_DATA_LOCATION},
        {"session.optimized_model_external_initializers_min_size_in_bytes", min_size},
        {"session.save_external_prepacked_constant_initializers", "1"},
    };
    for (size_t i = 0; r == 0 && i < sizeof(entries) / sizeof(entries[0]); i++)
        r = ort_check(api, api->AddSessionConfigEntry(so, entries[i][0], entries[i][1]),
                      entries[i][0], err);
    if (r == 0)
        r = ort_check(api, api->CreateSessionFromArray(env, image, len, so, &session),
                      "optimise the graph", err);
    if (session != NULL)
        api->ReleaseSession(session);
    if (so != NULL)
        api->ReleaseSessionOptions(so);
    if (env != NULL)
        api->ReleaseEnv(env);
    return r;
}

int main(int argc, char **argv)
{
    struct derive_options o = {.graph_fd = -1, .threads = 1};
    const struct opt_spec options[] = {
        {.name = "graph-fd",
         .type = OPT_TYPE_INT,
         .dest = &o.graph_fd,
         .min = 0,
         .max = 1 << 20,
         .meta = "N",
         .help = "read the share image from descriptor N"},
        {.name = "external-dir",
         .type = OPT_TYPE_STRING,
         .dest = &o.external_dir,
         .meta = "DIR",
         .help = "the store's public directory the graph's external data resolve in"},
        {.name = "out-dir",
         .type = OPT_TYPE_STRING,
         .dest = &o.out_dir,
         .meta = "DIR",
         .help = "write graph.onnx and " DERIVED_DATA_LOCATION " here"},
        {.name = "threads",
         .type = OPT_TYPE_INT,
         .dest = &o.threads,
         .min = 1,
         .max = 64,
         .meta = "N",
         .help = "intra-op threads (default 1)"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-derive",
        .synopsis = "--graph-fd N --external-dir DIR --out-dir DIR [--threads N]",
        .about = about,
        .options = options,
        .epilogue = epilogue,
    };
    int first = opt_parse(&prog, argc, argv);
    if (first < 0)
        return EXIT_USAGE;
    if (first < argc || o.graph_fd < 0 || o.external_dir == NULL || o.out_dir == NULL) {
        fprintf(stderr, "tetris-derive: --graph-fd, --external-dir and --out-dir are needed\n");
        return EXIT_USAGE;
    }
    tetris_error err = {0};
    cleanup_free uint8_t *image = NULL;
    size_t len = 0;
    if (read_image(o.graph_fd, &image, &len, &err) < 0) {
        log_error("event=derive-failed msg=%s", LOG_Q(err.msg));
        return err.code == TETRIS_E_FORMAT ? EXIT_BAD_INPUT : EXIT_FAILED;
    }
    const OrtApi *api = OrtGetApiBase()->GetApi(ORT_API_VERSION);
    if (api == NULL) {
        log_error("event=derive-failed msg=\"onnxruntime lacks API version %d\"", ORT_API_VERSION);
        return EXIT_FAILED;
    }
    if (derive(api, &o, image, len, &err) < 0) {
        log_error("event=derive-failed msg=%s", LOG_Q(err.msg));
        return err.code == TETRIS_E_FORMAT ? EXIT_BAD_INPUT : EXIT_FAILED;
    }
    char runtime[DERIVED_NAME_MAX];
    derived_runtime_name(OrtGetApiBase()->GetVersionString(), runtime, sizeof(runtime));
    printf("{\"runtime\":\"%s\"}\n", runtime);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAILED;
}
