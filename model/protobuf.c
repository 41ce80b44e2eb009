/* protobuf.c - protocol buffers wire-format reader (see protobuf.h). */
#include "model/protobuf.h"

#include <assert.h>

#define PB_MAX_FIELD_NUMBER 536870911u /* 2^29 - 1 */

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
                               "byte %llu: field %u: malformed varint (truncated, over 10 bytes or over 64 bits)",
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
                               (unsigned long long)at, f->number, (unsigned long long)len,
                               left);
        f->data = r->p;
        f->len = (size_t)len;
        r->p += len;
        assert(r->p <= r->end); /* len <= left, checked above */
        return 1;
    }
    default:
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "byte %llu: field %u: unsupported wire type %u",
                           (unsigned long long)at, f->number, (unsigned)(key & 7));
    }
}

int pb_reader_sub(const pb_reader *parent, const pb_field *f, pb_reader *child,
                  tetris_error *err)
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
