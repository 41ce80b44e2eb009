/* unprivileged.c - dropping root for good before parsing what a pod sent
 * (see unprivileged.h).
 *
 * Order matters: the bounding set needs CAP_SETPCAP and the groups
 * CAP_SETGID, so both go first; the gid before the uid, which takes the
 * rest with it (a root process that sets all its uids to another loses
 * its permitted and effective capabilities, unless it asked to keep
 * them: PR_SET_KEEPCAPS is cleared here first). The inheritable set
 * survives a change of uid, so it is cleared by capset afterwards. A
 * change of credentials clears the parent-death signal and makes the
 * process non-dumpable (no ptrace or /proc access by the new uid's other
 * processes); the signal is armed again here. */
#include "agent/unprivileged.h"

#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"

/* The highest capability number a kernel may know: PR_CAPBSET_DROP says
 * EINVAL past the running kernel's last one. */
#define CAP_NUMBER_MAX 63

/* Empties the bounding set; 0 when that takes CAP_SETPCAP the process
 * lacks (a container given only what the drop needs): with no new
 * privileges, what is left in it can never be gained again. */
static int drop_bounding_set(bool *dropped, tetris_error *err)
{
    *dropped = false;
    if (prctl(PR_CAPBSET_READ, CAP_SETPCAP, 0, 0, 0) != 1)
        return 0;
    for (int cap = 0; cap <= CAP_NUMBER_MAX; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
            continue;
        if (errno == EINVAL && cap > 0)
            break; /* past the kernel's last capability */
        return tetris_fail(err, TETRIS_E_DENIED, errno, "drop capability %d from the bounding set",
                           cap);
    }
    *dropped = true;
    return 0;
}

static int clear_capabilities(tetris_error *err)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capset, &hdr, data) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno, "clear the capability sets");
    return 0;
}

int unprivileged_become(uid_t uid, gid_t gid, tetris_error *err)
{
    pid_t parent = getppid();
    if (uid == 0 || gid == 0)
        return tetris_fail(err, TETRIS_E_DENIED, 0, "uid and gid must not be 0");
    if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno, "PR_SET_KEEPCAPS");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno, "clear the ambient capabilities");
    bool bounding_dropped;
    int rc = drop_bounding_set(&bounding_dropped, err);
    if (rc < 0)
        return rc;
    if (setgroups(0, NULL) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno, "clear the supplementary groups");
    if (setresgid(gid, gid, gid) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno, "set gid %u", (unsigned)gid);
    if (setresuid(uid, uid, uid) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno, "set uid %u", (unsigned)uid);
    if ((rc = clear_capabilities(err)) < 0)
        return rc;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno, "PR_SET_NO_NEW_PRIVS");
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno, "PR_SET_PDEATHSIG");
    if (getppid() != parent)
        return tetris_fail(err, TETRIS_E_DENIED, 0, "the parent exited meanwhile");
#ifdef __SANITIZE_ADDRESS__
    /* LeakSanitizer stops the world with ptrace from a task outside this
     * thread group, which a non-dumpable process refuses (make SAN=1 only). */
    if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno, "PR_SET_DUMPABLE");
#endif
    struct unprivileged_creds c;
    if ((rc = unprivileged_read(&c, err)) < 0)
        return rc;
    for (size_t i = 0; i < 4; i++)
        if (c.uid[i] != uid || c.gid[i] != gid)
            return tetris_fail(err, TETRIS_E_DENIED, 0, "the kernel shows uid %u gid %u",
                               (unsigned)c.uid[i], (unsigned)c.gid[i]);
    if (c.n_groups != 0 || c.cap_inh != 0 || c.cap_prm != 0 || c.cap_eff != 0 ||
        (bounding_dropped && c.cap_bnd != 0) || c.cap_amb != 0 || !c.no_new_privs)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "the kernel shows groups or capabilities left after the drop");
    return 0;
}

/* One line of /proc/self/status into c: 1 when it was one of ours, 0 when
 * not, -1 when it was but its value is not what the kernel writes. */
static int read_status_line(const char *key, const char *value, struct unprivileged_creds *c)
{
    static const struct {
        const char *key;
        size_t offset;
    } caps[] = {
        {"CapInh", offsetof(struct unprivileged_creds, cap_inh)},
        {"CapPrm", offsetof(struct unprivileged_creds, cap_prm)},
        {"CapEff", offsetof(struct unprivileged_creds, cap_eff)},
        {"CapBnd", offsetof(struct unprivileged_creds, cap_bnd)},
        {"CapAmb", offsetof(struct unprivileged_creds, cap_amb)},
    };
    unsigned ids[4];
    bool is_uid = strcmp(key, "Uid") == 0;
    if (is_uid || strcmp(key, "Gid") == 0) {
        if (sscanf(value, "%u %u %u %u", &ids[0], &ids[1], &ids[2], &ids[3]) != 4)
            return -1;
        for (size_t i = 0; i < 4; i++) {
            if (is_uid)
                c->uid[i] = (uid_t)ids[i];
            else
                c->gid[i] = (gid_t)ids[i];
        }
        return 1;
    }
    if (strcmp(key, "Groups") == 0) {
        unsigned group;
        for (int used = 0; sscanf(value, "%u%n", &group, &used) == 1; value += used)
            c->n_groups++;
        return 1;
    }
    if (strcmp(key, "NoNewPrivs") == 0) {
        c->no_new_privs = strtol(value, NULL, 10) == 1;
        return 1;
    }
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
        if (strcmp(key, caps[i].key) == 0)
            return sscanf(value, "%" SCNx64, (uint64_t *)((char *)c + caps[i].offset)) == 1 ? 1
                                                                                            : -1;
    return 0;
}

int unprivileged_read(struct unprivileged_creds *c, tetris_error *err)
{
    cleanup_fclose FILE *f = fopen("/proc/self/status", "re");
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "/proc/self/status");
    memset(c, 0, sizeof(*c));
    char line[4096];
    unsigned seen = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');
        if (colon == NULL)
            continue;
        *colon = '\0';
        int r = read_status_line(line, colon + 1, c);
        if (r < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "/proc/self/status: %s unreadable", line);
        seen += (unsigned)r;
    }
    /* Uid, Gid, Groups, NoNewPrivs and the five capability sets. */
    if (seen != 9)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "/proc/self/status lacks ids, groups or capability sets");
    return 0;
}
