# profiler/module.mk - tetris-profiler (model index, latency profiles over
# <c, b, p> on real tetris-function processes, the profiling Job, open-loop
# load for benchmarks) and its tests.
PROGRAMS += tetris-profiler
tetris-profiler_SRCS := profiler/tetris-profiler.c profiler/profile_run.c profiler/fn_process.c \
                        profiler/loadgen.c profiler/procmem.c profiler/cgroup_cpu.c profiler/job.c
tetris-profiler_LIBS := -lcurl

SHELL_TESTS += $(sort $(wildcard tests/profiler/test-*.sh))
# The profiling Job on the local cluster.
E2E_TESTS += $(wildcard tests/profiler/test-k8s-*.sh)
