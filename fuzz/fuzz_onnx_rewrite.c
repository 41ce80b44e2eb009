/* fuzz_onnx_rewrite.c - libFuzzer harness for onnx_rewrite(), the pass
 * that strips shared tensor payloads out of an ONNX image before ONNX
 * Runtime sees it. The last input byte picks which tensors the share
 * callback takes, so the mutator explores both paths of every tensor.
 *
 * Checked: every tensor the callback is shown lies inside the input (its
 * name, its in-image payload, its external location); a rewritten image is
 * itself a well-formed model; and rewriting with nothing shared is a fixed
 * point (it only re-encodes the messages it walks, so doing it twice
 * changes nothing, and on an image with nothing shared it is the identity
 * up to that re-encoding). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_common.h"
#include "model/onnx_rewrite.h"

struct policy {
    const uint8_t *image;
    size_t size;
    uint8_t share_bits; /* tensor k is shared if bit k % 8 is set */
    unsigned seen;
};

static bool inside(const struct policy *p, const void *ptr, size_t len)
{
    const uint8_t *b = ptr;
    return b >= p->image && b <= p->image + p->size && len <= (size_t)(p->image + p->size - b);
}

static bool share_some(void *ctx, const struct onnx_tensor_ref *t, struct onnx_external *ext)
{
    struct policy *p = ctx;
    if (t->ndim < 0 || t->ndim > TENSOR_MAX_DIMS)
        abort();
    if (t->name != NULL ? !inside(p, t->name, t->name_len) : t->name_len != 0)
        abort();
    if (t->location != NULL) {
        if (!inside(p, t->location, t->location_len))
            abort();
    } else if (t->offset > p->size || t->length > p->size - t->offset) {
        abort(); /* an in-image payload must lie in the image */
    }
    bool share = (p->share_bits >> (p->seen++ % 8)) & 1;
    if (share) {
        int n = t->name_len > 200 ? 200 : (int)t->name_len;
        snprintf(ext->location, sizeof(ext->location), "tensors/%.*s", n,
                 t->name != NULL ? t->name : "");
        ext->offset = t->offset;
    }
    return share;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct policy p = {.image = data, .size = size, .share_bits = size ? data[size - 1] : 0};
    uint8_t *once = NULL, *twice = NULL, *thrice = NULL;
    size_t once_len = 0, twice_len = 0, thrice_len = 0;
    tetris_error err;

    if (onnx_rewrite(data, size, share_some, &p, &once, &once_len, &err) < 0) {
        if (err.code != TETRIS_E_FORMAT && err.code != TETRIS_E_NOMEM)
            abort();
        return 0;
    }
    struct policy q = {.image = once, .size = once_len}; /* shares nothing */
    if (onnx_rewrite(once, once_len, share_some, &q, &twice, &twice_len, &err) < 0) {
        fprintf(stderr, "rewritten image does not parse: %s\n", err.msg);
        abort();
    }
    struct policy r = {.image = twice, .size = twice_len};
    if (onnx_rewrite(twice, twice_len, share_some, &r, &thrice, &thrice_len, &err) < 0)
        abort();
    if (thrice_len != twice_len || memcmp(thrice, twice, twice_len) != 0)
        abort(); /* sharing nothing must be a fixed point */
    if (p.share_bits == 0 && (twice_len != once_len || memcmp(twice, once, once_len) != 0))
        abort();
    free(once);
    free(twice);
    free(thrice);
    return 0;
}
