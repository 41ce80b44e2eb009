/* map.c - handing out resident tensors: read-only shared mappings after a
 * trailer check, the process's mapping budget, and the re-hashing scrubs
 * (full digest, or CRC32 only).
 *
 * Every mapped tensor is one mapping, and the kernel caps the mappings of
 * a process at vm.max_map_count (65530 by default). Past it mmap fails with
 * ENOMEM, which reads like a lack of memory; map_file says which limit it
 * is instead, and store_map_budget lets a loader plan around it.
 *
 * A mapping covers the whole file (bytes + trailer) from offset 0, so the
 * tensor bytes start page-aligned and, on tmpfs mounted huge=within_size or
 * huge=advise, the kernel can back them with 2 MiB pages (shmem picks a
 * suitably aligned address itself; MADV_HUGEPAGE opts in under "advise"). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "tensorstore/crc32.h"
#include "tensorstore/store_private.h"

#define HUGE_PAGE_BYTES (2u * 1024u * 1024u)

/* Mappings within this many of the limit count as "at the limit" (the
 * kernel's count and /proc/self/maps differ by the vsyscall page). */
#define MAP_LIMIT_SLACK 16

static int read_map_limit(uint64_t *out, tetris_error *err)
{
    cleanup_fclose FILE *f = fopen("/proc/sys/vm/max_map_count", "re");
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "open /proc/sys/vm/max_map_count");
    unsigned long long v;
    if (fscanf(f, "%llu", &v) != 1)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "read /proc/sys/vm/max_map_count");
    *out = v;
    return 0;
}

/* Lines of /proc/self/maps: one per mapping. */
static int count_own_mappings(uint64_t *out, tetris_error *err)
{
    cleanup_close int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open /proc/self/maps");
    char buf[65536];
    uint64_t lines = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "read /proc/self/maps");
        if (n == 0)
            break;
        for (const char *p = buf; (p = memchr(p, '\n', (size_t)(buf + n - p))) != NULL; p++)
            lines++;
    }
    *out = lines;
    return 0;
}

int store_map_budget(uint64_t *out, tetris_error *err)
{
    uint64_t limit, used;
    int rc = read_map_limit(&limit, err);
    if (rc == 0)
        rc = count_own_mappings(&used, err);
    if (rc < 0)
        return rc;
    *out = used + MAP_LIMIT_SLACK < limit ? limit - used - MAP_LIMIT_SLACK : 0;
    return 0;
}

int store_each_own_mapping(int (*fn)(void *ctx, const store_own_mapping *m), void *ctx,
                           tetris_error *err)
{
    cleanup_fclose FILE *maps = fopen("/proc/self/maps", "re");
    if (maps == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "open /proc/self/maps");
    cleanup_free char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, maps) > 0) {
        unsigned long start, end, inode;
        unsigned dev_major, dev_minor;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %*s %*x %x:%x %lu %n", &start, &end, &dev_major, &dev_minor,
                   &inode, &path_at) != 5)
            continue;
        line[strcspn(line, "\n")] = '\0';
        store_own_mapping m = {.start = start,
                               .end = end,
                               .dev = makedev(dev_major, dev_minor),
                               .inode = inode,
                               .path = line[path_at] == '/' ? line + path_at : NULL};
        int r = fn(ctx, &m);
        if (r != 0)
            return r;
    }
    return 0;
}

/* store_keep_small_pages: the file's identity, and how many were marked. */
struct small_pages {
    const char *path;
    struct stat st;
    size_t marked;
    tetris_error *err;
};

static int mark_small_pages(void *ctx, const store_own_mapping *m)
{
    struct small_pages *k = ctx;
    if (m->inode != (unsigned long)k->st.st_ino || m->dev != k->st.st_dev)
        return 0;
    /* EINVAL: a kernel without transparent huge pages, nothing to keep. */
    if (madvise((void *)m->start, m->end - m->start, MADV_NOHUGEPAGE) != 0 && errno != EINVAL)
        return tetris_fail(k->err, TETRIS_E_IO, errno, "madvise(MADV_NOHUGEPAGE) on %s", k->path);
    k->marked++;
    return 0;
}

int store_keep_small_pages(const char *path, size_t *marked, tetris_error *err)
{
    struct small_pages k = {.path = path, .err = err};
    *marked = 0;
    if (stat(path, &k.st) != 0)
        return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_IO, errno, "%s",
                           path);
    int r = store_each_own_mapping(mark_small_pages, &k, err);
    *marked = k.marked;
    return r;
}

#ifndef PR_THP_DISABLE_EXCEPT_ADVISED
#define PR_THP_DISABLE_EXCEPT_ADVISED (1 << 1) /* Linux 6.18 */
#endif

int store_keep_small_pages_inherited(bool *kept, tetris_error *err)
{
    *kept = false;
    int now = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0);
    if (now < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "prctl(PR_GET_THP_DISABLE)");
    if (now != 0) {
        /* Off already, perhaps for every mapping: loosening it to "except
         * advised" is not ours to do. */
        *kept = true;
        return 0;
    }
    if (prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED, 0, 0) == 0) {
        *kept = true;
        return 0;
    }
    /* EINVAL: a kernel before the mode. Turning huge pages off altogether
     * instead would also take them from what the runtime asks them for. */
    if (errno == EINVAL)
        return 0;
    return tetris_fail(err, TETRIS_E_IO, errno, "prctl(PR_SET_THP_DISABLE)");
}

/* mmap failed with ENOMEM: name the limit if that is what was hit. */
static int fail_nomem(size_t len, tetris_error *err)
{
    uint64_t limit, used;
    if (read_map_limit(&limit, NULL) == 0 && count_own_mappings(&used, NULL) == 0 &&
        used + MAP_LIMIT_SLACK >= limit)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM,
                           "mmap %zu bytes: this process has %llu mappings, the kernel's limit "
                           "(vm.max_map_count = %llu); each shared tensor takes one: raise the "
                           "limit (sysctl vm.max_map_count) or map fewer tensors",
                           len, (unsigned long long)used, (unsigned long long)limit);
    return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "mmap %zu bytes", len);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* Fills the page tables of a fresh read-only mapping. A kernel before 5.14
 * does not know MADV_POPULATE_READ (EINVAL): then one read per page does
 * the same, at the cost of a fault each (what the first inference would
 * otherwise pay). */
static int populate(void *base, size_t len, bool *by_reads, tetris_error *err)
{
    *by_reads = false;
    if (madvise(base, len, MADV_POPULATE_READ) == 0)
        return 0;
    if (errno != EINVAL)
        return tetris_fail(err, store_errno_code(errno), errno, "populate %zu bytes", len);
    long page = sysconf(_SC_PAGESIZE);
    size_t step = page > 0 ? (size_t)page : 4096;
    volatile const unsigned char *p = base;
    for (size_t off = 0; off < len; off += step)
        (void)p[off];
    *by_reads = true;
    return 0;
}

static int map_file(int fd, const tensor_meta *meta, enum store_populate how, store_mapping *out,
                    tetris_error *err)
{
    size_t len = (size_t)meta->nbytes + TENSOR_TRAILER_BYTES;
    int flags = MAP_SHARED | (how == STORE_POPULATE_MAP ? MAP_POPULATE : 0);
    void *base = mmap(NULL, len, PROT_READ, flags, fd, 0);
    if (base == MAP_FAILED && errno == ENOMEM)
        return fail_nomem(len, err);
    if (base == MAP_FAILED)
        return tetris_fail(err, store_errno_code(errno), errno, "mmap %zu bytes", len);
    if (meta->nbytes >= HUGE_PAGE_BYTES)
        madvise(base, len, MADV_HUGEPAGE); /* a hint; kernels without THP say EINVAL */
    bool by_reads = false;
    if (how == STORE_POPULATE_MADVISE) {
        int rc = populate(base, len, &by_reads, err);
        if (rc < 0) {
            munmap(base, len);
            return rc;
        }
    }
    out->data = base;
    out->nbytes = meta->nbytes;
    out->meta = *meta;
    out->map_base = base;
    out->map_len = len;
    out->populated_by_reads = by_reads;
    return 0;
}

int store_map_tensor(store *s, const tensor_digest *d, store_mapping *out, tetris_error *err)
{
    return store_map_tensor_populated(s, d, STORE_POPULATE_NONE, out, err);
}

int store_map_tensor_populated(store *s, const tensor_digest *d, enum store_populate how,
                               store_mapping *out, tetris_error *err)
{
    tensor_meta meta;
    cleanup_close int fd = tensor_file_open(s, d, &meta, err);
    if (fd < 0) {
        if (err != NULL && err->code == TETRIS_E_NOTFOUND)
            return tetris_wrap(err, "store %s", s->root);
        return fd;
    }
    return map_file(fd, &meta, how, out, err);
}

void store_unmap_tensor(store_mapping *m)
{
    if (m == NULL || m->map_base == NULL)
        return;
    munmap(m->map_base, m->map_len);
    memset(m, 0, sizeof *m);
}

bool store_has_tensor(store *s, const tensor_digest *d)
{
    tensor_meta meta;
    int fd = tensor_file_open(s, d, &meta, NULL);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

bool store_tensor_present(store *s, const tensor_digest *d)
{
    char rel[3 + TENSOR_DIGEST_HEX_LEN + 1];
    struct stat st;
    tensor_relpath(d, rel);
    return fstatat(s->tensors_fd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
           st.st_size >= TENSOR_TRAILER_BYTES;
}

int store_verify_tensor(store *s, const tensor_digest *d, tetris_error *err)
{
    store_mapping m;
    int rc = store_map_tensor(s, d, &m, err);
    if (rc < 0)
        return rc;
    tensor_hasher *h = NULL;
    rc = tensor_hasher_new(&m.meta, &h, err);
    if (rc < 0) {
        store_unmap_tensor(&m);
        return rc;
    }
    tensor_hasher_update(h, m.data, m.nbytes);
    tensor_digest got;
    uint32_t crc;
    tensor_hasher_finish(h, &got, &crc);
    bool digest_ok = tensor_digest_equal(&got, d);
    uint32_t want_crc = m.meta.crc32;
    bool crc_ok = crc == want_crc;
    store_unmap_tensor(&m);
    if (digest_ok && crc_ok)
        return 0;
    char want_hex[TENSOR_DIGEST_HEX_LEN + 1], got_hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(d, want_hex);
    tensor_digest_to_hex(&got, got_hex);
    if (!digest_ok)
        return tetris_fail(err, TETRIS_E_CORRUPT, 0, "tensor %s: bytes hash to %s", want_hex,
                           got_hex);
    return tetris_fail(err, TETRIS_E_CORRUPT, 0, "tensor %s: crc32 %08x, trailer says %08x",
                       want_hex, crc, want_crc);
}

int store_check_crc(store *s, const tensor_digest *d, tetris_error *err)
{
    store_mapping m;
    int rc = store_map_tensor(s, d, &m, err);
    if (rc < 0)
        return rc;
    uint32_t crc = crc32_update(0, m.data, m.nbytes);
    uint32_t want = m.meta.crc32;
    store_unmap_tensor(&m);
    if (crc == want)
        return 0;
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(d, hex);
    return tetris_fail(err, TETRIS_E_CORRUPT, 0, "tensor %s: crc32 %08x, trailer says %08x", hex,
                       crc, want);
}
