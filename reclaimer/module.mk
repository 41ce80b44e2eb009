# reclaimer/module.mk - the node daemon tetris-reclaimer and its tests.
# (tetris-node-pins, its sidecar, is the sub-module reclaimer/node-pins/.)
PROGRAMS += tetris-reclaimer
tetris-reclaimer_LIBS := -lcurl
tetris-reclaimer_SRCS := reclaimer/tetris-reclaimer.c reclaimer/stores.c reclaimer/served.c \
                         reclaimer/adopt.c reclaimer/reclaim.c \
                         reclaimer/ingest_server.c reclaimer/http_api.c \
                         reclaimer/gpu_pool.c reclaimer/peers.c reclaimer/derive.c \
                         reclaimer/starts.c reclaimer/pull.c
# The daemon's settings, tensor index and reclaim rule are in the library
# so the unit tests (and the cluster evaluation, for the rule) can reach
# them.
LIB_SRCS += reclaimer/config.c reclaimer/tensor_index.c reclaimer/store_tmpfs.c reclaimer/pin_file.c \
            reclaimer/reclaim_policy.c reclaimer/registry_allow.c
UNIT_TESTS += tests/reclaimer/test_reclaimer_units.c tests/reclaimer/test_pin_file.c

# A hostile registry for the pull tests (wrong bytes, truncation, size,
# redirects, error statuses, basic and token auth), on the shared fault
# server.
TEST_PROGRAMS += tetris-test-fault-registry
tetris-test-fault-registry_SRCS := tests/reclaimer/fault_registry.c tests/lib/faultserver.c \
                                   tests/lib/unit.c
tetris-test-fault-registry_LIBS := -lcheck -lsubunit -lrt
TEST_PROGRAMS += tetris-ingest-probe
tetris-ingest-probe_SRCS := tests/reclaimer/ingest-probe.c
SHELL_TESTS += tests/reclaimer/test-reclaim.sh
SHELL_TESTS += tests/reclaimer/test-bad-requests.sh
SHELL_TESTS += tests/reclaimer/test-prometheus.sh
SHELL_TESTS += tests/reclaimer/test-dashboard.sh
SHELL_TESTS += tests/reclaimer/test-inventory-scrub.sh
SHELL_TESTS += tests/reclaimer/test-agent.sh
SHELL_TESTS += tests/reclaimer/test-concurrent.sh
SHELL_TESTS += tests/reclaimer/test-tenants.sh
SHELL_TESTS += tests/reclaimer/test-tenant-isolation.sh
SHELL_TESTS += tests/reclaimer/test-health-restart.sh
SHELL_TESTS += tests/reclaimer/test-hostile-locks.sh tests/reclaimer/test-hostile-links.sh
# A hostile pod (uid nobody) against the daemon's budgets and limits.
SHELL_TESTS += tests/reclaimer/test-budgets.sh
# Tenants who cannot take from each other (pods as uids of their own):
# forged and refused claims, connection shares, parsing memory, the shared
# store's quota, references and fallback reports.
SHELL_TESTS += tests/reclaimer/test-conn-shares.sh \
               tests/reclaimer/test-claims.sh \
               tests/reclaimer/test-parse-memory.sh \
               tests/reclaimer/test-shared-store.sh
SHELL_TESTS += tests/reclaimer/test-workers.sh
# Models pulled from a registry: a real one (anonymous; with basic auth
# and TLS), and a hostile, flaky or token-locked one.
SHELL_TESTS += tests/reclaimer/test-pull.sh tests/reclaimer/test-pull-faults.sh \
               tests/reclaimer/test-pull-auth.sh tests/reclaimer/test-pull-retries.sh
# Root: the store on a tmpfs of its own (huge=within_size), reused, refused;
# a kernel without huge tmpfs pages played by an LD_PRELOAD library.
SHELL_TESTS += tests/reclaimer/test-store-tmpfs.sh
NO_HUGE_TMPFS := $(BUILD)/preload/no-huge-tmpfs.so
all: $(NO_HUGE_TMPFS)
# No sanitizer: it is preloaded into sanitized and plain programs alike.
$(NO_HUGE_TMPFS): tests/reclaimer/no_huge_tmpfs.c | .deps/.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -std=c11 -O1 -g -Wall -Wextra -Werror -Wmissing-prototypes -fPIC -shared \
	    -o $@ $< -ldl
# Real memory cgroups and a 256 MiB model; 25 daemon crashes mid-ingest.
SLOW_TESTS += tests/reclaimer/test-cgroup.sh tests/reclaimer/test-crash.sh
# Root: tmpfs mounts of its own, filled up; huge=never and within_size.
SLOW_TESTS += tests/reclaimer/test-degrade.sh
