/* gpu_check.c - tetris-gpu-check: shows, on a real CUDA driver and GPU,
 * each point the GPU sharing design rests on (docs/GPU.md), with the same
 * code the daemon and the agent use (tensorstore/gpu/gpu.h):
 *   1. driver version, GPU name, VMM and POSIX-fd support, granularity
 *   2. cuMemCreate + export with no context current (a daemon needs none)
 *   3. importers in their own PID and network namespaces get the
 *      descriptor over a filesystem socket, map it read-only and a kernel
 *      (hand-written PTX, cuModuleLoadData) reads the right bytes
 *   4. a kernel store into the read-only mapping fails in that process
 *      only (CUDA_ERROR_ILLEGAL_ADDRESS expected); a host-to-device copy
 *      into it is refused; the exporter and other importers go on
 *   5. an importer may map it read-write: read-only is no boundary
 *   6. importing adds no device memory (one copy for N importers); the
 *      memory outlives the exporter's release and returns only once the
 *      last importer has unmapped it
 *   7. legacy CUDA IPC (cuIpcOpenMemHandle) across PID namespaces, and in
 *      the same one, for contrast
 *   8. a matrix-vector product (PTX) over the shared read-only weights
 *      equals the CPU's: the largest 2-D float32 tensor of --model (a
 *      real model's layer, read from the file), else synthetic weights
 * It prints one line per point ("check=N ok|FAIL|info ...").
 *
 * Every check passed on an NVIDIA H200 (driver 580.159.04, CUDA 13.0;
 * docs/GPU.md "Validated on hardware").
 *
 * Exit status: 0 every check passed, 1 one failed, 2 usage, 77 no CUDA
 * driver or GPU here (skipped, says so on stderr). */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/model.h"
#include "tensorstore/gpu/cuda_abi.h"
#include "tensorstore/gpu/gpu.h"

#define EXIT_SKIP 77
#define N_IMPORTERS 4
#define WRITER 3 /* the importer that writes into its read-only mapping */

static const char usage_text[] =
    "usage: tetris-gpu-check [--size BYTES] [--model FILE] [--libcuda PATH]\n"
    "Checks CUDA VMM sharing between processes and namespaces on a real GPU\n"
    "(cuda:0): see the head of tests/gpu/gpu_check.c. --size: the shared\n"
    "allocation (default 1 GiB, so device-memory deltas stand out). --model:\n"
    "the matrix-vector check runs over its largest 2-D float32 tensor.\n"
    "Exit status: 0 all checks passed, 1 a check failed, 2 usage, 77 no driver\n"
    "or GPU (skipped).\n";

/* Kernels in PTX, JIT-compiled by the driver: no nvcc needed. sm_80 code
 * runs on later GPUs through the JIT; ISA 7.0 is old enough for any
 * driver that has VMM. */
static const char ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry checksum(.param .u64 p_data, .param .u64 p_words, .param .u64 p_out)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<12>;\n"
    "  .reg .b64 %rd<12>;\n"
    "  ld.param.u64 %rd1, [p_data];\n"
    "  ld.param.u64 %rd2, [p_words];\n"
    "  ld.param.u64 %rd3, [p_out];\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  mad.lo.u32 %r4, %r1, %r2, %r3;\n"
    "  cvt.u64.u32 %rd4, %r4;\n"
    "  mov.u32 %r5, %nctaid.x;\n"
    "  mul.lo.u32 %r6, %r5, %r2;\n"
    "  cvt.u64.u32 %rd5, %r6;\n"
    "  mov.u32 %r7, 0;\n"
    "$Lloop:\n"
    "  setp.ge.u64 %p1, %rd4, %rd2;\n"
    "  @%p1 bra $Ldone;\n"
    "  shl.b64 %rd6, %rd4, 2;\n"
    "  add.s64 %rd7, %rd1, %rd6;\n"
    "  ld.global.u32 %r8, [%rd7];\n"
    "  add.u32 %r7, %r7, %r8;\n"
    "  add.s64 %rd4, %rd4, %rd5;\n"
    "  bra $Lloop;\n"
    "$Ldone:\n"
    "  atom.global.add.u32 %r9, [%rd3], %r7;\n"
    "  ret;\n"
    "}\n"
    ".visible .entry poke(.param .u64 p_data)\n"
    "{\n"
    "  .reg .b32 %r<2>;\n"
    "  .reg .b64 %rd<2>;\n"
    "  ld.param.u64 %rd1, [p_data];\n"
    "  mov.u32 %r1, 1;\n"
    "  st.global.u32 [%rd1], %r1;\n"
    "  ret;\n"
    "}\n"
    ".visible .entry matvec(.param .u64 p_w, .param .u64 p_x, .param .u64 p_y, .param .u32 "
    "p_rows,\n"
    "                       .param .u32 p_cols)\n"
    "{\n"
    "  .reg .pred %p<3>;\n"
    "  .reg .b32 %r<12>;\n"
    "  .reg .b64 %rd<12>;\n"
    "  .reg .f32 %f<4>;\n"
    "  ld.param.u64 %rd1, [p_w];\n"
    "  ld.param.u64 %rd2, [p_x];\n"
    "  ld.param.u64 %rd3, [p_y];\n"
    "  ld.param.u32 %r1, [p_rows];\n"
    "  ld.param.u32 %r2, [p_cols];\n"
    "  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %ntid.x;\n"
    "  mov.u32 %r5, %tid.x;\n"
    "  mad.lo.u32 %r6, %r3, %r4, %r5;\n"
    "  setp.ge.u32 %p1, %r6, %r1;\n"
    "  @%p1 bra $Lmdone;\n"
    "  mul.wide.u32 %rd4, %r6, %r2;\n"
    "  shl.b64 %rd4, %rd4, 2;\n"
    "  add.s64 %rd4, %rd1, %rd4;\n"
    "  mov.f32 %f1, 0f00000000;\n"
    "  mov.u32 %r7, 0;\n"
    "$Lmloop:\n"
    "  setp.ge.u32 %p2, %r7, %r2;\n"
    "  @%p2 bra $Lmend;\n"
    "  mul.wide.u32 %rd5, %r7, 4;\n"
    "  add.s64 %rd6, %rd4, %rd5;\n"
    "  ld.global.f32 %f2, [%rd6];\n"
    "  add.s64 %rd7, %rd2, %rd5;\n"
    "  ld.global.f32 %f3, [%rd7];\n"
    "  fma.rn.f32 %f1, %f2, %f3, %f1;\n"
    "  add.u32 %r7, %r7, 1;\n"
    "  bra $Lmloop;\n"
    "$Lmend:\n"
    "  mul.wide.u32 %rd8, %r6, 4;\n"
    "  add.s64 %rd8, %rd3, %rd8;\n"
    "  st.global.f32 [%rd8], %f1;\n"
    "$Lmdone:\n"
    "  ret;\n"
    "}\n";

/* Entry points beyond gpu.h's, resolved from the same library. */
static struct {
    tcu_result (*init)(unsigned);
    tcu_result (*ctx_set_current)(tcu_context);
    tcu_result (*mem_create)(tcu_mem_handle *, size_t, const tcu_mem_allocation_prop *,
                             unsigned long long);
    tcu_result (*mem_export)(void *, tcu_mem_handle, int, unsigned long long);
    tcu_result (*mem_release)(tcu_mem_handle);
    tcu_result (*granularity)(size_t *, const tcu_mem_allocation_prop *, int);
    tcu_result (*module_load_data)(tcu_module *, const void *);
    tcu_result (*module_get_function)(tcu_function *, tcu_module, const char *);
    tcu_result (*launch)(tcu_function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, tcu_stream, void **, void **);
    tcu_result (*ctx_synchronize)(void);
    tcu_result (*mem_alloc)(tcu_deviceptr *, size_t);
    tcu_result (*mem_free)(tcu_deviceptr);
    tcu_result (*memset_d32)(tcu_deviceptr, unsigned, size_t);
    tcu_result (*ipc_get)(void *, tcu_deviceptr);
    tcu_result (*ipc_open)(tcu_deviceptr *, const void *, unsigned);
    tcu_result (*device_get_attribute)(int *, int, tcu_device);
} cu;

static const char *libcuda_path;

/* --model's layer, read before the importers fork (they inherit it). */
static struct {
    char name[256];
    float *w;
    uint32_t rows, cols;
} layer;

static int load_layer(const char *path)
{
    model *m;
    tetris_error err;
    if (model_parse_file(path, &m, &err) < 0) {
        fprintf(stderr, "tetris-gpu-check: %s\n", err.msg);
        return -1;
    }
    const tensor_desc *best = NULL;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        if (strcmp(t->meta.dtype, "float32") == 0 && t->meta.ndim == 2 &&
            t->encoding == TENSOR_ENC_RAW && t->meta.shape[0] > 0 && t->meta.shape[1] > 0 &&
            t->meta.shape[0] < (1 << 30) && t->meta.shape[1] < (1 << 30) &&
            (best == NULL || t->meta.nbytes > best->meta.nbytes))
            best = t;
    }
    int rc = -1;
    FILE *f = best != NULL ? fopen(best->source, "rb") : NULL;
    if (best != NULL && f != NULL && (layer.w = malloc(best->meta.nbytes)) != NULL &&
        fseeko(f, (off_t)best->offset, SEEK_SET) == 0 &&
        fread(layer.w, 1, best->meta.nbytes, f) == best->meta.nbytes) {
        layer.rows = (uint32_t)best->meta.shape[0];
        layer.cols = (uint32_t)best->meta.shape[1];
        snprintf(layer.name, sizeof(layer.name), "%s", best->name);
        rc = 0;
    } else {
        fprintf(stderr, "tetris-gpu-check: %s has no readable 2-D float32 tensor\n", path);
    }
    if (f != NULL)
        fclose(f);
    model_free(m);
    return rc;
}

static int resolve(void)
{
    void *lib = dlopen(libcuda_path ? libcuda_path : GPU_LIBCUDA_DEFAULT, RTLD_NOW);
    if (lib == NULL)
        return -1;
    struct {
        void *slot;
        const char *name;
    } syms[] = {
        {&cu.init, "cuInit"},
        {&cu.ctx_set_current, "cuCtxSetCurrent"},
        {&cu.mem_create, "cuMemCreate"},
        {&cu.mem_export, "cuMemExportToShareableHandle"},
        {&cu.mem_release, "cuMemRelease"},
        {&cu.granularity, "cuMemGetAllocationGranularity"},
        {&cu.module_load_data, "cuModuleLoadData"},
        {&cu.module_get_function, "cuModuleGetFunction"},
        {&cu.launch, "cuLaunchKernel"},
        {&cu.ctx_synchronize, "cuCtxSynchronize"},
        {&cu.mem_alloc, "cuMemAlloc_v2"},
        {&cu.mem_free, "cuMemFree_v2"},
        {&cu.memset_d32, "cuMemsetD32_v2"},
        {&cu.ipc_get, "cuIpcGetMemHandle"},
        {&cu.ipc_open, "cuIpcOpenMemHandle_v2"},
        {&cu.device_get_attribute, "cuDeviceGetAttribute"},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(lib, syms[i].name);
        if (f == NULL) {
            fprintf(stderr, "tetris-gpu-check: %s lacks %s\n",
                    libcuda_path ? libcuda_path : GPU_LIBCUDA_DEFAULT, syms[i].name);
            return -2;
        }
        memcpy(syms[i].slot, &f, sizeof(f));
    }
    return 0;
}

static int failures;

static void check(int n, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(int n, bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("check=%d %s ", n, ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    failures += !ok;
}

/* The shared bytes: float32 weights in [-0.5, 0.5), deterministic. */
static float weight(uint64_t i)
{
    uint32_t h = (uint32_t)(i * 2654435761u);
    return (float)(h >> 8) / 16777216.0f - 0.5f;
}

/* ---- the messages between the exporter and an importer ---- */

struct order {
    char cmd;              /* see importer() */
    uint64_t size;         /* the allocation's */
    uint64_t words;        /* 32-bit words of payload */
    unsigned char ipc[64]; /* legacy IPC handle */
};

static int send_order(int sock, const struct order *o, int fd)
{
    struct iovec iov = {.iov_base = (void *)o, .iov_len = sizeof(*o)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        msg.msg_control = u.buf;
        msg.msg_controllen = sizeof(u.buf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    return sendmsg(sock, &msg, 0) == (ssize_t)sizeof(*o) ? 0 : -1;
}

static int recv_order(int sock, struct order *o, int *fd)
{
    struct iovec iov = {.iov_base = o, .iov_len = sizeof(*o)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = u.buf,
                         .msg_controllen = sizeof(u.buf)};
    *fd = -1;
    if (recvmsg(sock, &msg, MSG_WAITALL) != (ssize_t)sizeof(*o))
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (c != NULL && c->cmsg_type == SCM_RIGHTS)
        memcpy(fd, CMSG_DATA(c), sizeof(int));
    return 0;
}

/* A reply: one line of text. */
static void reply(int sock, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply(int sock, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if (write(sock, line, (size_t)n) != n)
        _exit(3);
}

static int read_reply(int sock, char *line, size_t len)
{
    size_t n = 0;
    while (n + 1 < len) {
        ssize_t r = read(sock, line + n, 1);
        if (r <= 0)
            return -1;
        if (line[n] == '\n')
            break;
        n++;
    }
    line[n] = '\0';
    return 0;
}

/* ---- importer (a child process) ---- */

static tcu_result run_checksum(tcu_function f, uint64_t ptr, uint64_t words, uint32_t *out)
{
    tcu_deviceptr d_out;
    tcu_result r = cu.mem_alloc(&d_out, 4);
    if (r != TCU_SUCCESS)
        return r;
    cu.memset_d32(d_out, 0, 1);
    void *args[] = {&ptr, &words, &d_out};
    r = cu.launch(f, 1024, 1, 1, 256, 1, 1, 0, NULL, args, NULL);
    if (r == TCU_SUCCESS)
        r = cu.ctx_synchronize();
    uint32_t sum = 0;
    if (r == TCU_SUCCESS) {
        tcu_result (*dtoh)(void *, tcu_deviceptr, size_t) = NULL;
        void *lib = dlopen(libcuda_path ? libcuda_path : GPU_LIBCUDA_DEFAULT, RTLD_NOW);
        if (lib != NULL)
            *(void **)&dtoh = dlsym(lib, "cuMemcpyDtoH_v2");
        r = dtoh != NULL ? dtoh(&sum, d_out, 4) : TCU_ERROR_NOT_SUPPORTED;
    }
    cu.mem_free(d_out);
    *out = sum;
    return r;
}

/* Serves orders until 'X': M map read-only and checksum (reply with the
 * sum and the device memory the import took), C checksum again, W store
 * into the read-only mapping by a kernel, H host-to-device copy into it,
 * R map read-write and copy the same bytes back (the trust limit), U
 * unmap, L legacy IPC open, V matrix-vector product. */
static void importer(int sock)
{
    gpu_driver *g = NULL;
    tetris_error err;
    if (gpu_driver_open(libcuda_path, &g, &err) < 0 || resolve() < 0) {
        reply(sock, "fail driver %s", err.msg);
        _exit(1);
    }
    gpu_mapping m = {0};
    tcu_module mod = NULL;
    tcu_function f_sum = NULL, f_poke = NULL, f_matvec = NULL;
    uint64_t words = 0;
    for (;;) {
        struct order o;
        int fd;
        if (recv_order(sock, &o, &fd) < 0)
            _exit(1);
        uint64_t free0 = 0, free1 = 0, total = 0;
        uint32_t sum = 0;
        tcu_result r;
        switch (o.cmd) {
        case 'M':
            words = o.words;
            gpu_mem_info(g, 0, &free0, &total, &err);
            if (gpu_import_map(g, 0, fd, o.size, false, &m, &err) < 0) {
                reply(sock, "fail import %s", err.msg);
                break;
            }
            close(fd);
            gpu_mem_info(g, 0, &free1, &total, &err);
            r = cu.module_load_data(&mod, ptx);
            if (r == TCU_SUCCESS)
                r = cu.module_get_function(&f_sum, mod, "checksum");
            if (r == TCU_SUCCESS)
                r = cu.module_get_function(&f_poke, mod, "poke");
            if (r == TCU_SUCCESS)
                r = cu.module_get_function(&f_matvec, mod, "matvec");
            if (r == TCU_SUCCESS)
                r = run_checksum(f_sum, m.ptr, words, &sum);
            reply(sock, "%s sum=%u import_took=%lld cuda=%d pid_here=%d",
                  r == TCU_SUCCESS ? "ok" : "fail", sum, (long long)free0 - (long long)free1, r,
                  (int)getpid());
            break;
        case 'C':
            r = run_checksum(f_sum, m.ptr, words, &sum);
            reply(sock, "%s sum=%u cuda=%d", r == TCU_SUCCESS ? "ok" : "fail", sum, r);
            break;
        case 'W': {
            uint64_t p = m.ptr;
            void *args[] = {&p};
            r = cu.launch(f_poke, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
            tcu_result s = r == TCU_SUCCESS ? cu.ctx_synchronize() : r;
            /* Sticky: the context is unusable from now on. */
            tcu_result after = run_checksum(f_sum, m.ptr, words, &sum);
            reply(sock, "done launch=%d sync=%d after=%d", r, s, after);
            break;
        }
        case 'H': {
            uint32_t word = 0;
            int rc = gpu_copy_to_device(g, 0, m.ptr, &word, 4, &err);
            reply(sock, "done htod=%s", rc == 0 ? "accepted" : err.msg);
            break;
        }
        case 'R': {
            gpu_mapping rw;
            if (gpu_import_map(g, 0, fd, o.size, true, &rw, &err) < 0) {
                reply(sock, "done rw_map=refused %s", err.msg);
                break;
            }
            close(fd);
            uint32_t first;
            int rc = gpu_copy_to_host(g, 0, &first, rw.ptr, 4, &err);
            if (rc == 0)
                rc = gpu_copy_to_device(g, 0, rw.ptr, &first, 4, &err);
            gpu_unmap(g, &rw);
            reply(sock, "done rw_map=accepted rw_write=%s", rc == 0 ? "accepted" : err.msg);
            break;
        }
        case 'U':
            gpu_unmap(g, &m);
            reply(sock, "ok");
            break;
        case 'L': {
            tcu_deviceptr p = 0;
            r = cu.ipc_open(&p, o.ipc, 1 /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */);
            reply(sock, "done ipc_open=%d", r);
            break;
        }
        case 'V': {
            /* y = W x: over --model's layer, shared as its own allocation
             * (fd), or the first rows x cols floats of the first mapping. */
            uint32_t rows = 1024, cols = (uint32_t)(words / rows < 4096 ? words / rows : 4096);
            uint64_t pw = m.ptr;
            gpu_mapping lm = {0};
            if (fd >= 0) {
                if (gpu_import_map(g, 0, fd, o.size, false, &lm, &err) < 0) {
                    reply(sock, "fail layer import %s", err.msg);
                    close(fd);
                    break;
                }
                close(fd);
                pw = lm.ptr;
                rows = layer.rows;
                cols = layer.cols;
            }
            float *x = malloc(cols * sizeof(float)), *y = malloc(rows * sizeof(float));
            tcu_deviceptr dx = 0, dy = 0;
            r = x && y ? cu.mem_alloc(&dx, cols * 4) : TCU_ERROR_OUT_OF_MEMORY;
            if (r == TCU_SUCCESS)
                r = cu.mem_alloc(&dy, rows * 4);
            for (uint32_t j = 0; x && j < cols; j++)
                x[j] = weight(1000003u + j);
            if (r == TCU_SUCCESS && gpu_copy_to_device(g, 0, dx, x, cols * 4, &err) < 0)
                r = TCU_ERROR_INVALID_VALUE;
            void *args[] = {&pw, &dx, &dy, &rows, &cols};
            if (r == TCU_SUCCESS)
                r = cu.launch(f_matvec, (rows + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL);
            if (r == TCU_SUCCESS)
                r = cu.ctx_synchronize();
            if (r == TCU_SUCCESS && gpu_copy_to_host(g, 0, y, dy, rows * 4, &err) < 0)
                r = TCU_ERROR_INVALID_VALUE;
            /* The same fma order as the kernel: equal up to rounding of
             * the last bits, relative to the row's magnitude. */
            double worst = 0;
            for (uint32_t i = 0; r == TCU_SUCCESS && i < rows; i++) {
                float acc = 0, mag = 0;
                for (uint32_t j = 0; j < cols; j++) {
                    float wij = fd >= 0 ? layer.w[(uint64_t)i * cols + j]
                                        : weight((uint64_t)i * cols + j);
                    acc = fmaf(wij, x[j], acc);
                    mag += fabsf(wij * x[j]);
                }
                double d = fabs((double)acc - (double)y[i]) / (mag > 1e-30f ? mag : 1);
                worst = d > worst ? d : worst;
            }
            reply(sock, "%s matvec %s rows=%u cols=%u max_rel_diff=%g cuda=%d",
                  r == TCU_SUCCESS && worst <= 1e-5 ? "ok" : "fail",
                  fd >= 0 ? layer.name : "(synthetic)", rows, cols, worst, r);
            gpu_unmap(g, &lm);
            cu.mem_free(dx);
            cu.mem_free(dy);
            free(x);
            free(y);
            break;
        }
        case 'X': _exit(0);
        }
    }
}

/* Forks an importer connected to the exporter's path socket; isolated:
 * in new PID and network namespaces (it is the new namespace's init),
 * with a /proc of its own as a container has: with its parent's /proc,
 * cuInit fails (CUDA_ERROR_OPERATING_SYSTEM, seen on an H200). */
static pid_t start_importer(const char *path, bool isolated)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    if (isolated) {
        if (unshare(CLONE_NEWPID | CLONE_NEWNET) < 0) {
            fprintf(stderr, "unshare: %s\n", strerror(errno));
            _exit(4);
        }
        pid_t inner = fork();
        if (inner < 0)
            _exit(4);
        if (inner > 0) {
            int st;
            waitpid(inner, &st, 0);
            _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 5);
        }
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
            fprintf(stderr, "a /proc of its own: %s\n", strerror(errno));
            _exit(4);
        }
    }
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    for (int i = 0; i < 100; i++) {
        if (connect(sock, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            importer(sock);
            _exit(0);
        }
        usleep(50000);
    }
    _exit(6);
}

/* ---- exporter (the parent, playing the node daemon) ---- */

static int order(int sock, char cmd, const gpu_alloc *a, uint64_t words, const unsigned char *ipc,
                 int fd, char *line, size_t len)
{
    struct order o = {.cmd = cmd, .size = a->size, .words = words};
    if (ipc != NULL)
        memcpy(o.ipc, ipc, sizeof(o.ipc));
    if (send_order(sock, &o, fd) < 0 || read_reply(sock, line, len) < 0) {
        snprintf(line, len, "importer gone");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"size", required_argument, NULL, 's'},
                                             {"model", required_argument, NULL, 'm'},
                                             {"libcuda", required_argument, NULL, 'l'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'V'},
                                             {NULL, 0, NULL, 0}};
    uint64_t size = 1ull << 30;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 's': size = strtoull(optarg, NULL, 0); break;
        case 'm':
            if (load_layer(optarg) < 0)
                return 1;
            break;
        case 'l': libcuda_path = optarg; break;
        case 'h': fputs(usage_text, stdout); return 0;
        case 'V': printf("tetris-gpu-check %s\n", TETRIS_VERSION); return 0;
        default: fputs(usage_text, stderr); return 2;
        }
    }
    if (libcuda_path == NULL)
        libcuda_path = getenv(GPU_LIBCUDA_ENV);
    if (optind != argc || size < 4096) {
        fputs(usage_text, stderr);
        return 2;
    }
    /* An importer that dies must fail its checks, not kill this process
     * at the next order it is sent. */
    signal(SIGPIPE, SIG_IGN);
    /* Is there a driver at all? Probed in a child: CUDA must not be
     * initialised in a process that forks the importers afterwards. */
    pid_t probe = fork();
    if (probe == 0) {
        gpu_driver *g;
        tetris_error err;
        if (gpu_driver_open(libcuda_path, &g, &err) < 0) {
            fprintf(stderr, "SKIP tetris-gpu-check: %s\n", err.msg);
            _exit(EXIT_SKIP);
        }
        _exit(resolve() == 0 ? 0 : EXIT_SKIP);
    }
    int st;
    if (probe < 0 || waitpid(probe, &st, 0) < 0 || !WIFEXITED(st))
        return 1;
    if (WEXITSTATUS(st) != 0)
        return WEXITSTATUS(st);

    char dir[] = "/tmp/tetris-gpu-check.XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 1;
    char path[sizeof(dir) + 16];
    snprintf(path, sizeof(path), "%s/sock", dir);
    int lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (lsock < 0 || bind(lsock, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lsock, 8) < 0)
        return 1;
    /* Importers 0, 1 and the writer isolated, 2 in our namespaces (legacy
     * IPC works there, if anywhere). Forked before CUDA is initialised
     * here. */
    pid_t pids[N_IMPORTERS];
    int socks[N_IMPORTERS];
    for (int i = 0; i < N_IMPORTERS; i++) {
        pids[i] = start_importer(path, i != 2);
        socks[i] = accept4(lsock, NULL, NULL, SOCK_CLOEXEC);
        if (socks[i] < 0)
            return 1;
    }

    tetris_error err;
    gpu_driver *g = NULL;
    if (resolve() < 0 || cu.init(0) != TCU_SUCCESS)
        return 1;
    /* 2: create and export with no context current. */
    cu.ctx_set_current(NULL);
    tcu_mem_allocation_prop prop = {.type = TCU_MEM_ALLOCATION_TYPE_PINNED,
                                    .requested_handle_types =
                                        TCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                    .location = {.type = TCU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gmin = 0, grec = 0;
    tcu_result r1 = cu.granularity(&gmin, &prop, TCU_MEM_ALLOC_GRANULARITY_MINIMUM);
    cu.granularity(&grec, &prop, TCU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    tcu_mem_handle h0 = 0;
    int fd0 = -1;
    tcu_result r2 = r1 == TCU_SUCCESS ? cu.mem_create(&h0, gmin, &prop, 0) : r1;
    tcu_result r3 = r2 == TCU_SUCCESS
                        ? cu.mem_export(&fd0, h0, TCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
                        : r2;
    check(2, r3 == TCU_SUCCESS, "create+export without a context: create=%d export=%d", r2, r3);
    if (fd0 >= 0)
        close(fd0);
    if (r2 == TCU_SUCCESS)
        cu.mem_release(h0);

    /* 1: the device. */
    if (gpu_driver_open(libcuda_path, &g, &err) < 0 || gpu_device_check(g, 0, &err) < 0) {
        check(1, false, "cuda:0 not usable: %s", err.msg);
        return 1;
    }
    char name[128] = "";
    gpu_device_name(g, 0, name, sizeof(name), &err);
    check(1, true, "driver=%d gpu=\"%s\" vmm=1 posix_fd=1 granularity_min=%zu recommended=%zu",
          gpu_driver_version(g), name, gmin, grec);

    /* The shared allocation, filled with the weights. */
    uint64_t free_base, total;
    gpu_mem_info(g, 0, &free_base, &total, &err);
    gpu_alloc a;
    if (gpu_alloc_create(g, 0, size, &a, &err) < 0) {
        check(3, false, "cannot allocate %llu bytes: %s", (unsigned long long)size, err.msg);
        return 1;
    }
    uint64_t words = size / 4;
    float *host = malloc(size);
    uint32_t expect = 0;
    for (uint64_t i = 0; host != NULL && i < words; i++) {
        host[i] = weight(i);
        uint32_t w;
        memcpy(&w, &host[i], 4);
        expect += w;
    }
    if (host == NULL || gpu_alloc_fill(g, &a, host, size, &err) < 0) {
        check(3, false, "fill: %s", host ? err.msg : "out of memory");
        return 1;
    }
    free(host);
    uint64_t free_filled;
    gpu_mem_info(g, 0, &free_filled, &total, &err);
    /* The deltas of check 6 mean something only if cuMemGetInfo sees the
     * allocation itself. */
    check(6, free_base >= free_filled + a.size / 2,
          "the exporter's allocation of %llu bytes took %lld bytes of device memory",
          (unsigned long long)a.size, (long long)free_base - (long long)free_filled);

    /* 3 and 6: every importer maps it and checksums it on the device. */
    char line[512];
    for (int i = 0; i < N_IMPORTERS; i++) {
        int fd;
        if (gpu_alloc_export(g, &a, &fd, &err) < 0) {
            check(3, false, "export: %s", err.msg);
            return 1;
        }
        order(socks[i], 'M', &a, words, NULL, fd, line, sizeof(line));
        close(fd);
        unsigned got = 0;
        long long took = 0;
        sscanf(line, "%*s sum=%u import_took=%lld", &got, &took);
        check(3, strncmp(line, "ok", 2) == 0 && got == expect,
              "importer %d (%s namespaces) kernel checksum %u, want %u: %s", i,
              i != 2 ? "own PID+net" : "shared", got, expect, line);
        check(6, took < (long long)size / 2,
              "importer %d: import+map took %lld bytes of device memory (a copy: %llu)", i, took,
              (unsigned long long)a.size);
    }
    /* 4: a kernel store into the read-only mapping, by the writer, which
     * then leaves (its context is unusable after the fault). */
    order(socks[WRITER], 'H', &a, words, NULL, -1, line, sizeof(line));
    check(4, strstr(line, "accepted") == NULL, "host-to-device copy into read-only: %s", line);
    order(socks[WRITER], 'W', &a, words, NULL, -1, line, sizeof(line));
    int sync = -1;
    sscanf(line, "done launch=%*d sync=%d", &sync);
    check(4, sync != 0, "kernel store into read-only: %s (700 = ILLEGAL_ADDRESS expected)", line);
    order(socks[WRITER], 'X', &a, words, NULL, -1, line, sizeof(line));
    waitpid(pids[WRITER], &st, 0);
    for (int i = 0; i < WRITER; i++) {
        order(socks[i], 'C', &a, words, NULL, -1, line, sizeof(line));
        unsigned got = 0;
        sscanf(line, "%*s sum=%u", &got);
        check(4, got == expect, "importer %d unaffected by the writer: %s", i, line);
    }
    /* 5: the trust limit. */
    int fd;
    gpu_alloc_export(g, &a, &fd, &err);
    order(socks[2], 'R', &a, words, NULL, fd, line, sizeof(line));
    close(fd);
    check(5, true, "an importer choosing read-write: %s (read-only is no boundary)", line);
    /* 8: a matrix-vector product over the shared weights: --model's
     * layer in an allocation of its own, as the daemon would share it. */
    if (layer.w != NULL) {
        gpu_alloc la;
        uint64_t lbytes = (uint64_t)layer.rows * layer.cols * 4;
        if (gpu_alloc_create(g, 0, lbytes, &la, &err) < 0 ||
            gpu_alloc_fill(g, &la, layer.w, lbytes, &err) < 0 ||
            gpu_alloc_export(g, &la, &fd, &err) < 0) {
            check(8, false, "layer %s: %s", layer.name, err.msg);
        } else {
            order(socks[0], 'V', &la, words, NULL, fd, line, sizeof(line));
            close(fd);
            check(8, strncmp(line, "ok", 2) == 0, "importer 0: %s", line);
            gpu_alloc_release(g, &la);
        }
    } else {
        order(socks[0], 'V', &a, words, NULL, -1, line, sizeof(line));
        check(8, strncmp(line, "ok", 2) == 0, "importer 0: %s", line);
    }

    /* 6: lifetime, by device-memory deltas around single events (no
     * context is made or destroyed meanwhile). The exporter lets go, then
     * importers 0 and 1 unmap: importer 2 still maps it, nothing returns;
     * importer 2 unmaps: the copy returns. */
    uint64_t f0, f1, f2, f3;
    gpu_mem_info(g, 0, &f0, &total, &err);
    gpu_alloc_release(g, &a);
    gpu_mem_info(g, 0, &f1, &total, &err);
    check(6, f1 < f0 + a.size / 2, "exporter released, importers mapping: %+lld bytes free",
          (long long)f1 - (long long)f0);
    for (int i = 0; i < 2; i++)
        order(socks[i], 'U', &a, words, NULL, -1, line, sizeof(line));
    gpu_mem_info(g, 0, &f2, &total, &err);
    check(6, f2 < f1 + a.size / 2,
          "importers 0 and 1 unmapped, importer 2 mapping: %+lld bytes free",
          (long long)f2 - (long long)f1);
    order(socks[2], 'U', &a, words, NULL, -1, line, sizeof(line));
    gpu_mem_info(g, 0, &f3, &total, &err);
    check(6, f3 >= f2 + a.size / 2, "the last importer unmapped: %+lld bytes free (the copy: %llu)",
          (long long)f3 - (long long)f2, (unsigned long long)a.size);

    /* 7: legacy IPC, for contrast. */
    tcu_deviceptr legacy = 0;
    unsigned char handle[64] = {0};
    tcu_result lr = cu.mem_alloc(&legacy, 2u << 20);
    if (lr == TCU_SUCCESS)
        lr = cu.ipc_get(handle, legacy);
    order(socks[0], 'L', &a, words, handle, -1, line, sizeof(line));
    check(7, true,
          "(contrast, not asserted) legacy cuIpcOpenMemHandle, other PID namespace: %s "
          "(get=%d)",
          line, lr);
    order(socks[2], 'L', &a, words, handle, -1, line, sizeof(line));
    check(7, true, "(contrast, not asserted) legacy cuIpcOpenMemHandle, same PID namespace: %s",
          line);
    for (int i = 0; i < WRITER; i++) {
        order(socks[i], 'X', &a, words, NULL, -1, line, sizeof(line));
        waitpid(pids[i], &st, 0);
    }
    if (legacy)
        cu.mem_free(legacy);
    unlink(path);
    rmdir(dir);
    gpu_driver_close(g);
    printf("result=%s failures=%d\n", failures == 0 ? "pass" : "fail", failures);
    return failures == 0 ? 0 : 1;
}
