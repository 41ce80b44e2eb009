# tests/reclaimer/module.mk - tetris-reclaimer's tests and their driver.
TEST_PROGRAMS += tetris-ingest-probe
tetris-ingest-probe_SRCS := tests/reclaimer/ingest-probe.c
SHELL_TESTS += tests/reclaimer/test-reclaim.sh
SHELL_TESTS += tests/reclaimer/test-bad-requests.sh
SHELL_TESTS += tests/reclaimer/test-prometheus.sh
SHELL_TESTS += tests/reclaimer/test-cgroup.sh
SHELL_TESTS += tests/reclaimer/test-crash.sh
SHELL_TESTS += tests/reclaimer/test-inventory-scrub.sh
SHELL_TESTS += tests/reclaimer/test-agent.sh
SHELL_TESTS += tests/reclaimer/test-concurrent.sh
SHELL_TESTS += tests/reclaimer/test-tenants.sh
