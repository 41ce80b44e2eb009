# tensorstore/ - the node's tensor store (libtetris core).
LIB_SRCS += tensorstore/digest.c
UNIT_TESTS += tests/unit/test_digest.c
