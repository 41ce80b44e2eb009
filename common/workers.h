/* workers.h - how many CPUs this process may really use, and running the
 * items of one job on that many threads.
 *
 * The allowance is what the kernel will give us, not the host's core
 * count: the CPUs of our affinity mask, capped by the cgroup v2 CPU quota
 * (cpu.max of our cgroup and of every ancestor, rounded up). A daemon in a
 * pod limited to 2 CPUs on an 80-core node gets 2 workers, not 80.
 *
 * A worker_slots pool caps the helper threads of every job of a process
 * together: concurrent jobs (one per client request) share the allowance
 * instead of each starting its own set. */
#ifndef TETRIS_WORKERS_H
#define TETRIS_WORKERS_H

#include <pthread.h>
#include <stddef.h>

/* Where an allowance came from, for the log line that reports it. */
struct cpu_allowance {
    unsigned workers;  /* min(affinity, quota), at least 1 */
    unsigned affinity; /* CPUs in our sched affinity mask (0: unknown) */
    double quota_cpus; /* cgroup cpu.max quota / period, 0: no quota found */
};

/* Reads the allowance. Never fails: what cannot be read counts as no
 * limit, and the worst case is one worker. cgroup_root NULL means
 * /sys/fs/cgroup (tests pass a fake tree). */
void cpu_allowance_read(const char *cgroup_root, struct cpu_allowance *out);

/* Helper threads shared by the jobs of a process: at most limit at once. */
struct worker_slots {
    pthread_mutex_t lock;
    unsigned free;
};

void worker_slots_init(struct worker_slots *s, unsigned limit);
void worker_slots_destroy(struct worker_slots *s);

/* Calls fn(ctx, i) once for every i in [0, n), on the calling thread and
 * on up to want - 1 helper threads taken from slots (NULL: no shared cap),
 * fewer if the pool has fewer free or a thread cannot be created: the job
 * then runs on fewer threads, never fails. Items are handed out in
 * order, one at a time. Returns the number of threads that ran it. fn must
 * be safe to call concurrently. */
unsigned workers_run(size_t n, unsigned want, struct worker_slots *slots,
                     void (*fn)(void *ctx, size_t i), void *ctx);

#endif
