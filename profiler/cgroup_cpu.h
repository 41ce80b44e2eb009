/* cgroup_cpu.h - a CPU limit for a child process: a cgroup created under
 * the caller's own cpu cgroup (cgroup v1 `cpu` controller: cfs quota and
 * period; cgroup v2: cpu.max) that the child joins before it execs. */
#ifndef TETRIS_CGROUP_CPU_H
#define TETRIS_CGROUP_CPU_H

#include <sys/types.h>

#include "common/error.h"

typedef struct cpu_cgroup cpu_cgroup;

/* Creates <own cpu cgroup>/<name> limited to cpus CPUs (quota = cpus x
 * period). -TETRIS_E_NOTFOUND without a cpu controller, -TETRIS_E_DENIED /
 * -TETRIS_E_IO when the hierarchy cannot be written. */
int cpu_cgroup_create(const char *name, double cpus, cpu_cgroup **out, tetris_error *err);

/* The file a process writes its pid into to join (async-signal-safe to use
 * between fork and exec). */
const char *cpu_cgroup_procs_file(const cpu_cgroup *cg);

/* Where it lives, for messages. */
const char *cpu_cgroup_path(const cpu_cgroup *cg);

/* Removes the cgroup (its processes must have exited) and frees. */
void cpu_cgroup_remove(cpu_cgroup *cg);

#endif
