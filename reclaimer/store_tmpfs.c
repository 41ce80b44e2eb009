/* store_tmpfs.c - puts the store root on a tmpfs of the daemon's own: the
 * rule and its reasons are in store_tmpfs.h. */
#include "reclaimer/store_tmpfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"

#define HUGE_OPTION "huge=within_size"

int store_tmpfs_parse_mode(const char *text, enum store_tmpfs_mode *mode, tetris_error *err)
{
    if (strcmp(text, "huge") == 0)
        *mode = STORE_TMPFS_HUGE;
    else if (strcmp(text, "plain") == 0)
        *mode = STORE_TMPFS_PLAIN;
    else if (strcmp(text, "none") == 0)
        *mode = STORE_TMPFS_NONE;
    else
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: want huge, plain or none", text);
    return 0;
}

const char *store_tmpfs_state_name(enum store_tmpfs_state state)
{
    switch (state) {
    case STORE_TMPFS_MOUNTED: return "mounted";
    case STORE_TMPFS_REUSED: return "reused";
    case STORE_TMPFS_AS_IS: return "as-is";
    case STORE_TMPFS_FALLBACK: return "fallback";
    }
    return "unknown";
}

int store_tmpfs_enter_namespace(const char *path, tetris_error *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "cannot open mount namespace %s", path);
    if (setns(fd, CLONE_NEWNS) < 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno, "cannot enter mount namespace %s", path);
    return 0;
}

/* mkdir -p with mode 0755 for what it creates. */
static int make_dirs(const char *dir, tetris_error *err)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "store path too long");
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
            return tetris_fail(err, TETRIS_E_IO, errno, "cannot create %s", path);
        *p = c;
        if (c == '\0')
            return 0;
    }
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s)
{
    char *w = s;
    for (char *r = s; *r != '\0'; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

struct mount_facts {
    bool own_tmpfs; /* PATH is the root of a whole tmpfs */
    bool tmpfs;     /* PATH lies on a tmpfs */
    char huge[32];  /* that tmpfs's huge= option, "never" when absent */
};

static bool mount_covers(const char *point, const char *path)
{
    size_t n = strlen(point);
    if (strcmp(point, "/") == 0)
        return true;
    return strncmp(point, path, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* The mount PATH lies on: the longest mount point covering it, the last
 * one listed when mounts are stacked. A bind of a tmpfs's subdirectory (a
 * container's view of /dev/shm/tetris) is on tmpfs but not a tmpfs of its
 * own. */
static int find_mount(const char *path, struct mount_facts *facts, tetris_error *err)
{
    cleanup_fclose FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "cannot read /proc/self/mountinfo");
    cleanup_free char *line = NULL;
    size_t cap = 0, best = 0;
    memset(facts, 0, sizeof(*facts));
    while (getline(&line, &cap, f) > 0) {
        char root[PATH_MAX], point[PATH_MAX], fstype[64], super[1024];
        /* id parent major:minor root mount-point options [tags...] - type source super */
        if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, point) != 2)
            continue;
        const char *sep = strstr(line, " - ");
        if (sep == NULL || sscanf(sep, " - %63s %*s %1023s", fstype, super) != 2)
            continue;
        unescape_octal(root);
        unescape_octal(point);
        if (!mount_covers(point, path) || strlen(point) < best)
            continue;
        best = strlen(point);
        facts->tmpfs = strcmp(fstype, "tmpfs") == 0;
        facts->own_tmpfs = facts->tmpfs && strcmp(point, path) == 0 && strcmp(root, "/") == 0;
        snprintf(facts->huge, sizeof(facts->huge), "never");
        for (char *opt = strtok(super, ","); opt != NULL; opt = strtok(NULL, ","))
            if (strncmp(opt, "huge=", 5) == 0)
                snprintf(facts->huge, sizeof(facts->huge), "%s", opt + 5);
    }
    return 0;
}

static int dir_is_empty(const char *dir, bool *empty, tetris_error *err)
{
    cleanup_closedir DIR *d = opendir(dir);
    if (d == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "cannot read %s", dir);
    *empty = true;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            *empty = false;
    return 0;
}

/* Step 4 of the rule: huge pages first, then 4 KiB pages if the kernel
 * refuses the option. Fills out; never fails. */
static void mount_own_tmpfs(const char *path, enum store_tmpfs_mode mode,
                            struct store_tmpfs_outcome *out)
{
    const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
    out->state = STORE_TMPFS_MOUNTED;
    if (mode == STORE_TMPFS_HUGE) {
        if (mount("tetris-store", path, "tmpfs", flags, "mode=0755," HUGE_OPTION) == 0)
            return;
        if (errno != EINVAL) {
            out->state = STORE_TMPFS_FALLBACK;
            snprintf(out->reason, sizeof(out->reason), "mount tmpfs: %s", strerror(errno));
            return;
        }
        snprintf(out->reason, sizeof(out->reason),
                 "the kernel refused " HUGE_OPTION " (no transparent huge pages for tmpfs): "
                 "4 KiB pages");
    }
    if (mount("tetris-store", path, "tmpfs", flags, "mode=0755") < 0) {
        out->state = STORE_TMPFS_FALLBACK;
        snprintf(out->reason, sizeof(out->reason), "mount tmpfs: %s", strerror(errno));
    }
}

int store_tmpfs_prepare(const char *dir, enum store_tmpfs_mode mode,
                        struct store_tmpfs_outcome *out, tetris_error *err)
{
    memset(out, 0, sizeof(*out));
    int rc = make_dirs(dir, err);
    if (rc < 0)
        return rc;
    char path[PATH_MAX];
    if (realpath(dir, path) == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "cannot resolve %s", dir);
    struct mount_facts facts;
    if ((rc = find_mount(path, &facts, err)) < 0)
        return rc;

    if (facts.own_tmpfs) {
        out->state = STORE_TMPFS_REUSED;
    } else if (mode == STORE_TMPFS_NONE) {
        out->state = STORE_TMPFS_AS_IS;
    } else {
        bool empty = false;
        if ((rc = dir_is_empty(path, &empty, err)) < 0)
            return rc;
        if (!empty) {
            out->state = STORE_TMPFS_FALLBACK;
            snprintf(out->reason, sizeof(out->reason),
                     "the directory holds files and is not a tmpfs of its own: a mount "
                     "would hide them");
        } else {
            mount_own_tmpfs(path, mode, out);
        }
    }

    /* What the store ends up on: only a mount made here changed it. */
    if (out->state == STORE_TMPFS_MOUNTED && (rc = find_mount(path, &facts, err)) < 0)
        return rc;
    out->on_tmpfs = facts.tmpfs;
    if (facts.tmpfs)
        snprintf(out->huge, sizeof(out->huge), "%s", facts.huge);
    return 0;
}
