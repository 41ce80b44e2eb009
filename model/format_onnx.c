/* format_onnx.c - ONNX ModelProto walker (see format_onnx.h).
 *
 * Field numbers are those of onnx.proto (ONNX 1.x); only the fields that
 * lead to tensors are read, everything else is skipped as unknown. */
#include "model/format_onnx.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/pbwire.h"

enum {
    MODEL_GRAPH = 7,
    GRAPH_NODE = 1,
    GRAPH_INITIALIZER = 5,
    GRAPH_SPARSE_INITIALIZER = 15,
    NODE_OUTPUT = 2,
    NODE_OP_TYPE = 4,
    NODE_ATTRIBUTE = 5,
    NODE_DOMAIN = 7,
    ATTR_NAME = 1,
    ATTR_T = 5,
    ATTR_G = 6,
    ATTR_GRAPHS = 11,
    ATTR_SPARSE_TENSOR = 22,
    TENSOR_DIMS = 1,
    TENSOR_DATA_TYPE = 2,
    TENSOR_SEGMENT = 3,
    TENSOR_FLOAT_DATA = 4,
    TENSOR_INT32_DATA = 5,
    TENSOR_STRING_DATA = 6,
    TENSOR_INT64_DATA = 7,
    TENSOR_NAME = 8,
    TENSOR_RAW_DATA = 9,
    TENSOR_DOUBLE_DATA = 10,
    TENSOR_UINT64_DATA = 11,
    TENSOR_EXTERNAL_DATA = 13,
    TENSOR_DATA_LOCATION = 14,
    ENTRY_KEY = 1,
    ENTRY_VALUE = 2,
};

enum { ONNX_STRING = 8, ONNX_LOCATION_EXTERNAL = 1 };

/* TensorProto.DataType -> canonical dtype (NULL: not supported). */
static const char *const onnx_dtypes[] = {
    [1] = "float32", [2] = "uint8",    [3] = "int8",     [4] = "uint16",
    [5] = "int16",   [6] = "int32",    [7] = "int64",    [9] = "bool",
    [10] = "float16", [11] = "float64", [12] = "uint32", [13] = "uint64",
    [16] = "bfloat16", [17] = "float8e4m3fn", [19] = "float8e5m2",
};
static const char *const onnx_dtype_names[] = {
    [0] = "UNDEFINED", [8] = "STRING",  [14] = "COMPLEX64",      [15] = "COMPLEX128",
    [18] = "FLOAT8E4M3FNUZ", [20] = "FLOAT8E5M2FNUZ", [21] = "UINT4", [22] = "INT4",
    [23] = "FLOAT4E2M1",
};

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

struct onnx_ctx {
    const char *path;
    char *dir; /* the model's directory: external data resolves inside it */
    model *m;
    size_t n_string;
    size_t n_sparse;
    size_t n_tensors_seen; /* for messages about unnamed tensors */
};

/* The data fields of a TensorProto, as found on the wire. */
enum data_field { DF_RAW, DF_FLOAT, DF_INT32, DF_INT64, DF_DOUBLE, DF_UINT64, DF_COUNT };
static const char *const data_field_names[DF_COUNT] = {
    "raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data",
};

struct onnx_tensor {
    char name[1024];
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    uint64_t data_type;
    bool is_string;
    int data_count[DF_COUNT];
    pb_field data[DF_COUNT];
    uint64_t data_location;
    char location[PATH_MAX];
    bool has_location;
    char ext_offset[32], ext_length[32];
    bool has_ext_offset, has_ext_length;
};

static int graph_walk(struct onnx_ctx *c, pb_reader *r, tetris_error *err);

/* Names end up in JSON manifests, which hold UTF-8 only. */
static bool valid_utf8(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (len - i <= n)
            return false;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

/* Copies a protobuf string; NULs, bytes that are not UTF-8 and overlong
 * strings are errors. */
static int copy_string(const pb_field *f, char *dst, size_t cap, const char *what,
                       tetris_error *err)
{
    if (f->wire_type != PB_WT_LEN)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not a string (wire type %u)", what,
                           (unsigned)f->wire_type);
    if (f->len >= cap)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: %zu bytes long (limit %zu)", what,
                           f->len, cap - 1);
    if (memchr(f->data, '\0', f->len) != NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: contains a NUL byte", what);
    if (!valid_utf8(f->data, f->len))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not valid UTF-8", what);
    memcpy(dst, f->data, f->len);
    dst[f->len] = '\0';
    return 0;
}

static int expect_varint(const pb_field *f, const char *what, tetris_error *err)
{
    if (f->wire_type != PB_WT_VARINT)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: expected a varint, got wire type %u",
                           what, (unsigned)f->wire_type);
    return 0;
}

static int add_dim(struct onnx_tensor *t, uint64_t v, tetris_error *err)
{
    if (t->ndim == TENSOR_MAX_DIMS)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "more than %d dims", TENSOR_MAX_DIMS);
    if ((int64_t)v < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "dim %d is negative (%lld)", t->ndim,
                           (long long)(int64_t)v);
    t->shape[t->ndim++] = (int64_t)v;
    return 0;
}

static int read_dims(struct onnx_tensor *t, const pb_field *f, tetris_error *err)
{
    if (f->wire_type == PB_WT_VARINT)
        return add_dim(t, f->value, err);
    if (f->wire_type != PB_WT_LEN)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "dims: unexpected wire type %u",
                           (unsigned)f->wire_type);
    const uint8_t *p = f->data, *end = f->data + f->len;
    while (p < end) {
        uint64_t v;
        if (pb_decode_varint(&p, end, &v) < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "dims: malformed packed varint");
        int ret = add_dim(t, v, err);
        if (ret < 0)
            return ret;
    }
    return 0;
}

static int read_external_entry(struct onnx_tensor *t, pb_reader *parent, const pb_field *f,
                               tetris_error *err)
{
    pb_reader r;
    int ret = pb_reader_sub(parent, f, &r, err);
    if (ret < 0)
        return ret;
    char key[64] = "", value[PATH_MAX] = "";
    pb_field e;
    while ((ret = pb_next(&r, &e, err)) > 0) {
        if (e.number == ENTRY_KEY)
            ret = copy_string(&e, key, sizeof key, "external_data key", err);
        else if (e.number == ENTRY_VALUE)
            ret = copy_string(&e, value, sizeof value, "external_data value", err);
        if (ret < 0)
            return ret;
    }
    if (ret < 0)
        return ret;
    if (strcmp(key, "location") == 0) {
        memcpy(t->location, value, sizeof value);
        t->has_location = true;
    } else if (strcmp(key, "offset") == 0 || strcmp(key, "length") == 0) {
        bool is_offset = key[0] == 'o';
        char *dst = is_offset ? t->ext_offset : t->ext_length;
        if (strlen(value) >= sizeof t->ext_offset)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "external_data %s \"%.40s...\" too long",
                               key, value);
        strcpy(dst, value);
        *(is_offset ? &t->has_ext_offset : &t->has_ext_length) = true;
    }
    return 0;
}

/* Reads the fields of one TensorProto into *t. */
static int tensor_read(pb_reader *r, struct onnx_tensor *t, tetris_error *err)
{
    pb_field f;
    int ret;
    while ((ret = pb_next(r, &f, err)) > 0) {
        int df = -1;
        switch (f.number) {
        case TENSOR_DIMS:
            ret = read_dims(t, &f, err);
            break;
        case TENSOR_DATA_TYPE:
            ret = expect_varint(&f, "data_type", err);
            t->data_type = f.value;
            break;
        case TENSOR_SEGMENT:
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "segmented tensors are not supported");
        case TENSOR_NAME:
            ret = copy_string(&f, t->name, sizeof t->name, "name", err);
            break;
        case TENSOR_STRING_DATA:
            t->is_string = true;
            break;
        case TENSOR_EXTERNAL_DATA:
            ret = read_external_entry(t, r, &f, err);
            break;
        case TENSOR_DATA_LOCATION:
            ret = expect_varint(&f, "data_location", err);
            t->data_location = f.value;
            break;
        case TENSOR_RAW_DATA: df = DF_RAW; break;
        case TENSOR_FLOAT_DATA: df = DF_FLOAT; break;
        case TENSOR_INT32_DATA: df = DF_INT32; break;
        case TENSOR_INT64_DATA: df = DF_INT64; break;
        case TENSOR_DOUBLE_DATA: df = DF_DOUBLE; break;
        case TENSOR_UINT64_DATA: df = DF_UINT64; break;
        default:
            break;
        }
        if (ret < 0)
            return ret;
        if (df >= 0) {
            t->data_count[df]++;
            t->data[df] = f;
        }
    }
    return ret;
}

/* Which typed field may carry a dtype's values (ONNX's TensorProto rules). */
static enum data_field typed_field_for(const char *dtype)
{
    if (strcmp(dtype, "float32") == 0)
        return DF_FLOAT;
    if (strcmp(dtype, "float64") == 0)
        return DF_DOUBLE;
    if (strcmp(dtype, "int64") == 0)
        return DF_INT64;
    if (strcmp(dtype, "uint32") == 0 || strcmp(dtype, "uint64") == 0)
        return DF_UINT64;
    return DF_INT32;
}

static int parse_u64_string(const char *s, uint64_t *out)
{
    if (s[0] < '0' || s[0] > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > (unsigned long long)INT64_MAX)
        return -1;
    *out = v;
    return 0;
}

/* External data: location relative to the model's directory, which it must
 * not leave (no absolute paths, no "..", no symlink pointing outside). */
static int resolve_external(struct onnx_ctx *c, const struct onnx_tensor *t, tensor_desc *d,
                            tetris_error *err)
{
    const char *loc = t->location;
    if (!t->has_location || loc[0] == '\0')
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "external data without a location");
    if (loc[0] == '/')
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "external data location \"%s\" is absolute (must be relative to "
                           "the model's directory)",
                           loc);
    for (const char *p = loc; *p != '\0';) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "external data location \"%s\" leaves the model's directory",
                               loc);
        p += n;
        p += *p == '/';
    }
    cleanup_free char *source = NULL;
    if (asprintf(&source, "%s/%s", c->dir, loc) < 0)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "external data path");

    cleanup_free char *real_dir = realpath(c->dir, NULL);
    if (real_dir == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "resolve model directory %s", c->dir);
    cleanup_free char *real_src = realpath(source, NULL);
    if (real_src == NULL)
        return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_IO, errno,
                           "external data file %s", source);
    size_t n = strlen(real_dir);
    bool inside = strcmp(real_dir, "/") == 0 ||
                  (strncmp(real_src, real_dir, n) == 0 && real_src[n] == '/');
    if (!inside)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "external data file %s resolves to %s, outside the model's "
                           "directory",
                           source, real_src);
    struct stat st;
    if (stat(real_src, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", source);
    if (!S_ISREG(st.st_mode))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "external data %s is not a regular file",
                           source);

    uint64_t offset = 0, length = d->meta.nbytes;
    if (t->has_ext_offset && parse_u64_string(t->ext_offset, &offset) < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "external data offset \"%s\" is not a "
                           "non-negative integer", t->ext_offset);
    if (t->has_ext_length && parse_u64_string(t->ext_length, &length) < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "external data length \"%s\" is not a "
                           "non-negative integer", t->ext_length);
    uint64_t size = (uint64_t)st.st_size;
    if (offset > size || length > size - offset)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "external data [%llu, +%llu) is past the end of %s (%llu bytes)",
                           (unsigned long long)offset, (unsigned long long)length, source,
                           (unsigned long long)size);
    d->source = steal_pointer(&source);
    d->offset = offset;
    d->length = length;
    d->encoding = TENSOR_ENC_RAW;
    return 0;
}

/* Where the bytes of a tensor stored inside the model file are. */
static int locate_inline(const pb_reader *r, const struct onnx_tensor *t, tensor_desc *d,
                         tetris_error *err)
{
    int present = -1;
    for (int i = 0; i < DF_COUNT; i++) {
        if (t->data_count[i] == 0)
            continue;
        if (present >= 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "has both %s and %s",
                               data_field_names[present], data_field_names[i]);
        present = i;
    }
    uint64_t nbytes = d->meta.nbytes;
    d->encoding = TENSOR_ENC_RAW;
    if (present < 0) {
        if (nbytes != 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "no data (no raw_data, typed data or external data) for %llu "
                               "bytes",
                               (unsigned long long)nbytes);
        d->offset = 0;
        d->length = 0;
        return 0;
    }
    const pb_field *f = &t->data[present];
    const char *field = data_field_names[present];
    /* Protobuf may split a repeated field into several records; one region
     * cannot describe that, and no ONNX writer does it. */
    if (t->data_count[present] > 1)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s split across %d records (unsupported)",
                           field, t->data_count[present]);
    if (present != DF_RAW && (enum data_field)present != typed_field_for(d->meta.dtype))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s cannot hold dtype %s", field,
                           d->meta.dtype);
    d->offset = pb_offset(r, f->data);
    d->length = f->len;

    switch (present) {
    case DF_RAW:
    case DF_FLOAT:
    case DF_DOUBLE: {
        enum pb_wire_type fixed = present == DF_FLOAT ? PB_WT_FIXED32 : PB_WT_FIXED64;
        if (f->wire_type != PB_WT_LEN && (present == DF_RAW || f->wire_type != fixed))
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: unexpected wire type %u", field,
                               (unsigned)f->wire_type);
        if (d->length != nbytes)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s holds %llu bytes but dtype %s and its shape need %llu",
                               field, (unsigned long long)d->length, d->meta.dtype,
                               (unsigned long long)nbytes);
        return 0;
    }
    default: {
        if (f->wire_type != PB_WT_LEN && f->wire_type != PB_WT_VARINT)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: unexpected wire type %u", field,
                               (unsigned)f->wire_type);
        uint64_t count;
        int ret = pb_count_varints(f->data, f->len, &count, err);
        if (ret < 0)
            return tetris_wrap(err, "%s", field);
        uint64_t elems = nbytes / tensor_dtype_size(d->meta.dtype);
        if (count != elems)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s holds %llu values but the shape has %llu elements", field,
                               (unsigned long long)count, (unsigned long long)elems);
        d->encoding = TENSOR_ENC_VARINT;
        return 0;
    }
    }
}

/* The tensor's name, read ahead so that an error in a field before it can
 * still name the tensor; malformed input just leaves name empty. */
static void peek_name(const pb_reader *r, char *name, size_t cap)
{
    pb_reader ahead = *r;
    pb_field f;
    while (pb_next(&ahead, &f, NULL) > 0)
        if (f.number == TENSOR_NAME && copy_string(&f, name, cap, "name", NULL) == 0)
            return;
    name[0] = '\0';
}

/* Parses one TensorProto and adds it to the model (string tensors are
 * counted and left out). name_override names Constant-node tensors. */
static int tensor_add(struct onnx_ctx *c, pb_reader *r, const char *kind,
                      const char *name_override, tetris_error *err)
{
    struct onnx_tensor t = {0};
    size_t index = c->n_tensors_seen++;
    if (name_override == NULL)
        peek_name(r, t.name, sizeof t.name);
    int ret = tensor_read(r, &t, err);
    const char *name = name_override != NULL ? name_override : t.name;
    if (ret < 0) {
        if (name[0] != '\0')
            return tetris_wrap(err, "%s: %s \"%s\"", c->path, kind, name);
        return tetris_wrap(err, "%s: tensor #%zu (%s)", c->path, index, kind);
    }
    if (name[0] == '\0')
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: tensor #%zu (%s) has no name", c->path,
                           index, kind);
    if (t.is_string || t.data_type == ONNX_STRING) {
        c->n_string++;
        return 0;
    }

    tensor_desc d = {0};
    const char *dtype = t.data_type < N_ELEMS(onnx_dtypes) ? onnx_dtypes[t.data_type] : NULL;
    if (dtype == NULL) {
        const char *dname = t.data_type < N_ELEMS(onnx_dtype_names)
                                ? onnx_dtype_names[t.data_type]
                                : NULL;
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: %s \"%s\": unsupported data_type %llu (%s)", c->path, kind,
                           name, (unsigned long long)t.data_type,
                           dname != NULL ? dname : "unknown");
    }
    snprintf(d.meta.dtype, sizeof d.meta.dtype, "%s", dtype);
    d.meta.ndim = t.ndim;
    memcpy(d.meta.shape, t.shape, sizeof t.shape);
    ret = tensor_shape_nbytes(dtype, t.ndim, t.shape, &d.meta.nbytes, err);
    if (ret == 0) {
        if (t.data_location == ONNX_LOCATION_EXTERNAL) {
            bool inline_data = false;
            for (int i = 0; i < DF_COUNT; i++)
                inline_data |= t.data_count[i] > 0;
            ret = inline_data ? tetris_fail(err, TETRIS_E_FORMAT, 0,
                                            "data_location is EXTERNAL but data is inline")
                              : resolve_external(c, &t, &d, err);
        } else if (t.data_location != 0) {
            ret = tetris_fail(err, TETRIS_E_FORMAT, 0, "unknown data_location %llu",
                              (unsigned long long)t.data_location);
        } else {
            ret = locate_inline(r, &t, &d, err);
        }
    }
    if (ret == 0 && d.source == NULL && (d.source = strdup(c->path)) == NULL)
        ret = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor source");
    if (ret == 0 && (d.name = strdup(name)) == NULL)
        ret = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor name");
    if (ret < 0) {
        free(d.source);
        free(d.name);
        if (err != NULL && err->code == TETRIS_E_NOMEM)
            return ret;
        return tetris_wrap(err, "%s: %s \"%s\"", c->path, kind, name);
    }
    return model_add_tensor(c->m, &d, err);
}

/* One AttributeProto: walks subgraphs; for a Constant node, adds its
 * `value` tensor under the node's output name. */
static int attribute_walk(struct onnx_ctx *c, pb_reader *node, const pb_field *af,
                          const char *constant_output, tetris_error *err)
{
    pb_reader r;
    int ret = pb_reader_sub(node, af, &r, err);
    if (ret < 0)
        return ret;
    char name[256] = "";
    pb_field f, tensor = {0};
    bool has_tensor = false, has_sparse = false;
    while ((ret = pb_next(&r, &f, err)) > 0) {
        pb_reader sub;
        switch (f.number) {
        case ATTR_NAME:
            ret = copy_string(&f, name, sizeof name, "attribute name", err);
            break;
        case ATTR_T:
            tensor = f;
            has_tensor = true;
            break;
        case ATTR_SPARSE_TENSOR:
            has_sparse = true;
            break;
        case ATTR_G:
        case ATTR_GRAPHS:
            ret = pb_reader_sub(&r, &f, &sub, err);
            if (ret == 0)
                ret = graph_walk(c, &sub, err);
            break;
        default:
            break;
        }
        if (ret < 0)
            return ret;
    }
    if (ret < 0)
        return ret;
    if (constant_output == NULL)
        return 0;
    if (has_sparse && strcmp(name, "sparse_value") == 0) {
        c->n_sparse++;
        return 0;
    }
    if (!has_tensor || strcmp(name, "value") != 0)
        return 0;
    pb_reader tr;
    ret = pb_reader_sub(&r, &tensor, &tr, err);
    if (ret < 0)
        return ret;
    return tensor_add(c, &tr, "Constant", constant_output, err);
}

/* One NodeProto. Fields come in any order, so the op type and output are
 * known only after a first pass; the attributes are walked in a second. */
static int node_walk(struct onnx_ctx *c, pb_reader *r, tetris_error *err)
{
    char op_type[128] = "", domain[128] = "", output[1024] = "";
    bool has_output = false;
    pb_reader first = *r;
    pb_field f;
    int ret;
    while ((ret = pb_next(&first, &f, err)) > 0) {
        if (f.number == NODE_OP_TYPE)
            ret = copy_string(&f, op_type, sizeof op_type, "node op_type", err);
        else if (f.number == NODE_DOMAIN)
            ret = copy_string(&f, domain, sizeof domain, "node domain", err);
        else if (f.number == NODE_OUTPUT && !has_output) {
            ret = copy_string(&f, output, sizeof output, "node output", err);
            has_output = true;
        }
        if (ret < 0)
            return tetris_wrap(err, "%s", c->path);
    }
    if (ret < 0)
        return tetris_wrap(err, "%s", c->path);

    bool is_constant = strcmp(op_type, "Constant") == 0 &&
                       (domain[0] == '\0' || strcmp(domain, "ai.onnx") == 0);
    if (is_constant && output[0] == '\0')
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: Constant node without an output",
                           c->path);
    while ((ret = pb_next(r, &f, err)) > 0) {
        if (f.number != NODE_ATTRIBUTE)
            continue;
        ret = attribute_walk(c, r, &f, is_constant ? output : NULL, err);
        if (ret < 0)
            return ret;
    }
    return ret;
}

static int graph_walk(struct onnx_ctx *c, pb_reader *r, tetris_error *err)
{
    pb_field f;
    int ret;
    while ((ret = pb_next(r, &f, err)) > 0) {
        pb_reader sub;
        switch (f.number) {
        case GRAPH_NODE:
            ret = pb_reader_sub(r, &f, &sub, err);
            if (ret == 0)
                ret = node_walk(c, &sub, err);
            break;
        case GRAPH_INITIALIZER:
            ret = pb_reader_sub(r, &f, &sub, err);
            if (ret == 0)
                ret = tensor_add(c, &sub, "initializer", NULL, err);
            break;
        case GRAPH_SPARSE_INITIALIZER:
            c->n_sparse++;
            break;
        default:
            break;
        }
        if (ret < 0)
            return ret;
    }
    return ret;
}

static char *model_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

int onnx_parse(const char *path, const uint8_t *data, size_t len, model **out,
               tetris_error *err)
{
    *out = NULL;
    if (len == 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: empty file, not an ONNX model", path);
    cleanup_free char *dir = model_dir(path);
    if (dir == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", path);
    struct onnx_ctx c = {.path = path, .dir = dir};
    c.m = model_new(path, "onnx", err);
    if (c.m == NULL)
        return -TETRIS_E_NOMEM;

    pb_reader r;
    pb_reader_init(&r, data, len);
    pb_field f;
    int ret;
    bool has_graph = false;
    while ((ret = pb_next(&r, &f, err)) > 0) {
        if (f.number != MODEL_GRAPH)
            continue;
        pb_reader g;
        ret = pb_reader_sub(&r, &f, &g, err);
        if (ret == 0)
            ret = graph_walk(&c, &g, err);
        if (ret < 0)
            break;
        has_graph = true;
    }
    if (ret < 0) {
        /* Messages from the reader itself do not name the file yet. */
        if (err != NULL && strncmp(err->msg, path, strlen(path)) != 0)
            tetris_wrap(err, "%s: not a valid ONNX model", path);
    } else if (!has_graph) {
        ret = tetris_fail(err, TETRIS_E_FORMAT, 0,
                          "%s: no graph (ModelProto field 7): not an ONNX model", path);
    } else {
        ret = model_check(c.m, path, err);
    }
    if (ret < 0) {
        model_free(c.m);
        return ret;
    }
    c.m->n_skipped = c.n_string + c.n_sparse;
    if (c.m->n_skipped > 0)
        log_info("event=onnx-skipped-tensors model=%s string_tensors=%zu sparse_tensors=%zu "
                 "reason=not-shareable",
                 path, c.n_string, c.n_sparse);
    *out = c.m;
    return 0;
}

int onnx_decode_varints(const tensor_desc *t, const uint8_t *region, void *dst,
                        tetris_error *err)
{
    size_t width = tensor_dtype_size(t->meta.dtype);
    if (width == 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "unknown dtype \"%s\"", t->meta.dtype);
    bool is_bool = strcmp(t->meta.dtype, "bool") == 0;
    uint64_t elems = t->meta.nbytes / width;
    const uint8_t *p = region, *end = region + t->length;
    uint8_t *out = dst;
    for (uint64_t i = 0; i < elems; i++) {
        uint64_t v;
        if (pb_decode_varint(&p, end, &v) < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "varint %llu of %llu is malformed or missing",
                               (unsigned long long)i, (unsigned long long)elems);
        if (is_bool)
            v = v != 0;
        for (size_t b = 0; b < width; b++)
            out[b] = (uint8_t)(v >> (8 * b));
        out += width;
    }
    if (p != end)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%zu bytes left after %llu varints",
                           (size_t)(end - p), (unsigned long long)elems);
    return 0;
}
