/* pbwire.c - reading and writing the protocol buffers wire format (see
 * pbwire.h for the format and what reading refuses). */
#include "common/pbwire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading ---- */

void pb_reader_init(pb_reader *r, const uint8_t *buf, size_t len)
{
    r->start = buf;
    r->p = buf;
    r->end = buf + len;
}

int pb_read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    const uint8_t *q = *p;
    for (unsigned i = 0; i < PB_MAX_VARINT_BYTES; i++) {
        if (q == end)
            return -1;
        uint8_t b = *q++;
        /* The tenth byte holds bit 63 only. */
        if (i == PB_MAX_VARINT_BYTES - 1 && b > 1)
            return -1;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if ((b & 0x80) == 0) {
            *p = q;
            *out = v;
            return 0;
        }
    }
    return -1;
}

static uint64_t read_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int pb_next(pb_reader *r, struct pb_field *f, tetris_error *err)
{
    if (r->p == r->end)
        return 0;
    size_t at = (size_t)(r->p - r->start);
    uint64_t key;
    if (pb_read_varint(&r->p, r->end, &key) < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "protobuf: bad field key at offset %zu", at);
    uint64_t number = key >> 3;
    if (number == 0 || number > PB_MAX_FIELD_NUMBER)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "protobuf: field number %llu at offset %zu is out of range",
                           (unsigned long long)number, at);
    memset(f, 0, sizeof(*f));
    f->number = (uint32_t)number;
    f->type = (enum pb_wire_type)(key & 7);
    size_t left;
    switch (key & 7) {
    case PB_WIRE_VARINT:
        if (pb_read_varint(&r->p, r->end, &f->value) < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "protobuf: field %u at offset %zu: bad varint", f->number, at);
        return 1;
    case PB_WIRE_I64:
    case PB_WIRE_I32: {
        unsigned n = (key & 7) == PB_WIRE_I64 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "protobuf: field %u at offset %zu: truncated fixed%u", f->number, at,
                               n * 8);
        f->value = read_le(r->p, n);
        r->p += n;
        return 1;
    }
    case PB_WIRE_LEN:
        if (pb_read_varint(&r->p, r->end, &f->value) < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "protobuf: field %u at offset %zu: bad length", f->number, at);
        left = (size_t)(r->end - r->p);
        if (f->value > left)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "protobuf: field %u at offset %zu: length %llu past the end "
                               "(%zu bytes left)",
                               f->number, at, (unsigned long long)f->value, left);
        f->data = r->p;
        f->len = (size_t)f->value;
        r->p += f->len;
        return 1;
    default:
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "protobuf: field %u at offset %zu: wire type %u is not supported",
                           f->number, at, (unsigned)(key & 7));
    }
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
        if (f.type != PB_WIRE_LEN)
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
    put_key(w, number, PB_WIRE_VARINT);
    put_raw_varint(w, value);
}

void pb_put_bool(pb_writer *w, uint32_t number, bool value)
{
    pb_put_varint(w, number, value ? 1 : 0);
}

void pb_put_fixed32(pb_writer *w, uint32_t number, uint32_t value)
{
    put_key(w, number, PB_WIRE_I32);
    put_le(w, value, 4);
}

void pb_put_fixed64(pb_writer *w, uint32_t number, uint64_t value)
{
    put_key(w, number, PB_WIRE_I64);
    put_le(w, value, 8);
}

void pb_put_bytes(pb_writer *w, uint32_t number, const void *data, size_t len)
{
    put_key(w, number, PB_WIRE_LEN);
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
