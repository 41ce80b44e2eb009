/* gpu_importer.c - a function instance for the GPU sharing tests: loads a
 * model through the node daemon with a device (agent_load, options.device),
 * checks every device copy against the host bytes, prints one JSON line,
 * then, as asked, tries to write into its read-only device memory (by a
 * store through the pointer, or by a host-to-device copy) and holds the
 * model until stdin closes.
 *
 * usage: tetris-test-gpu-importer --store DIR --device cuda:N [--socket P]
 *        [--label L] [--copy-write] [--write] [--hold] MODEL
 *        tetris-test-gpu-importer --device cuda:N --mem-used
 *          prints the device's used bytes (cuMemGetInfo: total - free)
 *        tetris-test-gpu-importer --socket P --device cuda:N --ask-all [--hold] MODEL
 *          a client that ignores the agent's rules: ingests MODEL on its
 *          own connection and asks for device copies of every tensor, the
 *          smallest too; prints {"asked","attached","refused","reason"}
 * Exit status: 0 ok (every device copy matched), 1 a mismatch or failure,
 * 2 usage. The pointer write only makes sense with the fake driver
 * (tests/gpu/fake_libcuda.c), whose device pointers are host addresses:
 * the writer dies of SIGSEGV. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/agent.h"
#include "agent/ingest_client.h"
#include "common/cleanup.h"
#include "model/model.h"
#include "common/log.h"
#include "tensorstore/gpu/gpu.h"

static const char usage_text[] =
    "usage: tetris-test-gpu-importer --store DIR --device cuda:N [--socket PATH]\n"
    "           [--label L] [--copy-write] [--write] [--hold] MODEL\n"
    "       tetris-test-gpu-importer --device cuda:N --mem-used\n"
    "       tetris-test-gpu-importer --socket PATH --device cuda:N --ask-all [--hold] MODEL\n"
    "A function instance on a GPU, for the GPU sharing tests (tests/gpu/).\n"
    "Exit status: 0 ok, 1 a device copy differs or a failure, 2 usage.\n";

/* Blocks until stdin ends (the test closes it to let go). */
static void hold_until_stdin_ends(void)
{
    char buf[64];
    while (read(STDIN_FILENO, buf, sizeof(buf)) > 0)
        ;
}

/* --ask-all: what a hostile pod can send, past the agent's rules. */
static int ask_all(const char *socket_path, const char *device, const char *path, bool hold)
{
    tetris_error err;
    model *m = NULL;
    ingest_client *c = NULL;
    cleanup_free struct ingest_tensor_result *res = NULL;
    if (model_parse_file(path, &m, &err) < 0 || model_compute_digests(m, &err) < 0 ||
        (res = calloc(m->n_tensors + 1, sizeof(*res))) == NULL ||
        ingest_client_connect(socket_path, 0, &c, &err) < 0 ||
        ingest_client_ingest(c, "ask-all", m, res, NULL, &err) < 0) {
        log_error("event=ask-all-failed msg=%s", LOG_Q(res == NULL && m ? "oom" : err.msg));
        return 1;
    }
    size_t attached = 0, refused = 0;
    char reason[sizeof(err.msg)] = "";
    for (size_t b = 0; b < m->n_tensors; b += INGEST_MAX_GPU_TENSORS) {
        size_t n = m->n_tensors - b < INGEST_MAX_GPU_TENSORS ? m->n_tensors - b
                                                             : INGEST_MAX_GPU_TENSORS;
        tensor_digest dg[INGEST_MAX_GPU_TENSORS];
        struct ingest_gpu_result gr[INGEST_MAX_GPU_TENSORS];
        int fds[INGEST_MAX_GPU_TENSORS];
        for (size_t i = 0; i < n; i++)
            dg[i] = m->tensors[b + i].meta.digest;
        if (ingest_client_gpu_attach(c, device, dg, n, gr, fds, &err) < 0) {
            refused += n;
            snprintf(reason, sizeof(reason), "%s", err.msg);
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            if (gr[i].attached) {
                attached++;
                close(fds[i]);
            } else {
                refused++;
                if (reason[0] == '\0')
                    snprintf(reason, sizeof(reason), "%s", gr[i].reason);
            }
        }
    }
    json_t *out = json_pack("{s:I, s:I, s:I, s:s}", "asked", (json_int_t)m->n_tensors, "attached",
                            (json_int_t)attached, "refused", (json_int_t)refused, "reason", reason);
    char *text = out != NULL ? json_dumps(out, JSON_COMPACT) : NULL;
    printf("%s\n", text != NULL ? text : "{}");
    fflush(stdout);
    free(text);
    json_decref(out);
    if (hold)
        hold_until_stdin_ends();
    ingest_client_close(c);
    model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] =
        {{"store", required_argument, NULL, 's'},  {"socket", required_argument, NULL, 'S'},
         {"device", required_argument, NULL, 'd'}, {"label", required_argument, NULL, 'l'},
         {"write", no_argument, NULL, 'w'},        {"copy-write", no_argument, NULL, 'c'},
         {"hold", no_argument, NULL, 'H'},         {"mem-used", no_argument, NULL, 'M'},
         {"ask-all", no_argument, NULL, 'A'},      {"help", no_argument, NULL, 'h'},
         {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0}};
    struct agent_options o;
    agent_options_init(&o);
    bool write = false, copy_write = false, hold = false, mem_used = false, all = false;
    int c;
    log_init("tetris-test-gpu-importer");
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 's': o.store_dir = optarg; break;
        case 'S': o.daemon_socket = optarg; break;
        case 'd': o.device = optarg; break;
        case 'l': o.label = optarg; break;
        case 'w': write = true; break;
        case 'c': copy_write = true; break;
        case 'H': hold = true; break;
        case 'M': mem_used = true; break;
        case 'A': all = true; break;
        case 'h': fputs(usage_text, stdout); return 0;
        case 'V': printf("tetris-test-gpu-importer %s\n", TETRIS_VERSION); return 0;
        default: return 2;
        }
    }
    tetris_error err = {0};
    if (mem_used && o.device != NULL) {
        gpu_driver *g = NULL;
        int ordinal;
        uint64_t free_bytes, total;
        if (gpu_device_parse(o.device, &ordinal, &err) < 0 || gpu_driver_open(NULL, &g, &err) < 0 ||
            gpu_mem_info(g, ordinal, &free_bytes, &total, &err) < 0) {
            log_error("event=mem-info-failed msg=%s", LOG_Q(err.msg));
            return 1;
        }
        printf("%llu\n", (unsigned long long)(total - free_bytes));
        gpu_driver_close(g);
        return 0;
    }
    if (all && optind + 1 == argc && o.device != NULL && o.daemon_socket != NULL)
        return ask_all(o.daemon_socket, o.device, argv[optind], hold);
    if (optind + 1 != argc || o.device == NULL) {
        fputs(usage_text, stderr);
        return 2;
    }
    agent_model *am = NULL;
    if (agent_load(argv[optind], &o, &am, &err) < 0) {
        log_error("event=load-failed msg=%s", LOG_Q(err.msg));
        return 1;
    }
    int ordinal = 0;
    gpu_driver *g = NULL;
    size_t verified = 0, mismatched = 0;
    const agent_tensor *first = NULL;
    if (gpu_device_parse(o.device, &ordinal, &err) == 0 && am->stats.device_tensors > 0 &&
        gpu_driver_open(o.libcuda, &g, &err) == 0) {
        for (size_t i = 0; i < am->model->n_tensors; i++) {
            const agent_tensor *t = &am->tensors[i];
            uint64_t n = t->desc->meta.nbytes;
            if (t->device_ptr == 0)
                continue;
            first = first != NULL ? first : t;
            void *back = malloc(n + 1);
            if (back == NULL || gpu_copy_to_host(g, ordinal, back, t->device_ptr, n, &err) < 0 ||
                memcmp(back, t->data, n) != 0)
                mismatched++;
            else
                verified++;
            free(back);
        }
    }
    const char *copy = "not tried";
    if (copy_write && first != NULL)
        copy = gpu_copy_to_device(g, ordinal, first->device_ptr, "x", 1, &err) == 0 ? "accepted"
                                                                                    : "refused";
    printf("{\"pid\":%d,\"device_tensors\":%zu,\"device_bytes\":%llu,\"verified\":%zu,"
           "\"mismatched\":%zu,\"copy_write\":\"%s\",\"device_fallback\":\"%s\"}\n",
           (int)getpid(), am->stats.device_tensors, (unsigned long long)am->stats.device_bytes,
           verified, mismatched, copy, am->stats.device_fallback[0] ? "yes" : "");
    fflush(stdout);
    if (am->stats.device_fallback[0])
        log_warn("event=device-fallback msg=%s", LOG_Q(am->stats.device_fallback));
    if (write && first != NULL)
        ((volatile char *)(uintptr_t)first->device_ptr)[0] ^= 1;
    if (hold)
        hold_until_stdin_ends();
    gpu_driver_close(g);
    agent_model_free(am);
    return mismatched == 0 ? 0 : 1;
}
