# tests/kube/module.mk - the Kubernetes client against the fault-injecting
# HTTP server (dropped connections, 410 mid-stream, 429 storms, slow replies).
TEST_PROGRAMS += kube-client-test
kube-client-test_SRCS := tests/kube/kube_client_test.c tests/kube/faultserver.c
kube-client-test_LIBS := -lcheck -lsubunit -lrt -lcurl
SHELL_TESTS += tests/kube/test-kube-client.sh

# The scheduler extender over HTTP, inventories served by fault servers.
TEST_PROGRAMS += extender-test
extender-test_SRCS := tests/kube/extender_test.c tests/kube/faultserver.c
extender-test_LIBS := -lcheck -lsubunit -lrt -lcurl
SHELL_TESTS += tests/kube/test-extender.sh

# The client against the real apiserver (driven by tests/k8s/).
TEST_PROGRAMS += kube-e2e
kube-e2e_SRCS := tests/kube/kube_e2e.c
kube-e2e_LIBS := -lcurl
