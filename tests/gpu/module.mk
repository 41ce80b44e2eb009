# tests/gpu/module.mk - the GPU sharing tests: a fake libcuda.so.1 (built
# with everything, loaded through $TETRIS_LIBCUDA by the tests), the
# importer the end-to-end tests drive, and the check of our CUDA ABI
# header against the toolkit's where one is installed.
FAKE_LIBCUDA := $(BUILD)/fakecuda/libcuda.so.1
all: $(FAKE_LIBCUDA)
# No sanitizer: it is loaded into sanitized and plain programs alike.
$(FAKE_LIBCUDA): tests/gpu/fake_libcuda.c tensorstore/gpu/cuda_abi.h | .deps/.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -std=c11 -O1 -g -Wall -Wextra -Werror -Wmissing-prototypes -fPIC -shared \
	    -pthread -o $@ $< -lm

SHELL_TESTS += tests/gpu/test-abi.sh
TEST_PROGRAMS += tetris-test-gpu-importer
tetris-test-gpu-importer_SRCS := tests/gpu/gpu_importer.c
tetris-test-gpu-importer_LIBS := -lonnxruntime
SHELL_TESTS += tests/gpu/test-gpu-share.sh
SHELL_TESTS += tests/gpu/test-gpu-lifecycle.sh
# The checks of docs/GPU.md's design: on a real GPU (unvalidated on
# hardware so far; skipped, 77, without a driver), and on the fake
# driver, whose kernels run on the host (the program's own logic).
TEST_PROGRAMS += tetris-gpu-check
tetris-gpu-check_SRCS := tests/gpu/gpu_check.c
SHELL_TESTS += tests/gpu/test-gpu-check.sh tests/gpu/test-gpu-check-fake.sh
# The hardware run (docs/GPU.md "Validated on hardware"), on the fake.
SHELL_TESTS += tests/gpu/test-run-on-device-fake.sh
