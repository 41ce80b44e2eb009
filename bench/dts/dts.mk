# bench/dts/dts.mk - DTS vs the GLPK optimum (bench/dts/run.sh).
PROGRAMS += tetris-bench-dts
tetris-bench-dts_SRCS := bench/dts/bench_dts.c
tetris-bench-dts_LIBS := -lglpk
