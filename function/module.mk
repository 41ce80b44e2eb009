# function/module.mk - tetris-function, the OpenFaaS-compatible inference
# function (batching queue, workers, request metrics, the Open Inference
# Protocol API), and its tests. The protocol's decoder and encoder are pure
# and go into the library, so that the unit tests and the fuzzer link them.
LIB_SRCS += function/oip_request.c function/oip_response.c
UNIT_TESTS += tests/function/test_oip.c
PROGRAMS += tetris-function
tetris-function_SRCS := function/tetris-function.c function/oip_api.c function/batcher.c \
                        function/oip_ort.c function/fn_metrics.c function/fn_replies.c \
                        function/fn_view.c function/fn_upgrade.c
tetris-function_LIBS := -lonnxruntime -lmicrohttpd

SHELL_TESTS += $(sort $(wildcard tests/function/test-*.sh))
# As a pod on the local cluster.
E2E_TESTS += $(wildcard tests/function/test-k8s-*.sh)
# Identity models of every protocol datatype, for the tests.
TEST_PROGRAMS += tetris-test-oip-model
tetris-test-oip-model_SRCS := tests/function/gen_oip_model.c
