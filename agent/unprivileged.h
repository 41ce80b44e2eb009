/* unprivileged.h - how tetris-derive gives up the node daemon's root
 * before it reads a graph a pod sent (see unprivileged.c).
 *
 * The daemon execs tetris-derive as itself (root) so that the dynamic
 * loader can reach ONNX Runtime wherever it was installed; the program's
 * first act is unprivileged_become(), and nothing from the pod is read
 * before it returns. After it the process has the given uid and gid as
 * real, effective and saved ids, no supplementary groups, empty
 * permitted, effective, inheritable and ambient capability sets, an empty
 * bounding set where it held CAP_SETPCAP, and no new privileges;
 * unprivileged_read() is what the kernel says about it, which the child
 * reports to the daemon. */
#ifndef TETRIS_AGENT_UNPRIVILEGED_H
#define TETRIS_AGENT_UNPRIVILEGED_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

/* The credentials /proc/self/status shows. */
struct unprivileged_creds {
    uid_t uid[4]; /* real, effective, saved, filesystem */
    gid_t gid[4];
    unsigned n_groups;
    uint64_t cap_inh, cap_prm, cap_eff, cap_bnd, cap_amb;
    bool no_new_privs;
};

/* Becomes uid:gid for good (the caller needs CAP_SETUID and CAP_SETGID):
 * drops every capability from the bounding set (given CAP_SETPCAP),
 * clears the supplementary groups,
 * sets all ids, clears the inheritable and ambient sets, sets no new
 * privileges, then re-arms the parent-death signal (a change of
 * credentials clears it) and checks with unprivileged_read() that the
 * kernel agrees. TETRIS_E_DENIED naming the step that failed. */
int unprivileged_become(uid_t uid, gid_t gid, tetris_error *err);

/* Reads the calling process's credentials from /proc/self/status. */
int unprivileged_read(struct unprivileged_creds *c, tetris_error *err);

#endif
