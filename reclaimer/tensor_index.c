/* tensor_index.c - open-addressing hash table keyed by tensor digest (the
 * digest is a SHA-256, so its first 8 bytes are already a good hash), plus
 * the last-use state file. */
#include "reclaimer/tensor_index.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fileio.h"

struct tensor_index {
    struct index_entry *slots;
    size_t cap; /* power of two */
    size_t count;
};

static uint64_t digest_hash(const tensor_digest *d)
{
    uint64_t h;
    memcpy(&h, d->bytes, sizeof(h));
    return h;
}

int tensor_index_new(tensor_index **out, tetris_error *err)
{
    tensor_index *ix = calloc(1, sizeof(*ix));
    if (ix != NULL) {
        ix->cap = 1024;
        ix->slots = calloc(ix->cap, sizeof(*ix->slots));
    }
    if (ix == NULL || ix->slots == NULL) {
        free(ix);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor index");
    }
    *out = ix;
    return 0;
}

void tensor_index_free(tensor_index *ix)
{
    if (ix == NULL)
        return;
    free(ix->slots);
    free(ix);
}

static size_t probe(const tensor_index *ix, const tensor_digest *d)
{
    size_t mask = ix->cap - 1;
    size_t i = digest_hash(d) & mask;
    while (ix->slots[i].used && !tensor_digest_equal(&ix->slots[i].digest, d))
        i = (i + 1) & mask;
    return i;
}

struct index_entry *tensor_index_find(tensor_index *ix, const tensor_digest *d)
{
    size_t i = probe(ix, d);
    return ix->slots[i].used ? &ix->slots[i] : NULL;
}

static int grow(tensor_index *ix, tetris_error *err)
{
    size_t cap = ix->cap * 2;
    struct index_entry *slots = calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor index of %zu", cap);
    struct index_entry *old = ix->slots;
    size_t old_cap = ix->cap;
    ix->slots = slots;
    ix->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].used)
            ix->slots[probe(ix, &old[i].digest)] = old[i];
    free(old);
    return 0;
}

int tensor_index_upsert(tensor_index *ix, const tensor_digest *d, struct index_entry **out,
                        bool *created, tetris_error *err)
{
    size_t i = probe(ix, d);
    if (ix->slots[i].used) {
        *out = &ix->slots[i];
        if (created != NULL)
            *created = false;
        return 0;
    }
    if ((ix->count + 1) * 4 > ix->cap * 3) { /* keep load under 3/4 */
        int rc = grow(ix, err);
        if (rc < 0)
            return rc;
        i = probe(ix, d);
    }
    memset(&ix->slots[i], 0, sizeof(ix->slots[i]));
    ix->slots[i].digest = *d;
    ix->slots[i].used = true;
    ix->count++;
    *out = &ix->slots[i];
    if (created != NULL)
        *created = true;
    return 0;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
void tensor_index_remove(tensor_index *ix, const tensor_digest *d)
{
    size_t mask = ix->cap - 1;
    size_t i = probe(ix, d);
    if (!ix->slots[i].used)
        return;
    ix->slots[i].used = false;
    ix->count--;
    for (size_t j = (i + 1) & mask; ix->slots[j].used; j = (j + 1) & mask) {
        size_t home = digest_hash(&ix->slots[j].digest) & mask;
        /* Move j back to i if its home is not in (i, j] cyclically. */
        bool stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            ix->slots[i] = ix->slots[j];
            ix->slots[j].used = false;
            i = j;
        }
    }
}

size_t tensor_index_count(const tensor_index *ix)
{
    return ix->count;
}

struct index_entry *tensor_index_next(tensor_index *ix, size_t *cursor)
{
    while (*cursor < ix->cap) {
        struct index_entry *e = &ix->slots[(*cursor)++];
        if (e->used)
            return e;
    }
    return NULL;
}

int tensor_index_save(tensor_index *ix, const char *path, tetris_error *err)
{
    cleanup_free char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "save %s", path);
    struct index_entry *e;
    for (size_t c = 0; (e = tensor_index_next(ix, &c)) != NULL;) {
        if (e->last_ref_s == 0)
            continue;
        char hex[TENSOR_DIGEST_HEX_LEN + 1];
        tensor_digest_to_hex(&e->digest, hex);
        fprintf(mem, "%s %" PRId64 "\n", hex, e->last_ref_s);
    }
    if (fclose(mem) != 0)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "save %s", path);
    return file_replace(path, text, len, 0600, err);
}

int tensor_index_load(tensor_index *ix, const char *path, tetris_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", path);
    }
    cleanup_fclose FILE *fp = fdopen(fd, "r");
    if (fp == NULL) {
        close(fd);
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", path);
    }
    char line[256];
    int lineno = 0;
    while (fgets(line, sizeof(line), fp) != NULL) {
        lineno++;
        char hex[TENSOR_DIGEST_HEX_LEN + 1];
        int64_t t;
        tensor_digest d;
        tetris_error ignored;
        if (sscanf(line, "%64s %" SCNd64, hex, &t) != 2 ||
            tensor_digest_from_hex(hex, &d, &ignored) < 0 || t <= 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s:%d: malformed line", path, lineno);
        struct index_entry *e;
        int rc = tensor_index_upsert(ix, &d, &e, NULL, err);
        if (rc < 0)
            return rc;
        e->last_ref_s = t;
    }
    if (ferror(fp))
        return tetris_fail(err, TETRIS_E_IO, errno, "read %s", path);
    return 0;
}
