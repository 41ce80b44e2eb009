/* oip.c - Open Inference Protocol datatypes, number conversions and the
 * JSON form of tensors (see oip.h). */
#include "protocol/oip.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

static const struct {
    const char *name;
    size_t size;
    int onnx; /* ONNX TensorProto.DataType */
} datatypes[OIP_DATATYPE_COUNT] = {
    [OIP_BOOL] = {"BOOL", 1, 9},      [OIP_UINT8] = {"UINT8", 1, 2},
    [OIP_UINT16] = {"UINT16", 2, 4},  [OIP_UINT32] = {"UINT32", 4, 12},
    [OIP_UINT64] = {"UINT64", 8, 13}, [OIP_INT8] = {"INT8", 1, 3},
    [OIP_INT16] = {"INT16", 2, 5},    [OIP_INT32] = {"INT32", 4, 6},
    [OIP_INT64] = {"INT64", 8, 7},    [OIP_FP16] = {"FP16", 2, 10},
    [OIP_FP32] = {"FP32", 4, 1},      [OIP_FP64] = {"FP64", 8, 11},
    [OIP_BF16] = {"BF16", 2, 16},     [OIP_BYTES] = {"BYTES", 0, 8},
};

static bool valid_datatype(enum oip_datatype dt)
{
    return dt >= 0 && dt < OIP_DATATYPE_COUNT;
}

const char *oip_datatype_name(enum oip_datatype dt)
{
    return valid_datatype(dt) ? datatypes[dt].name : "";
}

enum oip_datatype oip_datatype_parse(const char *s, size_t len)
{
    for (int i = 0; i < OIP_DATATYPE_COUNT; i++)
        if (strlen(datatypes[i].name) == len && memcmp(datatypes[i].name, s, len) == 0)
            return (enum oip_datatype)i;
    return OIP_DATATYPE_NONE;
}

size_t oip_datatype_size(enum oip_datatype dt)
{
    return valid_datatype(dt) ? datatypes[dt].size : 0;
}

bool oip_datatype_is_float(enum oip_datatype dt)
{
    return dt == OIP_FP16 || dt == OIP_FP32 || dt == OIP_FP64 || dt == OIP_BF16;
}

enum oip_datatype oip_datatype_from_onnx(int onnx_type)
{
    for (int i = 0; i < OIP_DATATYPE_COUNT; i++)
        if (datatypes[i].onnx == onnx_type)
            return (enum oip_datatype)i;
    return OIP_DATATYPE_NONE;
}

int oip_datatype_to_onnx(enum oip_datatype dt)
{
    return valid_datatype(dt) ? datatypes[dt].onnx : 0;
}

/* ---- narrow floats ---- */

/* d rounded to nearest even into an IEEE binary format of exp_bits
 * exponent and man_bits mantissa bits (sign on top); past the largest
 * finite value it is infinity. Direct from the double, so a decimal read
 * with strtod is rounded once. */
static uint32_t narrow_double(double d, int exp_bits, int man_bits)
{
    uint64_t x;
    memcpy(&x, &d, sizeof(x));
    uint32_t sign = (uint32_t)(x >> 63) << (exp_bits + man_bits);
    uint32_t inf = ((1u << exp_bits) - 1) << man_bits;
    int bias = (1 << (exp_bits - 1)) - 1;
    int exp = (int)((x >> 52) & 0x7ff);
    uint64_t man = x & ((1ULL << 52) - 1);

    if (exp == 0x7ff)
        return sign | inf | (man != 0 ? 1u << (man_bits - 1) : 0);
    if (exp == 0) /* double subnormals are far below either format's range */
        return sign;
    int e = exp - 1023;
    uint64_t m = man | (1ULL << 52);
    bool subnormal = e < 1 - bias;
    int shift = 52 - man_bits + (subnormal ? 1 - bias - e : 0);
    if (shift >= 64)
        return sign;
    uint64_t q = m >> shift, rem = m & ((1ULL << shift) - 1), half = 1ULL << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    if (subnormal) /* q == 1 << man_bits is the smallest normal, encoded alike */
        return sign | (uint32_t)q;
    uint32_t biased = (uint32_t)(e + bias);
    if (q >> (man_bits + 1)) {
        q >>= 1;
        biased++;
    }
    if (biased >= (1u << exp_bits) - 1)
        return sign | inf;
    return sign | (biased << man_bits) | ((uint32_t)q & ((1u << man_bits) - 1));
}

uint16_t oip_fp16_from_double(double d)
{
    return (uint16_t)narrow_double(d, 5, 10);
}

uint16_t oip_bf16_from_double(double d)
{
    return (uint16_t)narrow_double(d, 8, 7);
}

float oip_fp16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t x;
    if (exp == 0x1f) {
        x = sign | 0x7f800000 | (man << 13);
    } else if (exp != 0) {
        x = sign | ((exp + 112) << 23) | (man << 13);
    } else {
        float f = ldexpf((float)man, -24); /* zero or subnormal: exact */
        memcpy(&x, &f, sizeof(x));
        x |= sign;
    }
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

float oip_bf16_to_float(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

/* ---- tensors ---- */

void oip_tensor_clear(oip_tensor *t)
{
    free(t->name);
    free(t->data);
    memset(t, 0, sizeof(*t));
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int oip_bytes_check(const uint8_t *data, size_t len, size_t count, tetris_error *err)
{
    size_t off = 0;
    for (size_t i = 0; i < count; i++) {
        if (len - off < 4)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "BYTES data ends at element %zu of %zu (no length)", i, count);
        uint32_t n = le32(data + off);
        off += 4;
        if (len - off < n)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "BYTES element %zu says %" PRIu32 " bytes, %zu are left", i, n,
                               len - off);
        off += n;
    }
    if (off != len)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "BYTES data has %zu bytes after its %zu elements", len - off, count);
    return 0;
}

int oip_write_json_string(textbuf *t, const char *s, size_t len, tetris_error *err)
{
    const unsigned char *u = (const unsigned char *)s;
    if (!utf8_valid(s, len))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "not UTF-8");
    textbuf_reserve(t, len + 2);
    textbuf_append(t, "\"", 1);
    size_t run = 0; /* bytes at the start of s[i - run, i) to copy as they are */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = u[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        textbuf_append(t, s + i - run, run);
        run = 0;
        switch (c) {
        case '"': textbuf_append(t, "\\\"", 2); break;
        case '\\': textbuf_append(t, "\\\\", 2); break;
        case '\n': textbuf_append(t, "\\n", 2); break;
        case '\r': textbuf_append(t, "\\r", 2); break;
        case '\t': textbuf_append(t, "\\t", 2); break;
        default: textbuf_printf(t, "\\u%04x", c); break;
        }
    }
    textbuf_append(t, s + len - run, run);
    textbuf_append(t, "\"", 1);
    return 0;
}

static void write_float(textbuf *t, double v, int digits)
{
    if (isnan(v))
        textbuf_puts(t, "\"NaN\"");
    else if (isinf(v))
        textbuf_puts(t, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    else if (v == 0 && signbit(v)) /* "-0" reads as the integer 0 in many parsers */
        textbuf_puts(t, "-0.0");
    else
        textbuf_printf(t, "%.*g", digits, v);
}

/* One element of a fixed-size datatype at p. */
static void write_element(textbuf *t, enum oip_datatype dt, const uint8_t *p)
{
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
    } v;
    memcpy(&v, p, oip_datatype_size(dt));
    switch (dt) {
    case OIP_BOOL: textbuf_puts(t, v.u8 ? "true" : "false"); break;
    case OIP_UINT8: textbuf_printf(t, "%u", (unsigned)v.u8); break;
    case OIP_UINT16: textbuf_printf(t, "%u", (unsigned)v.u16); break;
    case OIP_UINT32: textbuf_printf(t, "%" PRIu32, v.u32); break;
    case OIP_UINT64: textbuf_printf(t, "%" PRIu64, v.u64); break;
    case OIP_INT8: textbuf_printf(t, "%d", (int)v.i8); break;
    case OIP_INT16: textbuf_printf(t, "%d", (int)v.i16); break;
    case OIP_INT32: textbuf_printf(t, "%" PRId32, v.i32); break;
    case OIP_INT64: textbuf_printf(t, "%" PRId64, v.i64); break;
    case OIP_FP16: write_float(t, oip_fp16_to_float(v.u16), 9); break;
    case OIP_BF16: write_float(t, oip_bf16_to_float(v.u16), 9); break;
    case OIP_FP32: write_float(t, v.f32, 9); break;
    case OIP_FP64: write_float(t, v.f64, 17); break;
    default: break;
    }
}

static int write_data(textbuf *t, const oip_tensor *x, tetris_error *err)
{
    size_t size = oip_datatype_size(x->datatype);
    textbuf_puts(t, "[");
    if (x->datatype == OIP_BYTES) {
        int r = oip_bytes_check(x->data, x->data_bytes, x->count, err);
        for (size_t i = 0, off = 0; r == 0 && i < x->count; i++) {
            uint32_t n = le32(x->data + off);
            if (i > 0)
                textbuf_puts(t, ",");
            if (oip_write_json_string(t, (const char *)x->data + off + 4, n, err) < 0)
                return tetris_wrap(err, "element %zu", i);
            off += 4 + (size_t)n;
        }
        if (r < 0)
            return r;
    } else {
        if (size == 0 || x->data_bytes != x->count * size)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%zu bytes for %zu elements of %s",
                               x->data_bytes, x->count, oip_datatype_name(x->datatype));
        for (size_t i = 0; i < x->count; i++) {
            if (i > 0)
                textbuf_puts(t, ",");
            write_element(t, x->datatype, x->data + i * size);
        }
    }
    textbuf_puts(t, "]");
    return 0;
}

int oip_write_tensor(textbuf *t, const oip_tensor *x, bool binary, tetris_error *err)
{
    int r;
    textbuf_puts(t, "{\"name\":");
    if ((r = oip_write_json_string(t, x->name, strlen(x->name), err)) < 0)
        return tetris_wrap(err, "name");
    textbuf_printf(t, ",\"datatype\":\"%s\",\"shape\":[", oip_datatype_name(x->datatype));
    for (size_t k = 0; k < x->ndim; k++)
        textbuf_printf(t, "%s%" PRId64, k > 0 ? "," : "", x->shape[k]);
    textbuf_puts(t, "],");
    if (binary) {
        textbuf_printf(t, "\"parameters\":{\"binary_data_size\":%zu}", x->data_bytes);
    } else {
        textbuf_puts(t, "\"data\":");
        if ((r = write_data(t, x, err)) < 0)
            return tetris_wrap(err, "%s", x->name);
    }
    textbuf_puts(t, "}");
    return 0;
}
