/* tetris-bench-gpu.c - what a warm GPU instance saves. A parent
 * process plays the node daemon: one VMM allocation per tensor of a model
 * (tensorstore/gpu/gpu.h, as the daemon makes them), filled once. A child
 * plays a new instance and, measured in the same run:
 *   attach  imports and maps every tensor read-only from the descriptors
 *           (the warm start with tetris), per-tensor latency percentiles;
 *   copy    allocates and copies the same bytes host to device
 *           (cuMemAlloc + cuMemcpyHtoD: the start without tetris; the
 *           bytes are already in host memory, so no disk is timed).
 * It also reports the padding the per-tensor allocations cost.
 *
 * The tensor sizes come from --model (ONNX or safetensors) or, by default,
 * a synthetic 1.3 GB model (--synthetic-tensors N of equal size).
 *
 * Figures from an NVIDIA H200 in BENCHMARKS.md. Exit status: 0
 * done, 1 failure, 2 usage, 77 no CUDA driver or GPU here (skipped). */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/options.h"
#include "model/model.h"
#include "tensorstore/gpu/cuda_abi.h"
#include "tensorstore/gpu/gpu.h"

#define BATCH 64

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int send_fds(int sock, const int *fds, size_t n)
{
    char byte = 'f';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    char buf[CMSG_SPACE(BATCH * sizeof(int))];
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = buf,
                         .msg_controllen = CMSG_SPACE(n * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

static int recv_fds(int sock, int *fds, size_t n)
{
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    char buf[CMSG_SPACE(BATCH * sizeof(int))];
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = buf,
                         .msg_controllen = sizeof(buf)};
    if (recvmsg(sock, &msg, MSG_WAITALL) != 1)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (c == NULL || c->cmsg_len != CMSG_LEN(n * sizeof(int)))
        return -1;
    memcpy(fds, CMSG_DATA(c), n * sizeof(int));
    return 0;
}

/* The new instance: attach everything, then copy everything. */
static int instance(int sock, const char *libcuda, const uint64_t *bytes, const uint64_t *sizes,
                    size_t n)
{
    gpu_driver *g;
    tetris_error err;
    if (gpu_driver_open(libcuda, &g, &err) < 0 || gpu_device_check(g, 0, &err) < 0) {
        fprintf(stderr, "tetris-bench-gpu: %s\n", err.msg);
        return 1;
    }
    gpu_mapping *maps = calloc(n, sizeof(*maps));
    double *lat = calloc(n, sizeof(*lat));
    if (maps == NULL || lat == NULL)
        return 1;
    int64_t t0 = clock_mono_us();
    for (size_t b = 0; b < n; b += BATCH) {
        size_t k = n - b < BATCH ? n - b : BATCH;
        int fds[BATCH];
        if (recv_fds(sock, fds, k) < 0)
            return 1;
        for (size_t i = 0; i < k; i++) {
            int64_t s = clock_mono_us();
            if (gpu_import_map(g, 0, fds[i], sizes[b + i], false, &maps[b + i], &err) < 0) {
                fprintf(stderr, "tetris-bench-gpu: import: %s\n", err.msg);
                return 1;
            }
            lat[b + i] = (double)(clock_mono_us() - s);
            close(fds[i]);
        }
    }
    double attach_ms = (double)(clock_mono_us() - t0) / 1000;
    qsort(lat, n, sizeof(*lat), cmp_double);
    for (size_t i = 0; i < n; i++)
        gpu_unmap(g, &maps[i]);

    /* The baseline: a private device copy of every tensor. */
    void *lib = dlopen(libcuda != NULL ? libcuda : GPU_LIBCUDA_DEFAULT, RTLD_NOW);
    tcu_result (*mem_alloc)(tcu_deviceptr *, size_t) = NULL;
    tcu_result (*mem_free)(tcu_deviceptr) = NULL;
    if (lib != NULL) {
        *(void **)&mem_alloc = dlsym(lib, "cuMemAlloc_v2");
        *(void **)&mem_free = dlsym(lib, "cuMemFree_v2");
    }
    uint64_t max = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        max = bytes[i] > max ? bytes[i] : max;
        total += bytes[i];
    }
    char *host = malloc(max);
    if (mem_alloc == NULL || mem_free == NULL || host == NULL) {
        fprintf(stderr, "tetris-bench-gpu: the driver lacks cuMemAlloc_v2/cuMemFree_v2\n");
        return 1;
    }
    memset(host, 0x5a, max);
    tcu_deviceptr *dev = calloc(n, sizeof(*dev));
    t0 = clock_mono_us();
    for (size_t i = 0; i < n; i++)
        if (mem_alloc(&dev[i], bytes[i]) != TCU_SUCCESS ||
            gpu_copy_to_device(g, 0, dev[i], host, bytes[i], &err) < 0)
            return 1;
    double copy_ms = (double)(clock_mono_us() - t0) / 1000;
    for (size_t i = 0; i < n; i++)
        mem_free(dev[i]);
    char name[128] = "";
    gpu_device_name(g, 0, name, sizeof(name), &err);
    printf("gpu=\"%s\" driver=%d tensors=%zu bytes=%llu\n", name, gpu_driver_version(g), n,
           (unsigned long long)total);
    printf("attach_ms=%.1f copy_ms=%.1f speedup=%.1fx copy_gbps=%.2f\n", attach_ms, copy_ms,
           copy_ms / attach_ms, (double)total / (copy_ms / 1000) / 1e9);
    printf("import_map_us p50=%.1f p90=%.1f p99=%.1f max=%.1f attach_tensors_per_s=%.0f\n",
           lat[n / 2], lat[n * 9 / 10], lat[n * 99 / 100], lat[n - 1],
           (double)n / (attach_ms / 1000));
    return 0;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *libcuda = NULL;
    uint64_t syn_bytes = 1300000000ull, syn_tensors = 260;
    const struct opt_spec specs[] = {
        {.name = "model",
         .type = OPT_TYPE_STRING,
         .dest = &model_path,
         .meta = "FILE",
         .help = "the tensor sizes of this model (ONNX or safetensors)"},
        {.name = "synthetic-bytes",
         .type = OPT_TYPE_BYTES,
         .dest = &syn_bytes,
         .umin = 1,
         .umax = UINT64_MAX,
         .meta = "N",
         .help = "without --model: a synthetic model of N bytes (default 1.3 GB)"},
        {.name = "synthetic-tensors",
         .type = OPT_TYPE_U64,
         .dest = &syn_tensors,
         .umin = 1,
         .umax = 1000000,
         .meta = "N",
         .help = "in N tensors of equal size (default 260)"},
        {.name = "libcuda",
         .type = OPT_TYPE_STRING,
         .dest = &libcuda,
         .env = GPU_LIBCUDA_ENV,
         .meta = "PATH",
         .help = "the CUDA driver library (default " GPU_LIBCUDA_DEFAULT ")"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-bench-gpu",
        .synopsis = "[--model FILE | --synthetic-bytes N --synthetic-tensors N]\n"
                    "[--libcuda PATH]",
        .about = "Warm attach of a model's shared GPU tensors (import + map read-only, as a\n"
                 "tetris instance does) against copying them host to device, on cuda:0.\n"
                 "Default: a synthetic model of 1.3 GB in 260 tensors.\n",
        .options = specs,
        .epilogue = "Exit status: 0 done, 1 failure, 2 usage, 77 no driver or GPU (skipped).\n",
    };
    int first;
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return 2;
    if (first != argc)
        return opt_usage_error(&prog, "unexpected argument '%s'", argv[first]), 2;
    size_t n;
    uint64_t *bytes;
    tetris_error err;
    if (model_path != NULL) {
        model *m;
        if (model_parse_file(model_path, &m, &err) < 0) {
            fprintf(stderr, "tetris-bench-gpu: %s\n", err.msg);
            return 1;
        }
        n = m->n_tensors;
        bytes = calloc(n + 1, sizeof(*bytes));
        for (size_t i = 0; bytes != NULL && i < n; i++)
            bytes[i] = m->tensors[i].meta.nbytes;
        model_free(m);
    } else {
        n = syn_tensors;
        bytes = calloc(n, sizeof(*bytes));
        for (size_t i = 0; bytes != NULL && i < n; i++)
            bytes[i] = syn_bytes / n;
    }
    if (bytes == NULL || n == 0)
        return 1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return 1;
    /* The instance is forked before this process touches CUDA. */
    uint64_t *sizes = calloc(n, sizeof(*sizes));
    if (sizes == NULL)
        return 1;
    int szpipe[2];
    if (pipe(szpipe) < 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        close(szpipe[1]);
        size_t got = 0;
        while (got < n * sizeof(*sizes)) {
            ssize_t r = read(szpipe[0], (char *)sizes + got, n * sizeof(*sizes) - got);
            if (r <= 0)
                _exit(77); /* the daemon side found no GPU */
            got += (size_t)r;
        }
        int rc = instance(sv[1], libcuda, bytes, sizes, n);
        fflush(stdout); /* _exit flushes nothing */
        _exit(rc);
    }
    close(sv[1]);
    close(szpipe[0]);
    gpu_driver *g;
    if (gpu_driver_open(libcuda, &g, &err) < 0 || gpu_device_check(g, 0, &err) < 0) {
        fprintf(stderr, "SKIP tetris-bench-gpu: %s\n", err.msg);
        close(szpipe[1]);
        waitpid(pid, NULL, 0);
        free(sizes);
        free(bytes);
        return 77;
    }
    gpu_alloc *a = calloc(n, sizeof(*a));
    uint64_t max = 0, padded = 0, total = 0;
    for (size_t i = 0; i < n; i++)
        max = bytes[i] > max ? bytes[i] : max;
    char *host = calloc(1, max + 1);
    if (a == NULL || host == NULL)
        return 1;
    int64_t t0 = clock_mono_us();
    for (size_t i = 0; i < n; i++) {
        if (gpu_alloc_create(g, 0, bytes[i], &a[i], &err) < 0 ||
            gpu_alloc_fill(g, &a[i], host, bytes[i], &err) < 0) {
            fprintf(stderr, "tetris-bench-gpu: %s\n", err.msg);
            return 1;
        }
        sizes[i] = a[i].size;
        padded += a[i].size;
        total += bytes[i];
    }
    double fill_ms = (double)(clock_mono_us() - t0) / 1000;
    if (write(szpipe[1], sizes, n * sizeof(*sizes)) != (ssize_t)(n * sizeof(*sizes)))
        return 1;
    for (size_t b = 0; b < n; b += BATCH) {
        size_t k = n - b < BATCH ? n - b : BATCH;
        int fds[BATCH];
        for (size_t i = 0; i < k; i++)
            if (gpu_alloc_export(g, &a[b + i], &fds[i], &err) < 0)
                return 1;
        if (send_fds(sv[0], fds, k) < 0)
            return 1;
        for (size_t i = 0; i < k; i++)
            close(fds[i]);
    }
    int st;
    waitpid(pid, &st, 0);
    printf("daemon_fill_ms=%.1f padding_bytes=%llu (%.2f%% of %llu)\n", fill_ms,
           (unsigned long long)(padded - total), 100.0 * (double)(padded - total) / (double)total,
           (unsigned long long)total);
    for (size_t i = 0; i < n; i++)
        gpu_alloc_release(g, &a[i]);
    gpu_driver_close(g);
    free(a);
    free(host);
    free(sizes);
    free(bytes);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
