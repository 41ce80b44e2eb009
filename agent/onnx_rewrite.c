/* onnx_rewrite.c - strip chosen tensor payloads out of an ONNX protobuf
 * image (see onnx_rewrite.h).
 *
 * The walker copies every field it does not understand byte for byte and
 * only descends into the messages that can hold tensors:
 *   ModelProto.graph(7) -> GraphProto.node(1), .initializer(5)
 *   NodeProto.attribute(5) -> AttributeProto.g(6), .graphs(11)
 * A rewritten message changes length, so each one is built in its own
 * buffer and then emitted into its parent with a fresh length prefix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_rewrite.h"

#define MAX_DEPTH 64 /* nested subgraphs; real models use a handful */

enum wire { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

/* TensorProto fields */
enum {
    TP_DIMS = 1, TP_DATA_TYPE = 2, TP_SEGMENT = 3, TP_FLOAT_DATA = 4, TP_INT32_DATA = 5,
    TP_STRING_DATA = 6, TP_INT64_DATA = 7, TP_NAME = 8, TP_RAW_DATA = 9, TP_DOUBLE_DATA = 10,
    TP_UINT64_DATA = 11, TP_EXTERNAL_DATA = 13, TP_DATA_LOCATION = 14,
};
#define TP_LOCATION_EXTERNAL 1

struct buf {
    uint8_t *p;
    size_t len, cap;
};

struct field {
    unsigned number;
    unsigned wire;
    uint64_t varint;   /* WIRE_VARINT value */
    size_t start, end; /* the whole field, tag included */
    size_t payload, payload_len; /* WIRE_LEN payload */
};

struct rewriter {
    const uint8_t *img;
    onnx_share_fn share;
    void *ctx;
};

static int graph_rewrite(struct rewriter *rw, size_t start, size_t end, int depth, struct buf *out,
                         tetris_error *err);

static void buf_free(struct buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

static int buf_put(struct buf *b, const void *data, size_t n, tetris_error *err)
{
    if (n > SIZE_MAX - b->len)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "rewritten model too large");
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (p == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory rewriting model");
        b->p = p;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

static int buf_varint(struct buf *b, uint64_t v, tetris_error *err)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            tmp[n] |= 0x80;
        n++;
    } while (v);
    return buf_put(b, tmp, n, err);
}

static int buf_tag(struct buf *b, unsigned number, unsigned wire, tetris_error *err)
{
    return buf_varint(b, ((uint64_t)number << 3) | wire, err);
}

static int buf_len_field(struct buf *b, unsigned number, const void *data, size_t n,
                         tetris_error *err)
{
    int r = buf_tag(b, number, WIRE_LEN, err);
    if (r == 0)
        r = buf_varint(b, n, err);
    if (r == 0)
        r = buf_put(b, data, n, err);
    return r;
}

static int buf_copy_field(struct rewriter *rw, struct buf *b, const struct field *f,
                          tetris_error *err)
{
    return buf_put(b, rw->img + f->start, f->end - f->start, err);
}

static int read_varint(const uint8_t *img, size_t *pos, size_t end, uint64_t *out,
                       tetris_error *err)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (*pos >= end)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "protobuf varint runs past its message");
        uint8_t byte = img[(*pos)++];
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return tetris_fail(err, TETRIS_E_FORMAT, 0, "protobuf varint longer than 10 bytes");
}

/* Reads the field at *pos (< end) and advances past it. */
static int next_field(struct rewriter *rw, size_t *pos, size_t end, struct field *f,
                      tetris_error *err)
{
    uint64_t tag, n;
    int r;

    memset(f, 0, sizeof(*f));
    f->start = *pos;
    if ((r = read_varint(rw->img, pos, end, &tag, err)) < 0)
        return r;
    f->number = (unsigned)(tag >> 3);
    f->wire = (unsigned)(tag & 7);
    if (f->number == 0 || (tag >> 3) > 0x1fffffff)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "protobuf field number %llu at offset %zu",
                           (unsigned long long)(tag >> 3), f->start);
    switch (f->wire) {
    case WIRE_VARINT:
        if ((r = read_varint(rw->img, pos, end, &f->varint, err)) < 0)
            return r;
        break;
    case WIRE_I64:
    case WIRE_I32: {
        size_t width = f->wire == WIRE_I64 ? 8 : 4;
        if (end - *pos < width)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "protobuf fixed field past end at %zu",
                               f->start);
        *pos += width;
        break;
    }
    case WIRE_LEN:
        if ((r = read_varint(rw->img, pos, end, &n, err)) < 0)
            return r;
        if (n > end - *pos)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "protobuf field %u at offset %zu: length %llu past its message",
                               f->number, f->start, (unsigned long long)n);
        f->payload = *pos;
        f->payload_len = (size_t)n;
        *pos += (size_t)n;
        break;
    default:
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "protobuf wire type %u at offset %zu",
                           f->wire, f->start);
    }
    f->end = *pos;
    return 0;
}

static size_t element_size(int data_type)
{
    switch (data_type) {
    case 1: case 6: case 12: return 4;          /* float, int32, uint32 */
    case 2: case 3: case 9: case 17: case 18:   /* uint8, int8, bool, float8 */
    case 19: case 20: return 1;
    case 4: case 5: case 10: case 16: return 2; /* (u)int16, float16, bfloat16 */
    case 7: case 11: case 13: return 8;         /* int64, double, uint64 */
    default: return 0;                          /* string, complex, 4-bit */
    }
}

static bool is_data_field(unsigned number)
{
    return number == TP_FLOAT_DATA || number == TP_INT32_DATA || number == TP_STRING_DATA ||
           number == TP_INT64_DATA || number == TP_RAW_DATA || number == TP_DOUBLE_DATA ||
           number == TP_UINT64_DATA;
}

/* Fills ref from the TensorProto in [start, end). Returns 1 if it has one
 * contiguous payload that can be externalised, 0 if not, <0 on bad input. */
static int tensor_describe(struct rewriter *rw, size_t start, size_t end,
                           struct onnx_tensor_ref *ref, tetris_error *err)
{
    size_t pos = start;
    int payloads = 0;
    bool shareable = true;

    memset(ref, 0, sizeof(*ref));
    while (pos < end) {
        struct field f;
        int r = next_field(rw, &pos, end, &f, err);
        if (r < 0)
            return r;
        if (f.number == TP_DIMS && f.wire == WIRE_VARINT) {
            if (ref->ndim >= TENSOR_MAX_DIMS)
                return 0;
            ref->dims[ref->ndim++] = (int64_t)f.varint;
        } else if (f.number == TP_DIMS && f.wire == WIRE_LEN) {
            size_t p = f.payload, e = f.payload + f.payload_len;
            while (p < e) {
                uint64_t d;
                if ((r = read_varint(rw->img, &p, e, &d, err)) < 0)
                    return r;
                if (ref->ndim >= TENSOR_MAX_DIMS)
                    return 0;
                ref->dims[ref->ndim++] = (int64_t)d;
            }
        } else if (f.number == TP_DATA_TYPE && f.wire == WIRE_VARINT) {
            ref->data_type = (int)f.varint;
        } else if (f.number == TP_NAME && f.wire == WIRE_LEN) {
            ref->name = (const char *)rw->img + f.payload;
            ref->name_len = f.payload_len;
        } else if (is_data_field(f.number)) {
            payloads++;
            if (f.wire != WIRE_LEN || f.number == TP_STRING_DATA)
                shareable = false; /* unpacked repeated values or strings */
            ref->offset = f.payload;
            ref->length = f.payload_len;
        } else if (f.number == TP_SEGMENT || f.number == TP_EXTERNAL_DATA ||
                   (f.number == TP_DATA_LOCATION && f.varint == TP_LOCATION_EXTERNAL)) {
            shareable = false;
        }
    }
    for (int i = 0; i < ref->ndim; i++)
        if (ref->dims[i] < 0)
            shareable = false;
    if (payloads != 1 || element_size(ref->data_type) == 0)
        shareable = false;
    return shareable ? 1 : 0;
}

static uint64_t tensor_nbytes(const struct onnx_tensor_ref *ref)
{
    uint64_t n = element_size(ref->data_type);
    for (int i = 0; i < ref->ndim; i++)
        n *= (uint64_t)ref->dims[i];
    return n;
}

static int put_entry(struct buf *b, const char *key, const char *value, tetris_error *err)
{
    struct buf entry = {0};
    int r = buf_len_field(&entry, 1, key, strlen(key), err);
    if (r == 0)
        r = buf_len_field(&entry, 2, value, strlen(value), err);
    if (r == 0)
        r = buf_len_field(b, TP_EXTERNAL_DATA, entry.p, entry.len, err);
    buf_free(&entry);
    return r;
}

/* Emits into out (as field `number` of the parent) the TensorProto in
 * [start, end) without its payload, pointing at external data instead.
 * name, if not NULL, replaces the tensor's own name. */
static int tensor_externalise(struct rewriter *rw, size_t start, size_t end,
                              const struct onnx_tensor_ref *ref, const struct onnx_external *ext,
                              const char *name, size_t name_len, unsigned number,
                              struct buf *out, tetris_error *err)
{
    struct buf t = {0};
    size_t pos = start;
    char length[32], offset[32];
    int r = 0;

    while (r == 0 && pos < end) {
        struct field f;
        if ((r = next_field(rw, &pos, end, &f, err)) < 0)
            break;
        if (is_data_field(f.number) || f.number == TP_EXTERNAL_DATA ||
            f.number == TP_DATA_LOCATION || (name != NULL && f.number == TP_NAME))
            continue;
        r = buf_copy_field(rw, &t, &f, err);
    }
    snprintf(length, sizeof(length), "%llu", (unsigned long long)tensor_nbytes(ref));
    snprintf(offset, sizeof(offset), "%llu", (unsigned long long)ext->offset);
    if (r == 0 && name != NULL)
        r = buf_len_field(&t, TP_NAME, name, name_len, err);
    if (r == 0)
        r = put_entry(&t, "location", ext->location, err);
    if (r == 0)
        r = put_entry(&t, "offset", offset, err);
    if (r == 0)
        r = put_entry(&t, "length", length, err);
    if (r == 0)
        r = buf_tag(&t, TP_DATA_LOCATION, WIRE_VARINT, err);
    if (r == 0)
        r = buf_varint(&t, TP_LOCATION_EXTERNAL, err);
    if (r == 0)
        r = buf_len_field(out, number, t.p, t.len, err);
    buf_free(&t);
    return r;
}

static int attribute_rewrite(struct rewriter *rw, size_t start, size_t end, int depth,
                             struct buf *out, tetris_error *err)
{
    size_t pos = start;
    int r = 0;

    while (r == 0 && pos < end) {
        struct field f;
        if ((r = next_field(rw, &pos, end, &f, err)) < 0)
            break;
        if ((f.number == 6 || f.number == 11) && f.wire == WIRE_LEN) { /* g, graphs */
            struct buf g = {0};
            r = graph_rewrite(rw, f.payload, f.payload + f.payload_len, depth + 1, &g, err);
            if (r == 0)
                r = buf_len_field(out, f.number, g.p, g.len, err);
            buf_free(&g);
        } else {
            r = buf_copy_field(rw, out, &f, err);
        }
    }
    return r;
}

static int node_rewrite(struct rewriter *rw, size_t start, size_t end, int depth, struct buf *out,
                        tetris_error *err)
{
    size_t pos = start;
    int r = 0;

    while (r == 0 && pos < end) {
        struct field f;
        if ((r = next_field(rw, &pos, end, &f, err)) < 0)
            break;
        if (f.number == 5 && f.wire == WIRE_LEN) { /* attribute */
            struct buf a = {0};
            r = attribute_rewrite(rw, f.payload, f.payload + f.payload_len, depth, &a, err);
            if (r == 0)
                r = buf_len_field(out, f.number, a.p, a.len, err);
            buf_free(&a);
        } else {
            r = buf_copy_field(rw, out, &f, err);
        }
    }
    return r;
}

static bool bytes_equal(const uint8_t *p, size_t n, const char *s)
{
    return n == strlen(s) && memcmp(p, s, n) == 0;
}

/* A Constant node with a single output and a `value` tensor: finds the
 * tensor's range and the output name. Returns 1 if the node is one. */
static int constant_node_parse(struct rewriter *rw, size_t start, size_t end, size_t *t_start,
                               size_t *t_end, const char **out_name, size_t *out_name_len,
                               tetris_error *err)
{
    size_t pos = start;
    bool is_constant = false, default_domain = true, has_value = false;
    int outputs = 0, attributes = 0;

    while (pos < end) {
        struct field f;
        int r = next_field(rw, &pos, end, &f, err);
        if (r < 0)
            return r;
        if (f.wire != WIRE_LEN)
            continue;
        const uint8_t *p = rw->img + f.payload;
        if (f.number == 4) { /* op_type */
            is_constant = bytes_equal(p, f.payload_len, "Constant");
        } else if (f.number == 7) { /* domain */
            default_domain = f.payload_len == 0 || bytes_equal(p, f.payload_len, "ai.onnx");
        } else if (f.number == 2) { /* output */
            outputs++;
            *out_name = (const char *)p;
            *out_name_len = f.payload_len;
        } else if (f.number == 5) { /* attribute */
            size_t apos = f.payload, aend = f.payload + f.payload_len;
            bool named_value = false;
            size_t ts = 0, te = 0;
            attributes++;
            while (apos < aend) {
                struct field af;
                if ((r = next_field(rw, &apos, aend, &af, err)) < 0)
                    return r;
                if (af.number == 1 && af.wire == WIRE_LEN)
                    named_value = bytes_equal(rw->img + af.payload, af.payload_len, "value");
                else if (af.number == 5 && af.wire == WIRE_LEN) {
                    ts = af.payload;
                    te = af.payload + af.payload_len;
                }
            }
            if (named_value && te > 0) {
                has_value = true;
                *t_start = ts;
                *t_end = te;
            }
        }
    }
    return is_constant && default_domain && has_value && outputs == 1 && attributes == 1 &&
           *out_name_len > 0;
}

static int graph_rewrite(struct rewriter *rw, size_t start, size_t end, int depth, struct buf *out,
                         tetris_error *err)
{
    struct buf converted = {0}; /* Constant nodes turned initializers */
    size_t pos = start;
    int r = 0;

    if (depth > MAX_DEPTH)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "subgraphs nested deeper than %d", MAX_DEPTH);
    while (r == 0 && pos < end) {
        struct field f;
        struct onnx_tensor_ref ref;
        struct onnx_external ext = {{0}};
        size_t ps, pe;
        if ((r = next_field(rw, &pos, end, &f, err)) < 0)
            break;
        if (f.wire != WIRE_LEN || (f.number != 1 && f.number != 5)) {
            r = buf_copy_field(rw, out, &f, err);
            continue;
        }
        ps = f.payload;
        pe = f.payload + f.payload_len;
        if (f.number == 5) { /* initializer */
            if ((r = tensor_describe(rw, ps, pe, &ref, err)) < 0)
                break;
            if (r == 1 && rw->share(rw->ctx, &ref, &ext))
                r = tensor_externalise(rw, ps, pe, &ref, &ext, NULL, 0, 5, out, err);
            else
                r = buf_copy_field(rw, out, &f, err);
            continue;
        }
        /* node */
        size_t ts = 0, te = 0, name_len = 0;
        const char *name = NULL;
        if ((r = constant_node_parse(rw, ps, pe, &ts, &te, &name, &name_len, err)) < 0)
            break;
        if (r == 1) {
            if ((r = tensor_describe(rw, ts, te, &ref, err)) < 0)
                break;
            ref.name = name;
            ref.name_len = name_len;
            ref.from_constant = true;
            if (r == 1 && rw->share(rw->ctx, &ref, &ext)) {
                r = tensor_externalise(rw, ts, te, &ref, &ext, name, name_len, 5, &converted, err);
                continue;
            }
        }
        struct buf n = {0};
        r = node_rewrite(rw, ps, pe, depth, &n, err);
        if (r == 0)
            r = buf_len_field(out, f.number, n.p, n.len, err);
        buf_free(&n);
    }
    if (r == 0)
        r = buf_put(out, converted.p, converted.len, err);
    buf_free(&converted);
    return r;
}

int onnx_rewrite(const uint8_t *image, size_t len, onnx_share_fn share, void *ctx, uint8_t **out,
                 size_t *out_len, tetris_error *err)
{
    struct rewriter rw = {.img = image, .share = share, .ctx = ctx};
    struct buf b = {0};
    size_t pos = 0;
    int graphs = 0, r = 0;

    while (r == 0 && pos < len) {
        struct field f;
        if ((r = next_field(&rw, &pos, len, &f, err)) < 0)
            break;
        if (f.number == 7 && f.wire == WIRE_LEN) { /* graph */
            struct buf g = {0};
            graphs++;
            r = graph_rewrite(&rw, f.payload, f.payload + f.payload_len, 0, &g, err);
            if (r == 0)
                r = buf_len_field(&b, 7, g.p, g.len, err);
            buf_free(&g);
        } else {
            r = buf_copy_field(&rw, &b, &f, err);
        }
    }
    if (r == 0 && graphs != 1)
        r = tetris_fail(err, TETRIS_E_FORMAT, 0, "not an ONNX model: %d graphs", graphs);
    if (r < 0) {
        buf_free(&b);
        return r;
    }
    *out = b.p;
    *out_len = b.len;
    return 0;
}
