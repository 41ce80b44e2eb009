# tensorstore/ - the node's tensor store (libtetris core).
LIB_SRCS += tensorstore/crc32.c tensorstore/digest.c tensorstore/layout.c tensorstore/store.c tensorstore/map.c \
            tensorstore/publish.c tensorstore/holders.c tensorstore/maintenance.c
UNIT_TESTS += tests/tensorstore/test_digest.c tests/tensorstore/test_store.c

# Multi-process and crash tests: a helper that drives the store from many
# processes, and the shell tests that run it (stress runs of 32 processes,
# 300 loaders killed mid-ingest: the slow tier).
TEST_PROGRAMS += tetris-store-stress
tetris-store-stress_SRCS := tests/tensorstore/store_stress.c
SLOW_TESTS += tests/tensorstore/test-concurrent.sh tests/tensorstore/test-crash.sh
