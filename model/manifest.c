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

/* Strings must be UTF-8 (jansson refuses anything else). */
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
    if (t->offset > INT64_MAX || t->length > INT64_MAX || t->meta.nbytes > INT64_MAX) {
        tetris_fail(err, TETRIS_E_INVAL, 0, "tensor \"%s\": region beyond 2^63", t->name);
        return NULL;
    }
    __attribute__((cleanup(json_decref_p))) json_t *name = json_string(t->name);
    if (name == NULL || source == NULL) {
        tetris_fail(err, TETRIS_E_INVAL, 0,
                    "tensor \"%s\": name or source is not valid UTF-8 (or out of memory)",
                    t->name);
        return NULL;
    }
    json_t *shape = json_array();
    for (int i = 0; shape != NULL && i < t->meta.ndim; i++)
        if (json_array_append_new(shape, json_integer(t->meta.shape[i])) < 0) {
            json_decref(shape);
            shape = NULL;
        }
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(&t->meta.digest, hex);
    char digest[TENSOR_DIGEST_HEX_LEN + 8];
    snprintf(digest, sizeof digest, "sha256:%s", hex);
    json_t *obj = json_pack("{s:O, s:s, s:o, s:O, s:I, s:I, s:I, s:s, s:s, s:I}", "name", name,
                            "dtype", t->meta.dtype, "shape", shape, source_key, source, "offset",
                            (json_int_t)t->offset, "length", (json_int_t)t->length, "nbytes",
                            (json_int_t)t->meta.nbytes, "encoding", encoding_name(t->encoding),
                            "digest", digest, "crc32", (json_int_t)t->meta.crc32);
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

/* v is obj's member field (NULL: missing). */
static int string_value(const json_t *v, const char *field, const struct where *w,
                        const char **out, tetris_error *err)
{
    if (v == NULL)
        return field_type_error(w, field, "missing", err);
    if (!json_is_string(v))
        return field_type_error(w, field, "must be a string", err);
    if (json_string_length(v) == 0)
        return field_error(w, field, "must not be empty", err);
    *out = json_string_value(v);
    return 0;
}

static int get_string(const json_t *obj, const char *field, const struct where *w,
                      const char **out, tetris_error *err)
{
    return string_value(json_object_get(obj, field), field, w, out, err);
}

static int get_uint(const json_t *obj, const char *field, uint64_t max, const struct where *w,
                    uint64_t *out, tetris_error *err)
{
    const json_t *v = json_object_get(obj, field);
    if (v == NULL)
        return field_type_error(w, field, "missing", err);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return field_type_error(w, field, "must be a non-negative integer", err);
    if ((uint64_t)json_integer_value(v) > max) {
        char problem[64];
        snprintf(problem, sizeof problem, "%lld exceeds %llu",
                 (long long)json_integer_value(v), (unsigned long long)max);
        return field_error(w, field, problem, err);
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int get_digest(const json_t *obj, const struct where *w, tensor_digest *out,
                      tetris_error *err)
{
    const char *digest;
    int ret = get_string(obj, "digest", w, &digest, err);
    if (ret < 0)
        return ret;
    if (strncmp(digest, "sha256:", 7) != 0)
        return field_error(w, "digest", "must be \"sha256:\" and 64 hex digits", err);
    tetris_error derr;
    if (tensor_digest_from_hex(digest, out, &derr) < 0)
        return field_error(w, "digest", derr.msg, err);
    return 0;
}

/* The document, an object, and its "format" and "tensors", as every reader
 * of a manifest starts. */
static int manifest_open(const char *what, const char *json, size_t len, json_t **root,
                         const json_t **tensors, tetris_error *err)
{
    json_error_t jerr;
    *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (*root == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not JSON: line %d column %d: %s", what,
                           jerr.line, jerr.column, jerr.text);
    if (!json_is_object(*root))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not a JSON object", what);
    struct where w = {.what = what, .index = SIZE_MAX};
    const char *format;
    int ret = get_string(*root, "format", &w, &format, err);
    if (ret < 0)
        return ret;
    if (strcmp(format, MANIFEST_FORMAT) != 0)
        return field_error(&w, "format", "must be \"" MANIFEST_FORMAT "\"", err);
    *tensors = json_object_get(*root, "tensors");
    if (*tensors == NULL)
        return field_error(&w, "tensors", "missing", err);
    if (!json_is_array(*tensors))
        return field_error(&w, "tensors", "must be an array", err);
    return 0;
}

static int entry_object(const json_t *entry, const struct where *w, tetris_error *err)
{
    if (!json_is_object(entry))
        return field_error(w, "tensors", "entry is not an object", err);
    return 0;
}

/* manifest_entry_decode at w (whose name it sets). */
static int entry_decode(const json_t *obj, struct where *w, const char *source_key,
                        bool digest_optional, tensor_desc *t, const json_t **source_value,
                        tetris_error *err)
{
    int ret = entry_object(obj, w, err);
    if (ret < 0)
        return ret;
    const char *name, *dtype, *encoding;
    if ((ret = get_string(obj, "name", w, &name, err)) < 0)
        return ret;
    w->name = name;
    if ((ret = get_string(obj, "dtype", w, &dtype, err)) < 0)
        return ret;
    *source_value = json_object_get(obj, source_key);
    if (*source_value == NULL)
        return field_type_error(w, source_key, "missing", err);
    if ((ret = get_string(obj, "encoding", w, &encoding, err)) < 0)
        return ret;
    if (tensor_dtype_size(dtype) == 0 || strlen(dtype) >= sizeof t->meta.dtype)
        return field_error(w, "dtype", "unknown dtype", err);
    snprintf(t->meta.dtype, sizeof t->meta.dtype, "%s", dtype);

    const json_t *shape = json_object_get(obj, "shape");
    if (shape == NULL)
        return field_type_error(w, "shape", "missing", err);
    if (!json_is_array(shape))
        return field_type_error(w, "shape", "must be an array", err);
    if (json_array_size(shape) > TENSOR_MAX_DIMS)
        return field_error(w, "shape", "more than 8 dims", err);
    t->meta.ndim = (int)json_array_size(shape);
    for (int i = 0; i < t->meta.ndim; i++) {
        const json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return field_error(w, "shape", "dims must be non-negative integers", err);
        t->meta.shape[i] = json_integer_value(d);
    }
    uint64_t computed;
    tetris_error serr;
    if (tensor_shape_nbytes(t->meta.dtype, t->meta.ndim, t->meta.shape, &computed, &serr) < 0)
        return field_error(w, "shape", serr.msg, err);

    uint64_t crc = 0;
    if ((ret = get_uint(obj, "offset", INT64_MAX, w, &t->offset, err)) < 0 ||
        (ret = get_uint(obj, "length", INT64_MAX, w, &t->length, err)) < 0 ||
        (ret = get_uint(obj, "nbytes", INT64_MAX, w, &t->meta.nbytes, err)) < 0)
        return ret;
    /* An identity is both fields or, where allowed, neither: the reader
     * then computes it. */
    bool identity = !digest_optional || json_object_get(obj, "digest") != NULL ||
                    json_object_get(obj, "crc32") != NULL;
    if (identity && (ret = get_uint(obj, "crc32", UINT32_MAX, w, &crc, err)) < 0)
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
    if (identity && (ret = get_digest(obj, w, &t->meta.digest, err)) < 0)
        return ret;
    t->has_digest = identity;
    t->name = strdup(name);
    if (t->name == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: tensor \"%s\"", w->what, name);
    return 0;
}

int manifest_entry_decode(const json_t *entry, const char *what, size_t index,
                          const char *source_key, bool digest_optional, tensor_desc *t,
                          const json_t **source_value, tetris_error *err)
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

static int tensor_from_json(const json_t *obj, const char *base_dir, struct where *w,
                            tensor_desc *t, tetris_error *err)
{
    const json_t *value;
    const char *source;
    int ret = entry_decode(obj, w, "source", false, t, &value, err);
    if (ret == 0)
        ret = string_value(value, "source", w, &source, err);
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
    __attribute__((cleanup(json_decref_p))) json_t *root = NULL;
    const json_t *tensors;
    int ret = manifest_open(what, json, len, &root, &tensors, err);
    if (ret < 0)
        return ret;
    struct where w = {.what = what, .index = SIZE_MAX};
    const char *path, *model_format;
    uint64_t tensor_bytes;
    if ((ret = get_string(root, "model", &w, &path, err)) < 0 ||
        (ret = get_string(root, "model_format", &w, &model_format, err)) < 0 ||
        (ret = get_uint(root, "tensor_bytes", INT64_MAX, &w, &tensor_bytes, err)) < 0)
        return ret;

    cleanup_free char *model_path = resolve_source(base_dir, path);
    if (model_path == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", what);
    model *m = model_new(model_path, model_format, err);
    if (m == NULL)
        return -TETRIS_E_NOMEM;
    w.needs = "name, dtype, shape, source, offset, length, nbytes, encoding, digest, crc32";
    for (size_t i = 0; i < json_array_size(tensors) && ret == 0; i++) {
        tensor_desc t = {0};
        w.index = i;
        w.name = NULL;
        ret = tensor_from_json(json_array_get(tensors, i), base_dir, &w, &t, err);
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
    __attribute__((cleanup(json_decref_p))) json_t *root = NULL;
    const json_t *tensors;
    int ret = manifest_open(what, json, len, &root, &tensors, err);
    if (ret < 0)
        return ret;
    size_t n = json_array_size(tensors);
    manifest_digests d = {.n = n, .digests = malloc((n ? n : 1) * sizeof *d.digests)};
    if (with_nbytes)
        d.nbytes = malloc((n ? n : 1) * sizeof *d.nbytes);
    if (d.digests == NULL || (with_nbytes && d.nbytes == NULL)) {
        manifest_digests_release(&d);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: %zu tensors", what, n);
    }
    struct where w = {.what = what, .needs = with_nbytes ? "digest, nbytes" : "digest"};
    for (size_t i = 0; i < n && ret == 0; i++) {
        const json_t *entry = json_array_get(tensors, i);
        w.index = i;
        w.name = NULL;
        ret = entry_object(entry, &w, err);
        if (ret < 0)
            break;
        w.name = json_string_value(json_object_get(entry, "name")); /* messages only */
        ret = get_digest(entry, &w, &d.digests[i], err);
        if (ret == 0 && with_nbytes)
            ret = get_uint(entry, "nbytes", INT64_MAX, &w, &d.nbytes[i], err);
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
