# protocol/module.mk - the contracts between tetris's components, one
# module each (spec comment, encoder, decoder, used by both sides): the
# model profile the profiler writes and the autoscaler reads.
LIB_SRCS += protocol/profile.c
UNIT_TESTS += tests/unit/test_profile.c
