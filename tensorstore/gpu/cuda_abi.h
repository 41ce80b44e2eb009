/* cuda_abi.h - the few CUDA driver API types, values and entry-point
 * signatures tetris uses, written from NVIDIA's public driver API
 * reference (CUDA Driver API, "Virtual Memory Management" and "Memory
 * Management" groups), so that tetris builds without a CUDA toolkit and
 * loads libcuda.so.1 at run time (tensorstore/gpu/gpu.c). Only what is
 * listed here is used; tests/gpu/abi_check.c compares it with the
 * toolkit's own header where one is installed.
 *
 * Entry points are resolved by their exported ELF names: where the
 * toolkit's header maps an API to a versioned symbol (cuMemGetInfo ->
 * cuMemGetInfo_v2), the versioned name is the one named here. */
#ifndef TETRIS_GPU_CUDA_ABI_H
#define TETRIS_GPU_CUDA_ABI_H

#include <stddef.h>

/* CUresult, an enum the driver returns in an int's register;
 * tests/gpu/abi_check.c defines TCU_RESULT_TYPE as the toolkit's enum so
 * that the signatures below compare exactly. */
#ifndef TCU_RESULT_TYPE
#define TCU_RESULT_TYPE int
#endif
typedef TCU_RESULT_TYPE tcu_result;
typedef int tcu_device;                    /* CUdevice */
typedef struct tcu_ctx_st *tcu_context;    /* CUcontext */
typedef struct tcu_mod_st *tcu_module;     /* CUmodule */
typedef struct tcu_func_st *tcu_function;  /* CUfunction */
typedef struct tcu_stream_st *tcu_stream;  /* CUstream */
typedef unsigned long long tcu_deviceptr;  /* CUdeviceptr (64-bit) */
typedef unsigned long long tcu_mem_handle; /* CUmemGenericAllocationHandle */

enum {
    TCU_SUCCESS = 0,
    TCU_ERROR_INVALID_VALUE = 1,
    TCU_ERROR_OUT_OF_MEMORY = 2,
    TCU_ERROR_NOT_INITIALIZED = 3,
    TCU_ERROR_NO_DEVICE = 100,
    TCU_ERROR_INVALID_DEVICE = 101,
    TCU_ERROR_INVALID_CONTEXT = 201,
    TCU_ERROR_OPERATING_SYSTEM = 304,
    TCU_ERROR_ILLEGAL_ADDRESS = 700,
    TCU_ERROR_LAUNCH_FAILED = 719,
    TCU_ERROR_NOT_SUPPORTED = 801,
};

/* CUdevice_attribute values used */
enum {
    TCU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
    TCU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103,
};

/* CUmemAllocationType */
enum { TCU_MEM_ALLOCATION_TYPE_PINNED = 1 };
/* CUmemAllocationHandleType */
enum { TCU_MEM_HANDLE_TYPE_NONE = 0, TCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1 };
/* CUmemLocationType */
enum { TCU_MEM_LOCATION_TYPE_DEVICE = 1 };
/* CUmemAccess_flags */
enum {
    TCU_MEM_ACCESS_FLAGS_PROT_NONE = 0,
    TCU_MEM_ACCESS_FLAGS_PROT_READ = 1,
    TCU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
};
/* CUmemAllocationGranularity_flags */
enum { TCU_MEM_ALLOC_GRANULARITY_MINIMUM = 0, TCU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1 };

/* CUmemLocation */
typedef struct tcu_mem_location {
    int type; /* TCU_MEM_LOCATION_TYPE_* */
    int id;   /* the device ordinal */
} tcu_mem_location;

/* CUmemAllocationProp */
typedef struct tcu_mem_allocation_prop {
    int type;                   /* TCU_MEM_ALLOCATION_TYPE_* */
    int requested_handle_types; /* TCU_MEM_HANDLE_TYPE_* */
    tcu_mem_location location;
    void *win32_handle_meta_data; /* Windows only: NULL */
    struct {
        unsigned char compression_type;
        unsigned char gpu_direct_rdma_capable;
        unsigned short usage;
        unsigned char reserved[4];
    } alloc_flags;
} tcu_mem_allocation_prop;

/* CUmemAccessDesc */
typedef struct tcu_mem_access_desc {
    tcu_mem_location location;
    int flags; /* TCU_MEM_ACCESS_FLAGS_* */
} tcu_mem_access_desc;

/* Signatures of the entry points, by their exported names. */
typedef tcu_result (*tcu_init_fn)(unsigned flags);             /* cuInit */
typedef tcu_result (*tcu_driver_get_version_fn)(int *version); /* cuDriverGetVersion */
typedef tcu_result (*tcu_get_error_string_fn)(tcu_result e, const char **s); /* cuGetErrorString */
typedef tcu_result (*tcu_device_get_count_fn)(int *n);                       /* cuDeviceGetCount */
typedef tcu_result (*tcu_device_get_fn)(tcu_device *d, int ordinal);         /* cuDeviceGet */
typedef tcu_result (*tcu_device_get_name_fn)(char *name, int len,
                                             tcu_device d); /* cuDeviceGetName */
typedef tcu_result (*tcu_device_get_attribute_fn)(int *v, int attr, tcu_device d);
typedef tcu_result (*tcu_primary_ctx_retain_fn)(tcu_context *c, tcu_device d);
typedef tcu_result (*tcu_primary_ctx_release_fn)(tcu_device d); /* ..._v2 */
typedef tcu_result (*tcu_ctx_set_current_fn)(tcu_context c);
typedef tcu_result (*tcu_ctx_synchronize_fn)(void);
typedef tcu_result (*tcu_mem_get_info_fn)(size_t *free_bytes, size_t *total); /* cuMemGetInfo_v2 */
typedef tcu_result (*tcu_mem_get_allocation_granularity_fn)(size_t *g,
                                                            const tcu_mem_allocation_prop *p,
                                                            int option);
typedef tcu_result (*tcu_mem_create_fn)(tcu_mem_handle *h, size_t size,
                                        const tcu_mem_allocation_prop *p, unsigned long long flags);
typedef tcu_result (*tcu_mem_release_fn)(tcu_mem_handle h);
typedef tcu_result (*tcu_mem_export_fn)(void *shareable, tcu_mem_handle h, int handle_type,
                                        unsigned long long flags);
typedef tcu_result (*tcu_mem_import_fn)(tcu_mem_handle *h, void *os_handle, int handle_type);
typedef tcu_result (*tcu_mem_address_reserve_fn)(tcu_deviceptr *p, size_t size, size_t alignment,
                                                 tcu_deviceptr addr, unsigned long long flags);
typedef tcu_result (*tcu_mem_address_free_fn)(tcu_deviceptr p, size_t size);
typedef tcu_result (*tcu_mem_map_fn)(tcu_deviceptr p, size_t size, size_t offset, tcu_mem_handle h,
                                     unsigned long long flags);
typedef tcu_result (*tcu_mem_unmap_fn)(tcu_deviceptr p, size_t size);
typedef tcu_result (*tcu_mem_set_access_fn)(tcu_deviceptr p, size_t size,
                                            const tcu_mem_access_desc *desc, size_t count);
typedef tcu_result (*tcu_memcpy_htod_fn)(tcu_deviceptr dst, const void *src, size_t n); /* _v2 */
typedef tcu_result (*tcu_memcpy_dtoh_fn)(void *dst, tcu_deviceptr src, size_t n);       /* _v2 */

#endif
