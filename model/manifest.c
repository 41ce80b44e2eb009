/* manifest.c - a model's manifest: its tensors, where their bytes are, and
 * their identities, as JSON (the format is in manifest.h). Every reader,
 * the whole-model one and the identities-only one, goes through the same
 * field decoders, so a field means and is checked the same everywhere. */
#include "model/manifest.h"
#include "model/model.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/json_scan.h"
#include "common/textbuf.h"
#include "common/utf8.h"

#define MANIFEST_MAX_BYTES (256u << 20)

static const char *encoding_name(enum tensor_encoding e)
{
    return e == TENSOR_ENC_VARINT ? "varint" : "raw";
}

static void json_decref_p(json_t **j)
{
    json_decref(*j);
}

/* ---- writing ---- */

int manifest_entry_write(textbuf *b, const tensor_desc *t, const char *source_key,
                         const char *source_json, tetris_error *err)
{
    if (t->offset > INT64_MAX || t->length > INT64_MAX || t->meta.nbytes > INT64_MAX)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "tensor \"%s\": region beyond 2^63", t->name);
    if (!utf8_valid(t->name, strlen(t->name)))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "tensor \"%s\": name is not valid UTF-8",
                           t->name);
    textbuf_puts(b, "{\"name\":");
    textbuf_json_string(b, t->name);
    textbuf_printf(b, ",\"dtype\":\"%s\",\"shape\":[", t->meta.dtype);
    for (int i = 0; i < t->meta.ndim; i++)
        textbuf_printf(b, "%s%lld", i > 0 ? "," : "", (long long)t->meta.shape[i]);
    textbuf_printf(b,
                   "],\"%s\":%s,\"offset\":%llu,\"length\":%llu,\"nbytes\":%llu,"
                   "\"encoding\":\"%s\"",
                   source_key, source_json, (unsigned long long)t->offset,
                   (unsigned long long)t->length, (unsigned long long)t->meta.nbytes,
                   encoding_name(t->encoding));
    if (t->has_digest) {
        char hex[TENSOR_DIGEST_HEX_LEN + 1];
        tensor_digest_to_hex(&t->meta.digest, hex);
        textbuf_printf(b, ",\"digest\":\"sha256:%s\",\"crc32\":%u", hex, t->meta.crc32);
    }
    if (!textbuf_puts(b, "}"))
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor \"%s\": building its entry",
                           t->name);
    return 0;
}

/* manifest_entry_write's text, as jansson's value. */
json_t *manifest_entry_encode(const tensor_desc *t, const char *source_key,
                              json_t *source_value, tetris_error *err)
{
    __attribute__((cleanup(json_decref_p))) json_t *source = source_value;
    if (!t->has_digest) {
        tetris_fail(err, TETRIS_E_INVAL, 0,
                    "tensor \"%s\" has no digest (compute digests before encoding it)",
                    t->name);
        return NULL;
    }
    if (source == NULL) {
        tetris_fail(err, TETRIS_E_INVAL, 0,
                    "tensor \"%s\": source is not valid UTF-8 (or out of memory)", t->name);
        return NULL;
    }
    cleanup_free char *source_json = json_dumps(source, JSON_ENCODE_ANY | JSON_COMPACT);
    if (source_json == NULL) {
        tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor \"%s\": building its entry", t->name);
        return NULL;
    }
    textbuf b = {0};
    if (manifest_entry_write(&b, t, source_key, source_json, err) < 0) {
        textbuf_free(&b);
        return NULL;
    }
    json_t *obj = json_loadb(b.data, b.len, 0, NULL);
    textbuf_free(&b);
    if (obj == NULL)
        tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor \"%s\": building its entry", t->name);
    return obj;
}

static char *manifest_nomem(const model *m, tetris_error *err)
{
    tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: building manifest", m->path);
    return NULL;
}

char *manifest_to_json(const model *m, tetris_error *err)
{
    __attribute__((cleanup(json_decref_p))) json_t *tensors = json_array();
    if (tensors == NULL)
        return manifest_nomem(m, err);
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        json_t *obj = manifest_entry_encode(t, "source", json_string(t->source), err);
        if (obj == NULL) {
            tetris_wrap(err, "%s", m->path);
            return NULL;
        }
        if (json_array_append_new(tensors, obj) < 0)
            return manifest_nomem(m, err);
    }
    __attribute__((cleanup(json_decref_p))) json_t *root =
        json_pack("{s:s, s:s, s:s, s:I, s:O}", "format", MANIFEST_FORMAT, "model", m->path,
                  "model_format", m->format, "tensor_bytes", (json_int_t)m->total_bytes,
                  "tensors", tensors);
    if (root == NULL) {
        tetris_fail(err, TETRIS_E_INVAL, 0,
                    "%s: model path or format is not valid UTF-8 (or out of memory)", m->path);
        return NULL;
    }
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    if (text == NULL)
        return manifest_nomem(m, err);
    return text;
}

/* Replaces the file whole (file_replace), so a reader never sees half a
 * manifest. */
int manifest_write_file(const model *m, const char *path, tetris_error *err)
{
    cleanup_free char *text = manifest_to_json(m, err);
    if (text == NULL)
        return -(err != NULL ? err->code : TETRIS_E_NOMEM);
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps' NUL becomes the final newline */
    if (strcmp(path, "-") == 0)
        return fd_write_all(STDOUT_FILENO, text, len + 1, "stdout", err);
    return file_replace(path, text, len + 1, 0644, err);
}

/* ---- reading ---- */

/* Where a decoder is, for messages. */
struct where {
    const char *what;  /* the input */
    size_t index;      /* tensor index, or SIZE_MAX at top level */
    const char *name;  /* tensor name once known */
    const char *needs; /* an entry's fields, or NULL at top level */
};

static int report(const struct where *w, const char *field, const char *problem,
                  const char *needs, tetris_error *err)
{
    char hint[200] = "";
    if (needs != NULL)
        snprintf(hint, sizeof hint, " (an entry needs %s)", needs);
    if (w->index == SIZE_MAX)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: field \"%s\": %s", w->what, field,
                           problem);
    if (w->name != NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: tensors[%zu] (\"%s\"): field \"%s\": %s%s", w->what, w->index,
                           w->name, field, problem, hint);
    return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: tensors[%zu]: field \"%s\": %s%s",
                       w->what, w->index, field, problem, hint);
}

/* A field whose value is wrong. */
static int field_error(const struct where *w, const char *field, const char *problem,
                       tetris_error *err)
{
    return report(w, field, problem, NULL, err);
}

/* A field missing or of the wrong type: the message also says what an
 * entry needs, which is the fix most of the time. */
static int field_type_error(const struct where *w, const char *field, const char *problem,
                            tetris_error *err)
{
    return report(w, field, problem, w->needs, err);
}

/* The members of an object that a decoder reads, by name: one pass over
 * the object's members puts each known one's value in spans[k] (names[k];
 * p NULL when absent). A known key given twice is refused; others are not
 * read, so neither are their repeats (json_scan.h). */
static int collect_members(json_span obj, const char *const *names, size_t n_names,
                           json_span *spans, const struct where *w, tetris_error *err)
{
    for (size_t k = 0; k < n_names; k++)
        spans[k] = (json_span){NULL, 0};
    json_iter it;
    if (!json_iter_object(&it, obj))
        return field_error(w, "tensors", "entry is not an object", err);
    json_span key, value;
    int r;
    while ((r = json_iter_next(&it, &key, &value)) > 0) {
        char name[32];
        /* A key without escapes is its own text: no decoding. */
        const char *raw = key.p + 1;
        size_t len = key.len - 2;
        if (memchr(raw, '\\', len) != NULL) {
            ssize_t n = json_span_string(key, name, sizeof name);
            if (n < 0)
                continue; /* longer than any name read here */
            raw = name;
            len = (size_t)n;
        }
        for (size_t k = 0; k < n_names; k++) {
            if (strlen(names[k]) != len || memcmp(raw, names[k], len) != 0)
                continue;
            if (spans[k].p != NULL)
                return report(w, names[k], "duplicate key", NULL, err);
            spans[k] = value;
        }
    }
    if (r < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not JSON", w->what);
    return 0;
}

/* v as a string field (p NULL: missing) decoded into buf; one too long
 * for buf, or holding a NUL, is a wrong value. */
static int string_field(json_span v, const char *field, const struct where *w, char *buf,
                        size_t cap, tetris_error *err)
{
    if (v.p == NULL)
        return field_type_error(w, field, "missing", err);
    if (!json_span_is_string(v))
        return field_type_error(w, field, "must be a string", err);
    ssize_t n = json_span_string(v, buf, cap);
    if (n < 0) {
        char problem[64];
        snprintf(problem, sizeof problem, "longer than %zu bytes or holds a NUL", cap - 1);
        return field_error(w, field, problem, err);
    }
    if (n == 0)
        return field_error(w, field, "must not be empty", err);
    return 0;
}

/* The same, into a malloc'd copy of any length. */
static int string_field_dup(json_span v, const char *field, const struct where *w, char **out,
                            tetris_error *err)
{
    if (v.p == NULL)
        return field_type_error(w, field, "missing", err);
    if (!json_span_is_string(v))
        return field_type_error(w, field, "must be a string", err);
    json_scan s;
    size_t len;
    json_scan_init(&s, v.p, v.len, 0);
    char *copy = NULL;
    int r = json_scan_string_dup(&s, &copy, &len, err);
    if (r < 0)
        return r;
    if (len == 0 || strlen(copy) != len) {
        free(copy);
        return field_error(w, field, len == 0 ? "must not be empty" : "holds a NUL", err);
    }
    *out = copy;
    return 0;
}

static int uint_field(json_span v, const char *field, uint64_t max, const struct where *w,
                      uint64_t *out, tetris_error *err)
{
    if (v.p == NULL)
        return field_type_error(w, field, "missing", err);
    uint64_t n;
    int r = json_span_uint(v, &n);
    if (r == 0)
        return field_type_error(w, field, "must be a non-negative integer", err);
    if (r < 0 || n > max) {
        char problem[64];
        snprintf(problem, sizeof problem, "%.*s exceeds %llu", v.len > 24 ? 24 : (int)v.len, v.p,
                 (unsigned long long)max);
        return field_error(w, field, problem, err);
    }
    *out = n;
    return 0;
}

static int digest_field(json_span v, const struct where *w, tensor_digest *out, tetris_error *err)
{
    char digest[8 + TENSOR_DIGEST_HEX_LEN + 1];
    int ret = string_field(v, "digest", w, digest, sizeof digest, err);
    if (ret < 0)
        return ret;
    if (strncmp(digest, "sha256:", 7) != 0)
        return field_error(w, "digest", "must be \"sha256:\" and 64 hex digits", err);
    tetris_error derr;
    if (tensor_digest_from_hex(digest, out, &derr) < 0)
        return field_error(w, "digest", derr.msg, err);
    return 0;
}

/* The top-level members every reader of a manifest reads. */
enum { TOP_FORMAT, TOP_MODEL, TOP_MODEL_FORMAT, TOP_TENSOR_BYTES, TOP_TENSORS, TOP_N };
static const char *const top_names[TOP_N] = {"format", "model", "model_format", "tensor_bytes",
                                             "tensors"};

/* The document, an object, and its "format" and "tensors", as every reader
 * of a manifest starts; top[] gets the top-level members. */
static int manifest_open(const char *what, const char *json, size_t len, json_span *top,
                         json_iter *tensors, tetris_error *err)
{
    json_span doc;
    tetris_error serr;
    if (json_scan_document(json, len, &doc, &serr) < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not JSON: %s", what, serr.msg);
    if (!json_span_is_object(doc))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not a JSON object", what);
    struct where w = {.what = what, .index = SIZE_MAX};
    int ret = collect_members(doc, top_names, TOP_N, top, &w, err);
    char format[sizeof MANIFEST_FORMAT + 1];
    if (ret == 0)
        ret = string_field(top[TOP_FORMAT], "format", &w, format, sizeof format, err);
    if (ret == 0 && strcmp(format, MANIFEST_FORMAT) != 0)
        ret = field_error(&w, "format", "must be \"" MANIFEST_FORMAT "\"", err);
    if (ret < 0)
        return ret;
    if (top[TOP_TENSORS].p == NULL)
        return field_error(&w, "tensors", "missing", err);
    if (!json_iter_array(tensors, top[TOP_TENSORS]))
        return field_error(&w, "tensors", "must be an array", err);
    return 0;
}

/* An entry's members, in the order entry_decode reads them. */
enum {
    ENTRY_NAME,
    ENTRY_DTYPE,
    ENTRY_SOURCE,
    ENTRY_ENCODING,
    ENTRY_SHAPE,
    ENTRY_OFFSET,
    ENTRY_LENGTH,
    ENTRY_NBYTES,
    ENTRY_DIGEST,
    ENTRY_CRC32,
    ENTRY_N
};

static int shape_field(json_span v, const struct where *w, tensor_meta *meta, tetris_error *err)
{
    json_iter dims;
    if (v.p == NULL)
        return field_type_error(w, "shape", "missing", err);
    if (!json_iter_array(&dims, v))
        return field_type_error(w, "shape", "must be an array", err);
    json_span d;
    int ndim = 0;
    while (json_iter_next(&dims, NULL, &d) > 0) {
        uint64_t dim;
        if (ndim == TENSOR_MAX_DIMS)
            return field_error(w, "shape", "more than 8 dims", err);
        if (json_span_uint(d, &dim) <= 0 || dim > INT64_MAX)
            return field_error(w, "shape", "dims must be non-negative integers", err);
        meta->shape[ndim++] = (int64_t)dim;
    }
    meta->ndim = ndim;
    return 0;
}

/* manifest_entry_decode at w (whose name it sets), with the source
 * member named source_key. */
static int entry_decode(json_span obj, struct where *w, const char *source_key,
                        bool digest_optional, tensor_desc *t, json_span *source_value,
                        tetris_error *err)
{
    const char *names[ENTRY_N] = {"name",   "dtype",  "",       "encoding", "shape",
                                  "offset", "length", "nbytes", "digest",   "crc32"};
    names[ENTRY_SOURCE] = source_key;
    json_span f[ENTRY_N];
    int ret = collect_members(obj, names, ENTRY_N, f, w, err);
    if (ret < 0)
        return ret;
    cleanup_free char *name = NULL;
    char dtype[sizeof t->meta.dtype + 1], encoding[8];
    if ((ret = string_field_dup(f[ENTRY_NAME], "name", w, &name, err)) < 0)
        return ret;
    w->name = name;
    if ((ret = string_field(f[ENTRY_DTYPE], "dtype", w, dtype, sizeof dtype, err)) < 0)
        return ret;
    *source_value = f[ENTRY_SOURCE];
    if (source_value->p == NULL)
        return field_type_error(w, source_key, "missing", err);
    if ((ret = string_field(f[ENTRY_ENCODING], "encoding", w, encoding, sizeof encoding, err)) < 0)
        return ret;
    if (tensor_dtype_size(dtype) == 0 || strlen(dtype) >= sizeof t->meta.dtype)
        return field_error(w, "dtype", "unknown dtype", err);
    memcpy(t->meta.dtype, dtype, strlen(dtype) + 1);
    if ((ret = shape_field(f[ENTRY_SHAPE], w, &t->meta, err)) < 0)
        return ret;
    uint64_t computed;
    tetris_error serr;
    if (tensor_shape_nbytes(t->meta.dtype, t->meta.ndim, t->meta.shape, &computed, &serr) < 0)
        return field_error(w, "shape", serr.msg, err);

    uint64_t crc = 0;
    if ((ret = uint_field(f[ENTRY_OFFSET], "offset", INT64_MAX, w, &t->offset, err)) < 0 ||
        (ret = uint_field(f[ENTRY_LENGTH], "length", INT64_MAX, w, &t->length, err)) < 0 ||
        (ret = uint_field(f[ENTRY_NBYTES], "nbytes", INT64_MAX, w, &t->meta.nbytes, err)) < 0)
        return ret;
    /* An identity is both fields or, where allowed, neither: the reader
     * then computes it. */
    bool identity = !digest_optional || f[ENTRY_DIGEST].p != NULL || f[ENTRY_CRC32].p != NULL;
    if (identity && (ret = uint_field(f[ENTRY_CRC32], "crc32", UINT32_MAX, w, &crc, err)) < 0)
        return ret;
    t->meta.crc32 = identity ? (uint32_t)crc : 0;
    if (t->meta.nbytes != computed)
        return field_error(w, "nbytes", "does not match dtype and shape", err);
    if (strcmp(encoding, "raw") == 0)
        t->encoding = TENSOR_ENC_RAW;
    else if (strcmp(encoding, "varint") == 0)
        t->encoding = TENSOR_ENC_VARINT;
    else
        return field_error(w, "encoding", "must be \"raw\" or \"varint\"", err);
    if (t->encoding == TENSOR_ENC_RAW && t->length != t->meta.nbytes) {
        char problem[128];
        snprintf(problem, sizeof problem,
                 "must equal nbytes for raw encoding (raw length %llu, nbytes %llu)",
                 (unsigned long long)t->length, (unsigned long long)t->meta.nbytes);
        return field_error(w, "length", problem, err);
    }
    /* A varint is 1 to 10 bytes per element: a longer region is a claim
     * that would only make its reader read (or allocate) more. */
    size_t width = tensor_dtype_size(t->meta.dtype);
    if (t->encoding == TENSOR_ENC_VARINT &&
        (t->length < t->meta.nbytes / width || (t->length + 9) / 10 > t->meta.nbytes / width)) {
        char problem[160];
        snprintf(problem, sizeof problem,
                 "%llu bytes of varints cannot encode %llu elements (1 to 10 bytes each)",
                 (unsigned long long)t->length, (unsigned long long)(t->meta.nbytes / width));
        return field_error(w, "length", problem, err);
    }
    if (identity && (ret = digest_field(f[ENTRY_DIGEST], w, &t->meta.digest, err)) < 0)
        return ret;
    t->has_digest = identity;
    t->name = steal_pointer(&name);
    w->name = t->name;
    return 0;
}

int manifest_entry_decode(json_span entry, const char *what, size_t index, const char *source_key,
                          bool digest_optional, tensor_desc *t, json_span *source_value,
                          tetris_error *err)
{
    char needs[200];
    snprintf(needs, sizeof needs,
             "name, dtype, shape, %s, offset, length, nbytes, encoding, digest, crc32",
             source_key);
    struct where w = {.what = what, .index = index, .needs = needs};
    return entry_decode(entry, &w, source_key, digest_optional, t, source_value, err);
}

/* A source as the manifest names it, resolved against base_dir (the
 * manifest's directory) when it is relative. malloc'd. */
static char *resolve_source(const char *base_dir, const char *source)
{
    char *out;
    if (base_dir == NULL || source[0] == '/')
        return strdup(source);
    if (asprintf(&out, "%s/%s", base_dir, source) < 0)
        return NULL;
    return out;
}

static int tensor_from_json(json_span obj, const char *base_dir, struct where *w, tensor_desc *t,
                            tetris_error *err)
{
    json_span value;
    cleanup_free char *source = NULL;
    int ret = entry_decode(obj, w, "source", false, t, &value, err);
    if (ret == 0)
        ret = string_field_dup(value, "source", w, &source, err);
    if (ret == 0 && (t->source = resolve_source(base_dir, source)) == NULL)
        ret = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: tensor \"%s\"", w->what, w->name);
    return ret;
}

/* Parses a manifest; `what` names it in messages. Relative paths in it
 * are resolved against base_dir, unless that is NULL. */
static int manifest_parse_named(const char *what, const char *base_dir, const char *json,
                                size_t len, model **out, tetris_error *err)
{
    *out = NULL;
    json_span top[TOP_N];
    json_iter tensors;
    int ret = manifest_open(what, json, len, top, &tensors, err);
    if (ret < 0)
        return ret;
    struct where w = {.what = what, .index = SIZE_MAX};
    cleanup_free char *path = NULL;
    char model_format[32];
    uint64_t tensor_bytes;
    if ((ret = string_field_dup(top[TOP_MODEL], "model", &w, &path, err)) < 0 ||
        (ret = string_field(top[TOP_MODEL_FORMAT], "model_format", &w, model_format,
                            sizeof model_format, err)) < 0 ||
        (ret = uint_field(top[TOP_TENSOR_BYTES], "tensor_bytes", INT64_MAX, &w, &tensor_bytes,
                          err)) < 0)
        return ret;

    cleanup_free char *model_path = resolve_source(base_dir, path);
    if (model_path == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", what);
    model *m = model_new(model_path, model_format, err);
    if (m == NULL)
        return -TETRIS_E_NOMEM;
    w.needs = "name, dtype, shape, source, offset, length, nbytes, encoding, digest, crc32";
    json_span entry;
    for (size_t i = 0; ret == 0 && json_iter_next(&tensors, NULL, &entry) > 0; i++) {
        tensor_desc t = {0};
        w.index = i;
        w.name = NULL;
        ret = tensor_from_json(entry, base_dir, &w, &t, err);
        if (ret < 0) {
            free(t.name);
            free(t.source);
        } else if (m->total_bytes + t.meta.nbytes < m->total_bytes) {
            free(t.name);
            free(t.source);
            w.index = SIZE_MAX;
            ret = field_error(&w, "tensors", "total size overflows", err);
        } else {
            ret = model_add_tensor(m, &t, err);
        }
    }
    if (ret == 0 && m->total_bytes != tensor_bytes) {
        w.index = SIZE_MAX;
        ret = field_error(&w, "tensor_bytes", "does not equal the sum of the tensors' nbytes",
                          err);
    }
    if (ret == 0)
        ret = model_check(m, what, err);
    if (ret < 0) {
        model_free(m);
        return ret;
    }
    *out = m;
    return 0;
}

int manifest_parse(const char *json, size_t len, model **out, tetris_error *err)
{
    return manifest_parse_named("manifest", NULL, json, len, out, err);
}

int manifest_read_file(const char *path, model **out, tetris_error *err)
{
    *out = NULL;
    cleanup_free char *buf = NULL;
    size_t len;
    int rc = file_read_all(path, MANIFEST_MAX_BYTES, &buf, &len, err);
    if (rc < 0)
        return rc;
    /* Relative sources are relative to the manifest, wherever it is read
     * from; a bare file name is in the working directory already. */
    const char *slash = strrchr(path, '/');
    cleanup_free char *dir = NULL;
    if (slash != NULL && (dir = strndup(path, slash == path ? 1 : (size_t)(slash - path))) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", path);
    return manifest_parse_named(path, dir, buf, len, out, err);
}

int model_sources_realpath(model *m, tetris_error *err)
{
    char *real = realpath(m->path, NULL);
    if (real == NULL)
        return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_IO, errno,
                           "resolve %s", m->path);
    free(m->path);
    m->path = real;
    /* One model file holds most tensors: resolve each run of one source once. */
    cleanup_free char *prev = NULL; /* the previous tensor's source as it was */
    for (size_t i = 0; i < m->n_tensors; i++) {
        tensor_desc *t = &m->tensors[i];
        if (prev != NULL && strcmp(t->source, prev) == 0) {
            if ((real = strdup(m->tensors[i - 1].source)) == NULL)
                return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "resolve %s", t->source);
        } else if ((real = realpath(t->source, NULL)) == NULL) {
            return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_IO, errno,
                               "resolve %s", t->source);
        }
        free(prev);
        prev = t->source;
        t->source = real;
    }
    return 0;
}

/* ---- identities only ---- */

int manifest_read_digests(const char *json, size_t len, const char *what, bool with_nbytes,
                          manifest_digests *out, tetris_error *err)
{
    memset(out, 0, sizeof *out);
    json_span top[TOP_N];
    json_iter tensors;
    int ret = manifest_open(what, json, len, top, &tensors, err);
    if (ret < 0)
        return ret;
    size_t n = json_iter_count(tensors);
    manifest_digests d = {.n = n, .digests = malloc((n ? n : 1) * sizeof *d.digests)};
    if (with_nbytes)
        d.nbytes = malloc((n ? n : 1) * sizeof *d.nbytes);
    if (d.digests == NULL || (with_nbytes && d.nbytes == NULL)) {
        manifest_digests_release(&d);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: %zu tensors", what, n);
    }
    enum { ID_NAME, ID_DIGEST, ID_NBYTES, ID_N };
    static const char *const names[ID_N] = {"name", "digest", "nbytes"};
    struct where w = {.what = what, .needs = with_nbytes ? "digest, nbytes" : "digest"};
    json_span entry;
    for (size_t i = 0; ret == 0 && json_iter_next(&tensors, NULL, &entry) > 0; i++) {
        json_span f[ID_N];
        char name[256];
        w.index = i;
        w.name = NULL;
        ret = collect_members(entry, names, ID_N, f, &w, err);
        if (ret < 0)
            break;
        if (json_span_string(f[ID_NAME], name, sizeof name) > 0)
            w.name = name; /* messages only */
        ret = digest_field(f[ID_DIGEST], &w, &d.digests[i], err);
        if (ret == 0 && with_nbytes)
            ret = uint_field(f[ID_NBYTES], "nbytes", INT64_MAX, &w, &d.nbytes[i], err);
    }
    if (ret < 0) {
        manifest_digests_release(&d);
        return ret;
    }
    *out = d;
    return 0;
}

void manifest_digests_release(manifest_digests *d)
{
    free(d->digests);
    free(d->nbytes);
    memset(d, 0, sizeof *d);
}
