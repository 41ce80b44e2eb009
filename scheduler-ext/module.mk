# scheduler-ext/module.mk - the Kubernetes client (common/kube*.c), the
# tensor-similarity scheduler extender and its tests. The DTS autoscaler has
# its own fragment (autoscaler.mk).
LIB_SRCS += common/kube.c common/kubeconfig.c
UNIT_TESTS += tests/unit/test_kubeconfig.c

# The extender's parts live in libtetris so the benchmark and tests reuse them.
LIB_SRCS += scheduler-ext/strmap.c scheduler-ext/tensor_ids.c scheduler-ext/similarity.c \
            scheduler-ext/manifests.c scheduler-ext/inventory.c scheduler-ext/extender.c \
            scheduler-ext/node_pods.c

PROGRAMS += tetris-scheduler-ext
tetris-scheduler-ext_SRCS := scheduler-ext/extender_main.c
tetris-scheduler-ext_LIBS := -lmicrohttpd -lcurl

# Keeps tetris-reclaimer's --pin-file in step with the pods on its node.
PROGRAMS += tetris-node-pins
tetris-node-pins_SRCS := scheduler-ext/node_pins_main.c
tetris-node-pins_LIBS := -lcurl
