/* model.c - the model object: building it, whole-model checks, and
 * reading tensor bytes back from their sources (decoding and hashing
 * them). The parsers build it; model_parse.c picks the parser. */
#include "model/model.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/workers.h"
#include "common/pbwire.h"

model *model_new(const char *path, const char *format, tetris_error *err)
{
    model *m = calloc(1, sizeof *m);
    if (m == NULL) {
        tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "model %s", path);
        return NULL;
    }
    m->path = strdup(path);
    m->format = strdup(format);
    if (m->path == NULL || m->format == NULL) {
        model_free(m);
        tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "model %s", path);
        return NULL;
    }
    return m;
}

void model_free(model *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_tensors; i++) {
        free(m->tensors[i].name);
        free(m->tensors[i].source);
    }
    free(m->tensors);
    free(m->path);
    free(m->format);
    free(m);
}

int model_add_tensor(model *m, tensor_desc *t, tetris_error *err)
{
    if (m->n_tensors % 64 == 0) {
        size_t cap = m->n_tensors + 64;
        tensor_desc *grown = reallocarray(m->tensors, cap, sizeof *grown);
        if (grown == NULL) {
            free(t->name);
            free(t->source);
            t->name = t->source = NULL;
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: tensor table", m->path);
        }
        m->tensors = grown;
    }
    m->tensors[m->n_tensors++] = *t;
    m->total_bytes += t->meta.nbytes;
    t->name = t->source = NULL;
    return 0;
}

int tensor_shape_nbytes(const char *dtype, int ndim, const int64_t *shape, uint64_t *nbytes,
                        tetris_error *err)
{
    size_t size = tensor_dtype_size(dtype);
    if (size == 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "unknown dtype \"%s\"", dtype);
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%d dims (at most %d supported)", ndim,
                           TENSOR_MAX_DIMS);
    uint64_t n = size;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "dim %d is negative (%lld)", i,
                               (long long)shape[i]);
        if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n) || n > (uint64_t)INT64_MAX)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "shape overflows: byte size exceeds 2^63 at dim %d", i);
    }
    *nbytes = n;
    return 0;
}

void tensor_shape_format(const int64_t *shape, size_t ndim, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (size_t k = 0; k < ndim && used < len; k++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, k > 0 ? "," : "", shape[k]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

/* Orders regions by (source, offset) so overlaps become neighbours. */
static int region_cmp(const void *a, const void *b)
{
    const tensor_desc *x = *(const tensor_desc *const *)a;
    const tensor_desc *y = *(const tensor_desc *const *)b;
    int c = strcmp(x->source, y->source);
    if (c != 0)
        return c;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int name_cmp(const void *a, const void *b)
{
    const tensor_desc *x = *(const tensor_desc *const *)a;
    const tensor_desc *y = *(const tensor_desc *const *)b;
    return strcmp(x->name, y->name);
}

int model_check(const model *m, const char *what, tetris_error *err)
{
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        uint64_t end;
        /* Regions are file offsets: off_t is signed. */
        if (__builtin_add_overflow(t->offset, t->length, &end) || end > (uint64_t)INT64_MAX)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: tensor \"%s\": offset + length overflows 2^63", what,
                               t->name);
        if (t->encoding == TENSOR_ENC_RAW && t->length != t->meta.nbytes)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: tensor \"%s\": %llu bytes of data for a %s tensor of "
                               "%llu bytes",
                               what, t->name, (unsigned long long)t->length, t->meta.dtype,
                               (unsigned long long)t->meta.nbytes);
        if (t->encoding == TENSOR_ENC_VARINT && t->length > 10 * t->meta.nbytes)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: tensor \"%s\": %llu bytes of varints cannot hold %llu "
                               "bytes of %s",
                               what, t->name, (unsigned long long)t->length,
                               (unsigned long long)t->meta.nbytes, t->meta.dtype);
    }
    if (m->n_tensors < 2)
        return 0;

    cleanup_free const tensor_desc **v = calloc(m->n_tensors, sizeof *v);
    if (v == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: checking tensors", what);
    for (size_t i = 0; i < m->n_tensors; i++)
        v[i] = &m->tensors[i];

    qsort(v, m->n_tensors, sizeof *v, name_cmp);
    for (size_t i = 1; i < m->n_tensors; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: duplicate tensor name \"%s\"",
                               what, v[i]->name);

    qsort(v, m->n_tensors, sizeof *v, region_cmp);
    const tensor_desc *prev = NULL;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *t = v[i];
        if (t->length == 0)
            continue; /* empty tensors occupy no bytes */
        if (prev != NULL && strcmp(prev->source, t->source) == 0 &&
            prev->offset + prev->length > t->offset)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) "
                               "overlap in %s",
                               what, prev->name, (unsigned long long)prev->offset,
                               (unsigned long long)(prev->offset + prev->length), t->name,
                               (unsigned long long)t->offset,
                               (unsigned long long)(t->offset + t->length), t->source);
        prev = t;
    }
    return 0;
}

static int pread_full(int fd, void *buf, uint64_t len, uint64_t offset, const tensor_desc *t,
                      tetris_error *err)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, (off_t)offset);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "read %s (tensor \"%s\")", t->source,
                               t->name);
        if (n == 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: tensor \"%s\": file ends before its region (changed since "
                               "it was indexed?)",
                               t->source, t->name);
        p += n;
        len -= (uint64_t)n;
        offset += (uint64_t)n;
    }
    return 0;
}

/* Decodes a VARINT region streamed from the file through a bounded buffer:
 * the region's length is the source's claim (up to 10 bytes per element),
 * so reading it whole would let a request make its reader allocate ten
 * times the tensor's size. Only dst (nbytes) and the buffer are memory. */
#define VARINT_CHUNK_BYTES (1u << 20)
#define VARINT_MAX_BYTES 10

static int read_varints(const tensor_desc *t, int fd, void *dst, tetris_error *err)
{
    size_t width = tensor_dtype_size(t->meta.dtype);
    if (width == 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "unknown dtype \"%s\"", t->meta.dtype);
    bool is_bool = strcmp(t->meta.dtype, "bool") == 0;
    uint64_t elems = t->meta.nbytes / width;
    size_t cap = t->length < VARINT_CHUNK_BYTES ? (size_t)t->length : VARINT_CHUNK_BYTES;
    cleanup_free uint8_t *buf = malloc(cap > 0 ? cap : 1);
    if (buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "varint buffer");
    uint64_t read_off = 0; /* region bytes read so far */
    size_t have = 0, pos = 0;
    uint8_t *out = dst;
    for (uint64_t i = 0; i < elems; i++) {
        if (have - pos < VARINT_MAX_BYTES && read_off < t->length) {
            memmove(buf, buf + pos, have - pos);
            have -= pos;
            pos = 0;
            uint64_t want = t->length - read_off;
            if (want > cap - have)
                want = cap - have;
            int rc = pread_full(fd, buf + have, want, t->offset + read_off, t, err);
            if (rc < 0)
                return rc;
            have += (size_t)want;
            read_off += want;
        }
        const uint8_t *p = buf + pos;
        uint64_t v;
        if (pb_decode_varint(&p, buf + have, &v) < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "varint %llu of %llu is malformed or missing", (unsigned long long)i,
                               (unsigned long long)elems);
        pos = (size_t)(p - buf);
        if (is_bool)
            v = v != 0;
        for (size_t b = 0; b < width; b++)
            out[b] = (uint8_t)(v >> (8 * b));
        out += width;
    }
    if (pos != have || read_off != t->length)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%llu bytes left after %llu varints",
                           (unsigned long long)(t->length - read_off + (have - pos)),
                           (unsigned long long)elems);
    return 0;
}

int model_read_tensor(const tensor_desc *t, int source_fd, void *dst, tetris_error *err)
{
    if (t->encoding == TENSOR_ENC_RAW) {
        if (t->length != t->meta.nbytes)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: tensor \"%s\": region of %llu bytes for %llu bytes",
                               t->source, t->name, (unsigned long long)t->length,
                               (unsigned long long)t->meta.nbytes);
        return pread_full(source_fd, dst, t->length, t->offset, t, err);
    }
    if (t->encoding != TENSOR_ENC_VARINT)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: tensor \"%s\": unsupported encoding %d",
                           t->source, t->name, (int)t->encoding);
    if (read_varints(t, source_fd, dst, err) < 0)
        return tetris_wrap(err, "%s: tensor \"%s\"", t->source, t->name);
    return 0;
}

int model_read_tensor_range(const tensor_desc *t, int source_fd, uint64_t offset, void *dst,
                            size_t len, tetris_error *err)
{
    if (t->encoding != TENSOR_ENC_RAW)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "tensor \"%s\": not raw, read it whole",
                           t->name);
    if (offset > t->length || len > t->length - offset)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "tensor \"%s\": range past its %llu bytes",
                           t->name, (unsigned long long)t->length);
    return pread_full(source_fd, dst, len, t->offset + offset, t, err);
}

/* One source file, open for hashing. */
struct open_source {
    const char *path;
    int fd;
    uint64_t size;
};

/* The job of hashing a model's tensors from its sources, on workers: each
 * tensor is one item; the first error stops the rest. */
struct digest_job {
    model *m;
    const struct open_source *src; /* per tensor: its source */
    pthread_mutex_t lock;
    int rc;
    tetris_error err;
};

/* Chunk of a raw tensor's hashing: read with pread and hashed while it is
 * still in cache. Not a mapping of the file: where page faults are dear
 * (some VMs: several seconds per GiB), faulting the source in costs more
 * than hashing it. */
#define DIGEST_CHUNK_BYTES (256u * 1024u)

static int digest_raw(tensor_desc *t, const struct open_source *os, tetris_error *err)
{
    tensor_hasher *h = NULL;
    int ret = tensor_hasher_new(&t->meta, &h, err);
    if (ret < 0)
        return ret;
    size_t chunk = t->meta.nbytes < DIGEST_CHUNK_BYTES ? (size_t)t->meta.nbytes
                                                       : DIGEST_CHUNK_BYTES;
    cleanup_free uint8_t *buf = malloc(chunk > 0 ? chunk : 1);
    if (buf == NULL) {
        tensor_hasher_free(h);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor \"%s\"", t->name);
    }
    for (uint64_t off = 0; off < t->meta.nbytes; off += chunk) {
        size_t n = t->meta.nbytes - off < chunk ? (size_t)(t->meta.nbytes - off) : chunk;
        if ((ret = model_read_tensor_range(t, os->fd, off, buf, n, err)) < 0) {
            tensor_hasher_free(h);
            return ret;
        }
        tensor_hasher_update(h, buf, n);
    }
    tensor_hasher_finish(h, &t->meta.digest, &t->meta.crc32);
    return 0;
}

static int digest_tensor(tensor_desc *t, const struct open_source *os, tetris_error *err)
{
    if (t->offset > os->size || t->length > os->size - t->offset)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: tensor \"%s\": region [%llu, +%llu) is past the end of the "
                           "file (%llu bytes)",
                           os->path, t->name, (unsigned long long)t->offset,
                           (unsigned long long)t->length, (unsigned long long)os->size);
    int ret;
    if (t->encoding == TENSOR_ENC_RAW) {
        ret = digest_raw(t, os, err);
    } else {
        cleanup_free uint8_t *bytes = malloc(t->meta.nbytes > 0 ? t->meta.nbytes : 1);
        if (bytes == NULL)
            ret = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor \"%s\"", t->name);
        else if ((ret = model_read_tensor(t, os->fd, bytes, err)) == 0)
            ret = tensor_digest_compute(&t->meta, bytes, err);
    }
    if (ret < 0)
        return tetris_wrap(err, "%s: tensor \"%s\"", os->path, t->name);
    t->has_digest = true;
    return 0;
}

static void digest_item(void *ctx, size_t i)
{
    struct digest_job *j = ctx;
    pthread_mutex_lock(&j->lock);
    bool failed = j->rc < 0;
    pthread_mutex_unlock(&j->lock);
    if (failed)
        return;
    if (j->m->tensors[i].has_digest)
        return;
    tetris_error err;
    int rc = digest_tensor(&j->m->tensors[i], &j->src[i], &err);
    pthread_mutex_lock(&j->lock);
    if (rc < 0 && j->rc == 0) {
        j->rc = rc;
        j->err = err;
    }
    pthread_mutex_unlock(&j->lock);
}

static int open_source(const char *path, struct open_source *os, tetris_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_IO, errno,
                           "open %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int rc = tetris_fail(err, TETRIS_E_IO, errno, "stat %s", path);
        close(fd);
        return rc;
    }
    *os = (struct open_source){.path = path, .fd = fd, .size = (uint64_t)st.st_size};
    return 0;
}

int model_compute_digests_workers(model *m, unsigned workers, tetris_error *err)
{
    if (m->n_tensors == 0)
        return 0;
    if (workers == 0) {
        struct cpu_allowance a;
        cpu_allowance_read(NULL, &a);
        workers = a.workers;
    }
    /* Each distinct source is opened once. */
    cleanup_free struct open_source *sources = calloc(m->n_tensors, sizeof(*sources));
    cleanup_free struct open_source *per_tensor = calloc(m->n_tensors, sizeof(*per_tensor));
    if (sources == NULL || per_tensor == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "model of %zu tensors", m->n_tensors);
    size_t n_sources = 0;
    int ret = 0;
    for (size_t i = 0; i < m->n_tensors && ret == 0; i++) {
        size_t k = 0;
        while (k < n_sources && strcmp(sources[k].path, m->tensors[i].source) != 0)
            k++;
        if (k == n_sources && (ret = open_source(m->tensors[i].source, &sources[k], err)) == 0)
            n_sources++;
        if (ret == 0)
            per_tensor[i] = sources[k];
    }
    if (ret == 0) {
        struct digest_job j = {.m = m, .src = per_tensor};
        pthread_mutex_init(&j.lock, NULL);
        workers_run(m->n_tensors, workers, NULL, digest_item, &j);
        pthread_mutex_destroy(&j.lock);
        if (j.rc < 0) {
            ret = j.rc;
            if (err != NULL)
                *err = j.err;
        }
    }
    for (size_t k = 0; k < n_sources; k++)
        close(sources[k].fd);
    return ret;
}

int model_compute_digests(model *m, tetris_error *err)
{
    return model_compute_digests_workers(m, 0, err);
}
