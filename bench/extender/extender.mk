# bench/extender/extender.mk - scheduler extender decision latency
# (bench/extender/run.sh).
PROGRAMS += tetris-bench-extender
tetris-bench-extender_SRCS := bench/extender/bench_extender.c
tetris-bench-extender_LIBS := -lcurl
