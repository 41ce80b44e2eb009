# reclaimer/csi/module.mk - tetris-csi, the CSI node plugin beside the node
# daemon: a pod's model view as an inline ephemeral volume (volumes.h), and
# its tests: the plugin driven over gRPC by a test client, and csi-sanity.
PROGRAMS += tetris-csi
tetris-csi_SRCS := reclaimer/csi/tetris-csi.c reclaimer/csi/volumes.c
# The tenant map is in the library so that its unit test and its fuzzer
# reach it.
LIB_SRCS += reclaimer/csi/tenant_map.c
UNIT_TESTS += tests/csi/test_tenant_map.c

# The kubelet's side of gRPC, for the tests: nghttp2 as a client.
TEST_PROGRAMS += tetris-test-csi-client
tetris-test-csi-client_SRCS := tests/csi/csi_client.c tests/lib/grpc_client.c

# Root: real bind mounts beneath a pods directory of its own.
SHELL_TESTS += tests/csi/test-csi.sh
# Root: tenants chosen from the pods' identities, one volume per tenant.
SHELL_TESTS += tests/csi/test-csi-tenants.sh
# Root: volumes of models named by registry reference, pulled by the
# daemon from a real docker-registry (and hostile ones) on loopback.
SHELL_TESTS += tests/csi/test-csi-registry.sh
# Root: volumes read by the Node.js, Python and C readers as pods read
# them (node and onnxruntime-node, numpy).
SHELL_TESTS += tests/csi/test-csi-langs.sh
# Root: volumes that carry the store's derived form, read by tetris-function.
SHELL_TESTS += tests/csi/test-csi-derived.sh
# The real kubelet of the local cluster: registration, pods through the
# webhook, tenants, restarts, unpublish.
E2E_TESTS += tests/k8s/test-csi-k8s.sh
E2E_SAN_TESTS += tests/k8s/test-csi-k8s.sh
# The chart's DaemonSet with tetris-csi in it, on the same kubelet.
E2E_TESTS += tests/helm/test-install-csi.sh
# The community's conformance suite, built once from its source tarball
# with Go (minutes the first time; skipped without the tarball).
SLOW_TESTS += tests/csi/test-csi-sanity.sh
