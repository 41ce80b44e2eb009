/* abi_check.c - compiles only if tensorstore/gpu/cuda_abi.h agrees with
 * the CUDA toolkit's own header: sizes and offsets of the structures,
 * enum values, and the signatures of the entry points under their
 * exported names. Built by tests/gpu/test-abi.sh where a toolkit is
 * installed; never part of the build. */
#include <cuda.h>
#include <stddef.h>

/* Our signatures return the toolkit's enum here, so gcc compares them
 * exactly; the enum and int share a size (checked below). */
#define TCU_RESULT_TYPE CUresult
#include "tensorstore/gpu/cuda_abi.h"

#define SAME_SIZE(a, b) _Static_assert(sizeof(a) == sizeof(b), "size of " #a)
#define SAME_OFF(a, fa, b, fb) _Static_assert(offsetof(a, fa) == offsetof(b, fb), #a "." #fa)
#define SAME_VAL(a, b) _Static_assert((long long)(a) == (long long)(b), #a)

SAME_SIZE(tcu_result, CUresult);
SAME_SIZE(tcu_device, CUdevice);
SAME_SIZE(tcu_deviceptr, CUdeviceptr);
SAME_SIZE(tcu_mem_handle, CUmemGenericAllocationHandle);
SAME_SIZE(tcu_context, CUcontext);

SAME_SIZE(tcu_mem_location, CUmemLocation);
SAME_OFF(tcu_mem_location, type, CUmemLocation, type);
SAME_OFF(tcu_mem_location, id, CUmemLocation, id);

SAME_SIZE(tcu_mem_allocation_prop, CUmemAllocationProp);
SAME_OFF(tcu_mem_allocation_prop, type, CUmemAllocationProp, type);
SAME_OFF(tcu_mem_allocation_prop, requested_handle_types, CUmemAllocationProp,
         requestedHandleTypes);
SAME_OFF(tcu_mem_allocation_prop, location, CUmemAllocationProp, location);
SAME_OFF(tcu_mem_allocation_prop, win32_handle_meta_data, CUmemAllocationProp, win32HandleMetaData);
SAME_OFF(tcu_mem_allocation_prop, alloc_flags, CUmemAllocationProp, allocFlags);
SAME_OFF(tcu_mem_allocation_prop, alloc_flags.usage, CUmemAllocationProp, allocFlags.usage);

SAME_SIZE(tcu_mem_access_desc, CUmemAccessDesc);
SAME_OFF(tcu_mem_access_desc, location, CUmemAccessDesc, location);
SAME_OFF(tcu_mem_access_desc, flags, CUmemAccessDesc, flags);

SAME_VAL(TCU_SUCCESS, CUDA_SUCCESS);
SAME_VAL(TCU_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
SAME_VAL(TCU_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
SAME_VAL(TCU_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED);
SAME_VAL(TCU_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME_VAL(TCU_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE);
SAME_VAL(TCU_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT);
SAME_VAL(TCU_ERROR_OPERATING_SYSTEM, CUDA_ERROR_OPERATING_SYSTEM);
SAME_VAL(TCU_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_ILLEGAL_ADDRESS);
SAME_VAL(TCU_ERROR_LAUNCH_FAILED, CUDA_ERROR_LAUNCH_FAILED);
SAME_VAL(TCU_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED);
SAME_VAL(TCU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
         CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
SAME_VAL(TCU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
         CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
SAME_VAL(TCU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_ALLOCATION_TYPE_PINNED);
SAME_VAL(TCU_MEM_HANDLE_TYPE_NONE, CU_MEM_HANDLE_TYPE_NONE);
SAME_VAL(TCU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
SAME_VAL(TCU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_DEVICE);
SAME_VAL(TCU_MEM_ACCESS_FLAGS_PROT_NONE, CU_MEM_ACCESS_FLAGS_PROT_NONE);
SAME_VAL(TCU_MEM_ACCESS_FLAGS_PROT_READ, CU_MEM_ACCESS_FLAGS_PROT_READ);
SAME_VAL(TCU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
SAME_VAL(TCU_MEM_ALLOC_GRANULARITY_MINIMUM, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
SAME_VAL(TCU_MEM_ALLOC_GRANULARITY_RECOMMENDED, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);

/* The entry points whose parameters are scalars are assigned to our
 * function-pointer types under their exported names, which gcc accepts
 * only if the signatures are the same. Those that take the toolkit's
 * structures or enums cannot be compared that way (their tags differ
 * from ours); the layouts above and these sizes cover them: our enum
 * parameters are ints. */
SAME_SIZE(CUdevice_attribute, int);
SAME_SIZE(CUmemAllocationHandleType, int);
SAME_SIZE(CUmemAllocationGranularity_flags, int);
SAME_SIZE(CUresult, int);
SAME_SIZE(CUmemAccess_flags, int);

static tcu_mem_get_info_fn mem_get_info = cuMemGetInfo_v2;
static tcu_memcpy_htod_fn memcpy_htod = cuMemcpyHtoD_v2;
static tcu_memcpy_dtoh_fn memcpy_dtoh = cuMemcpyDtoH_v2;
static tcu_primary_ctx_release_fn primary_ctx_release = cuDevicePrimaryCtxRelease_v2;
static tcu_mem_address_reserve_fn mem_address_reserve = cuMemAddressReserve;
static tcu_mem_address_free_fn mem_address_free = cuMemAddressFree;
static tcu_mem_map_fn mem_map = cuMemMap;
static tcu_mem_unmap_fn mem_unmap = cuMemUnmap;
static tcu_mem_release_fn mem_release = cuMemRelease;
static tcu_init_fn init = cuInit;
static tcu_device_get_count_fn device_get_count = cuDeviceGetCount;
static tcu_driver_get_version_fn driver_get_version = cuDriverGetVersion;
static tcu_get_error_string_fn get_error_string = cuGetErrorString;
static tcu_device_get_fn device_get = cuDeviceGet;
static tcu_device_get_name_fn device_get_name = cuDeviceGetName;

int main(void)
{
    /* Referenced so the compiler checks every assignment above. */
    return !(mem_get_info && memcpy_htod && memcpy_dtoh && primary_ctx_release &&
             mem_address_reserve && mem_address_free && mem_map && mem_unmap && mem_release &&
             init && device_get_count && driver_get_version && get_error_string && device_get &&
             device_get_name);
}
