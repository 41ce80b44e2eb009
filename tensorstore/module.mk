# tensorstore/ - the node's tensor store (libtetris core).
LIB_SRCS += tensorstore/digest.c tensorstore/layout.c tensorstore/store.c tensorstore/map.c \
            tensorstore/publish.c tensorstore/holders.c tensorstore/maintenance.c
UNIT_TESTS += tests/unit/test_digest.c tests/unit/test_store.c
