# function/module.mk - tetris-function, the OpenFaaS-compatible inference
# function (batching queue, workers, request metrics), and its tests.
PROGRAMS += tetris-function
tetris-function_SRCS := function/tetris-function.c function/batcher.c function/fn_metrics.c
tetris-function_LIBS := -lonnxruntime -lmicrohttpd

SHELL_TESTS += $(sort $(wildcard tests/function/test-*.sh))
# As a pod on the local cluster.
E2E_TESTS += $(wildcard tests/function/test-k8s-*.sh)
