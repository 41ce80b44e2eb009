# scheduler-ext/module.mk - the Kubernetes client (common/kube*.c), the
# tensor-similarity scheduler extender and its tests. The DTS autoscaler has
# its own fragment (autoscaler.mk).
LIB_SRCS += common/kube.c common/kubeconfig.c
UNIT_TESTS += tests/unit/test_kubeconfig.c
