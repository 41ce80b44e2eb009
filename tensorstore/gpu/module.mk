# tensorstore/gpu/module.mk - GPU device memory shared between processes
# (CUDA VMM allocations exported as file descriptors), the CUDA driver
# loaded at run time; its unit test runs against the fake driver of
# tests/gpu/.
LIB_SRCS += tensorstore/gpu/gpu.c
UNIT_TESTS += tests/gpu/test_gpu.c
