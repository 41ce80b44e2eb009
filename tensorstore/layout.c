/* layout.c - the on-disk pieces of a store: tensor file trailers, tensor
 * paths, lock stripes, and temp files whose writer's liveness is its flock.
 *
 * Liveness by flock: a writer (ingest temp file, holder file) keeps an
 * exclusive flock on its own open file description for as long as it lives;
 * the kernel drops it when the process dies, however it dies. Anyone can
 * then ask "is the writer gone?" by trying LOCK_EX|LOCK_NB on a *fresh*
 * open() of the file. flock locks belong to open file descriptions, not to
 * processes, so the probe works even inside the writer's own process (the
 * fresh description conflicts with the writer's); it would be wrong only on
 * a dup() of the writer's fd, which shares its description. A forked child
 * inherits the description and keeps the writer "alive" until it exits. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/cleanup.h"
#include "tensorstore/store_private.h"

/* Trailer layout (little-endian, TENSOR_TRAILER_BYTES long):
 *   0  magic[8]   "tetrisT1"
 *   8  u32        trailer size
 *  12  u32        ndim
 *  16  char[16]   dtype, NUL padded
 *  32  i64[8]     shape
 *  96  u64        nbytes
 * 104  u32        crc32 of the tensor bytes
 * 108  u32        zero
 * 112  u8[32]     digest
 * 144  u32        crc32 of bytes 0..143 (catches a torn or scribbled trailer)
 * 148  zero padding */
#define TRAILER_SELF_CRC_OFFSET 144

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void trailer_encode(const tensor_meta *meta, uint8_t out[TENSOR_TRAILER_BYTES])
{
    memset(out, 0, TENSOR_TRAILER_BYTES);
    memcpy(out, TENSOR_TRAILER_MAGIC, 8);
    put_u32(out + 8, TENSOR_TRAILER_BYTES);
    put_u32(out + 12, (uint32_t)meta->ndim);
    memcpy(out + 16, meta->dtype, strnlen(meta->dtype, TENSOR_DTYPE_MAX - 1));
    for (int i = 0; i < meta->ndim && i < TENSOR_MAX_DIMS; i++)
        put_u64(out + 32 + 8 * i, (uint64_t)meta->shape[i]);
    put_u64(out + 96, meta->nbytes);
    put_u32(out + 104, meta->crc32);
    memcpy(out + 112, meta->digest.bytes, TENSOR_DIGEST_BYTES);
    put_u32(out + TRAILER_SELF_CRC_OFFSET, (uint32_t)crc32_z(0L, out, TRAILER_SELF_CRC_OFFSET));
}

int trailer_decode(const uint8_t in[TENSOR_TRAILER_BYTES], tensor_meta *meta, tetris_error *err)
{
    if (memcmp(in, TENSOR_TRAILER_MAGIC, 8) != 0)
        return tetris_fail(err, TETRIS_E_CORRUPT, 0, "no tensor trailer (bad magic)");
    if (get_u32(in + 8) != TENSOR_TRAILER_BYTES)
        return tetris_fail(err, TETRIS_E_CORRUPT, 0, "unsupported trailer size %u",
                           get_u32(in + 8));
    if (get_u32(in + TRAILER_SELF_CRC_OFFSET) != (uint32_t)crc32_z(0L, in, TRAILER_SELF_CRC_OFFSET))
        return tetris_fail(err, TETRIS_E_CORRUPT, 0, "trailer checksum mismatch");
    memset(meta, 0, sizeof *meta);
    uint32_t ndim = get_u32(in + 12);
    if (ndim > TENSOR_MAX_DIMS)
        return tetris_fail(err, TETRIS_E_CORRUPT, 0, "trailer ndim %u out of range", ndim);
    meta->ndim = (int)ndim;
    memcpy(meta->dtype, in + 16, TENSOR_DTYPE_MAX);
    meta->dtype[TENSOR_DTYPE_MAX - 1] = '\0';
    for (uint32_t i = 0; i < ndim; i++)
        meta->shape[i] = (int64_t)get_u64(in + 32 + 8 * i);
    meta->nbytes = get_u64(in + 96);
    meta->crc32 = get_u32(in + 104);
    memcpy(meta->digest.bytes, in + 112, TENSOR_DIGEST_BYTES);
    tetris_error inner;
    if (tensor_meta_validate(meta, &inner) < 0)
        return tetris_fail(err, TETRIS_E_CORRUPT, 0, "trailer: %s", inner.msg);
    return 0;
}

void tensor_relpath(const tensor_digest *d, char out[3 + TENSOR_DIGEST_HEX_LEN + 1])
{
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(d, hex);
    snprintf(out, 3 + TENSOR_DIGEST_HEX_LEN + 1, "%.2s/%s", hex, hex);
}

int tensor_file_check(int fd, const tensor_digest *d, const char *what, tensor_meta *meta,
                      tetris_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", what);
    if (!S_ISREG(st.st_mode) || st.st_size < TENSOR_TRAILER_BYTES)
        return tetris_fail(err, TETRIS_E_CORRUPT, 0, "%s: %lld bytes, too short for a tensor file",
                           what, (long long)st.st_size);
    uint8_t trailer[TENSOR_TRAILER_BYTES];
    ssize_t n = pread(fd, trailer, sizeof trailer, st.st_size - TENSOR_TRAILER_BYTES);
    if (n < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "read trailer of %s", what);
    if (n != TENSOR_TRAILER_BYTES)
        return tetris_fail(err, TETRIS_E_CORRUPT, 0, "%s: short trailer read", what);
    int rc = trailer_decode(trailer, meta, err);
    if (rc < 0) {
        tetris_wrap(err, "%s", what);
        return rc;
    }
    if (meta->nbytes != (uint64_t)st.st_size - TENSOR_TRAILER_BYTES)
        return tetris_fail(err, TETRIS_E_CORRUPT, 0,
                           "%s: trailer says %llu bytes, file holds %llu", what,
                           (unsigned long long)meta->nbytes,
                           (unsigned long long)(st.st_size - TENSOR_TRAILER_BYTES));
    if (!tensor_digest_equal(&meta->digest, d))
        return tetris_fail(err, TETRIS_E_CORRUPT, 0, "%s: trailer digest differs from its name",
                           what);
    return 0;
}

int tensor_file_open(store *s, const tensor_digest *d, tensor_meta *meta, tetris_error *err)
{
    char rel[3 + TENSOR_DIGEST_HEX_LEN + 1];
    tensor_relpath(d, rel);
    cleanup_close int fd = store_openat(s->tensors_fd, rel, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
    if (fd < 0) {
        int code = errno == ELOOP ? TETRIS_E_CORRUPT : store_errno_code(errno);
        return tetris_fail(err, code, errno, "tensor %.64s", rel + 3);
    }
    int rc = tensor_file_check(fd, d, rel + 3, meta, err);
    if (rc < 0)
        return rc;
    return steal_fd(&fd);
}

int store_errno_code(int errnum)
{
    switch (errnum) {
    case EACCES:
    case EPERM:
    case EROFS:
        return TETRIS_E_DENIED;
    case ENOENT:
        return TETRIS_E_NOTFOUND;
    case ENOSPC:
    case EDQUOT:
        return TETRIS_E_FULL;
    case ENOMEM:
        return TETRIS_E_NOMEM;
    default:
        return TETRIS_E_IO;
    }
}

int store_require_writable(store *s, const char *what, tetris_error *err)
{
    if (s->read_only)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "%s: store %s is open read-only (only the node daemon writes it)", what,
                           s->root);
    return 0;
}

/* openat2 is tried once; kernels before 5.6 say ENOSYS and get the
 * component-by-component walk. */
static atomic_int openat2_missing;

/* The fallback: every directory on the way opened with O_NOFOLLOW, and
 * no "..", so the path cannot leave dir_fd either. */
static int openat_walk(int dir_fd, const char *path, int flags, mode_t mode)
{
    char buf[4096];
    if (strlen(path) >= sizeof buf || path[0] == '/') {
        errno = path[0] == '/' ? EXDEV : ENAMETOOLONG;
        return -1;
    }
    strcpy(buf, path);
    int cur = dir_fd;
    char *name = buf;
    for (char *slash; (slash = strchr(name, '/')) != NULL; name = slash + 1) {
        *slash = '\0';
        if (strcmp(name, "..") == 0) {
            errno = EXDEV;
            break;
        }
        int next = openat(cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cur != dir_fd)
            close(cur);
        cur = next;
        if (cur < 0)
            return -1;
    }
    int fd = -1;
    if (strchr(name, '/') == NULL && strcmp(name, "..") != 0)
        fd = openat(cur, name, flags | O_NOFOLLOW, mode);
    int saved = errno;
    if (cur != dir_fd)
        close(cur);
    errno = saved;
    return fd;
}

int store_openat(int dir_fd, const char *path, int flags, mode_t mode)
{
    if (!atomic_load_explicit(&openat2_missing, memory_order_relaxed)) {
        struct open_how how = {
            .flags = (uint64_t)(flags | O_NOFOLLOW),
            .mode = (flags & O_CREAT) ? mode : 0,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        long fd;
        do
            fd = syscall(SYS_openat2, dir_fd, path, &how, sizeof how);
        while (fd < 0 && (errno == EINTR || errno == EAGAIN));
        if (fd >= 0 || errno != ENOSYS)
            return (int)fd;
        atomic_store_explicit(&openat2_missing, 1, memory_order_relaxed);
    }
    return openat_walk(dir_fd, path, flags, mode);
}

int store_open_dir(int dir_fd, const char *path)
{
    return store_openat(dir_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
}

/* Kept fanout descriptors of every handle in the process. */
static atomic_size_t fanout_fds_kept;

/* The limit is read at each call (a getrlimit per fanout directory a
 * handle first opens, not per tensor): a process that raises its limit
 * later, as the node daemon does at its start, gets the larger budget. */
bool store_keep_fanout_fd(void)
{
    struct rlimit rl;
    size_t budget = SIZE_MAX;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        budget = (size_t)(rl.rlim_cur / 4);
    if (atomic_fetch_add(&fanout_fds_kept, 1) < budget)
        return true;
    atomic_fetch_sub(&fanout_fds_kept, 1);
    return false;
}

void store_release_fanout_fds(size_t n)
{
    atomic_fetch_sub(&fanout_fds_kept, n);
}

int store_flock(int fd, int op, int timeout_ms)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long delay_us = 200;
    for (;;) {
        if (flock(fd, op | LOCK_NB) == 0)
            return 0;
        if (errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long waited_ms = (now.tv_sec - start.tv_sec) * 1000 +
                         (now.tv_nsec - start.tv_nsec) / 1000000;
        if (waited_ms >= timeout_ms) {
            errno = ETIMEDOUT;
            return -1;
        }
        /* Polling, since flock has no timed wait: from 0.2 ms (locks are
         * usually held for microseconds) doubling up to 20 ms. */
        struct timespec pause = {0, delay_us * 1000};
        nanosleep(&pause, NULL);
        delay_us = delay_us * 2 > 20000 ? 20000 : delay_us * 2;
    }
}

/* Opens locks/<name>, made if missing; a link planted in its place is
 * removed, never followed. */
static int open_lock_file(store *s, const char *name, tetris_error *err)
{
    int fd = store_openat(s->locks_fd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 && errno == ELOOP && unlinkat(s->locks_fd, name, 0) == 0)
        fd = store_openat(s->locks_fd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return tetris_fail(err, store_errno_code(errno), errno, "open lock %s/private/locks/%s",
                           s->root, name);
    return fd;
}

int store_lock_named(store *s, const char *name, tetris_error *err)
{
    int rc = store_require_writable(s, "lock", err);
    if (rc < 0)
        return rc;
    cleanup_close int fd = open_lock_file(s, name, err);
    if (fd < 0)
        return fd;
    if (store_flock(fd, LOCK_EX, STORE_LOCK_TIMEOUT_MS) < 0)
        return tetris_fail(err, errno == ETIMEDOUT ? TETRIS_E_TIMEOUT : TETRIS_E_IO, errno,
                           "lock %s/private/locks/%s", s->root, name);
    return steal_fd(&fd);
}

int store_lock_tensor(store *s, const tensor_digest *d, tetris_error *err)
{
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(d, hex);
    hex[STORE_LOCK_STRIPE_CHARS] = '\0';
    return store_lock_named(s, hex, err);
}

/* Made in order: when the last stripe is there, a previous call made them
 * all (nothing removes a lock file), and a restart costs one fstatat. */
int store_make_lock_stripes(store *s, tetris_error *err)
{
    int rc = store_require_writable(s, "make lock stripes", err);
    unsigned stripes = 1u << (4 * STORE_LOCK_STRIPE_CHARS);
    char name[STORE_LOCK_STRIPE_CHARS + 1];
    struct stat st;
    snprintf(name, sizeof name, "%0*x", STORE_LOCK_STRIPE_CHARS, stripes - 1);
    if (rc == 0 && fstatat(s->locks_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
        return 0;
    for (unsigned i = 0; rc == 0 && i < stripes; i++) {
        snprintf(name, sizeof name, "%0*x", STORE_LOCK_STRIPE_CHARS, i);
        int fd = open_lock_file(s, name, err);
        if (fd < 0)
            rc = fd;
        else
            close(fd);
    }
    return rc;
}

int store_create_locked(int dir_fd, const char *prefix, const char *suffix, int mode,
                        char *name_out, size_t name_len, tetris_error *err)
{
    for (int attempt = 0; attempt < 16; attempt++) {
        uint64_t rnd;
        if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
            return tetris_fail(err, TETRIS_E_IO, errno, "getrandom");
        int n = snprintf(name_out, name_len, "%s.%016llx%s", prefix, (unsigned long long)rnd,
                         suffix);
        if (n < 0 || (size_t)n >= name_len)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "temp file name too long");
        cleanup_close int fd = store_openat(dir_fd, name_out, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
                                            (mode_t)mode);
        if (fd < 0) {
            if (errno == EEXIST)
                continue;
            return tetris_fail(err, store_errno_code(errno), errno, "create %s", name_out);
        }
        /* Nobody else has a reason to lock a name nobody knew: if someone
         * does (a repair probe), take another name rather than wait. */
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            if (errno == EWOULDBLOCK) {
                unlinkat(dir_fd, name_out, 0);
                continue;
            }
            return tetris_fail(err, TETRIS_E_IO, errno, "lock %s", name_out);
        }
        /* A repair pass may have found the file unlocked in the instant
         * before our flock and removed it; then start over. */
        struct stat mine, linked;
        if (fstat(fd, &mine) < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", name_out);
        if (fstatat(dir_fd, name_out, &linked, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT)
                continue;
            return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", name_out);
        }
        if (mine.st_ino != linked.st_ino || mine.st_dev != linked.st_dev)
            continue;
        return steal_fd(&fd);
    }
    return tetris_fail(err, TETRIS_E_IO, 0, "could not create a temp file '%s.*'", prefix);
}

int store_probe_dead(int dir_fd, const char *name, int *keep_fd, tetris_error *err)
{
    cleanup_close int fd = store_openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
    if (fd < 0)
        return tetris_fail(err, store_errno_code(errno), errno, "open %s", name);
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        if (errno == EWOULDBLOCK)
            return 0;
        return tetris_fail(err, TETRIS_E_IO, errno, "probe lock of %s", name);
    }
    if (keep_fd != NULL)
        *keep_fd = steal_fd(&fd);
    return 1;
}
