/* store_private.h - what the store's source files share and nobody else
 * sees: the open store handle, the tensor file trailer, lock and temp-file
 * helpers. */
#ifndef TETRIS_STORE_PRIVATE_H
#define TETRIS_STORE_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "tensorstore/store.h"

#define STORE_MARKER ".tetris-store" /* in public/ (format 1 had it in the root) */
#define STORE_USE_LOCK "use.lock"    /* in private/ */
#define STORE_FORMAT_VERSION 2
#define STORE_OLD_FORMAT_VERSION 1 /* everything in one directory pods mounted */
/* Waits on locks only trusted writers take (the daemon's threads, --direct
 * processes) end after this long with TETRIS_E_TIMEOUT, so that no stuck
 * process can stop the daemon's passes for good. */
#define STORE_LOCK_TIMEOUT_MS 30000
#define STORE_TENSOR_FANOUT 256  /* tensors/00 .. tensors/ff */
#define STORE_LOCK_STRIPE_CHARS 3 /* locks/000 .. locks/fff */
#define STORE_CAPACITY_LOCK "capacity"
#define HOLDER_SUFFIX ".ref"       /* holders/<id>.ref */
#define HOLDER_TEMP_PREFIX ".new"  /* holders/.new-<pid>.<random> before rename */
#define HOLDER_KEPT_SUFFIX ".keep" /* holders/<name>.keep: a kept holder */

/* Per-fanout-directory cache of the bytes its tensor files occupy, trusted
 * while the directory's mtime is unchanged and older than the scan (see
 * store.c: usage_scan_dir). */
struct usage_cache_entry {
    bool valid;
    struct timespec mtime;
    uint64_t bytes;
};

struct store {
    char *root;
    char *public_dir; /* root/public, or the root itself when that is a mounted public/ */
    bool read_only;
    uint64_t capacity_bytes;
    int root_fd;
    int public_fd;
    int private_fd; /* -1 when read-only: private/ is the writers' */
    int tensors_fd;
    int tmp_fd;
    int locks_fd;
    int holders_fd; /* read-only handles: only where private/ is readable (listing) */
    int quarantine_fd;
    int use_lock_fd; /* -1 when read-only: readers rely on the daemon's references */

    pthread_mutex_t use_mutex; /* guards use_depth and reclaiming */
    int use_depth;             /* store_use_begin calls not yet ended */
    bool reclaiming;
    pthread_mutex_t mutex; /* guards the usage cache */
    struct usage_cache_entry usage[STORE_TENSOR_FANOUT];
    /* tensors/XX as a publish first opened it, -1 before: kept for the
     * handle's life (publish.c: fanout_dir) while the process's budget of
     * kept fanout descriptors allows (store_keep_fanout_fd). */
    _Atomic int fanout_fds[STORE_TENSOR_FANOUT];
    _Atomic int temp_kind; /* how publishes make temp files (publish.c), 0 until the first */
};

/* ---- tensor files: bytes followed by a fixed little-endian trailer ---- */

#define TENSOR_TRAILER_BYTES 160
#define TENSOR_TRAILER_MAGIC "tetrisT1"

void trailer_encode(const tensor_meta *meta, uint8_t out[TENSOR_TRAILER_BYTES]);
/* Decodes and checks self-consistency (magic, own crc, valid meta); the
 * caller checks file size and name. */
int trailer_decode(const uint8_t in[TENSOR_TRAILER_BYTES], tensor_meta *meta, tetris_error *err);

/* Opens tensors/XX/<hex> read-only and checks its trailer against file size
 * and the digest; fills meta. Returns the fd. */
int tensor_file_open(store *s, const tensor_digest *d, tensor_meta *meta, tetris_error *err);
/* Same checks for an already open file. */
int tensor_file_check(int fd, const tensor_digest *d, const char *what, tensor_meta *meta,
                      tetris_error *err);

void tensor_relpath(const tensor_digest *d, char out[3 + TENSOR_DIGEST_HEX_LEN + 1]);

/* ---- opening files without following links ----
 * Every path the store opens is relative to one of its directory
 * descriptors and may not leave it or pass through a symbolic link:
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) where the kernel has it,
 * else O_NOFOLLOW on each component. Returns the fd or -1 with errno
 * (ELOOP for a link, EXDEV for a path that would leave dir_fd). */
int store_openat(int dir_fd, const char *path, int flags, mode_t mode);
/* A subdirectory of dir_fd, the same way. */
int store_open_dir(int dir_fd, const char *path);

/* Fanout descriptors kept open by the process's store handles, counted
 * together: a node daemon serving many tenant stores would otherwise keep
 * 256 per store and could run out of descriptors for its clients. At most
 * a quarter of the soft RLIMIT_NOFILE is kept; beyond it, a publish opens
 * its fanout directory and closes it after. store_keep_fanout_fd takes one
 * place in the budget (false: none left); store_release_fanout_fds gives
 * back n places whose descriptors were closed. */
bool store_keep_fanout_fd(void);
void store_release_fanout_fds(size_t n);

/* ---- locks and temp files ---- */

/* Takes the exclusive lock stripe for digest d; returns its fd (close to
 * release). */
int store_lock_tensor(store *s, const tensor_digest *d, tetris_error *err);
/* Takes locks/<name> exclusively; returns its fd. */
int store_lock_named(store *s, const char *name, tetris_error *err);
/* Makes every lock stripe file that is missing (store_prepare_publish). */
int store_make_lock_stripes(store *s, tetris_error *err);

/* Creates a new file in dir_fd named <prefix>.<random><suffix>, flock-ed
 * exclusively, and makes sure it is still linked once locked (repair may
 * have taken the lock and removed it between creation and locking). */
int store_create_locked(int dir_fd, const char *prefix, const char *suffix, int mode,
                        char *name_out, size_t name_len, tetris_error *err);

/* Whether the flock of dir_fd/name can be taken, i.e. its owner is gone.
 * Returns 1 dead, 0 alive, negative on error (-TETRIS_E_NOTFOUND if the file
 * vanished). When dead and keep_fd is not NULL the locked fd is returned in
 * it so the caller can remove the file while still holding the lock. */
int store_probe_dead(int dir_fd, const char *name, int *keep_fd, tetris_error *err);

/* flock(2) that gives up after timeout_ms (-1 with errno ETIMEDOUT),
 * resumed when a signal interrupts the wait. op is LOCK_SH or LOCK_EX. */
int store_flock(int fd, int op, int timeout_ms);

/* TETRIS_E_DENIED, _NOTFOUND, _FULL, _NOMEM or _IO for an errno. */
int store_errno_code(int errnum);

int store_require_writable(store *s, const char *what, tetris_error *err);

/* Bytes under tensors/ plus live temp files in tmp/ (their full size is
 * reserved by ftruncate before they are filled). */
int store_usage_with_reservations(store *s, uint64_t *out, tetris_error *err);

#endif
