/* workers.c - CPU allowance (affinity, cgroup v2 cpu.max) and a job's
 * items on a bounded number of threads (see workers.h). */
#include "common/workers.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"

/* Stack of a helper: the publish path keeps its chunk buffer on the heap. */
#define WORKER_STACK_BYTES (256u * 1024u)

static unsigned affinity_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return 0;
    int n = CPU_COUNT(&set);
    return n > 0 ? (unsigned)n : 0;
}

/* Our cgroup v2 path ("0::/a/b" in /proc/self/cgroup), or false. */
static bool own_cgroup(char *out, size_t len)
{
    cleanup_fclose FILE *f = fopen("/proc/self/cgroup", "re");
    if (f == NULL)
        return false;
    char line[PATH_MAX + 16];
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "0::", 3) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        size_t n = strlen(line + 3);
        if (n >= len)
            return false;
        memcpy(out, line + 3, n + 1);
        return true;
    }
    return false;
}

/* quota / period of one cpu.max ("max 100000" or "200000 100000"); 0 when
 * there is none or the file cannot be read. */
static double cpu_max_of(const char *root, const char *cg)
{
    char path[PATH_MAX * 2];
    snprintf(path, sizeof(path), "%s%s/cpu.max", root, cg);
    cleanup_fclose FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    char quota[32];
    unsigned long long period = 0;
    if (fscanf(f, "%31s %llu", quota, &period) != 2 || period == 0 || strcmp(quota, "max") == 0)
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long q = strtoull(quota, &end, 10);
    if (errno != 0 || end == quota || *end != '\0' || q == 0)
        return 0;
    return (double)q / (double)period;
}

void cpu_allowance_read(const char *cgroup_root, struct cpu_allowance *out)
{
    *out = (struct cpu_allowance){.affinity = affinity_cpus()};
    char cg[PATH_MAX];
    if (own_cgroup(cg, sizeof(cg))) {
        const char *root = cgroup_root != NULL ? cgroup_root : "/sys/fs/cgroup";
        /* The tightest quota on the way to the root is the one enforced. */
        for (;;) {
            double q = cpu_max_of(root, strcmp(cg, "/") == 0 ? "" : cg);
            if (q > 0 && (out->quota_cpus == 0 || q < out->quota_cpus))
                out->quota_cpus = q;
            char *slash = strrchr(cg, '/');
            if (slash == NULL || slash == cg)
                break;
            *slash = '\0';
        }
    }
    unsigned n = out->affinity > 0 ? out->affinity : 1;
    if (out->quota_cpus > 0 && ceil(out->quota_cpus) < (double)n)
        n = (unsigned)ceil(out->quota_cpus);
    out->workers = n > 0 ? n : 1;
}

void worker_slots_init(struct worker_slots *s, unsigned limit)
{
    pthread_mutex_init(&s->lock, NULL);
    s->free = limit;
}

void worker_slots_destroy(struct worker_slots *s)
{
    pthread_mutex_destroy(&s->lock);
}

static unsigned slots_take(struct worker_slots *s, unsigned want)
{
    if (s == NULL)
        return want;
    pthread_mutex_lock(&s->lock);
    unsigned got = want < s->free ? want : s->free;
    s->free -= got;
    pthread_mutex_unlock(&s->lock);
    return got;
}

static void slots_give(struct worker_slots *s, unsigned n)
{
    if (s == NULL || n == 0)
        return;
    pthread_mutex_lock(&s->lock);
    s->free += n;
    pthread_mutex_unlock(&s->lock);
}

struct job {
    size_t n;
    atomic_size_t next;
    void (*fn)(void *ctx, size_t i);
    void *ctx;
};

static void *job_main(void *arg)
{
    struct job *j = arg;
    for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n;)
        j->fn(j->ctx, i);
    return NULL;
}

unsigned workers_run(size_t n, unsigned want, struct worker_slots *slots,
                     void (*fn)(void *ctx, size_t i), void *ctx)
{
    struct job j = {.n = n, .fn = fn, .ctx = ctx};
    atomic_init(&j.next, 0);
    unsigned helpers = want > 1 && n > 1 ? want - 1 : 0;
    if (helpers > n - 1 && n > 0)
        helpers = (unsigned)(n - 1);
    helpers = helpers > 0 ? slots_take(slots, helpers) : 0;
    pthread_t tid[helpers > 0 ? helpers : 1];
    unsigned started = 0;
    if (helpers > 0) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, WORKER_STACK_BYTES);
        while (started < helpers && pthread_create(&tid[started], &attr, job_main, &j) == 0)
            started++;
        pthread_attr_destroy(&attr);
        slots_give(slots, helpers - started); /* not created: no longer ours */
    }
    job_main(&j);
    for (unsigned k = 0; k < started; k++)
        pthread_join(tid[k], NULL);
    slots_give(slots, started);
    return started + 1;
}
