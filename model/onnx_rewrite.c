/* onnx_rewrite.c - strip chosen tensor payloads out of an ONNX protobuf
 * image (see onnx_rewrite.h).
 *
 * The walker copies every field it does not understand byte for byte and
 * only descends into the messages that can hold tensors:
 *   ModelProto.graph(7) -> GraphProto.node(1), .initializer(5)
 *   NodeProto.attribute(5) -> AttributeProto.g(6), .graphs(11)
 * A rewritten message changes length, so each one is built in its own
 * buffer and then emitted into its parent with a fresh length prefix.
 * Reading (bounds, nesting depth) is protobuf.h's. */
#include "model/onnx_rewrite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pbwire.h"

enum { WIRE_VARINT = PB_WT_VARINT, WIRE_LEN = PB_WT_LEN };

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

/* A field as read by field_next(): pb_field plus the span it came from. */
struct field {
    pb_field f;
    const uint8_t *start, *end; /* the whole field, tag included */
};

struct rewriter {
    onnx_share_fn share;
    void *ctx;
};

static int graph_rewrite(struct rewriter *rw, const pb_reader *msg, struct buf *out,
                         tetris_error *err);

/* pb_next() that also remembers where the field starts and ends, so it can
 * be copied verbatim. Returns 1, 0 at the end, or <0. */
static int field_next(pb_reader *r, struct field *fd, tetris_error *err)
{
    fd->start = r->p;
    int n = pb_next(r, &fd->f, err);
    fd->end = r->p;
    return n;
}

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

static int buf_copy_field(struct buf *b, const struct field *fd, tetris_error *err)
{
    return buf_put(b, fd->start, (size_t)(fd->end - fd->start), err);
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

static bool bytes_equal(const uint8_t *p, size_t n, const char *s)
{
    return n == strlen(s) && memcmp(p, s, n) == 0;
}

/* The tensor's size in bytes from its type and dims; false if that is no
 * real size (a negative dim, or past 2^63: it would wrap, and could not be
 * written into external_data and read back). */
static bool tensor_nbytes(const struct onnx_tensor_ref *ref, uint64_t *out)
{
    uint64_t n = element_size(ref->data_type);
    for (int i = 0; i < ref->ndim; i++) {
        if (ref->dims[i] < 0)
            return false;
        uint64_t d = (uint64_t)ref->dims[i];
        if (d != 0 && n > INT64_MAX / d)
            return false;
        n *= d;
    }
    *out = n;
    return true;
}

static int parse_u64(const uint8_t *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 20)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        uint64_t digit = (uint64_t)(p[i] - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    *out = v;
    return 0;
}

/* One external_data entry (StringStringEntryProto: key 1, value 2). */
static int external_entry(const pb_reader *tensor, const pb_field *f,
                          struct onnx_tensor_ref *ref, bool *has_length, tetris_error *err)
{
    pb_reader e;
    struct field fd;
    const uint8_t *key = NULL, *value = NULL;
    size_t key_len = 0, value_len = 0;
    int n;

    if ((n = pb_reader_sub(tensor, f, &e, err)) < 0)
        return n;
    while ((n = field_next(&e, &fd, err)) == 1) {
        if (fd.f.number == 1 && fd.f.wire_type == PB_WT_LEN) {
            key = fd.f.data;
            key_len = fd.f.len;
        } else if (fd.f.number == 2 && fd.f.wire_type == PB_WT_LEN) {
            value = fd.f.data;
            value_len = fd.f.len;
        }
    }
    if (n < 0)
        return n;
    if (key == NULL || value == NULL)
        return 0;
    if (bytes_equal(key, key_len, "location")) {
        ref->location = (const char *)value;
        ref->location_len = value_len;
    } else if (bytes_equal(key, key_len, "offset") && parse_u64(value, value_len, &ref->offset) < 0) {
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "external data offset is not a number");
    } else if (bytes_equal(key, key_len, "length")) {
        if (parse_u64(value, value_len, &ref->length) < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "external data length is not a number");
        *has_length = true;
    }
    return 0;
}

/* Fills ref from the TensorProto msg. Returns 1 if it has one contiguous
 * payload that can be externalised, 0 if not, <0 on bad input. */
static int tensor_describe(const pb_reader *msg, struct onnx_tensor_ref *ref, tetris_error *err)
{
    pb_reader r = *msg;
    struct field fd;
    int payloads = 0, n;
    bool shareable = true;

    bool external = false, has_length = false;

    memset(ref, 0, sizeof(*ref));
    while ((n = field_next(&r, &fd, err)) == 1) {
        const pb_field *f = &fd.f;
        if (f->number == TP_DIMS && f->wire_type == PB_WT_VARINT) {
            if (ref->ndim >= TENSOR_MAX_DIMS)
                return 0;
            ref->dims[ref->ndim++] = (int64_t)f->value;
        } else if (f->number == TP_DIMS && f->wire_type == PB_WT_LEN) {
            const uint8_t *p = f->data, *e = f->data + f->len;
            while (p < e) {
                uint64_t d;
                if (pb_decode_varint(&p, e, &d) < 0)
                    return tetris_fail(err, TETRIS_E_FORMAT, 0, "byte %llu: malformed dims",
                                       (unsigned long long)pb_offset(&r, f->data));
                if (ref->ndim >= TENSOR_MAX_DIMS)
                    return 0;
                ref->dims[ref->ndim++] = (int64_t)d;
            }
        } else if (f->number == TP_DATA_TYPE && f->wire_type == PB_WT_VARINT) {
            ref->data_type = (int)f->value;
        } else if (f->number == TP_NAME && f->wire_type == PB_WT_LEN) {
            ref->name = (const char *)f->data;
            ref->name_len = f->len;
        } else if (is_data_field(f->number)) {
            payloads++;
            if (f->wire_type != PB_WT_LEN || f->number == TP_STRING_DATA)
                shareable = false; /* unpacked repeated values or strings */
            ref->offset = pb_offset(&r, f->data);
            ref->length = f->len;
        } else if (f->number == TP_EXTERNAL_DATA && f->wire_type == PB_WT_LEN) {
            if ((n = external_entry(&r, f, ref, &has_length, err)) < 0)
                return n;
        } else if (f->number == TP_DATA_LOCATION && f->wire_type == PB_WT_VARINT) {
            external = f->value == TP_LOCATION_EXTERNAL;
        } else if (f->number == TP_SEGMENT) {
            shareable = false;
        }
    }
    if (n < 0)
        return n;
    uint64_t nbytes = 0;
    if (!tensor_nbytes(ref, &nbytes) || element_size(ref->data_type) == 0)
        shareable = false;
    if (external) {
        if (payloads != 0 || ref->location == NULL)
            shareable = false;
        if (!has_length)
            ref->length = nbytes;
    } else {
        ref->location = NULL;
        if (payloads != 1)
            shareable = false;
    }
    return shareable ? 1 : 0;
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

/* Whether the external_data entry f of tensor is one of ONNX Runtime's
 * "prepacked_N" entries; fills its key and value. */
static bool prepacked_entry(const pb_reader *tensor, const pb_field *f, pb_field *key,
                            pb_field *value)
{
    pb_reader e;
    struct field fd;
    tetris_error ignored;
    bool is = false, has_value = false;
    if (pb_reader_sub(tensor, f, &e, &ignored) < 0)
        return false;
    while (field_next(&e, &fd, &ignored) == 1) {
        if (fd.f.number == 1 && fd.f.wire_type == PB_WT_LEN) {
            is = fd.f.len > 9 && memcmp(fd.f.data, "prepacked", 9) == 0;
            *key = fd.f;
        } else if (fd.f.number == 2 && fd.f.wire_type == PB_WT_LEN) {
            has_value = true;
            *value = fd.f;
        }
    }
    return is && has_value;
}

/* Emits a kept "prepacked_N" entry, its value mapped when ext says so. */
static int put_prepacked(struct buf *t, const struct field *fd, const pb_field *key,
                         const pb_field *value, const struct onnx_external *ext, tetris_error *err)
{
    if (ext->map_prepacked == NULL)
        return buf_copy_field(t, fd, err);
    char mapped[4096], name[64];
    if (key->len >= sizeof(name) || !ext->map_prepacked(ext->map_ctx, (const char *)value->data,
                                                        value->len, mapped, sizeof(mapped)))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "a pre-packed entry could not be mapped");
    memcpy(name, key->data, key->len);
    name[key->len] = '\0';
    return put_entry(t, name, mapped, err);
}

/* Emits into out (as field `number` of the parent) the TensorProto msg
 * without its payload, pointing at external data instead. name, if not
 * NULL, replaces the tensor's own name. */
static int tensor_externalise(const pb_reader *msg, const struct onnx_tensor_ref *ref,
                              const struct onnx_external *ext, const char *name, size_t name_len,
                              unsigned number, struct buf *out, tetris_error *err)
{
    pb_reader rd = *msg;
    struct buf t = {0};
    struct field fd;
    char length[32], offset[32];
    uint64_t nbytes = 0;
    int r = 0, n;

    while (r == 0 && (n = field_next(&rd, &fd, err)) == 1) {
        unsigned num = fd.f.number;
        pb_field key, value;
        if (num == TP_EXTERNAL_DATA && ext->keep_prepacked && fd.f.wire_type == PB_WT_LEN &&
            prepacked_entry(&rd, &fd.f, &key, &value)) {
            r = put_prepacked(&t, &fd, &key, &value, ext, err);
            continue;
        }
        if (is_data_field(num) || num == TP_EXTERNAL_DATA || num == TP_DATA_LOCATION ||
            (name != NULL && num == TP_NAME))
            continue;
        r = buf_copy_field(&t, &fd, err);
    }
    if (r == 0 && n < 0)
        r = n;
    tensor_nbytes(ref, &nbytes); /* shareable tensors have a real size */
    snprintf(length, sizeof(length), "%llu", (unsigned long long)nbytes);
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

/* Emits the length-delimited field fd of msg with its payload rewritten
 * by fn (a graph, node or attribute rewriter). */
static int rewrite_sub(struct rewriter *rw, const pb_reader *msg, const struct field *fd,
                       int (*fn)(struct rewriter *, const pb_reader *, struct buf *,
                                 tetris_error *),
                       struct buf *out, tetris_error *err)
{
    pb_reader sub;
    struct buf b = {0};
    int r = pb_reader_sub(msg, &fd->f, &sub, err);
    if (r == 0)
        r = fn(rw, &sub, &b, err);
    if (r == 0)
        r = buf_len_field(out, fd->f.number, b.p, b.len, err);
    buf_free(&b);
    return r;
}

static int attribute_rewrite(struct rewriter *rw, const pb_reader *msg, struct buf *out,
                             tetris_error *err)
{
    pb_reader rd = *msg;
    struct field fd;
    int r = 0, n;

    while (r == 0 && (n = field_next(&rd, &fd, err)) == 1) {
        if ((fd.f.number == 6 || fd.f.number == 11) && fd.f.wire_type == PB_WT_LEN) /* g, graphs */
            r = rewrite_sub(rw, &rd, &fd, graph_rewrite, out, err);
        else
            r = buf_copy_field(out, &fd, err);
    }
    return r < 0 ? r : n;
}

static int node_rewrite(struct rewriter *rw, const pb_reader *msg, struct buf *out,
                        tetris_error *err)
{
    pb_reader rd = *msg;
    struct field fd;
    int r = 0, n;

    while (r == 0 && (n = field_next(&rd, &fd, err)) == 1) {
        if (fd.f.number == 5 && fd.f.wire_type == PB_WT_LEN) /* attribute */
            r = rewrite_sub(rw, &rd, &fd, attribute_rewrite, out, err);
        else
            r = buf_copy_field(out, &fd, err);
    }
    return r < 0 ? r : n;
}

/* A Constant node with a single output and a `value` tensor: sets *value
 * to a reader over the tensor and *out_name to the output. Returns 1 if the
 * node is one, 0 if not, <0 on bad input. */
static int constant_node_parse(const pb_reader *msg, pb_reader *value, const char **out_name,
                               size_t *out_name_len, tetris_error *err)
{
    pb_reader rd = *msg;
    struct field fd;
    bool is_constant = false, default_domain = true, has_value = false;
    int outputs = 0, attributes = 0, n;

    while ((n = field_next(&rd, &fd, err)) == 1) {
        const pb_field *f = &fd.f;
        if (f->wire_type != PB_WT_LEN)
            continue;
        if (f->number == 4) { /* op_type */
            is_constant = bytes_equal(f->data, f->len, "Constant");
        } else if (f->number == 7) { /* domain */
            default_domain = f->len == 0 || bytes_equal(f->data, f->len, "ai.onnx");
        } else if (f->number == 2) { /* output */
            outputs++;
            *out_name = (const char *)f->data;
            *out_name_len = f->len;
        } else if (f->number == 5) { /* attribute */
            pb_reader attr, t = {0};
            struct field afd;
            bool named_value = false, has_t = false;
            int an;
            attributes++;
            if ((an = pb_reader_sub(&rd, f, &attr, err)) < 0)
                return an;
            while ((an = field_next(&attr, &afd, err)) == 1) {
                if (afd.f.number == 1 && afd.f.wire_type == PB_WT_LEN) {
                    named_value = bytes_equal(afd.f.data, afd.f.len, "value");
                } else if (afd.f.number == 5 && afd.f.wire_type == PB_WT_LEN) {
                    if ((an = pb_reader_sub(&attr, &afd.f, &t, err)) < 0)
                        return an;
                    has_t = true;
                }
            }
            if (an < 0)
                return an;
            if (named_value && has_t) {
                has_value = true;
                *value = t;
            }
        }
    }
    if (n < 0)
        return n;
    return is_constant && default_domain && has_value && outputs == 1 && attributes == 1 &&
           *out_name_len > 0;
}

/* A node field of a graph: a Constant whose tensor the caller shares
 * becomes an initializer in `converted`; any other node is rewritten in
 * place (its attributes may hold subgraphs). */
static int graph_node(struct rewriter *rw, const pb_reader *graph, const struct field *fd,
                      struct buf *out, struct buf *converted, tetris_error *err)
{
    struct onnx_tensor_ref ref;
    struct onnx_external ext;
    pb_reader node, value;
    const char *name = NULL;
    size_t name_len = 0;
    int r;

    if ((r = pb_reader_sub(graph, &fd->f, &node, err)) < 0)
        return r;
    if ((r = constant_node_parse(&node, &value, &name, &name_len, err)) < 0)
        return r;
    if (r == 1) {
        if ((r = tensor_describe(&value, &ref, err)) < 0)
            return r;
        ref.name = name;
        ref.name_len = name_len;
        ref.from_constant = true;
        memset(&ext, 0, sizeof(ext));
        if (r == 1 && rw->share(rw->ctx, &ref, &ext))
            return tensor_externalise(&value, &ref, &ext, name, name_len, 5, converted, err);
    }
    return rewrite_sub(rw, graph, fd, node_rewrite, out, err);
}

static int graph_rewrite(struct rewriter *rw, const pb_reader *msg, struct buf *out,
                         tetris_error *err)
{
    struct buf converted = {0}; /* Constant nodes turned initializers */
    pb_reader rd = *msg;
    struct field fd;
    int r = 0, n;

    while (r == 0 && (n = field_next(&rd, &fd, err)) == 1) {
        if (fd.f.wire_type == PB_WT_LEN && fd.f.number == 1) {
            r = graph_node(rw, &rd, &fd, out, &converted, err);
        } else if (fd.f.wire_type == PB_WT_LEN && fd.f.number == 5) { /* initializer */
            struct onnx_tensor_ref ref;
            struct onnx_external ext;
            pb_reader t;
            memset(&ext, 0, sizeof(ext));
            if ((r = pb_reader_sub(&rd, &fd.f, &t, err)) < 0 ||
                (r = tensor_describe(&t, &ref, err)) < 0)
                break;
            if (r == 1 && rw->share(rw->ctx, &ref, &ext))
                r = tensor_externalise(&t, &ref, &ext, NULL, 0, 5, out, err);
            else
                r = buf_copy_field(out, &fd, err);
        } else {
            r = buf_copy_field(out, &fd, err);
        }
    }
    if (r == 0 && n < 0)
        r = n;
    if (r == 0)
        r = buf_put(out, converted.p, converted.len, err);
    buf_free(&converted);
    return r;
}

int onnx_rewrite(const uint8_t *image, size_t len, onnx_share_fn share, void *ctx, uint8_t **out,
                 size_t *out_len, tetris_error *err)
{
    struct rewriter rw = {.share = share, .ctx = ctx};
    struct buf b = {0};
    struct field fd;
    pb_reader rd;
    int graphs = 0, r = 0, n;

    pb_reader_init(&rd, image, len);
    while (r == 0 && (n = field_next(&rd, &fd, err)) == 1) {
        if (fd.f.number == 7 && fd.f.wire_type == PB_WT_LEN) { /* graph */
            graphs++;
            r = rewrite_sub(&rw, &rd, &fd, graph_rewrite, &b, err);
        } else {
            r = buf_copy_field(&b, &fd, err);
        }
    }
    if (r == 0 && n < 0)
        r = n;
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
