/* publish.c - atomic, single-copy ingest of one tensor.
 *
 * Under the tensor's lock stripe: if the tensor is not resident yet, reserve
 * its full size in a temp file under tmp/ (0444 from its creation; unnamed,
 * or named and flock-ed so repair can tell a live writer from a dead one:
 * see enum temp_kind), write the bytes, hash what was written, append the
 * trailer and put it in place under tensors/XX/. A crash at any point
 * leaves at most a named temp file, never a partial file under tensors/.
 *
 * Two ways to supply the bytes: a fill callback that writes the whole tensor
 * through a writable shared mapping (for decoders that need the whole
 * destination), or a read callback asked for successive chunks that are
 * hashed while still in cache and written with pwrite. The chunked path is
 * the fast one: it never faults in or zeroes tmpfs pages one by one and
 * reads each byte from memory once. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "tensorstore/store_private.h"

#define HUGE_PAGE_BYTES (2u * 1024u * 1024u)
/* Chunk of the streaming path, hashed while it is still in cache. One huge
 * page: on a huge=within_size tmpfs a write that fills only part of a new
 * 2 MiB folio makes the kernel zero the rest of it first (shmem_write_end);
 * with 256 KiB chunks that zeroing took 60% of the daemon's CPU in a cold
 * ingest (perf, docs/benchmarks/HISTORY.md), with whole-page chunks it is
 * gone. */
#define STREAM_CHUNK_BYTES (2048u * 1024u)

/* Where the bytes of the tensor being published come from. */
struct byte_source {
    store_fill_fn fill; /* whole tensor through a mapping, or */
    store_read_fn read; /* successive chunks */
    void *ctx;
};

/* How a store's publishes make their temp files. An unnamed one
 * (O_TMPFILE in tmp/, linked into tensors/XX once verified) needs no name,
 * lock or checks in tmp/, leaves nothing to repair after a crash (the
 * kernel frees it with its last descriptor) and is put in place without a
 * rename, which takes the filesystem's rename lock that publishing threads
 * queue on: on a model of small tensors that is 5 system calls fewer a
 * tensor (BENCHMARKS.md, "Cold start of a model of small tensors"). Other
 * publishers cannot see it, so a store with a capacity (which counts the
 * live temp files as reservations) names its temp files; so does a kernel
 * or filesystem without O_TMPFILE and a process that can link a descriptor
 * neither by AT_EMPTY_PATH (CAP_DAC_READ_SEARCH) nor through /proc. */
enum temp_kind {
    TEMP_UNKNOWN = 0, /* not probed yet */
    TEMP_NAMED,
    TEMP_UNNAMED_EMPTY_PATH,
    TEMP_UNNAMED_PROC,
};

/* A temp file in tmp/ that is removed unless it was renamed (or, unnamed,
 * linked) into place. Invariant: only a temp file whose bytes hashed to
 * the digest it is published under (verified) is ever put into tensors/
 * (asserted in finish_file; tested by tests/tensorstore/test_store.c
 * publish_rejects_wrong_bytes_and_bad_meta). */
struct temp_file {
    int fd;
    int dir_fd;
    enum temp_kind kind;
    bool verified; /* its bytes hash to the digest and crc32 of its meta */
    char name[TENSOR_DIGEST_HEX_LEN + 32]; /* TEMP_NAMED only */
};

static void temp_file_discard(struct temp_file *t)
{
    if (t->fd < 0)
        return;
    if (t->kind == TEMP_NAMED)
        unlinkat(t->dir_fd, t->name, 0);
    close(t->fd);
    t->fd = -1;
}

/* Gives the unnamed file fd the name dir_fd/name. */
static int link_unnamed(int fd, enum temp_kind how, int dir_fd, const char *name)
{
    assert(how == TEMP_UNNAMED_EMPTY_PATH || how == TEMP_UNNAMED_PROC);
    if (how == TEMP_UNNAMED_EMPTY_PATH)
        return linkat(fd, "", dir_fd, name, AT_EMPTY_PATH);
    char proc[48];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    return linkat(AT_FDCWD, proc, dir_fd, name, AT_SYMLINK_FOLLOW);
}

/* The store's temp_kind, probed by its first publish: an unnamed file
 * linked into tmp/ one way or the other and removed again (a crash in
 * between leaves a file repair removes). Threads that probe at once agree
 * but for a name taken by another thread's probe, which makes one of them
 * settle for TEMP_NAMED: slower, never wrong. */
static enum temp_kind store_temp_kind(store *s)
{
    int kind = atomic_load(&s->temp_kind);
    if (kind != TEMP_UNKNOWN)
        return (enum temp_kind)kind;
    kind = TEMP_NAMED;
    cleanup_close int fd = openat(s->tmp_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0444);
    char name[48];
    snprintf(name, sizeof name, "link-probe.%ld", (long)gettid());
    for (int how = TEMP_UNNAMED_EMPTY_PATH; fd >= 0 && how <= TEMP_UNNAMED_PROC; how++)
        if (link_unnamed(fd, (enum temp_kind)how, s->tmp_fd, name) == 0) {
            unlinkat(s->tmp_fd, name, 0);
            kind = how;
            break;
        }
    atomic_store(&s->temp_kind, kind);
    return (enum temp_kind)kind;
}

/* Creates the temp file at its final size: from then on other publishers
 * count it against the capacity. */
static int temp_file_create(store *s, const char *hex, uint64_t file_bytes, struct temp_file *t,
                            tetris_error *err)
{
    t->dir_fd = s->tmp_fd;
    t->kind = s->capacity_bytes == 0 ? store_temp_kind(s) : TEMP_NAMED;
    /* Read-only from the start (this descriptor, opened at creation, still
     * writes): a published tensor is 0444, with no chmod per tensor. */
    if (t->kind == TEMP_NAMED) {
        t->fd = store_create_locked(s->tmp_fd, hex, "", 0444, t->name, sizeof t->name, err);
    } else {
        t->fd = openat(s->tmp_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0444);
        if (t->fd < 0)
            t->fd = tetris_fail(err, store_errno_code(errno), errno, "create an unnamed file");
    }
    if (t->fd < 0) {
        tetris_wrap(err, "store %s/private/tmp", s->root);
        return t->fd;
    }
    if (ftruncate(t->fd, (off_t)file_bytes) < 0) {
        int rc = tetris_fail(err, store_errno_code(errno), errno, "size temp file for %s", hex);
        temp_file_discard(t);
        return rc;
    }
    return 0;
}

/* Temp file creation, checked against the capacity under the store-wide
 * capacity lock: the reservation (a sized temp file) is visible to every
 * other publisher before the lock is released. */
static int reserve(store *s, const char *hex, uint64_t file_bytes, struct temp_file *t,
                   tetris_error *err)
{
    if (s->capacity_bytes == 0)
        return temp_file_create(s, hex, file_bytes, t, err);
    cleanup_close int lock = store_lock_named(s, STORE_CAPACITY_LOCK, err);
    if (lock < 0)
        return lock;
    uint64_t used = 0;
    int rc = store_usage_with_reservations(s, &used, err);
    if (rc < 0)
        return rc;
    uint64_t charge = store_charged_bytes(file_bytes);
    if (used > s->capacity_bytes || charge > s->capacity_bytes - used)
        return tetris_fail(err, TETRIS_E_FULL, 0,
                           "store full: need %llu bytes, %llu of %llu used (store %s)",
                           (unsigned long long)charge, (unsigned long long)used,
                           (unsigned long long)s->capacity_bytes, s->root);
    return temp_file_create(s, hex, file_bytes, t, err);
}

/* Allocates the file's blocks (outside the capacity lock: on tmpfs this
 * zeroes every page), so a full filesystem fails here with ENOSPC rather
 * than with SIGBUS while the caller writes through a mapping. After
 * ftruncate, so that tmpfs huge=within_size may use huge pages. A
 * filesystem without fallocate leaves the writes to report ENOSPC. */
static int allocate(int fd, uint64_t bytes, const char *hex, tetris_error *err)
{
    if (fallocate(fd, 0, 0, (off_t)bytes) < 0 && errno != EOPNOTSUPP)
        return tetris_fail(err, store_errno_code(errno), errno, "allocate %llu bytes for %s",
                           (unsigned long long)bytes, hex);
    return 0;
}

static int fill_through_mapping(const tensor_meta *meta, const char *hex, int fd,
                                const struct byte_source *src, tensor_hasher *h,
                                tetris_error *err)
{
    if (meta->nbytes == 0)
        return 0;
    size_t len = (size_t)meta->nbytes;
    /* No MAP_POPULATE: the fill's own faults cost about the same on
     * 4 KiB pages, and populating tmpfs huge pages measured several
     * times slower than letting the fill fault them in. */
    void *dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (dst == MAP_FAILED)
        return tetris_fail(err, store_errno_code(errno), errno, "mmap temp file for %s", hex);
    if (len >= HUGE_PAGE_BYTES)
        madvise(dst, len, MADV_HUGEPAGE); /* a hint; see map.c */
    int rc = src->fill(src->ctx, dst, meta->nbytes, err);
    if (rc == 0)
        tensor_hasher_update(h, dst, len);
    munmap(dst, len);
    return rc;
}

static int write_in_chunks(const tensor_meta *meta, const char *hex, int fd,
                           const struct byte_source *src, tensor_hasher *h, tetris_error *err)
{
    size_t chunk = meta->nbytes < STREAM_CHUNK_BYTES ? (size_t)meta->nbytes : STREAM_CHUNK_BYTES;
    cleanup_free unsigned char *buf = malloc(chunk > 0 ? chunk : 1);
    if (buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "chunk buffer for %s", hex);
    for (uint64_t off = 0; off < meta->nbytes;) {
        size_t n = meta->nbytes - off < chunk ? (size_t)(meta->nbytes - off) : chunk;
        int rc = src->read(src->ctx, buf, off, n, err);
        if (rc < 0)
            return rc;
        tensor_hasher_update(h, buf, n);
        for (size_t done = 0; done < n;) {
            ssize_t w = pwrite(fd, buf + done, n - done, (off_t)(off + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                /* write_and_hash names the tensor: a rejection's reason
                 * (160 bytes) then still ends with the errno's text. */
                return tetris_fail(err, store_errno_code(w < 0 ? errno : EIO), w < 0 ? errno : EIO,
                                   "write at %llu", (unsigned long long)(off + done));
            done += (size_t)w;
        }
        off += n;
    }
    return 0;
}

/* STORE_PUBLISH_SMALL_PAGES: the chunks are read straight into a mapping
 * of the file that allocates 4 KiB pages. Written with pwrite, or through
 * a mapping without MADV_NOHUGEPAGE, a file of a huge= tmpfs gets 2 MiB
 * pages wherever it is long enough; a fault through a MADV_NOHUGEPAGE
 * mapping never does. MADV_POPULATE_WRITE allocates every page in one call
 * and turns a full filesystem into an error rather than a SIGBUS in the
 * copy (what allocate's fallocate does for the other paths; fallocate
 * would allocate 2 MiB pages). A kernel without it (before 5.14) gets the
 * fallocate, and so maybe 2 MiB pages: the flag is a layout, never a
 * reason to fail. */
static int read_into_small_pages(const tensor_meta *meta, const char *hex, int fd,
                                 const struct byte_source *src, tensor_hasher *h, tetris_error *err)
{
    if (meta->nbytes == 0)
        return 0;
    size_t len = (size_t)meta->nbytes;
    unsigned char *dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (dst == MAP_FAILED)
        return tetris_fail(err, store_errno_code(errno), errno, "mmap temp file for %s", hex);
    int rc = 0;
    /* EINVAL: a kernel without transparent huge pages, 4 KiB pages anyway. */
    if (madvise(dst, len, MADV_NOHUGEPAGE) < 0 && errno != EINVAL)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "madvise(MADV_NOHUGEPAGE) for %s", hex);
    if (rc == 0 && madvise(dst, len, MADV_POPULATE_WRITE) < 0) {
        if (errno != EINVAL)
            /* EFAULT: a page could not be allocated, the filesystem is full. */
            rc = tetris_fail(err, errno == EFAULT || errno == ENOMEM ? TETRIS_E_FULL : TETRIS_E_IO,
                             errno == EFAULT ? ENOSPC : errno, "allocate %zu bytes for %s", len,
                             hex);
        else
            rc = allocate(fd, len, hex, err);
    }
    for (size_t off = 0; rc == 0 && off < len;) {
        size_t n = len - off < STREAM_CHUNK_BYTES ? len - off : STREAM_CHUNK_BYTES;
        rc = src->read(src->ctx, dst + off, off, n, err);
        if (rc == 0)
            tensor_hasher_update(h, dst + off, n);
        off += n;
    }
    munmap(dst, len);
    return rc;
}

/* Writes the bytes and hashes them as they are written. */
static int write_and_hash(const tensor_meta *meta, const char *hex, int fd,
                          const struct byte_source *src, unsigned flags, tensor_digest *got,
                          uint32_t *crc, tetris_error *err)
{
    tensor_hasher *h = NULL;
    int rc = tensor_hasher_new(meta, &h, err);
    if (rc < 0)
        return rc;
    if (flags & STORE_PUBLISH_SMALL_PAGES)
        rc = read_into_small_pages(meta, hex, fd, src, h, err);
    else if (src->read != NULL)
        rc = write_in_chunks(meta, hex, fd, src, h, err);
    else
        rc = fill_through_mapping(meta, hex, fd, src, h, err);
    if (rc < 0) {
        tensor_hasher_free(h);
        tetris_wrap(err, "filling tensor %s", hex);
        return rc;
    }
    tensor_hasher_finish(h, got, crc);
    return 0;
}

/* Writes the bytes, then checks that what was written hashes to the
 * digest and crc32 the caller claimed. */
static int write_and_verify(const tensor_meta *meta, const char *hex, int fd,
                            const struct byte_source *src, tetris_error *err)
{
    tensor_digest got;
    uint32_t crc;
    int rc = write_and_hash(meta, hex, fd, src, 0, &got, &crc, err);
    if (rc < 0)
        return rc;
    if (!tensor_digest_equal(&got, &meta->digest)) {
        char got_hex[TENSOR_DIGEST_HEX_LEN + 1];
        tensor_digest_to_hex(&got, got_hex);
        return tetris_fail(err, TETRIS_E_CORRUPT, 0, "tensor %s: filled bytes hash to %s", hex,
                           got_hex);
    }
    if (crc != meta->crc32)
        return tetris_fail(err, TETRIS_E_CORRUPT, 0,
                           "tensor %s: filled bytes have crc32 %08x, expected %08x", hex, crc,
                           meta->crc32);
    return 0;
}

/* The fanout directory tensors/XX (XX: fanout in hex) by its descriptor,
 * made if missing: a link in its place is refused, never followed. Kept by
 * the handle once a publish has opened it (fanout directories are never
 * removed; repair removes only what is not a directory there), so that a
 * publish costs no mkdir, open and close of it: on a model of small
 * tensors those were a tenth of the daemon's time per tensor
 * (BENCHMARKS.md, "Cold start of a model of small tensors"). Threads that
 * race on a first open keep the first descriptor installed. *kept false:
 * the process's budget of kept fanout descriptors is spent
 * (store_keep_fanout_fd), and the caller closes this one after use. */
static int fanout_dir(store *s, uint8_t fanout, bool *kept, tetris_error *err)
{
    _Atomic int *slot = &s->fanout_fds[fanout];
    int fd = atomic_load(slot);
    *kept = true;
    if (fd >= 0)
        return fd;
    char name[3];
    snprintf(name, sizeof name, "%02x", fanout);
    fd = store_open_dir(s->tensors_fd, name);
    if (fd < 0 && errno == ENOENT) {
        if (mkdirat(s->tensors_fd, name, 0755) < 0 && errno != EEXIST)
            return tetris_fail(err, store_errno_code(errno), errno, "create %s/tensors/%s",
                               s->public_dir, name);
        fd = store_open_dir(s->tensors_fd, name);
    }
    if (fd < 0)
        return tetris_fail(err, store_errno_code(errno), errno, "open %s/tensors/%s", s->public_dir,
                           name);
    if (!store_keep_fanout_fd()) {
        *kept = false;
        return fd;
    }
    int none = -1;
    if (!atomic_compare_exchange_strong(slot, &none, fd)) {
        close(fd);
        store_release_fanout_fds(1);
        fd = none;
    }
    return fd;
}

/* Drops the handle's descriptor of tensors/XX if it is still stale_fd (the
 * directory behind it was removed), so that the next fanout_dir opens or
 * makes the directory again; another thread may have done so already.
 * The stale descriptor is not closed, since another thread may be linking
 * through it (its number reused would point that thread elsewhere): one
 * descriptor kept per removal of a fanout directory, which nothing in
 * tetris does. */
static void forget_fanout_dir(store *s, uint8_t fanout, int stale_fd)
{
    atomic_compare_exchange_strong(&s->fanout_fds[fanout], &stale_fd, -1);
}

/* Names the verified temp file fanout_fd/hex, in place of whatever had the
 * name but did not verify as that tensor (the caller holds the tensor's
 * lock and found it not resident): a rename replaces it, a link needs the
 * name free. A reader's mapping of the file replaced keeps its pages. */
static int put_in_place(struct temp_file *t, int fanout_fd, const char *hex)
{
    if (t->kind == TEMP_NAMED)
        return renameat(t->dir_fd, t->name, fanout_fd, hex);
    int rc = link_unnamed(t->fd, t->kind, fanout_fd, hex);
    if (rc < 0 && errno == EEXIST && unlinkat(fanout_fd, hex, 0) == 0)
        rc = link_unnamed(t->fd, t->kind, fanout_fd, hex);
    return rc;
}

/* put_in_place into the tensor's fanout directory; once more if the
 * directory is gone (ENOENT: removed under a kept descriptor, or since a
 * publish over the budget opened it), through the directory made again. */
static int link_into_fanout(store *s, const tensor_meta *meta, const char *hex, struct temp_file *t,
                            tetris_error *err)
{
    uint8_t fanout = meta->digest.bytes[0];
    for (int attempt = 0;; attempt++) {
        bool kept;
        int fanout_fd = fanout_dir(s, fanout, &kept, err);
        if (fanout_fd < 0)
            return fanout_fd;
        int rc = put_in_place(t, fanout_fd, hex), failure = errno;
        if (!kept)
            close(fanout_fd);
        if (rc == 0)
            return 0;
        if (failure == ENOENT && attempt == 0) {
            if (kept)
                forget_fanout_dir(s, fanout, fanout_fd);
            continue;
        }
        return tetris_fail(err, store_errno_code(failure), failure, "publish %s/tensors/%.2s/%s",
                           s->public_dir, hex, hex);
    }
}

static int finish_file(store *s, const tensor_meta *meta, const char *hex, struct temp_file *t,
                       tetris_error *err)
{
    assert(t->fd >= 0 && t->verified);
    uint8_t trailer[TENSOR_TRAILER_BYTES];
    trailer_encode(meta, trailer);
    ssize_t n = pwrite(t->fd, trailer, sizeof trailer, (off_t)meta->nbytes);
    /* The bytes' blocks were allocated, the trailer's may not be: a
     * filesystem that fills up here writes part of it (or none, ENOSPC),
     * and the store is full like anywhere else. */
    int failure = n < 0 ? errno : ENOSPC;
    if (n != (ssize_t)sizeof trailer)
        return tetris_fail(err, store_errno_code(failure), failure, "write trailer of %s", hex);
    int rc = link_into_fanout(s, meta, hex, t, err);
    if (rc < 0)
        return rc;
    close(t->fd); /* in place: no longer ours to discard */
    t->fd = -1;
    return 0;
}

/* What every publish checks first. */
static int publish_check(store *s, const tensor_meta *meta, bool *published, tetris_error *err)
{
    if (published != NULL)
        *published = false;
    int rc = store_require_writable(s, "publish", err);
    if (rc < 0)
        return rc;
    rc = tensor_meta_validate(meta, err);
    if (rc < 0)
        return rc;
    if (meta->nbytes > (uint64_t)INT64_MAX - TENSOR_TRAILER_BYTES)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "tensor of %llu bytes is too large to store",
                           (unsigned long long)meta->nbytes);
    return 0;
}

static int publish_from(store *s, const tensor_meta *meta, const struct byte_source *src,
                        bool *published, tetris_error *err)
{
    int rc = publish_check(s, meta, published, err);
    if (rc < 0)
        return rc;
    /* Only under the lock: every caller that publishes what is missing has
     * looked already (a second look before the lock was a path lookup per
     * tensor for nothing), and another publisher may have finished since. */
    cleanup_close int lock = store_lock_tensor(s, &meta->digest, err);
    if (lock < 0)
        return lock;
    if (store_has_tensor(s, &meta->digest))
        return 0;

    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(&meta->digest, hex);
    struct temp_file t = {.fd = -1};
    uint64_t file_bytes = meta->nbytes + TENSOR_TRAILER_BYTES;
    rc = reserve(s, hex, file_bytes, &t, err);
    if (rc < 0)
        return rc;
    /* The mapping path needs the blocks up front (ENOSPC, not SIGBUS, on a
     * full filesystem); pwrite reports ENOSPC itself. */
    if (src->read == NULL)
        rc = allocate(t.fd, file_bytes, hex, err);
    if (rc == 0)
        rc = write_and_verify(meta, hex, t.fd, src, err);
    t.verified = rc == 0;
    if (rc == 0)
        rc = finish_file(s, meta, hex, &t, err);
    temp_file_discard(&t);
    if (rc == 0 && published != NULL)
        *published = true;
    return rc;
}

/* Each lock stripe and fanout directory made once at the daemon's start
 * costs no create in the first loads: a create takes the directory's lock,
 * which the publishing threads queue on (a cold start of a model of 250
 * small tensors registered 14% faster, BENCHMARKS.md). The fanout
 * directories are made, not opened: a handle opens those it publishes into
 * (fanout_dir), so a daemon serving many tenant stores holds descriptors
 * only for the directories in use, and at most its budget of them
 * (store_keep_fanout_fd). */
int store_prepare_publish(store *s, tetris_error *err)
{
    int rc = store_make_lock_stripes(s, err);
    for (unsigned i = 0; rc == 0 && i < STORE_TENSOR_FANOUT; i++) {
        char name[3];
        snprintf(name, sizeof name, "%02x", i);
        struct stat st;
        if (fstatat(s->tensors_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
            continue;
        if (mkdirat(s->tensors_fd, name, 0755) == 0)
            continue;
        int made_error = errno; /* EEXIST: made meanwhile, or a link or file in its place */
        if (made_error == EEXIST && fstatat(s->tensors_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISDIR(st.st_mode))
            continue;
        rc = tetris_fail(err, store_errno_code(made_error), made_error, "create %s/tensors/%s",
                         s->public_dir, name);
    }
    if (rc < 0)
        tetris_wrap(err, "prepare store %s for publishing", s->root);
    return rc;
}

int store_publish_tensor(store *s, const tensor_meta *meta, store_fill_fn fill, void *ctx,
                         bool *published, tetris_error *err)
{
    struct byte_source src = {.fill = fill, .ctx = ctx};
    return publish_from(s, meta, &src, published, err);
}

int store_publish_tensor_chunked(store *s, const tensor_meta *meta, store_read_fn read,
                                 void *ctx, bool *published, tetris_error *err)
{
    struct byte_source src = {.read = read, .ctx = ctx};
    return publish_from(s, meta, &src, published, err);
}

/* The bytes go into the temp file before their identity is known, so the
 * tensor's lock is taken only to publish: concurrent publishers of one
 * digest each write a copy, and the first rename wins (the others find it
 * resident under the lock and discard theirs). That costs a write of the
 * bytes, never a second read of them. */
int store_publish_tensor_computed(store *s, tensor_meta *meta, store_read_fn read,
                                  store_fill_fn fill, void *ctx, unsigned flags, bool *published,
                                  tetris_error *err)
{
    int rc = publish_check(s, meta, published, err);
    if (rc < 0)
        return rc;
    if ((read == NULL) == (fill == NULL))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "publish: give one of read and fill");
    if ((flags & ~(unsigned)STORE_PUBLISH_SMALL_PAGES) != 0 ||
        ((flags & STORE_PUBLISH_SMALL_PAGES) && read == NULL))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "publish: flags %#x with this source", flags);
    struct byte_source src = {.read = read, .fill = fill, .ctx = ctx};
    const char *what = "(identity pending)";
    struct temp_file t = {.fd = -1};
    uint64_t file_bytes = meta->nbytes + TENSOR_TRAILER_BYTES;
    rc = reserve(s, "pending", file_bytes, &t, err);
    if (rc < 0)
        return rc;
    if (fill != NULL)
        rc = allocate(t.fd, file_bytes, what, err);
    if (rc == 0)
        rc = write_and_hash(meta, what, t.fd, &src, flags, &meta->digest, &meta->crc32, err);
    /* Its identity is what its bytes hashed to: verified by construction. */
    t.verified = rc == 0;
    if (rc == 0) {
        cleanup_close int lock = store_lock_tensor(s, &meta->digest, err);
        if (lock < 0)
            rc = lock;
        else if (!store_has_tensor(s, &meta->digest)) {
            char hex[TENSOR_DIGEST_HEX_LEN + 1];
            tensor_digest_to_hex(&meta->digest, hex);
            rc = finish_file(s, meta, hex, &t, err);
            if (rc == 0 && published != NULL)
                *published = true;
        }
    }
    temp_file_discard(&t);
    return rc;
}
