/* store_tmpfs.h - the store on a tmpfs of the node daemon's own.
 *
 * Why: on a 4 KiB-page tmpfs (/dev/shm) every instance pays a page-table
 * entry and, on first touch, a fault per 4 KiB of weights, and its first
 * inference runs 40-50% slower than a private load's; on a tmpfs mounted
 * huge=within_size the tensors sit on 2 MiB pages (BENCHMARKS.md, "Cold start
 * against the node's limits": the figures behind this default).
 *
 * The rule, applied to the store root DIR before anything touches it:
 *   1. DIR is the root of a tmpfs already (a restart, or the mount an init
 *      container made): reused as it is, whatever its huge= option.
 *   2. mode none: DIR as it is (the program's default, e.g. /dev/shm/tetris).
 *   3. DIR holds anything: as it is; a mount would hide what is stored.
 *   4. Otherwise mount a tmpfs on DIR (mode 0755, nosuid, nodev, noexec;
 *      huge=within_size for mode huge). A kernel that refuses huge= (no
 *      transparent huge pages for shmem) gets a 4 KiB-page tmpfs; a mount
 *      refused (no CAP_SYS_ADMIN) leaves DIR as it is, on /dev/shm by
 *      default: a fallback, never a failure.
 * The mount outlives the daemon on purpose: instances keep mapping it while
 * the daemon restarts, and a restarted daemon finds it (rule 1).
 * Tested by tests/reclaimer/test-store-tmpfs.sh. */
#ifndef TETRIS_RECLAIMER_STORE_TMPFS_H
#define TETRIS_RECLAIMER_STORE_TMPFS_H

#include <stdbool.h>

#include "common/error.h"

enum store_tmpfs_mode {
    STORE_TMPFS_NONE,  /* the directory as it is */
    STORE_TMPFS_PLAIN, /* a tmpfs of its own, 4 KiB pages */
    STORE_TMPFS_HUGE,  /* a tmpfs of its own, huge=within_size */
};

enum store_tmpfs_state {
    STORE_TMPFS_MOUNTED,  /* this call mounted it */
    STORE_TMPFS_REUSED,   /* DIR was a tmpfs root already */
    STORE_TMPFS_AS_IS,    /* mode none */
    STORE_TMPFS_FALLBACK, /* a mount was wanted and not made: see reason */
};

struct store_tmpfs_outcome {
    enum store_tmpfs_state state;
    bool on_tmpfs;    /* DIR's filesystem is tmpfs (after the call) */
    char huge[32];    /* the tmpfs's huge= option ("never" when none), or "" */
    char reason[256]; /* for FALLBACK, and for a MOUNTED without huge pages */
};

/* Parses "huge", "plain" or "none". */
int store_tmpfs_parse_mode(const char *text, enum store_tmpfs_mode *mode, tetris_error *err);

/* Applies the rule above to DIR (created, mode 0755, if missing). Fails only
 * when DIR cannot be created or inspected; a mount not made is a FALLBACK. */
int store_tmpfs_prepare(const char *dir, enum store_tmpfs_mode mode,
                        struct store_tmpfs_outcome *out, tetris_error *err);

/* Enters the mount namespace at PATH (e.g. /proc/1/ns/mnt of a hostPID
 * pod: the host's), so that the mount is made where function pods' host
 * paths resolve, with no mount propagation to set up. Single-threaded
 * callers only (setns). */
int store_tmpfs_enter_namespace(const char *path, tetris_error *err);

const char *store_tmpfs_state_name(enum store_tmpfs_state state);

#endif
