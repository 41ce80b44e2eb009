# tests/k8s/extender.mk - end-to-end tests of the Kubernetes client, the scheduler
# extender and tetris-node-pins on the local cluster (tests/k8s/lib.sh).
SHELL_TESTS += tests/k8s/test-extender-kubeclient.sh
SHELL_TESTS += tests/k8s/test-extender-placement.sh
SHELL_TESTS += tests/k8s/test-extender-pins.sh
