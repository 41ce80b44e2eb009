# tests/bench/module.mk - functional tests of the benchmark tooling.
SHELL_TESTS += tests/bench/test-synth-model.sh tests/bench/test-bench-map.sh
