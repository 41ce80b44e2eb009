# tests/helm/module.mk - the Helm chart (charts/tetris): lint, rendering,
# server-side validation and an install on the local cluster.
SHELL_TESTS += tests/helm/test-render.sh
SHELL_TESTS += tests/helm/test-install.sh
