# tests/module.mk - tests that belong to no single module, and the fake
# apiserver several modules' tests share: the command-line
# conventions every program follows, the paper-scale model exporter
# (scripts/models/), the benchmark tooling, the Helm chart
# and the end-to-end tests on the local Kubernetes cluster
# (scripts/cluster-up.sh; the first test that needs the cluster starts it
# and leaves it up for the next; `make cluster-down` stops it). Each
# module's own tests are listed by its module.mk and live in
# tests/<module>/ (docs/TESTING.md, "Where the tests are").
# The read-only fake apiserver the shell tests of tetris-node-pins, the
# webhook and the daemons' run loop read namespaces, pods and ConfigMaps
# from: the fault server with objects behind its queue.
TEST_PROGRAMS += tetris-test-fake-apiserver
tetris-test-fake-apiserver_SRCS := tests/lib/fake_apiserver.c tests/lib/faultserver.c \
                                   tests/lib/unit.c
tetris-test-fake-apiserver_LIBS := -lcheck -lsubunit -lrt
SHELL_TESTS += tests/bench/test-synth-model.sh tests/bench/test-bench-map.sh \
               tests/bench/test-eval.sh tests/bench/test-eval-decisions.sh \
               tests/bench/test-bench-ort-format.sh
SHELL_TESTS += tests/models/test-paper-models-cli.sh
SLOW_TESTS += tests/models/test-paper-models-share.sh tests/models/test-paper-models-derived.sh
SHELL_TESTS += tests/cli/test-help-version.sh tests/cli/test-lint.sh
SHELL_TESTS += tests/helm/test-render.sh tests/helm/test-privilege.sh
E2E_TESTS += tests/helm/test-dry-run.sh tests/helm/test-install.sh
E2E_TESTS += tests/k8s/test-extender-kubeclient.sh tests/k8s/test-extender-placement.sh \
             tests/k8s/test-extender-pins.sh tests/k8s/test-cluster-smoke.sh \
             tests/k8s/test-autoscaler-placement.sh tests/k8s/test-openfaas.sh \
             tests/k8s/test-eval-validate.sh tests/k8s/test-openfaas-docs.sh \
             tests/k8s/test-openfaas-models.sh tests/k8s/test-openfaas-registry.sh \
             tests/k8s/test-openfaas-csi.sh
E2E_SAN_TESTS += tests/k8s/test-extender-kubeclient.sh tests/k8s/test-cluster-smoke.sh
