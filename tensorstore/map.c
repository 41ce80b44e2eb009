/* map.c - handing out resident tensors: read-only shared mappings after a
 * trailer check, and the re-hashing scrubs (full digest, or CRC32 only).
 *
 * A mapping covers the whole file (bytes + trailer) from offset 0, so the
 * tensor bytes start page-aligned and, on tmpfs mounted huge=within_size or
 * huge=advise, the kernel can back them with 2 MiB pages (shmem picks a
 * suitably aligned address itself; MADV_HUGEPAGE opts in under "advise"). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cleanup.h"
#include "crc32.h"
#include "store_private.h"

#define HUGE_PAGE_BYTES (2u * 1024u * 1024u)

static int map_file(int fd, const tensor_meta *meta, store_mapping *out, tetris_error *err)
{
    size_t len = (size_t)meta->nbytes + TENSOR_TRAILER_BYTES;
    void *base = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return tetris_fail(err, store_errno_code(errno), errno, "mmap %zu bytes", len);
    if (meta->nbytes >= HUGE_PAGE_BYTES)
        madvise(base, len, MADV_HUGEPAGE); /* a hint; kernels without THP say EINVAL */
    out->data = base;
    out->nbytes = meta->nbytes;
    out->meta = *meta;
    out->map_base = base;
    out->map_len = len;
    return 0;
}

int store_map_tensor(store *s, const tensor_digest *d, store_mapping *out, tetris_error *err)
{
    tensor_meta meta;
    cleanup_close int fd = tensor_file_open(s, d, &meta, err);
    if (fd < 0) {
        if (err != NULL && err->code == TETRIS_E_NOTFOUND)
            return tetris_wrap(err, "store %s", s->root);
        return fd;
    }
    return map_file(fd, &meta, out, err);
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
