# bench/synth.mk - the synthetic-model generator and the benchmark tests.
PROGRAMS += tetris-synth-model
tetris-synth-model_SRCS := bench/tetris-synth-model.c
PROGRAMS += tetris-bench-map
tetris-bench-map_SRCS := bench/tetris-bench-map.c
