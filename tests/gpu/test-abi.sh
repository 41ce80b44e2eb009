#!/bin/sh
# test-abi.sh - tensorstore/gpu/cuda_abi.h against the CUDA toolkit's
# cuda.h: tests/gpu/abi_check.c compiles only if sizes, offsets, enum
# values and the entry points' signatures agree. Skipped (77) where no
# toolkit is installed ($CUDA_HOME, default /usr/local/cuda).
set -eu
. "$(dirname "$0")/../lib/common.sh"

cuda=${CUDA_HOME:-/usr/local/cuda}
[ -f "$cuda/include/cuda.h" ] || skip "no CUDA toolkit header at $cuda/include/cuda.h"
# Only the header is used: nothing is linked against the toolkit.
${CC:-cc} -std=c11 -Wall -Wextra -Werror -Wincompatible-pointer-types -fsyntax-only \
    -I"$ROOT" -I"$cuda/include" "$ROOT/tests/gpu/abi_check.c" >"$WORK/cc.log" 2>&1 ||
    fail "our CUDA ABI header disagrees with $cuda/include/cuda.h (see cc.log)"
note "cuda_abi.h agrees with $cuda/include/cuda.h"
