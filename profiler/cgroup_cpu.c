/* cgroup_cpu.c - child cpu cgroups with a CFS quota (see cgroup_cpu.h). */
#include "profiler/cgroup_cpu.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"

#define CFS_PERIOD_US 100000

struct cpu_cgroup {
    char dir[PATH_MAX];
    char procs[PATH_MAX + 16];
};

/* True when the comma-separated list has item. */
static bool list_has(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (len == n && strncmp(p, item, n) == 0)
            return true;
        p = comma != NULL ? comma + 1 : NULL;
    }
    return false;
}

/* Our cgroup path for the v1 cpu controller, or (v2 == true) the unified
 * hierarchy's when no v1 cpu controller is listed. */
static int own_cgroup(char *path, size_t len, bool *v2, tetris_error *err)
{
    cleanup_fclose FILE *f = fopen("/proc/self/cgroup", "re");
    char line[PATH_MAX + 64], unified[PATH_MAX] = "";
    bool have_unified = false;
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "open /proc/self/cgroup");
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL)
            continue;
        *c2 = '\0';
        if (list_has(c1 + 1, "cpu")) {
            snprintf(path, len, "%s", c2 + 1);
            *v2 = false;
            return 0;
        }
        if (c1[1] == '\0') {
            snprintf(unified, sizeof(unified), "%s", c2 + 1);
            have_unified = true;
        }
    }
    if (!have_unified)
        return tetris_fail(err, TETRIS_E_NOTFOUND, 0, "no cpu cgroup in /proc/self/cgroup");
    snprintf(path, len, "%s", unified);
    *v2 = true;
    return 0;
}

/* The mount point and mounted root of the hierarchy (v1 with the cpu
 * option, or cgroup2), from /proc/self/mountinfo. */
static int hierarchy_mount(bool v2, char *mnt, size_t mnt_len, char *root, size_t root_len,
                           tetris_error *err)
{
    cleanup_fclose FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "open /proc/self/mountinfo");
    while (fgets(line, sizeof(line), f) != NULL) {
        char r[PATH_MAX], m[PATH_MAX], fstype[64], super[1024];
        const char *sep = strstr(line, " - ");
        if (sep == NULL || sscanf(line, "%*s %*s %*s %4095s %4095s", r, m) != 2 ||
            sscanf(sep + 3, "%63s %*s %1023s", fstype, super) != 2)
            continue;
        if ((v2 && strcmp(fstype, "cgroup2") == 0) ||
            (!v2 && strcmp(fstype, "cgroup") == 0 && list_has(super, "cpu"))) {
            snprintf(mnt, mnt_len, "%s", m);
            snprintf(root, root_len, "%s", r);
            return 0;
        }
    }
    return tetris_fail(err, TETRIS_E_NOTFOUND, 0, "no %s cpu hierarchy mounted",
                       v2 ? "cgroup2" : "cgroup v1");
}

static int write_file(const char *path, const char *text, tetris_error *err)
{
    cleanup_close int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, errno == EACCES || errno == EROFS ? TETRIS_E_DENIED : TETRIS_E_IO,
                           errno, "open %s", path);
    ssize_t n = write(fd, text, strlen(text));
    if (n < 0 || (size_t)n != strlen(text))
        return tetris_fail(err, TETRIS_E_IO, n < 0 ? errno : EIO, "write %s", path);
    return 0;
}

int cpu_cgroup_create(const char *name, double cpus, cpu_cgroup **out, tetris_error *err)
{
    char own[PATH_MAX], mnt[PATH_MAX], root[PATH_MAX], file[PATH_MAX + 32], text[64];
    bool v2 = false;
    int r;

    if (!(cpus > 0) || strchr(name, '/') != NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "cgroup %s with %g CPUs", name, cpus);
    if ((r = own_cgroup(own, sizeof(own), &v2, err)) < 0 ||
        (r = hierarchy_mount(v2, mnt, sizeof(mnt), root, sizeof(root), err)) < 0)
        return r;
    /* Inside a cgroup namespace or a container the mount's root is a
     * subtree: our path is relative to it. */
    const char *rel = own;
    size_t root_n = strlen(root);
    if (strcmp(root, "/") != 0 && strncmp(own, root, root_n) == 0)
        rel = own + root_n;
    cpu_cgroup *cg = calloc(1, sizeof(*cg));
    if (cg == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    int n = snprintf(cg->dir, sizeof(cg->dir), "%s%s%s/%s", mnt, rel[0] == '/' ? "" : "/",
                     strcmp(rel, "/") == 0 ? "" : rel, name);
    if (n < 0 || (size_t)n >= sizeof(cg->dir)) {
        free(cg);
        return tetris_fail(err, TETRIS_E_INVAL, 0, "cgroup path too long");
    }
    snprintf(cg->procs, sizeof(cg->procs), "%s/cgroup.procs", cg->dir);
    if (mkdir(cg->dir, 0755) < 0 && errno != EEXIST) {
        r = tetris_fail(err, errno == EACCES || errno == EROFS ? TETRIS_E_DENIED : TETRIS_E_IO,
                        errno, "mkdir %s", cg->dir);
        free(cg);
        return r;
    }
    long quota = (long)(cpus * CFS_PERIOD_US + 0.5);
    if (v2) {
        snprintf(file, sizeof(file), "%s/cpu.max", cg->dir);
        snprintf(text, sizeof(text), "%ld %d", quota, CFS_PERIOD_US);
        r = write_file(file, text, err);
    } else {
        snprintf(file, sizeof(file), "%s/cpu.cfs_period_us", cg->dir);
        snprintf(text, sizeof(text), "%d", CFS_PERIOD_US);
        r = write_file(file, text, err);
        if (r == 0) {
            snprintf(file, sizeof(file), "%s/cpu.cfs_quota_us", cg->dir);
            snprintf(text, sizeof(text), "%ld", quota);
            r = write_file(file, text, err);
        }
    }
    if (r < 0) {
        cpu_cgroup_remove(cg);
        return r;
    }
    *out = cg;
    return 0;
}

const char *cpu_cgroup_procs_file(const cpu_cgroup *cg)
{
    return cg->procs;
}

const char *cpu_cgroup_path(const cpu_cgroup *cg)
{
    return cg->dir;
}

void cpu_cgroup_remove(cpu_cgroup *cg)
{
    if (cg == NULL)
        return;
    /* The last process may still be leaving: retry briefly. */
    for (int i = 0; i < 50 && rmdir(cg->dir) < 0 && errno == EBUSY; i++)
        usleep(20000);
    free(cg);
}
