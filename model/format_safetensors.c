/* format_safetensors.c - safetensors parser (see format_safetensors.h). */
#include "model/format_safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"

static const struct {
    const char *name;
    const char *canonical;
} safetensors_dtypes[] = {
    {"F64", "float64"},  {"F32", "float32"},        {"F16", "float16"},
    {"BF16", "bfloat16"}, {"I64", "int64"},         {"I32", "int32"},
    {"I16", "int16"},    {"I8", "int8"},            {"U8", "uint8"},
    {"BOOL", "bool"},    {"F8_E4M3", "float8e4m3fn"}, {"F8_E5M2", "float8e5m2"},
    {"U16", "uint16"},   {"U32", "uint32"},         {"U64", "uint64"},
};

const char *safetensors_dtype_canonical(const char *dtype)
{
    for (size_t i = 0; i < sizeof safetensors_dtypes / sizeof safetensors_dtypes[0]; i++)
        if (strcmp(dtype, safetensors_dtypes[i].name) == 0)
            return safetensors_dtypes[i].canonical;
    return NULL;
}

static uint64_t read_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

bool safetensors_sniff(const uint8_t *data, size_t len)
{
    if (len < 9)
        return false;
    uint64_t n = read_le64(data);
    return n >= 2 && n <= len - 8 && data[8] == '{';
}

/* A non-negative JSON integer, or -1. */
static int64_t json_uint(const json_t *v)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    return json_integer_value(v);
}

/* Fills t from one header entry; region offsets are still relative to the
 * byte buffer. */
static int parse_entry(const char *path, const char *name, const json_t *entry, tensor_desc *t,
                       tetris_error *err)
{
    if (!json_is_object(entry))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: tensor \"%s\": entry is not an object",
                           path, name);
    const json_t *dtype = json_object_get(entry, "dtype");
    const json_t *shape = json_object_get(entry, "shape");
    const json_t *offsets = json_object_get(entry, "data_offsets");
    if (!json_is_string(dtype))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: tensor \"%s\": \"dtype\" missing or not a string", path, name);
    const char *canonical = safetensors_dtype_canonical(json_string_value(dtype));
    if (canonical == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: tensor \"%s\": unknown dtype \"%s\"",
                           path, name, json_string_value(dtype));
    if (!json_is_array(shape))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: tensor \"%s\": \"shape\" missing or not an array", path, name);
    if (json_array_size(shape) > TENSOR_MAX_DIMS)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: tensor \"%s\": %zu dims (at most %d supported)", path, name,
                           json_array_size(shape), TENSOR_MAX_DIMS);
    if (!json_is_array(offsets) || json_array_size(offsets) != 2)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: tensor \"%s\": \"data_offsets\" must be [begin, end]", path,
                           name);

    snprintf(t->meta.dtype, sizeof t->meta.dtype, "%s", canonical);
    t->meta.ndim = (int)json_array_size(shape);
    for (int i = 0; i < t->meta.ndim; i++) {
        int64_t d = json_uint(json_array_get(shape, (size_t)i));
        if (d < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: tensor \"%s\": shape[%d] is not a non-negative integer",
                               path, name, i);
        t->meta.shape[i] = d;
    }
    if (tensor_shape_nbytes(t->meta.dtype, t->meta.ndim, t->meta.shape, &t->meta.nbytes, err) <
        0)
        return tetris_wrap(err, "%s: tensor \"%s\"", path, name);

    int64_t begin = json_uint(json_array_get(offsets, 0));
    int64_t end = json_uint(json_array_get(offsets, 1));
    if (begin < 0 || end < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: tensor \"%s\": data_offsets must be non-negative integers", path,
                           name);
    if (end < begin)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: tensor \"%s\": data_offsets end %lld before begin %lld", path,
                           name, (long long)end, (long long)begin);
    t->offset = (uint64_t)begin;
    t->length = (uint64_t)(end - begin);
    if (t->length != t->meta.nbytes)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: tensor \"%s\": data_offsets span %llu bytes but dtype %s and "
                           "its shape need %llu",
                           path, name, (unsigned long long)t->length, json_string_value(dtype),
                           (unsigned long long)t->meta.nbytes);
    t->encoding = TENSOR_ENC_RAW;
    return 0;
}

static int check_metadata(const char *path, const json_t *meta, tetris_error *err)
{
    if (!json_is_object(meta))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: \"__metadata__\" is not an object",
                           path);
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)meta, key, value)
    {
        if (!json_is_string(value))
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: \"__metadata__\".\"%s\" is not a string", path, key);
    }
    return 0;
}

static int offset_cmp(const void *a, const void *b)
{
    const tensor_desc *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->length < y->length ? -1 : x->length > y->length;
}

/* The regions, sorted by offset, must tile [0, buffer) exactly. */
static int check_coverage(const char *path, const model *m, uint64_t buffer, tetris_error *err)
{
    uint64_t pos = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        if (t->offset + t->length > buffer)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: tensor \"%s\": data_offsets [%llu, %llu) out of range "
                               "(byte buffer is %llu bytes)",
                               path, t->name, (unsigned long long)t->offset,
                               (unsigned long long)(t->offset + t->length),
                               (unsigned long long)buffer);
        if (t->offset < pos)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: tensor \"%s\": data_offsets [%llu, %llu) overlap tensor "
                               "\"%s\"",
                               path, t->name, (unsigned long long)t->offset,
                               (unsigned long long)(t->offset + t->length),
                               m->tensors[i - 1].name);
        if (t->offset > pos)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: tensor \"%s\": hole of %llu bytes before it at offset %llu "
                               "(tensor regions must be contiguous)",
                               path, t->name, (unsigned long long)(t->offset - pos),
                               (unsigned long long)pos);
        pos = t->offset + t->length;
    }
    if (pos != buffer)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: %llu trailing bytes after the last tensor (byte buffer is "
                           "%llu bytes)",
                           path, (unsigned long long)(buffer - pos), (unsigned long long)buffer);
    return 0;
}

static void json_decref_p(json_t **j)
{
    json_decref(*j);
}

int safetensors_parse(const char *path, const uint8_t *data, size_t len, model **out,
                      tetris_error *err)
{
    *out = NULL;
    if (len < 8)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: truncated: %zu bytes, a safetensors file starts with an 8-byte "
                           "header length",
                           path, len);
    uint64_t hlen = read_le64(data);
    if (hlen > len - 8)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: header length %llu runs past the end of the file (%zu bytes)",
                           path, (unsigned long long)hlen, len);
    if (hlen > SAFETENSORS_MAX_HEADER)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: header length %llu exceeds the %u-byte limit", path,
                           (unsigned long long)hlen, SAFETENSORS_MAX_HEADER);
    if (hlen < 2 || data[8] != '{')
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: header is not a JSON object (must start with '{')", path);

    json_error_t jerr;
    __attribute__((cleanup(json_decref_p))) json_t *header =
        json_loadb((const char *)data + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (header == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: header JSON, byte %d: %s", path, jerr.position, jerr.text);
    if (!json_is_object(header))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: header is not a JSON object", path);

    model *m = model_new(path, "safetensors", err);
    if (m == NULL)
        return -TETRIS_E_NOMEM;
    const char *name;
    const json_t *entry;
    int ret = 0;
    json_object_foreach(header, name, entry)
    {
        if (strcmp(name, "__metadata__") == 0) {
            ret = check_metadata(path, entry, err);
            if (ret < 0)
                break;
            continue;
        }
        if (name[0] == '\0') {
            ret = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: tensor with an empty name", path);
            break;
        }
        tensor_desc t = {0};
        ret = parse_entry(path, name, entry, &t, err);
        if (ret < 0)
            break;
        t.name = strdup(name);
        t.source = strdup(path);
        if (t.name == NULL || t.source == NULL) {
            free(t.name);
            free(t.source);
            ret = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: tensor \"%s\"", path, name);
            break;
        }
        ret = model_add_tensor(m, &t, err);
        if (ret < 0)
            break;
    }
    if (ret == 0) {
        /* File order: sequential reads, and coverage is one pass. */
        if (m->n_tensors > 1)
            qsort(m->tensors, m->n_tensors, sizeof *m->tensors, offset_cmp);
        ret = check_coverage(path, m, len - 8 - hlen, err);
    }
    if (ret == 0) {
        for (size_t i = 0; i < m->n_tensors; i++)
            m->tensors[i].offset += 8 + hlen;
        ret = model_check(m, path, err);
    }
    if (ret < 0) {
        model_free(m);
        return ret;
    }
    *out = m;
    return 0;
}
