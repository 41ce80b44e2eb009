/* model_publish.c - a model file's tensor into the store, without an
 * intermediate copy of the whole tensor. */
#include "model/model_publish.h"

struct source {
    const tensor_desc *t;
    int fd;
    model_publish_check_fn check; /* may be NULL */
    void *check_ctx;
};

static int check(const struct source *src, tetris_error *err)
{
    return src->check != NULL ? src->check(src->check_ctx, err) : 0;
}

static int decode_whole(void *ctx, void *dst, uint64_t len, tetris_error *err)
{
    const struct source *src = ctx;
    if (len != src->t->meta.nbytes)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "tensor %s: store asked for %llu bytes, not %llu",
                           src->t->name, (unsigned long long)len,
                           (unsigned long long)src->t->meta.nbytes);
    int rc = check(src, err);
    if (rc != 0)
        return rc;
    return model_read_tensor(src->t, src->fd, dst, err);
}

static int read_raw_range(void *ctx, void *dst, uint64_t offset, size_t len, tetris_error *err)
{
    const struct source *src = ctx;
    int rc = check(src, err);
    if (rc != 0)
        return rc;
    return model_read_tensor_range(src->t, src->fd, offset, dst, len, err);
}

int model_publish_tensor_checked(store *s, const tensor_desc *t, int source_fd,
                                 model_publish_check_fn check_fn, void *check_ctx, bool *published,
                                 tetris_error *err)
{
    struct source src = {.t = t, .fd = source_fd, .check = check_fn, .check_ctx = check_ctx};
    if (t->encoding == TENSOR_ENC_RAW && t->length == t->meta.nbytes)
        return store_publish_tensor_chunked(s, &t->meta, read_raw_range, &src, published, err);
    return store_publish_tensor(s, &t->meta, decode_whole, &src, published, err);
}

int model_publish_tensor(store *s, const tensor_desc *t, int source_fd, bool *published,
                         tetris_error *err)
{
    return model_publish_tensor_checked(s, t, source_fd, NULL, NULL, published, err);
}

int model_publish_tensor_computed(store *s, tensor_desc *t, int source_fd,
                                  model_publish_check_fn check_fn, void *check_ctx, unsigned flags,
                                  bool *published, tetris_error *err)
{
    struct source src = {.t = t, .fd = source_fd, .check = check_fn, .check_ctx = check_ctx};
    bool raw = t->encoding == TENSOR_ENC_RAW && t->length == t->meta.nbytes;
    int rc = store_publish_tensor_computed(s, &t->meta, raw ? read_raw_range : NULL,
                                           raw ? NULL : decode_whole, &src, flags, published, err);
    if (rc == 0)
        t->has_digest = true;
    return rc;
}
