# bench/formats/formats.mk - cost of indexing models (bench/formats/run.sh).
PROGRAMS += tetris-bench-formats
tetris-bench-formats_SRCS := bench/formats/bench_formats.c
