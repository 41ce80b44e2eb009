/* fake_libcuda.c - a test-only libcuda.so.1: the CUDA driver entry points
 * tetris loads (tensorstore/gpu/cuda_abi.h), backed by host memory so the
 * GPU path runs end to end on machines without a GPU.
 *
 * Device memory is a memfd per allocation (named tetris-fakecuda-ID-N
 * for device N of fake machine ID, $TETRIS_FAKE_CUDA_ID, default 0, so
 * that concurrent test runs do not count each other's allocations); an exported handle is a dup of
 * it, so it survives SCM_RIGHTS and outlives its exporter like a real one; an address reservation
 * is a PROT_NONE mapping, cuMemMap maps the memfd over it and cuMemSetAccess is mprotect: a "device
 * pointer" is a host address a test can read, and a store through a read-only mapping kills the
 * writer with SIGSEGV. cuMemGetInfo_v2 counts the bytes of every live fake allocation on the
 * machine (descriptors and mappings of all processes in /proc), so tests
 * can count copies the way they would on a GPU.
 *
 * Only the versioned names of APIs the toolkit maps to versioned symbols
 * are exported (cuMemGetInfo_v2, not cuMemGetInfo), so a loader that asks
 * for the wrong one fails here too.
 *
 * Kernels: cuModuleLoadData accepts any image and cuModuleGetFunction
 * knows the three kernels of tests/gpu/gpu_check.c by name (checksum,
 * poke, matvec), which cuLaunchKernel runs on the host; a store into
 * memory without write access is not made but, as on a GPU, leaves the
 * process's context with the sticky CUDA_ERROR_ILLEGAL_ADDRESS. Legacy
 * IPC is not supported.
 *
 * Stricter than a test needs, where a real driver was: a host-to-device
 * copy of more than 64 KiB (from pageable memory) is in flight until
 * cuCtxSynchronize or a device-to-host copy, and unmapping its
 * destination meanwhile poisons the context with the sticky
 * CUDA_ERROR_LAUNCH_FAILED, as the DMA's fault does on an H200; and
 * cuInit fails with CUDA_ERROR_OPERATING_SYSTEM in a process whose /proc
 * is not its PID namespace's (/proc/self is not getpid()), as there.
 *
 * Environment: TETRIS_FAKE_CUDA_DEVICES (default 1),
 * TETRIS_FAKE_CUDA_TOTAL (bytes per device, default 1 GiB),
 * TETRIS_FAKE_CUDA_GRANULARITY (default 2 MiB), TETRIS_FAKE_CUDA_NO_VMM=1
 * (devices without VMM support), TETRIS_FAKE_CUDA_FAIL_CREATE_AFTER=N
 * (cuMemCreate fails out of memory after N successes in a process). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensorstore/gpu/cuda_abi.h"

#define FAKE_NAME "tetris-fakecuda-"

/* The exported entry points (their prototypes, for -Wmissing-prototypes). */
tcu_result cuInit(unsigned flags);
tcu_result cuDriverGetVersion(int *v);
tcu_result cuGetErrorString(tcu_result e, const char **s);
tcu_result cuDeviceGetCount(int *n);
tcu_result cuDeviceGet(tcu_device *d, int ordinal);
tcu_result cuDeviceGetName(char *name, int len, tcu_device d);
tcu_result cuDeviceGetAttribute(int *v, int attr, tcu_device d);
tcu_result cuDevicePrimaryCtxRetain(tcu_context *c, tcu_device d);
tcu_result cuDevicePrimaryCtxRelease_v2(tcu_device d);
tcu_result cuCtxSetCurrent(tcu_context c);
tcu_result cuMemGetInfo_v2(size_t *free_bytes, size_t *total);
tcu_result cuMemGetAllocationGranularity(size_t *g, const tcu_mem_allocation_prop *p, int option);
tcu_result cuMemCreate(tcu_mem_handle *h, size_t size, const tcu_mem_allocation_prop *p,
                       unsigned long long flags);
tcu_result cuMemRelease(tcu_mem_handle h);
tcu_result cuMemExportToShareableHandle(void *sh, tcu_mem_handle h, int type,
                                        unsigned long long flags);
tcu_result cuMemImportFromShareableHandle(tcu_mem_handle *h, void *os_handle, int type);
tcu_result cuMemAddressReserve(tcu_deviceptr *p, size_t size, size_t alignment, tcu_deviceptr addr,
                               unsigned long long flags);
tcu_result cuMemAddressFree(tcu_deviceptr p, size_t size);
tcu_result cuMemMap(tcu_deviceptr p, size_t size, size_t offset, tcu_mem_handle h,
                    unsigned long long flags);
tcu_result cuMemUnmap(tcu_deviceptr p, size_t size);
tcu_result cuMemSetAccess(tcu_deviceptr p, size_t size, const tcu_mem_access_desc *desc,
                          size_t count);
tcu_result cuMemcpyHtoD_v2(tcu_deviceptr dst, const void *src, size_t n);
tcu_result cuMemcpyDtoH_v2(void *dst, tcu_deviceptr src, size_t n);
tcu_result cuMemAlloc_v2(tcu_deviceptr *p, size_t n);
tcu_result cuMemFree_v2(tcu_deviceptr p);
tcu_result cuMemsetD32_v2(tcu_deviceptr p, unsigned v, size_t n);
tcu_result cuModuleLoadData(tcu_module *m, const void *image);
tcu_result cuModuleGetFunction(tcu_function *f, tcu_module m, const char *name);
tcu_result cuLaunchKernel(tcu_function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared, tcu_stream stream,
                          void **params, void **extra);
tcu_result cuCtxSynchronize(void);
tcu_result cuIpcGetMemHandle(void *handle, tcu_deviceptr p);
tcu_result cuIpcOpenMemHandle_v2(tcu_deviceptr *p, const void *handle, unsigned flags);

struct fake_alloc {
    int fd;
    size_t size;
    int ordinal;
};

struct fake_map {
    uintptr_t va;
    size_t size;
    int access; /* TCU_MEM_ACCESS_FLAGS_* */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_map *maps;
static size_t n_maps;
static int initialised;
static unsigned long creates;
static __thread int current = -1; /* ordinal of the current context */
static tcu_result sticky;         /* a kernel's fault poisons the context for good */

/* The host-to-device copy still in flight, if any (see the head). */
#define STAGED_COPY_LIMIT 65536
static uintptr_t dma_va;
static size_t dma_n;

static unsigned long long env_u64(const char *name, unsigned long long def)
{
    const char *s = getenv(name);
    return s != NULL && *s != '\0' ? strtoull(s, NULL, 0) : def;
}

static int n_devices(void)
{
    return (int)env_u64("TETRIS_FAKE_CUDA_DEVICES", 1);
}

/* The memfd name of device ordinal's allocations, up to the ordinal. */
static void fake_name(char *buf, size_t len, int ordinal)
{
    const char *id = getenv("TETRIS_FAKE_CUDA_ID");
    snprintf(buf, len, FAKE_NAME "%s-%d", id != NULL && *id != '\0' ? id : "0", ordinal);
}

static size_t granularity(void)
{
    return (size_t)env_u64("TETRIS_FAKE_CUDA_GRANULARITY", 2u << 20);
}

tcu_result cuInit(unsigned flags)
{
    if (flags != 0)
        return TCU_ERROR_INVALID_VALUE;
    char self[32];
    ssize_t n = readlink("/proc/self", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        if (strtol(self, NULL, 10) != (long)getpid())
            return TCU_ERROR_OPERATING_SYSTEM;
    }
    initialised = 1;
    return TCU_SUCCESS;
}

tcu_result cuDriverGetVersion(int *v)
{
    *v = 13000;
    return TCU_SUCCESS;
}

tcu_result cuGetErrorString(tcu_result e, const char **s)
{
    switch (e) {
    case TCU_SUCCESS: *s = "no error"; break;
    case TCU_ERROR_INVALID_VALUE: *s = "invalid argument"; break;
    case TCU_ERROR_OUT_OF_MEMORY: *s = "out of memory"; break;
    case TCU_ERROR_NOT_INITIALIZED: *s = "initialization error"; break;
    case TCU_ERROR_INVALID_DEVICE: *s = "invalid device ordinal"; break;
    case TCU_ERROR_INVALID_CONTEXT: *s = "invalid device context"; break;
    case TCU_ERROR_OPERATING_SYSTEM:
        *s = "OS call failed or operation not supported on this OS";
        break;
    case TCU_ERROR_ILLEGAL_ADDRESS: *s = "an illegal memory access was encountered"; break;
    case TCU_ERROR_LAUNCH_FAILED: *s = "unspecified launch failure"; break;
    case TCU_ERROR_NOT_SUPPORTED: *s = "operation not supported"; break;
    default: return TCU_ERROR_INVALID_VALUE;
    }
    return TCU_SUCCESS;
}

tcu_result cuDeviceGetCount(int *n)
{
    if (!initialised)
        return TCU_ERROR_NOT_INITIALIZED;
    *n = n_devices();
    return TCU_SUCCESS;
}

tcu_result cuDeviceGet(tcu_device *d, int ordinal)
{
    if (!initialised)
        return TCU_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= n_devices())
        return TCU_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return TCU_SUCCESS;
}

tcu_result cuDeviceGetName(char *name, int len, tcu_device d)
{
    if (d < 0 || d >= n_devices())
        return TCU_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "tetris fake GPU %d", d);
    return TCU_SUCCESS;
}

tcu_result cuDeviceGetAttribute(int *v, int attr, tcu_device d)
{
    if (d < 0 || d >= n_devices())
        return TCU_ERROR_INVALID_DEVICE;
    if (attr != TCU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED &&
        attr != TCU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)
        return TCU_ERROR_INVALID_VALUE;
    *v = env_u64("TETRIS_FAKE_CUDA_NO_VMM", 0) ? 0 : 1;
    return TCU_SUCCESS;
}

/* A context is its device's ordinal + 1, disguised as a pointer. */
tcu_result cuDevicePrimaryCtxRetain(tcu_context *c, tcu_device d)
{
    if (!initialised)
        return TCU_ERROR_NOT_INITIALIZED;
    if (d < 0 || d >= n_devices())
        return TCU_ERROR_INVALID_DEVICE;
    *c = (tcu_context)(uintptr_t)(d + 1);
    return TCU_SUCCESS;
}

tcu_result cuDevicePrimaryCtxRelease_v2(tcu_device d)
{
    return d >= 0 && d < n_devices() ? TCU_SUCCESS : TCU_ERROR_INVALID_DEVICE;
}

tcu_result cuCtxSetCurrent(tcu_context c)
{
    current = c == NULL ? -1 : (int)(uintptr_t)c - 1;
    return TCU_SUCCESS;
}

/* ---- accounting: live allocations on the whole machine ---- */

struct seen {
    ino_t ino;
    size_t size;
};

static void note(struct seen **v, size_t *n, ino_t ino, size_t size)
{
    for (size_t i = 0; i < *n; i++)
        if ((*v)[i].ino == ino) {
            if (size > (*v)[i].size)
                (*v)[i].size = size;
            return;
        }
    struct seen *w = realloc(*v, (*n + 1) * sizeof(*w));
    if (w == NULL)
        return;
    *v = w;
    w[(*n)++] = (struct seen){ino, size};
}

/* Bytes of the device's allocations any process holds a descriptor or a
 * mapping of (what a driver frees only once both are gone). */
static size_t used_bytes(int ordinal)
{
    char dev[64], want[80];
    fake_name(dev, sizeof(dev), ordinal);
    snprintf(want, sizeof(want), "/memfd:%s ", dev);
    struct seen *v = NULL;
    size_t n = 0;
    DIR *proc = opendir("/proc");
    if (proc == NULL)
        return 0;
    struct dirent *p;
    while ((p = readdir(proc)) != NULL) {
        if (!isdigit((unsigned char)p->d_name[0]))
            continue;
        char path[600], link[300];
        snprintf(path, sizeof(path), "/proc/%s/fd", p->d_name);
        DIR *fds = opendir(path);
        if (fds != NULL) {
            struct dirent *f;
            while ((f = readdir(fds)) != NULL) {
                snprintf(path, sizeof(path), "/proc/%s/fd/%s", p->d_name, f->d_name);
                ssize_t l = readlink(path, link, sizeof(link) - 2);
                if (l <= 0)
                    continue;
                link[l] = ' ';
                link[l + 1] = '\0';
                struct stat st;
                if (strncmp(link, want, strlen(want)) == 0 && stat(path, &st) == 0)
                    note(&v, &n, st.st_ino, (size_t)st.st_size);
            }
            closedir(fds);
        }
        snprintf(path, sizeof(path), "/proc/%s/maps", p->d_name);
        FILE *m = fopen(path, "re");
        if (m == NULL)
            continue;
        char line[512];
        while (fgets(line, sizeof(line), m) != NULL) {
            unsigned long lo, hi, ino;
            char name[300] = "";
            if (sscanf(line, "%lx-%lx %*s %*s %*s %lu %299[^\n]", &lo, &hi, &ino, name) < 4)
                continue;
            size_t nl = strlen(name);
            if (nl + 1 < sizeof(name)) {
                name[nl] = ' ';
                name[nl + 1] = '\0';
            }
            if (strncmp(name, want, strlen(want)) == 0)
                note(&v, &n, (ino_t)ino, hi - lo);
        }
        fclose(m);
    }
    closedir(proc);
    size_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i].size;
    free(v);
    return sum;
}

static size_t total_bytes(void)
{
    return (size_t)env_u64("TETRIS_FAKE_CUDA_TOTAL", 1ull << 30);
}

tcu_result cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    if (current < 0)
        return TCU_ERROR_INVALID_CONTEXT;
    size_t used = used_bytes(current);
    *total = total_bytes();
    *free_bytes = used < *total ? *total - used : 0;
    return TCU_SUCCESS;
}

/* ---- allocations ---- */

static int prop_ok(const tcu_mem_allocation_prop *p)
{
    return p != NULL && p->type == TCU_MEM_ALLOCATION_TYPE_PINNED &&
           p->location.type == TCU_MEM_LOCATION_TYPE_DEVICE && p->location.id >= 0 &&
           p->location.id < n_devices() && p->win32_handle_meta_data == NULL;
}

tcu_result cuMemGetAllocationGranularity(size_t *g, const tcu_mem_allocation_prop *p, int option)
{
    if (!initialised)
        return TCU_ERROR_NOT_INITIALIZED;
    if (!prop_ok(p) || (option != TCU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                        option != TCU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return TCU_ERROR_INVALID_VALUE;
    *g = granularity();
    return TCU_SUCCESS;
}

tcu_result cuMemCreate(tcu_mem_handle *h, size_t size, const tcu_mem_allocation_prop *p,
                       unsigned long long flags)
{
    if (!initialised)
        return TCU_ERROR_NOT_INITIALIZED;
    if (!prop_ok(p) || flags != 0 || size == 0 || size % granularity() != 0 ||
        p->requested_handle_types != TCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return TCU_ERROR_INVALID_VALUE;
    unsigned long long fail_after = env_u64("TETRIS_FAKE_CUDA_FAIL_CREATE_AFTER", ~0ull);
    pthread_mutex_lock(&lock);
    int refuse = creates >= fail_after;
    if (!refuse)
        creates++;
    pthread_mutex_unlock(&lock);
    size_t used = used_bytes(p->location.id);
    if (refuse || used > total_bytes() || size > total_bytes() - used)
        return TCU_ERROR_OUT_OF_MEMORY;
    char name[64];
    fake_name(name, sizeof(name), p->location.id);
    struct fake_alloc *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return TCU_ERROR_OUT_OF_MEMORY;
    a->fd = memfd_create(name, MFD_CLOEXEC);
    if (a->fd < 0 || ftruncate(a->fd, (off_t)size) < 0) {
        if (a->fd >= 0)
            close(a->fd);
        free(a);
        return TCU_ERROR_OUT_OF_MEMORY;
    }
    a->size = size;
    a->ordinal = p->location.id;
    *h = (tcu_mem_handle)(uintptr_t)a;
    return TCU_SUCCESS;
}

tcu_result cuMemRelease(tcu_mem_handle h)
{
    struct fake_alloc *a = (struct fake_alloc *)(uintptr_t)h;
    if (a == NULL)
        return TCU_ERROR_INVALID_VALUE;
    close(a->fd);
    free(a);
    return TCU_SUCCESS;
}

tcu_result cuMemExportToShareableHandle(void *sh, tcu_mem_handle h, int type,
                                        unsigned long long flags)
{
    struct fake_alloc *a = (struct fake_alloc *)(uintptr_t)h;
    if (a == NULL || sh == NULL || type != TCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags != 0)
        return TCU_ERROR_INVALID_VALUE;
    int fd = dup(a->fd); /* like the driver's: no close-on-exec */
    if (fd < 0)
        return TCU_ERROR_OUT_OF_MEMORY;
    *(int *)sh = fd;
    return TCU_SUCCESS;
}

tcu_result cuMemImportFromShareableHandle(tcu_mem_handle *h, void *os_handle, int type)
{
    if (!initialised)
        return TCU_ERROR_NOT_INITIALIZED;
    int fd = (int)(intptr_t)os_handle;
    if (type != TCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0)
        return TCU_ERROR_INVALID_VALUE;
    char path[64], link[300];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t l = readlink(path, link, sizeof(link) - 1);
    if (l <= 0)
        return TCU_ERROR_INVALID_VALUE;
    link[l] = '\0';
    const char *prefix = "/memfd:" FAKE_NAME;
    if (strncmp(link, prefix, strlen(prefix)) != 0)
        return TCU_ERROR_INVALID_VALUE; /* not an exported allocation */
    struct stat st;
    if (fstat(fd, &st) < 0)
        return TCU_ERROR_INVALID_VALUE;
    struct fake_alloc *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return TCU_ERROR_OUT_OF_MEMORY;
    a->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (a->fd < 0) {
        free(a);
        return TCU_ERROR_OUT_OF_MEMORY;
    }
    a->size = (size_t)st.st_size;
    a->ordinal = atoi(strrchr(link, '-') + 1);
    *h = (tcu_mem_handle)(uintptr_t)a;
    return TCU_SUCCESS;
}

/* ---- address space ---- */

tcu_result cuMemAddressReserve(tcu_deviceptr *p, size_t size, size_t alignment, tcu_deviceptr addr,
                               unsigned long long flags)
{
    if (!initialised)
        return TCU_ERROR_NOT_INITIALIZED;
    size_t g = granularity();
    if (size == 0 || size % g != 0 || flags != 0 || addr != 0 ||
        (alignment != 0 && (alignment & (alignment - 1)) != 0))
        return TCU_ERROR_INVALID_VALUE;
    if (alignment < g)
        alignment = g;
    size_t span = size + alignment;
    void *m = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return TCU_ERROR_OUT_OF_MEMORY;
    uintptr_t base = ((uintptr_t)m + alignment - 1) & ~(uintptr_t)(alignment - 1);
    if (base > (uintptr_t)m)
        munmap(m, base - (uintptr_t)m);
    size_t tail = (uintptr_t)m + span - (base + size);
    if (tail > 0)
        munmap((void *)(base + size), tail);
    *p = base;
    return TCU_SUCCESS;
}

tcu_result cuMemAddressFree(tcu_deviceptr p, size_t size)
{
    return munmap((void *)(uintptr_t)p, size) == 0 ? TCU_SUCCESS : TCU_ERROR_INVALID_VALUE;
}

static struct fake_map *find_map(uintptr_t va, size_t n)
{
    for (size_t i = 0; i < n_maps; i++)
        if (va >= maps[i].va && n <= maps[i].size && va - maps[i].va <= maps[i].size - n)
            return &maps[i];
    return NULL;
}

tcu_result cuMemMap(tcu_deviceptr p, size_t size, size_t offset, tcu_mem_handle h,
                    unsigned long long flags)
{
    struct fake_alloc *a = (struct fake_alloc *)(uintptr_t)h;
    /* The driver maps whole allocations only: offset "currently must be
     * zero". */
    if (a == NULL || offset != 0 || flags != 0 || size != a->size)
        return TCU_ERROR_INVALID_VALUE;
    if (current < 0)
        return TCU_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    tcu_result r = TCU_SUCCESS;
    struct fake_map *grown = realloc(maps, (n_maps + 1) * sizeof(*grown));
    if (grown != NULL)
        maps = grown;
    if (grown == NULL)
        r = TCU_ERROR_OUT_OF_MEMORY;
    else if (find_map(p, 1) != NULL)
        r = TCU_ERROR_INVALID_VALUE;
    else if (mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0) ==
             MAP_FAILED)
        r = TCU_ERROR_OUT_OF_MEMORY;
    if (r == TCU_SUCCESS)
        maps[n_maps++] = (struct fake_map){(uintptr_t)p, size, TCU_MEM_ACCESS_FLAGS_PROT_NONE};
    pthread_mutex_unlock(&lock);
    return r;
}

tcu_result cuMemUnmap(tcu_deviceptr p, size_t size)
{
    if (dma_n > 0 && dma_va < p + size && p < dma_va + dma_n)
        sticky = TCU_ERROR_LAUNCH_FAILED;
    pthread_mutex_lock(&lock);
    struct fake_map *m = find_map(p, size);
    tcu_result r = TCU_ERROR_INVALID_VALUE;
    if (m != NULL && m->va == p && m->size == size) {
        /* Back to a reservation. */
        if (mmap((void *)(uintptr_t)p, size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) != MAP_FAILED) {
            *m = maps[--n_maps];
            r = TCU_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

tcu_result cuMemSetAccess(tcu_deviceptr p, size_t size, const tcu_mem_access_desc *desc,
                          size_t count)
{
    if (desc == NULL || count != 1 || desc->location.type != TCU_MEM_LOCATION_TYPE_DEVICE ||
        desc->location.id < 0 || desc->location.id >= n_devices())
        return TCU_ERROR_INVALID_VALUE;
    int prot;
    switch (desc->flags) {
    case TCU_MEM_ACCESS_FLAGS_PROT_NONE: prot = PROT_NONE; break;
    case TCU_MEM_ACCESS_FLAGS_PROT_READ: prot = PROT_READ; break;
    case TCU_MEM_ACCESS_FLAGS_PROT_READWRITE: prot = PROT_READ | PROT_WRITE; break;
    default: return TCU_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&lock);
    struct fake_map *m = find_map(p, size);
    tcu_result r = TCU_ERROR_INVALID_VALUE;
    if (m != NULL && m->va == p && m->size == size &&
        mprotect((void *)(uintptr_t)p, size, prot) == 0) {
        m->access = desc->flags;
        r = TCU_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* ---- copies ---- */

static tcu_result copy_check(uintptr_t va, size_t n, int need)
{
    if (current < 0)
        return TCU_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    struct fake_map *m = find_map(va, n);
    int access = m != NULL ? m->access : -1;
    pthread_mutex_unlock(&lock);
    return access >= 0 && (access & need) == need ? TCU_SUCCESS : TCU_ERROR_INVALID_VALUE;
}

tcu_result cuMemcpyHtoD_v2(tcu_deviceptr dst, const void *src, size_t n)
{
    if (sticky != TCU_SUCCESS)
        return sticky;
    tcu_result r = copy_check(dst, n, TCU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    if (r == TCU_SUCCESS) {
        memcpy((void *)(uintptr_t)dst, src, n);
        if (n > STAGED_COPY_LIMIT) {
            dma_va = dst;
            dma_n = n;
        }
    }
    return r;
}

tcu_result cuMemcpyDtoH_v2(void *dst, tcu_deviceptr src, size_t n)
{
    dma_n = 0; /* the null stream is in order: earlier copies have landed */
    if (sticky != TCU_SUCCESS)
        return sticky;
    tcu_result r = copy_check(src, n, TCU_MEM_ACCESS_FLAGS_PROT_READ);
    if (r == TCU_SUCCESS)
        memcpy(dst, (const void *)(uintptr_t)src, n);
    return r;
}

/* ---- plain device memory, kernels ---- */

tcu_result cuMemAlloc_v2(tcu_deviceptr *p, size_t n)
{
    if (current < 0)
        return TCU_ERROR_INVALID_CONTEXT;
    size_t len = (n + 4095) & ~(size_t)4095;
    void *m = mmap(NULL, len ? len : 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                   0);
    if (m == MAP_FAILED)
        return TCU_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    struct fake_map *grown = realloc(maps, (n_maps + 1) * sizeof(*grown));
    if (grown != NULL) {
        maps = grown;
        maps[n_maps++] = (struct fake_map){(uintptr_t)m, len ? len : 4096,
                                           TCU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    }
    pthread_mutex_unlock(&lock);
    if (grown == NULL) {
        munmap(m, len ? len : 4096);
        return TCU_ERROR_OUT_OF_MEMORY;
    }
    *p = (uintptr_t)m;
    return TCU_SUCCESS;
}

tcu_result cuMemFree_v2(tcu_deviceptr p)
{
    pthread_mutex_lock(&lock);
    struct fake_map *m = find_map(p, 1);
    tcu_result r = TCU_ERROR_INVALID_VALUE;
    if (m != NULL && m->va == p) {
        munmap((void *)(uintptr_t)p, m->size);
        *m = maps[--n_maps];
        r = TCU_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

tcu_result cuMemsetD32_v2(tcu_deviceptr p, unsigned v, size_t n)
{
    tcu_result r = copy_check(p, n * 4, TCU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    for (size_t i = 0; r == TCU_SUCCESS && i < n; i++)
        ((uint32_t *)(uintptr_t)p)[i] = v;
    return r;
}

enum { K_CHECKSUM = 1, K_POKE, K_MATVEC };

tcu_result cuModuleLoadData(tcu_module *m, const void *image)
{
    if (current < 0)
        return TCU_ERROR_INVALID_CONTEXT;
    if (image == NULL)
        return TCU_ERROR_INVALID_VALUE;
    *m = (tcu_module)(uintptr_t)1;
    return TCU_SUCCESS;
}

tcu_result cuModuleGetFunction(tcu_function *f, tcu_module m, const char *name)
{
    static const char *const names[] = {NULL, "checksum", "poke", "matvec"};
    for (uintptr_t k = K_CHECKSUM; m != NULL && k <= K_MATVEC; k++)
        if (strcmp(name, names[k]) == 0) {
            *f = (tcu_function)k;
            return TCU_SUCCESS;
        }
    return TCU_ERROR_INVALID_VALUE;
}

tcu_result cuLaunchKernel(tcu_function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared, tcu_stream stream,
                          void **params, void **extra)
{
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)stream;
    if (sticky != TCU_SUCCESS)
        return sticky;
    if (current < 0)
        return TCU_ERROR_INVALID_CONTEXT;
    if (params == NULL || extra != NULL)
        return TCU_ERROR_INVALID_VALUE;
    switch ((uintptr_t)f) {
    case K_CHECKSUM: {
        uint64_t data = *(uint64_t *)params[0], words = *(uint64_t *)params[1];
        uint64_t out = *(uint64_t *)params[2];
        if (copy_check(data, words * 4, TCU_MEM_ACCESS_FLAGS_PROT_READ) != TCU_SUCCESS ||
            copy_check(out, 4, TCU_MEM_ACCESS_FLAGS_PROT_READWRITE) != TCU_SUCCESS) {
            sticky = TCU_ERROR_ILLEGAL_ADDRESS;
            return TCU_SUCCESS;
        }
        uint32_t sum = 0;
        for (uint64_t i = 0; i < words; i++)
            sum += ((const uint32_t *)(uintptr_t)data)[i];
        *(uint32_t *)(uintptr_t)out += sum;
        return TCU_SUCCESS;
    }
    case K_POKE: {
        uint64_t data = *(uint64_t *)params[0];
        if (copy_check(data, 4, TCU_MEM_ACCESS_FLAGS_PROT_READWRITE) != TCU_SUCCESS)
            sticky = TCU_ERROR_ILLEGAL_ADDRESS; /* reported by the next sync */
        else
            *(uint32_t *)(uintptr_t)data = 1;
        return TCU_SUCCESS;
    }
    case K_MATVEC: {
        uint64_t w = *(uint64_t *)params[0], x = *(uint64_t *)params[1];
        uint64_t y = *(uint64_t *)params[2];
        uint32_t rows = *(uint32_t *)params[3], cols = *(uint32_t *)params[4];
        if (copy_check(w, (size_t)rows * cols * 4, TCU_MEM_ACCESS_FLAGS_PROT_READ) != TCU_SUCCESS ||
            copy_check(x, (size_t)cols * 4, TCU_MEM_ACCESS_FLAGS_PROT_READ) != TCU_SUCCESS ||
            copy_check(y, (size_t)rows * 4, TCU_MEM_ACCESS_FLAGS_PROT_READWRITE) != TCU_SUCCESS) {
            sticky = TCU_ERROR_ILLEGAL_ADDRESS;
            return TCU_SUCCESS;
        }
        const float *W = (const float *)(uintptr_t)w, *X = (const float *)(uintptr_t)x;
        float *Y = (float *)(uintptr_t)y;
        for (uint32_t i = 0; i < rows; i++) {
            float acc = 0;
            for (uint32_t j = 0; j < cols; j++)
                acc = fmaf(W[(size_t)i * cols + j], X[j], acc);
            Y[i] = acc;
        }
        return TCU_SUCCESS;
    }
    default: return TCU_ERROR_INVALID_VALUE;
    }
}

tcu_result cuCtxSynchronize(void)
{
    dma_n = 0;
    return sticky;
}

tcu_result cuIpcGetMemHandle(void *handle, tcu_deviceptr p)
{
    (void)handle, (void)p;
    return TCU_ERROR_NOT_SUPPORTED;
}

tcu_result cuIpcOpenMemHandle_v2(tcu_deviceptr *p, const void *handle, unsigned flags)
{
    (void)p, (void)handle, (void)flags;
    return TCU_ERROR_NOT_SUPPORTED;
}
