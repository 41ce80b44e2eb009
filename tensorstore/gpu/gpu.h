/* gpu.h - device memory that several processes share, through the CUDA
 * driver's virtual memory management (VMM) API and POSIX file descriptors:
 * one process (the node daemon) creates an allocation per tensor, fills it
 * and exports it as a descriptor; others (function instances) import the
 * descriptor and map it read-only. The driver is loaded at run time
 * (dlopen of libcuda.so.1, or $TETRIS_LIBCUDA), so nothing here needs a
 * CUDA toolkit to build and everything fails cleanly without a GPU.
 *
 *   exporter: gpu_driver_open, gpu_device_check, gpu_alloc_create,
 *             gpu_alloc_fill, gpu_alloc_export (send the fd), gpu_alloc_release
 *   importer: gpu_driver_open, gpu_import_map (fd, size from the exporter),
 *             use mapping.ptr on the device, gpu_unmap
 *
 * Every allocation is padded to the device's minimum granularity and
 * mapped whole (the driver maps no sub-range), so a reader of one
 * allocation sees no other tensor's bytes. Read-only access is a guard
 * against bugs, not a boundary: an importer sets its own access flags. */
#ifndef TETRIS_GPU_H
#define TETRIS_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* Devices are named "cuda:N" (N: the driver's ordinal). */
#define GPU_DEVICE_NAME_MAX 16
#define GPU_MAX_DEVICES 16
/* Overrides where the driver library is loaded from. */
#define GPU_LIBCUDA_ENV "TETRIS_LIBCUDA"
#define GPU_LIBCUDA_DEFAULT "libcuda.so.1"

typedef struct gpu_driver gpu_driver;

/* Loads the driver (path NULL: $TETRIS_LIBCUDA, else libcuda.so.1),
 * resolves its entry points and initialises it. TETRIS_E_UNAVAILABLE
 * ("libcuda.so.1 not found: GPU sharing unavailable") when the library
 * cannot be loaded, lacks an entry point, or finds no device. The driver
 * stays loaded for the life of the process; gpu_driver_close frees the
 * object only. */
int gpu_driver_open(const char *path, gpu_driver **out, tetris_error *err);
void gpu_driver_close(gpu_driver *g);
int gpu_driver_version(gpu_driver *g); /* e.g. 13000 */

/* A tensor under 1/GPU_SHARE_MIN_FRACTION of the device's allocation
 * granularity is not shared on the device: padded to the granularity (2 MiB
 * on an H200), it would cost more than the private copies of a few
 * instances. The agent does not ask for one, and the daemon refuses one. */
#define GPU_SHARE_MIN_FRACTION 4

/* "cuda:N" -> N; anything else is TETRIS_E_INVAL. */
int gpu_device_parse(const char *name, int *ordinal, tetris_error *err);
/* The device exists and supports VMM with POSIX-fd handles: 0; else
 * TETRIS_E_NOTFOUND (no such ordinal) or TETRIS_E_UNAVAILABLE. */
int gpu_device_check(gpu_driver *g, int ordinal, tetris_error *err);
int gpu_device_name(gpu_driver *g, int ordinal, char *buf, size_t len, tetris_error *err);
/* The minimum allocation granularity (bytes). */
int gpu_granularity(gpu_driver *g, int ordinal, size_t *out, tetris_error *err);
/* What the driver reports for the device (cuMemGetInfo). */
int gpu_mem_info(gpu_driver *g, int ordinal, uint64_t *free_bytes, uint64_t *total,
                 tetris_error *err);

/* ---- exporter ---- */

typedef struct gpu_alloc {
    uint64_t handle;
    uint64_t size; /* padded to the granularity */
    int ordinal;
} gpu_alloc;

/* Size nbytes rounded up to the device's granularity. */
int gpu_padded_size(gpu_driver *g, int ordinal, uint64_t nbytes, uint64_t *out, tetris_error *err);
/* A new allocation of nbytes (padded) on the device, exportable as a file
 * descriptor. TETRIS_E_FULL when the device is out of memory. */
int gpu_alloc_create(gpu_driver *g, int ordinal, uint64_t nbytes, gpu_alloc *out,
                     tetris_error *err);
/* Copies n <= a->size bytes from host memory into the allocation. */
int gpu_alloc_fill(gpu_driver *g, const gpu_alloc *a, const void *src, uint64_t n,
                   tetris_error *err);
/* A new descriptor of the allocation (close-on-exec); the caller closes it. */
int gpu_alloc_export(gpu_driver *g, const gpu_alloc *a, int *fd, tetris_error *err);
/* Drops this process's handle: the memory goes once every importer has
 * unmapped and released it too. */
void gpu_alloc_release(gpu_driver *g, gpu_alloc *a);

/* ---- importer ---- */

typedef struct gpu_mapping {
    uint64_t ptr;  /* device address, valid in this process's contexts */
    uint64_t size; /* the allocation's, as the exporter said */
    uint64_t handle;
    int ordinal;
} gpu_mapping;

/* Imports an exported descriptor (fd stays the caller's) of an allocation
 * of size bytes and maps it whole, read-only unless read_write. */
int gpu_import_map(gpu_driver *g, int ordinal, int fd, uint64_t size, bool read_write,
                   gpu_mapping *out, tetris_error *err);
void gpu_unmap(gpu_driver *g, gpu_mapping *m);
/* Copies n bytes of device memory at src to host memory. */
int gpu_copy_to_host(gpu_driver *g, int ordinal, void *dst, uint64_t src, uint64_t n,
                     tetris_error *err);
/* Copies n bytes of host memory to device memory at dst (a test's write
 * into a read-only mapping fails here). */
int gpu_copy_to_device(gpu_driver *g, int ordinal, uint64_t dst, const void *src, uint64_t n,
                       tetris_error *err);

#endif
