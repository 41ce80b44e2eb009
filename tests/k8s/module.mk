# tests/k8s/module.mk - end-to-end tests on the local Kubernetes cluster
# (scripts/cluster-up.sh). They start the cluster when it is not running and
# leave it up for the next test; `make cluster-down` stops it.
SHELL_TESTS += tests/k8s/test-cluster-smoke.sh
