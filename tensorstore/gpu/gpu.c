/* gpu.c - the CUDA driver loaded at run time and the VMM calls tetris
 * makes on it (see gpu.h); the ABI is tensorstore/gpu/cuda_abi.h's. */
#include "tensorstore/gpu/gpu.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensorstore/gpu/cuda_abi.h"

struct gpu_driver {
    void *lib;
    int version;
    int n_devices;
    tcu_init_fn init;
    tcu_driver_get_version_fn driver_get_version;
    tcu_get_error_string_fn get_error_string;
    tcu_device_get_count_fn device_get_count;
    tcu_device_get_fn device_get;
    tcu_device_get_name_fn device_get_name;
    tcu_device_get_attribute_fn device_get_attribute;
    tcu_primary_ctx_retain_fn primary_ctx_retain;
    tcu_primary_ctx_release_fn primary_ctx_release;
    tcu_ctx_set_current_fn ctx_set_current;
    tcu_ctx_synchronize_fn ctx_synchronize;
    tcu_mem_get_info_fn mem_get_info;
    tcu_mem_get_allocation_granularity_fn mem_get_allocation_granularity;
    tcu_mem_create_fn mem_create;
    tcu_mem_release_fn mem_release;
    tcu_mem_export_fn mem_export;
    tcu_mem_import_fn mem_import;
    tcu_mem_address_reserve_fn mem_address_reserve;
    tcu_mem_address_free_fn mem_address_free;
    tcu_mem_map_fn mem_map;
    tcu_mem_unmap_fn mem_unmap;
    tcu_mem_set_access_fn mem_set_access;
    tcu_memcpy_htod_fn memcpy_htod;
    tcu_memcpy_dtoh_fn memcpy_dtoh;
    /* Primary contexts, retained on first use of a device. */
    pthread_mutex_t lock;
    tcu_context ctx[GPU_MAX_DEVICES];
    size_t granularity[GPU_MAX_DEVICES];
};

/* The exported names: versioned where the toolkit's header maps the API
 * to a versioned symbol. */
static const struct {
    const char *name;
    size_t offset;
} entry_points[] = {
#define EP(field, sym)                                                                             \
    {                                                                                              \
        sym, offsetof(struct gpu_driver, field)                                                    \
    }
    EP(init, "cuInit"),
    EP(driver_get_version, "cuDriverGetVersion"),
    EP(get_error_string, "cuGetErrorString"),
    EP(device_get_count, "cuDeviceGetCount"),
    EP(device_get, "cuDeviceGet"),
    EP(device_get_name, "cuDeviceGetName"),
    EP(device_get_attribute, "cuDeviceGetAttribute"),
    EP(primary_ctx_retain, "cuDevicePrimaryCtxRetain"),
    EP(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2"),
    EP(ctx_set_current, "cuCtxSetCurrent"),
    EP(ctx_synchronize, "cuCtxSynchronize"),
    EP(mem_get_info, "cuMemGetInfo_v2"),
    EP(mem_get_allocation_granularity, "cuMemGetAllocationGranularity"),
    EP(mem_create, "cuMemCreate"),
    EP(mem_release, "cuMemRelease"),
    EP(mem_export, "cuMemExportToShareableHandle"),
    EP(mem_import, "cuMemImportFromShareableHandle"),
    EP(mem_address_reserve, "cuMemAddressReserve"),
    EP(mem_address_free, "cuMemAddressFree"),
    EP(mem_map, "cuMemMap"),
    EP(mem_unmap, "cuMemUnmap"),
    EP(mem_set_access, "cuMemSetAccess"),
    EP(memcpy_htod, "cuMemcpyHtoD_v2"),
    EP(memcpy_dtoh, "cuMemcpyDtoH_v2"),
#undef EP
};

/* A CUDA error as a tetris one: out of memory is FULL, a missing device
 * NOTFOUND, an unsupported feature UNAVAILABLE, the rest RUNTIME. */
static int cu_fail(gpu_driver *g, tetris_error *err, tcu_result r, const char *what)
{
    const char *s = NULL;
    if (g->get_error_string == NULL || g->get_error_string(r, &s) != TCU_SUCCESS || s == NULL)
        s = "unknown error";
    int code = TETRIS_E_RUNTIME;
    if (r == TCU_ERROR_OUT_OF_MEMORY)
        code = TETRIS_E_FULL;
    else if (r == TCU_ERROR_INVALID_DEVICE || r == TCU_ERROR_NO_DEVICE)
        code = TETRIS_E_NOTFOUND;
    else if (r == TCU_ERROR_NOT_SUPPORTED)
        code = TETRIS_E_UNAVAILABLE;
    return tetris_fail(err, code, 0, "%s: CUDA error %d (%s)", what, r, s);
}

int gpu_driver_open(const char *path, gpu_driver **out, tetris_error *err)
{
    if (path == NULL || path[0] == '\0')
        path = getenv(GPU_LIBCUDA_ENV);
    if (path == NULL || path[0] == '\0')
        path = GPU_LIBCUDA_DEFAULT;
    /* RTLD_NODELETE: a driver is never unloaded under threads it started. */
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (lib == NULL) {
        const char *why = dlerror();
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0,
                           "%s not found: GPU sharing unavailable (%s)", path,
                           why != NULL ? why : "dlopen failed");
    }
    gpu_driver *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        dlclose(lib);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "gpu driver");
    }
    g->lib = lib;
    for (size_t i = 0; i < sizeof(entry_points) / sizeof(entry_points[0]); i++) {
        void *sym = dlsym(lib, entry_points[i].name);
        if (sym == NULL) {
            free(g);
            dlclose(lib);
            return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0,
                               "%s lacks %s: GPU sharing unavailable (driver too old?)", path,
                               entry_points[i].name);
        }
        memcpy((char *)g + entry_points[i].offset, &sym, sizeof(sym));
    }
    pthread_mutex_init(&g->lock, NULL);
    tcu_result r = g->init(0);
    if (r == TCU_SUCCESS)
        r = g->driver_get_version(&g->version);
    if (r == TCU_SUCCESS)
        r = g->device_get_count(&g->n_devices);
    if (r == TCU_SUCCESS && g->n_devices <= 0)
        r = TCU_ERROR_NO_DEVICE;
    if (r != TCU_SUCCESS) {
        tetris_error e;
        cu_fail(g, &e, r, "cuInit");
        gpu_driver_close(g);
        /* Seen on an H200 (driver 580): a process in a PID namespace of
         * its own that still sees its parent's /proc. */
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "GPU sharing unavailable: %s%s", e.msg,
                           r == TCU_ERROR_OPERATING_SYSTEM
                               ? " (in a PID namespace of its own, a process needs a /proc "
                                 "mounted for it)"
                               : "");
    }
    *out = g;
    return 0;
}

void gpu_driver_close(gpu_driver *g)
{
    if (g == NULL)
        return;
    for (int i = 0; i < GPU_MAX_DEVICES; i++)
        if (g->ctx[i] != NULL)
            g->primary_ctx_release(i);
    pthread_mutex_destroy(&g->lock);
    dlclose(g->lib);
    free(g);
}

int gpu_driver_version(gpu_driver *g)
{
    return g->version;
}

int gpu_device_parse(const char *name, int *ordinal, tetris_error *err)
{
    if (name == NULL || strncmp(name, "cuda:", 5) != 0 || name[5] < '0' || name[5] > '9')
        return tetris_fail(err, TETRIS_E_INVAL, 0, "device \"%.32s\" is not cuda:N",
                           name != NULL ? name : "");
    char *end;
    errno = 0;
    long n = strtol(name + 5, &end, 10);
    if (errno != 0 || *end != '\0' || n < 0 || n >= GPU_MAX_DEVICES || (name[5] == '0' && name[6]))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "device \"%.32s\" is not cuda:N (0 <= N < %d)",
                           name, GPU_MAX_DEVICES);
    *ordinal = (int)n;
    return 0;
}

/* Makes the device's primary context current on the calling thread
 * (contexts are per thread; every entry point below calls this first). */
static int use_device(gpu_driver *g, int ordinal, tetris_error *err)
{
    if (ordinal < 0 || ordinal >= g->n_devices || ordinal >= GPU_MAX_DEVICES)
        return tetris_fail(err, TETRIS_E_NOTFOUND, 0, "no GPU cuda:%d (the driver sees %d)",
                           ordinal, g->n_devices);
    pthread_mutex_lock(&g->lock);
    tcu_result r = TCU_SUCCESS;
    if (g->ctx[ordinal] == NULL) {
        tcu_device dev;
        r = g->device_get(&dev, ordinal);
        if (r == TCU_SUCCESS)
            r = g->primary_ctx_retain(&g->ctx[ordinal], dev);
    }
    tcu_context ctx = g->ctx[ordinal];
    pthread_mutex_unlock(&g->lock);
    if (r == TCU_SUCCESS)
        r = g->ctx_set_current(ctx);
    return r == TCU_SUCCESS ? 0 : cu_fail(g, err, r, "cuDevicePrimaryCtxRetain");
}

int gpu_device_check(gpu_driver *g, int ordinal, tetris_error *err)
{
    int rc = use_device(g, ordinal, err);
    if (rc < 0)
        return rc;
    tcu_device dev;
    tcu_result r = g->device_get(&dev, ordinal);
    int vmm = 0, fd = 0;
    if (r == TCU_SUCCESS)
        r = g->device_get_attribute(&vmm, TCU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                    dev);
    if (r == TCU_SUCCESS)
        r = g->device_get_attribute(
            &fd, TCU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
    if (r != TCU_SUCCESS)
        return cu_fail(g, err, r, "cuDeviceGetAttribute");
    if (!vmm || !fd)
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0,
                           "cuda:%d supports no %s: GPU sharing unavailable", ordinal,
                           !vmm ? "virtual memory management" : "POSIX file descriptor handles");
    return 0;
}

int gpu_device_name(gpu_driver *g, int ordinal, char *buf, size_t len, tetris_error *err)
{
    int rc = use_device(g, ordinal, err);
    if (rc < 0)
        return rc;
    tcu_device dev;
    tcu_result r = g->device_get(&dev, ordinal);
    if (r == TCU_SUCCESS)
        r = g->device_get_name(buf, (int)len, dev);
    return r == TCU_SUCCESS ? 0 : cu_fail(g, err, r, "cuDeviceGetName");
}

static tcu_mem_allocation_prop alloc_prop(int ordinal)
{
    return (tcu_mem_allocation_prop){
        .type = TCU_MEM_ALLOCATION_TYPE_PINNED,
        .requested_handle_types = TCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        .location = {.type = TCU_MEM_LOCATION_TYPE_DEVICE, .id = ordinal},
    };
}

int gpu_granularity(gpu_driver *g, int ordinal, size_t *out, tetris_error *err)
{
    int rc = use_device(g, ordinal, err);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&g->lock);
    size_t gran = g->granularity[ordinal];
    pthread_mutex_unlock(&g->lock);
    if (gran == 0) {
        tcu_mem_allocation_prop p = alloc_prop(ordinal);
        tcu_result r = g->mem_get_allocation_granularity(&gran, &p,
                                                         TCU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (r != TCU_SUCCESS)
            return cu_fail(g, err, r, "cuMemGetAllocationGranularity");
        if (gran == 0 || (gran & (gran - 1)) != 0)
            return tetris_fail(err, TETRIS_E_RUNTIME, 0,
                               "cuda:%d: granularity %zu is not a power of two", ordinal, gran);
        pthread_mutex_lock(&g->lock);
        g->granularity[ordinal] = gran;
        pthread_mutex_unlock(&g->lock);
    }
    *out = gran;
    return 0;
}

int gpu_mem_info(gpu_driver *g, int ordinal, uint64_t *free_bytes, uint64_t *total,
                 tetris_error *err)
{
    int rc = use_device(g, ordinal, err);
    if (rc < 0)
        return rc;
    size_t f = 0, t = 0;
    tcu_result r = g->mem_get_info(&f, &t);
    if (r != TCU_SUCCESS)
        return cu_fail(g, err, r, "cuMemGetInfo");
    *free_bytes = f;
    *total = t;
    return 0;
}

int gpu_padded_size(gpu_driver *g, int ordinal, uint64_t nbytes, uint64_t *out, tetris_error *err)
{
    size_t gran;
    int rc = gpu_granularity(g, ordinal, &gran, err);
    if (rc < 0)
        return rc;
    if (nbytes == 0)
        nbytes = 1; /* an empty tensor still needs an allocation to export */
    if (nbytes > UINT64_MAX - gran)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "tensor of %llu bytes",
                           (unsigned long long)nbytes);
    *out = (nbytes + gran - 1) & ~(uint64_t)(gran - 1);
    return 0;
}

int gpu_alloc_create(gpu_driver *g, int ordinal, uint64_t nbytes, gpu_alloc *out, tetris_error *err)
{
    uint64_t size;
    int rc = gpu_padded_size(g, ordinal, nbytes, &size, err);
    if (rc < 0)
        return rc;
    tcu_mem_allocation_prop p = alloc_prop(ordinal);
    tcu_mem_handle h;
    tcu_result r = g->mem_create(&h, size, &p, 0);
    if (r != TCU_SUCCESS)
        return cu_fail(g, err, r, "cuMemCreate");
    *out = (gpu_alloc){.handle = h, .size = size, .ordinal = ordinal};
    return 0;
}

/* Maps handle h (size bytes) into a new address range of this process with
 * the given access. */
static int map_handle(gpu_driver *g, int ordinal, tcu_mem_handle h, uint64_t size, int flags,
                      tcu_deviceptr *out, tetris_error *err)
{
    size_t gran;
    int rc = gpu_granularity(g, ordinal, &gran, err);
    if (rc < 0)
        return rc;
    if (size == 0 || size % gran != 0)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "allocation size %llu is not a multiple of the granularity %zu",
                           (unsigned long long)size, gran);
    tcu_deviceptr va = 0;
    tcu_result r = g->mem_address_reserve(&va, size, gran, 0, 0);
    if (r != TCU_SUCCESS)
        return cu_fail(g, err, r, "cuMemAddressReserve");
    r = g->mem_map(va, size, 0, h, 0);
    if (r != TCU_SUCCESS) {
        rc = cu_fail(g, err, r, "cuMemMap");
        g->mem_address_free(va, size);
        return rc;
    }
    tcu_mem_access_desc acc = {.location = {.type = TCU_MEM_LOCATION_TYPE_DEVICE, .id = ordinal},
                               .flags = flags};
    r = g->mem_set_access(va, size, &acc, 1);
    if (r != TCU_SUCCESS) {
        rc = cu_fail(g, err, r, "cuMemSetAccess");
        g->mem_unmap(va, size);
        g->mem_address_free(va, size);
        return rc;
    }
    *out = va;
    return 0;
}

/* A copy from pageable host memory returns once the bytes are staged, not
 * once they have landed (CUDA's "API synchronization behavior"): unmapping
 * the destination before the DMA completes faults the context for good
 * (CUDA_ERROR_LAUNCH_FAILED on the next call, seen on an H200 for copies
 * of megabytes). So every copy into the device waits for it. */
static tcu_result copy_htod_sync(gpu_driver *g, tcu_deviceptr dst, const void *src, uint64_t n)
{
    tcu_result r = g->memcpy_htod(dst, src, n);
    return r == TCU_SUCCESS ? g->ctx_synchronize() : r;
}

int gpu_alloc_fill(gpu_driver *g, const gpu_alloc *a, const void *src, uint64_t n,
                   tetris_error *err)
{
    if (n > a->size)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%llu bytes into an allocation of %llu",
                           (unsigned long long)n, (unsigned long long)a->size);
    tcu_deviceptr va;
    int rc = map_handle(g, a->ordinal, a->handle, a->size, TCU_MEM_ACCESS_FLAGS_PROT_READWRITE, &va,
                        err);
    if (rc < 0)
        return rc;
    tcu_result r = copy_htod_sync(g, va, src, n);
    if (r != TCU_SUCCESS)
        rc = cu_fail(g, err, r, "cuMemcpyHtoD");
    g->mem_unmap(va, a->size);
    g->mem_address_free(va, a->size);
    return rc;
}

int gpu_alloc_export(gpu_driver *g, const gpu_alloc *a, int *fd, tetris_error *err)
{
    int rc = use_device(g, a->ordinal, err);
    if (rc < 0)
        return rc;
    int f = -1;
    tcu_result r = g->mem_export(&f, a->handle, TCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != TCU_SUCCESS)
        return cu_fail(g, err, r, "cuMemExportToShareableHandle");
    /* The driver's descriptor may lack FD_CLOEXEC; a child must not keep
     * the device memory alive. */
    if (fcntl(f, F_SETFD, FD_CLOEXEC) < 0) {
        int e = errno;
        close(f);
        return tetris_fail(err, TETRIS_E_IO, e, "fcntl of an exported handle");
    }
    *fd = f;
    return 0;
}

void gpu_alloc_release(gpu_driver *g, gpu_alloc *a)
{
    if (a->handle == 0)
        return;
    tetris_error err;
    if (use_device(g, a->ordinal, &err) == 0)
        g->mem_release(a->handle);
    a->handle = 0;
}

int gpu_import_map(gpu_driver *g, int ordinal, int fd, uint64_t size, bool read_write,
                   gpu_mapping *out, tetris_error *err)
{
    int rc = use_device(g, ordinal, err);
    if (rc < 0)
        return rc;
    tcu_mem_handle h;
    tcu_result r = g->mem_import(&h, (void *)(intptr_t)fd,
                                 TCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != TCU_SUCCESS)
        return cu_fail(g, err, r, "cuMemImportFromShareableHandle");
    tcu_deviceptr va;
    rc = map_handle(g, ordinal, h, size,
                    read_write ? TCU_MEM_ACCESS_FLAGS_PROT_READWRITE
                               : TCU_MEM_ACCESS_FLAGS_PROT_READ,
                    &va, err);
    if (rc < 0) {
        g->mem_release(h);
        return rc;
    }
    *out = (gpu_mapping){.ptr = va, .size = size, .handle = h, .ordinal = ordinal};
    return 0;
}

void gpu_unmap(gpu_driver *g, gpu_mapping *m)
{
    if (m->ptr == 0)
        return;
    tetris_error err;
    if (use_device(g, m->ordinal, &err) == 0) {
        g->mem_unmap(m->ptr, m->size);
        g->mem_address_free(m->ptr, m->size);
        g->mem_release(m->handle);
    }
    *m = (gpu_mapping){0};
}

int gpu_copy_to_host(gpu_driver *g, int ordinal, void *dst, uint64_t src, uint64_t n,
                     tetris_error *err)
{
    int rc = use_device(g, ordinal, err);
    if (rc < 0)
        return rc;
    tcu_result r = g->memcpy_dtoh(dst, src, n);
    return r == TCU_SUCCESS ? 0 : cu_fail(g, err, r, "cuMemcpyDtoH");
}

int gpu_copy_to_device(gpu_driver *g, int ordinal, uint64_t dst, const void *src, uint64_t n,
                       tetris_error *err)
{
    int rc = use_device(g, ordinal, err);
    if (rc < 0)
        return rc;
    tcu_result r = copy_htod_sync(g, dst, src, n);
    return r == TCU_SUCCESS ? 0 : cu_fail(g, err, r, "cuMemcpyHtoD");
}
