/* pbwire.c - reading and writing the protocol buffers wire format (see
 * pbwire.h for the format and what reading refuses). */
#include "common/pbwire.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading ---- */

void pb_reader_init(pb_reader *r, const uint8_t *data, size_t len)
{
    r->base = data;
    r->p = data;
    r->end = data + len;
    r->depth = 0;
}

uint64_t pb_offset(const pb_reader *r, const uint8_t *p)
{
    return (uint64_t)(p - r->base);
}

int pb_decode_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    const uint8_t *q = *p;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (q == end)
            return -1;
        assert(q < end);
        uint8_t b = *q++;
        /* The tenth byte holds bit 63 only. */
        if (i == 9 && b > 1)
            return -1;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if ((b & 0x80) == 0) {
            assert(q <= end);
            *p = q;
            *out = v;
            return 0;
        }
    }
    return -1;
}

int pb_next(pb_reader *r, pb_field *f, tetris_error *err)
{
    if (r->p == r->end)
        return 0;
    uint64_t at = pb_offset(r, r->p);
    uint64_t key;
    if (pb_decode_varint(&r->p, r->end, &key) < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "byte %llu: malformed field key varint",
                           (unsigned long long)at);
    uint64_t number = key >> 3;
    if (number == 0 || number > PB_MAX_FIELD_NUMBER)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "byte %llu: invalid field number %llu",
                           (unsigned long long)at, (unsigned long long)number);
    f->number = (uint32_t)number;
    f->wire_type = (enum pb_wire_type)(key & 7);
    f->value = 0;
    size_t left;
    switch (key & 7) {
    case PB_WT_VARINT:
        f->data = r->p;
        if (pb_decode_varint(&r->p, r->end, &f->value) < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "byte %llu: field %u: malformed varint (truncated, over 10 bytes or "
                               "over 64 bits)",
                               (unsigned long long)at, f->number);
        f->len = (size_t)(r->p - f->data);
        return 1;
    case PB_WT_FIXED64:
    case PB_WT_FIXED32: {
        size_t width = (key & 7) == PB_WT_FIXED64 ? 8 : 4;
        if ((size_t)(r->end - r->p) < width)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "byte %llu: field %u: truncated %zu-byte value",
                               (unsigned long long)at, f->number, width);
        f->data = r->p;
        f->len = width;
        for (size_t i = 0; i < width; i++)
            f->value |= (uint64_t)r->p[i] << (8 * i);
        r->p += width;
        assert(r->p <= r->end);
        return 1;
    }
    case PB_WT_LEN: {
        uint64_t len;
        if (pb_decode_varint(&r->p, r->end, &len) < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "byte %llu: field %u: malformed length varint",
                               (unsigned long long)at, f->number);
        left = (size_t)(r->end - r->p);
        if (len > left)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "byte %llu: field %u: length %llu runs past the end of its "
                               "message (%zu bytes left)",
                               (unsigned long long)at, f->number, (unsigned long long)len, left);
        f->data = r->p;
        f->len = (size_t)len;
        r->p += len;
        assert(r->p <= r->end); /* len <= left, checked above */
        return 1;
    }
    default:
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "byte %llu: field %u: unsupported wire type %u",
                           (unsigned long long)at, f->number, (unsigned)(key & 7));
    }
}

int pb_reader_sub(const pb_reader *parent, const pb_field *f, pb_reader *child, tetris_error *err)
{
    if (f->wire_type != PB_WT_LEN)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "byte %llu: field %u: expected a message, got wire type %u",
                           (unsigned long long)pb_offset(parent, f->data), f->number,
                           (unsigned)f->wire_type);
    if (parent->depth + 1 > PB_MAX_DEPTH)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "byte %llu: messages nested deeper than %d levels",
                           (unsigned long long)pb_offset(parent, f->data), PB_MAX_DEPTH);
    child->base = parent->base;
    child->p = f->data;
    child->end = f->data + f->len;
    /* A field's bytes lie inside its parent's (pb_next checked them). */
    assert(child->p >= parent->base && child->end <= parent->end && child->p <= child->end);
    child->depth = parent->depth + 1;
    return 0;
}

int pb_count_varints(const uint8_t *data, size_t len, uint64_t *count, tetris_error *err)
{
    const uint8_t *p = data;
    const uint8_t *end = data + len;
    uint64_t n = 0;
    while (p < end) {
        uint64_t v;
        size_t at = (size_t)(p - data);
        if (pb_decode_varint(&p, end, &v) < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "malformed varint at byte %zu of packed data", at);
        n++;
    }
    *count = n;
    return 0;
}

int pb_map_entry(const uint8_t *data, size_t len, const uint8_t **key, size_t *key_len,
                 const uint8_t **value, size_t *value_len, tetris_error *err)
{
    static const uint8_t empty[1];
    pb_reader r;
    struct pb_field f;
    int rc;
    *key = *value = empty;
    *key_len = *value_len = 0;
    pb_reader_init(&r, data, len);
    while ((rc = pb_next(&r, &f, err)) > 0) {
        if (f.number != 1 && f.number != 2)
            continue;
        if (f.wire_type != PB_WT_LEN)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "protobuf: map entry's %s is not a string",
                               f.number == 1 ? "key" : "value");
        if (f.number == 1) {
            *key = f.data;
            *key_len = f.len;
        } else {
            *value = f.data;
            *value_len = f.len;
        }
    }
    return rc < 0 ? tetris_wrap(err, "map entry") : 0;
}

/* ---- writing ---- */

void pb_writer_init(pb_writer *w, size_t max)
{
    memset(w, 0, sizeof(*w));
    w->max = max;
}

static bool reserve(pb_writer *w, size_t n)
{
    if (w->failed)
        return false;
    if (n > w->max || w->len > w->max - n) {
        w->failed = w->over_limit = true;
        return false;
    }
    if (w->len + n <= w->cap)
        return true;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < w->len + n)
        cap *= 2;
    uint8_t *b = realloc(w->buf, cap);
    if (b == NULL) {
        w->failed = true;
        return false;
    }
    w->buf = b;
    w->cap = cap;
    return true;
}

static void put_raw_varint(pb_writer *w, uint64_t v)
{
    uint8_t tmp[PB_MAX_VARINT_BYTES];
    size_t n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v != 0)
            tmp[n] |= 0x80;
        n++;
    } while (v != 0);
    if (!reserve(w, n))
        return;
    memcpy(w->buf + w->len, tmp, n);
    w->len += n;
}

static void put_key(pb_writer *w, uint32_t number, enum pb_wire_type type)
{
    put_raw_varint(w, (uint64_t)number << 3 | (uint64_t)type);
}

static void put_le(pb_writer *w, uint64_t v, unsigned n)
{
    if (!reserve(w, n))
        return;
    for (unsigned i = 0; i < n; i++)
        w->buf[w->len++] = (uint8_t)(v >> (8 * i));
}

void pb_put_varint(pb_writer *w, uint32_t number, uint64_t value)
{
    put_key(w, number, PB_WT_VARINT);
    put_raw_varint(w, value);
}

void pb_put_bool(pb_writer *w, uint32_t number, bool value)
{
    pb_put_varint(w, number, value ? 1 : 0);
}

void pb_put_fixed32(pb_writer *w, uint32_t number, uint32_t value)
{
    put_key(w, number, PB_WT_FIXED32);
    put_le(w, value, 4);
}

void pb_put_fixed64(pb_writer *w, uint32_t number, uint64_t value)
{
    put_key(w, number, PB_WT_FIXED64);
    put_le(w, value, 8);
}

void pb_put_bytes(pb_writer *w, uint32_t number, const void *data, size_t len)
{
    put_key(w, number, PB_WT_LEN);
    put_raw_varint(w, len);
    if (len == 0 || !reserve(w, len))
        return;
    memcpy(w->buf + w->len, data, len);
    w->len += len;
}

void pb_put_string(pb_writer *w, uint32_t number, const char *s)
{
    if (s != NULL)
        pb_put_bytes(w, number, s, strlen(s));
}

void pb_put_message(pb_writer *w, uint32_t number, const pb_writer *sub)
{
    if (sub->failed) {
        w->failed = true;
        w->over_limit |= sub->over_limit;
        return;
    }
    pb_put_bytes(w, number, sub->buf, sub->len);
}

int pb_writer_finish(pb_writer *w, uint8_t **out, size_t *len, tetris_error *err)
{
    if (!w->failed && w->buf == NULL && (w->buf = malloc(1)) == NULL)
        w->failed = true;
    if (w->failed) {
        bool over = w->over_limit;
        size_t max = w->max;
        pb_writer_free(w);
        return over ? tetris_fail(err, TETRIS_E_INVAL, 0,
                                  "protobuf: message larger than its limit of %zu bytes", max)
                    : tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "protobuf: out of memory");
    }
    *out = w->buf;
    *len = w->len;
    memset(w, 0, sizeof(*w));
    return 0;
}

void pb_writer_free(pb_writer *w)
{
    free(w->buf);
    memset(w, 0, sizeof(*w));
}
