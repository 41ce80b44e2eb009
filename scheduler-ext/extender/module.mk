# scheduler-ext/extender/module.mk - tetris-scheduler-ext, the kube-scheduler
# extender that filters and scores nodes by tensor similarity, and its tests.
# Its parts live in libtetris so the benchmark and the tests reuse them.
LIB_SRCS += scheduler-ext/extender/tensor_ids.c scheduler-ext/extender/id_set.c \
            scheduler-ext/extender/similarity.c \
            scheduler-ext/extender/manifests.c scheduler-ext/extender/inventory.c \
            scheduler-ext/extender/ext_request.c scheduler-ext/extender/extender.c

PROGRAMS += tetris-scheduler-ext
tetris-scheduler-ext_SRCS := scheduler-ext/extender/tetris-scheduler-ext.c
tetris-scheduler-ext_LIBS := -lmicrohttpd -lcurl

UNIT_TESTS += tests/extender/test_id_set.c

# The extender over HTTP, inventories served by fault servers.
TEST_PROGRAMS += extender-test
extender-test_SRCS := tests/extender/extender_test.c tests/lib/faultserver.c tests/lib/unit.c
extender-test_LIBS := -lcheck -lsubunit -lrt -lcurl
SHELL_TESTS += tests/extender/test-extender.sh tests/extender/test-extender-registry.sh
