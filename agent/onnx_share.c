/* onnx_share.c - the model image and the proto -> agent tensor match that
 * both graph rewriters of the agent use (see onnx_share.h). */
#include "agent/onnx_share.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"

int onnx_share_read_image(const char *path, uint8_t **out, size_t *len, tetris_error *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", path);
    if (fstat(fd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", path);
    cleanup_free uint8_t *buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    if (buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory reading %s", path);
    size_t done = 0;
    while (done < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + done, (size_t)st.st_size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "read %s", path);
        if (n == 0)
            return tetris_fail(err, TETRIS_E_IO, 0, "%s shrank while reading", path);
        done += (size_t)n;
    }
    *out = steal_pointer(&buf);
    *len = done;
    return 0;
}

int onnx_share_image_open(const agent_model *am, const char *model_path,
                          struct onnx_share_image *img, tetris_error *err)
{
    memset(img, 0, sizeof(*img));
    const uint8_t *graph = am != NULL ? agent_model_graph(am, &img->len) : NULL;
    if (graph != NULL) {
        img->bytes = graph;
        return 0;
    }
    cleanup_close int fd = open(model_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", model_path);
    if (fstat(fd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", model_path);
    if (!S_ISREG(st.st_mode) || st.st_size <= 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not a regular file with bytes",
                           model_path);
    img->len = (size_t)st.st_size;
    img->map = mmap(NULL, img->len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (img->map == MAP_FAILED) {
        img->map = NULL;
        return tetris_fail(err, TETRIS_E_IO, errno, "mmap %s", model_path);
    }
    /* Read-ahead would read the weights around every header it faults
     * in; only advice, so a kernel that ignores it costs nothing. */
    madvise(img->map, img->len, MADV_RANDOM);
    img->bytes = img->map;
    return 0;
}

void onnx_share_image_close(struct onnx_share_image *img)
{
    if (img->map != NULL)
        munmap(img->map, img->len);
    memset(img, 0, sizeof(*img));
}

static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (strcmp(a, b) == 0)
        return true;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

int onnx_share_match_init(struct onnx_share_match *m, const agent_model *am, const char *model_path,
                          tetris_error *err)
{
    const model *mdl = am->model;
    memset(m, 0, sizeof(*m));
    m->am = am;
    size_t graph_len;
    m->pulled = agent_model_graph(am, &graph_len) != NULL;
    m->in_file = calloc(mdl->n_tensors + 1, sizeof(*m->in_file));
    if (m->in_file == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    for (size_t i = 0; i < mdl->n_tensors; i++)
        m->in_file[i] = mdl->tensors[i].source != NULL &&
                        same_file(mdl->tensors[i].source, model_path);
    const char *slash = strrchr(model_path, '/');
    if (slash == NULL)
        snprintf(m->model_dir, sizeof(m->model_dir), ".");
    else if ((size_t)(slash - model_path) >= sizeof(m->model_dir))
        return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "%s: path too long", model_path);
    else
        snprintf(m->model_dir, sizeof(m->model_dir), "%.*s",
                 slash == model_path ? 1 : (int)(slash - model_path), model_path);
    return 0;
}

/* A pulled graph's payload at "tensors/XX/<hex>", offset 0: the tensor of
 * that identity. */
static const agent_tensor *find_by_store_name(const struct onnx_share_match *m,
                                              const struct onnx_tensor_ref *ref)
{
    const model *mdl = m->am->model;
    char location[8 + 3 + TENSOR_DIGEST_HEX_LEN + 1];
    if (ref->location == NULL || ref->offset != 0 || ref->location_len != sizeof(location) - 1)
        return NULL;
    memcpy(location, ref->location, ref->location_len);
    location[ref->location_len] = '\0';
    tensor_digest d;
    tetris_error derr;
    if (strncmp(location, "tensors/", 8) != 0 || location[10] != '/' ||
        strncmp(location + 8, location + 11, 2) != 0 ||
        tensor_digest_from_hex(location + 11, &d, &derr) < 0)
        return NULL;
    for (size_t i = 0; i < mdl->n_tensors; i++)
        if (tensor_digest_equal(&mdl->tensors[i].meta.digest, &d))
            return &m->am->tensors[i];
    return NULL;
}

const agent_tensor *onnx_share_match_find(const struct onnx_share_match *m,
                                          const struct onnx_tensor_ref *ref)
{
    const model *mdl = m->am->model;
    char path[PATH_MAX];

    if (m->pulled)
        return find_by_store_name(m, ref);
    if (ref->location != NULL &&
        snprintf(path, sizeof(path), "%s/%.*s", m->model_dir, (int)ref->location_len,
                 ref->location) >= (int)sizeof(path))
        return NULL;
    for (size_t i = 0; i < mdl->n_tensors; i++) {
        const tensor_desc *d = &mdl->tensors[i];
        if (d->offset != ref->offset)
            continue;
        if (ref->location == NULL ? m->in_file[i] : d->source != NULL && same_file(d->source, path))
            return &m->am->tensors[i];
    }
    return NULL;
}

void onnx_share_match_release(struct onnx_share_match *m)
{
    free(m->in_file);
    m->in_file = NULL;
}

bool onnx_share_same_size(const struct onnx_tensor_ref *ref, const agent_tensor *t)
{
    if (t->desc->length != ref->length)
        return false;
    uint64_t nbytes = tensor_dtype_size(t->desc->meta.dtype);
    for (int i = 0; i < ref->ndim; i++) {
        if (ref->dims[i] < 0)
            return false;
        nbytes *= (uint64_t)ref->dims[i];
    }
    return nbytes == t->desc->meta.nbytes;
}
