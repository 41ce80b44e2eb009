/* model_synth.h - builds small model files byte by byte for tests, the
 * bad-input corpus and fuzz seeds: safetensors files and ONNX protobufs
 * (tensors, Constant nodes, If/Loop subgraphs, external data), plus a table
 * of malformed files, each with the phrase its error message must contain.
 *
 * Header-only (static inline) so unit tests, the corpus generator and the
 * fuzz seed writer share it without another library. */
#ifndef TETRIS_MODEL_SYNTH_H
#define TETRIS_MODEL_SYNTH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable byte buffer ---- */
struct sbuf {
    uint8_t *p;
    size_t len, cap;
};

static inline void sbuf_put(struct sbuf *b, const void *data, size_t len)
{
    if (b->len + len > b->cap) {
        size_t cap = b->cap == 0 ? 256 : b->cap;
        while (cap < b->len + len)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (p == NULL)
            abort();
        b->p = p;
        b->cap = cap;
    }
    if (len > 0)
        memcpy(b->p + b->len, data, len);
    b->len += len;
}

static inline void sbuf_free(struct sbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

static inline void sbuf_str(struct sbuf *b, const char *s)
{
    sbuf_put(b, s, strlen(s));
}

static inline void sbuf_le64(struct sbuf *b, uint64_t v)
{
    uint8_t x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    sbuf_put(b, x, 8);
}

static inline int sbuf_write_file(const struct sbuf *b, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t n = b->len > 0 ? fwrite(b->p, 1, b->len, f) : 0;
    return (fclose(f) == 0 && n == b->len) ? 0 : -1;
}

/* ---- protobuf encoding ---- */
static inline void pbw_varint(struct sbuf *b, uint64_t v)
{
    uint8_t x[10];
    size_t n = 0;
    do {
        x[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v != 0)
            x[n] |= 0x80;
        n++;
    } while (v != 0);
    sbuf_put(b, x, n);
}

static inline void pbw_key(struct sbuf *b, uint32_t field, unsigned wire_type)
{
    pbw_varint(b, (uint64_t)field << 3 | wire_type);
}

static inline void pbw_uint(struct sbuf *b, uint32_t field, uint64_t v)
{
    pbw_key(b, field, 0);
    pbw_varint(b, v);
}

static inline void pbw_bytes(struct sbuf *b, uint32_t field, const void *data, size_t len)
{
    pbw_key(b, field, 2);
    pbw_varint(b, len);
    sbuf_put(b, data, len);
}

static inline void pbw_string(struct sbuf *b, uint32_t field, const char *s)
{
    pbw_bytes(b, field, s, strlen(s));
}

/* Appends sub as a length-delimited field and frees it. */
static inline void pbw_msg(struct sbuf *b, uint32_t field, struct sbuf *sub)
{
    pbw_bytes(b, field, sub->p, sub->len);
    sbuf_free(sub);
}

/* ---- ONNX ---- */
enum {
    SYN_FLOAT = 1, SYN_UINT8 = 2, SYN_INT8 = 3, SYN_UINT16 = 4, SYN_INT16 = 5,
    SYN_INT32 = 6, SYN_INT64 = 7, SYN_STRING = 8, SYN_BOOL = 9, SYN_FLOAT16 = 10,
    SYN_DOUBLE = 11, SYN_UINT32 = 12, SYN_UINT64 = 13, SYN_COMPLEX64 = 14,
    SYN_BFLOAT16 = 16,
};
/* TensorProto data fields. */
enum {
    SYN_F_FLOAT = 4, SYN_F_INT32 = 5, SYN_F_STRING = 6, SYN_F_INT64 = 7, SYN_F_RAW = 9,
    SYN_F_DOUBLE = 10, SYN_F_UINT64 = 11,
};

/* TensorProto header: dims (unpacked, as onnx.proto declares them), type,
 * name (NULL: none). Data fields are appended by the caller. */
static inline void syn_tensor_head(struct sbuf *t, const char *name, int data_type, int ndim,
                                   const int64_t *dims)
{
    for (int i = 0; i < ndim; i++)
        pbw_uint(t, 1, (uint64_t)dims[i]);
    pbw_uint(t, 2, (uint64_t)data_type);
    if (name != NULL)
        pbw_string(t, 8, name);
}

/* A TensorProto with one data field holding data (already encoded). */
static inline struct sbuf syn_tensor(const char *name, int data_type, int ndim,
                                     const int64_t *dims, uint32_t data_field, const void *data,
                                     size_t len)
{
    struct sbuf t = {0};
    syn_tensor_head(&t, name, data_type, ndim, dims);
    pbw_bytes(&t, data_field, data, len);
    return t;
}

/* Packed varints of values (as protobuf int64 encodes them). */
static inline struct sbuf syn_varints(const int64_t *values, size_t n)
{
    struct sbuf v = {0};
    for (size_t i = 0; i < n; i++)
        pbw_varint(&v, (uint64_t)values[i]);
    return v;
}

/* A Constant node whose `value` attribute is tensor (consumed). */
static inline struct sbuf syn_constant_node(const char *output, struct sbuf *tensor)
{
    struct sbuf attr = {0}, node = {0};
    pbw_string(&attr, 1, "value");
    pbw_uint(&attr, 20, 4); /* AttributeProto.TENSOR */
    pbw_msg(&attr, 5, tensor);
    pbw_string(&node, 2, output);
    pbw_string(&node, 4, "Constant");
    pbw_msg(&node, 5, &attr);
    return node;
}

/* An If node with then/else branch graphs (consumed). */
static inline struct sbuf syn_if_node(const char *output, struct sbuf *then_graph,
                                      struct sbuf *else_graph)
{
    struct sbuf node = {0}, a = {0}, e = {0};
    pbw_string(&node, 1, "cond");
    pbw_string(&node, 2, output);
    pbw_string(&node, 4, "If");
    pbw_string(&a, 1, "then_branch");
    pbw_uint(&a, 20, 5); /* GRAPH */
    pbw_msg(&a, 6, then_graph);
    pbw_msg(&node, 5, &a);
    pbw_string(&e, 1, "else_branch");
    pbw_uint(&e, 20, 5);
    pbw_msg(&e, 6, else_graph);
    pbw_msg(&node, 5, &e);
    return node;
}

/* A node of op_type whose attribute `name` holds graphs (the `graphs`
 * list form, as Scan-like custom ops use), consumed. */
static inline struct sbuf syn_graphs_node(const char *op_type, struct sbuf *graphs, int n)
{
    struct sbuf node = {0}, a = {0};
    pbw_string(&node, 2, "out");
    pbw_string(&node, 4, op_type);
    pbw_string(&a, 1, "bodies");
    pbw_uint(&a, 20, 10); /* GRAPHS */
    for (int i = 0; i < n; i++)
        pbw_msg(&a, 11, &graphs[i]);
    pbw_msg(&node, 5, &a);
    return node;
}

static inline void syn_graph_add_initializer(struct sbuf *g, struct sbuf *tensor)
{
    pbw_msg(g, 5, tensor);
}

static inline void syn_graph_add_node(struct sbuf *g, struct sbuf *node)
{
    pbw_msg(g, 1, node);
}

/* ModelProto around graph (consumed): ir_version, producer, opset. */
static inline struct sbuf syn_model(struct sbuf *graph)
{
    struct sbuf m = {0}, opset = {0};
    pbw_uint(&m, 1, 8);
    pbw_string(&m, 2, "tetris-tests");
    pbw_msg(&m, 7, graph);
    pbw_uint(&opset, 2, 17);
    pbw_msg(&m, 8, &opset);
    return m;
}

/* ---- safetensors ---- */

/* header (JSON text) + data; header_len overrides the length word when
 * not UINT64_MAX. */
static inline struct sbuf syn_safetensors(const char *header, uint64_t header_len,
                                          const void *data, size_t len)
{
    struct sbuf b = {0};
    sbuf_le64(&b, header_len != UINT64_MAX ? header_len : strlen(header));
    sbuf_str(&b, header);
    sbuf_put(&b, data, len);
    return b;
}

/* ---- malformed files ---- */
struct syn_bad_case {
    const char *file;   /* file name; its extension picks the parser */
    const char *expect; /* phrase the error message contains */
    struct sbuf (*build)(void);
};

static const uint8_t syn_zeros[256];

#define SYN_ST(fn, header, nbytes)                                                    \
    static inline struct sbuf fn(void)                                                \
    {                                                                                 \
        return syn_safetensors(header, UINT64_MAX, syn_zeros, nbytes);                \
    }

static inline struct sbuf syn_st_tiny(void)
{
    struct sbuf b = {0};
    sbuf_put(&b, "\x10\0\0", 3);
    return b;
}
static inline struct sbuf syn_st_header_past_eof(void)
{
    return syn_safetensors("{}", 4096, NULL, 0);
}
static inline struct sbuf syn_st_header_huge(void)
{
    return syn_safetensors("{}", UINT64_MAX - 1, NULL, 0);
}
SYN_ST(syn_st_not_json, "{\"a\": [1, 2", 0)
SYN_ST(syn_st_not_object, "[1, 2, 3]", 0)
SYN_ST(syn_st_out_of_range,
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8)
SYN_ST(syn_st_overlap,
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
       24)
SYN_ST(syn_st_hole,
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
       20)
SYN_ST(syn_st_trailing, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12)
SYN_ST(syn_st_dtype_mismatch,
       "{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16)
SYN_ST(syn_st_too_many_dims,
       "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1)
SYN_ST(syn_st_shape_overflow,
       "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8)
SYN_ST(syn_st_negative_dim, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
       4)
SYN_ST(syn_st_unknown_dtype,
       "{\"a\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}", 16)
SYN_ST(syn_st_duplicate,
       "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
       "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
       2)
SYN_ST(syn_st_end_before_begin,
       "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4)
SYN_ST(syn_st_bad_offsets, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1)
SYN_ST(syn_st_metadata_not_string, "{\"__metadata__\":{\"k\":1}}", 0)

/* A model around one initializer tensor (consumed). */
static inline struct sbuf syn_model_with(struct sbuf *tensor)
{
    struct sbuf g = {0};
    pbw_string(&g, 2, "g");
    syn_graph_add_initializer(&g, tensor);
    return syn_model(&g);
}

static inline struct sbuf syn_onnx_garbage(void)
{
    struct sbuf b = {0};
    uint32_t x = 0x9e3779b9;
    for (int i = 0; i < 4096; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        uint8_t c = (uint8_t)x;
        sbuf_put(&b, &c, 1);
    }
    return b;
}
static inline struct sbuf syn_onnx_text(void)
{
    struct sbuf b = {0};
    sbuf_str(&b, "this is not a model\n");
    return b;
}
static inline struct sbuf syn_onnx_truncated(void)
{
    static const float w[16];
    int64_t dims[] = {4, 4};
    struct sbuf t = syn_tensor("w", SYN_FLOAT, 2, dims, SYN_F_RAW, w, sizeof w);
    struct sbuf m = syn_model_with(&t);
    m.len -= 40; /* cuts into the raw_data payload */
    return m;
}
static inline struct sbuf syn_onnx_varint_too_long(void)
{
    struct sbuf b = {0};
    pbw_key(&b, 1, 0);
    sbuf_put(&b, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
    return b;
}
static inline struct sbuf syn_onnx_varint_overflow(void)
{
    struct sbuf b = {0};
    pbw_key(&b, 1, 0);
    sbuf_put(&b, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 10);
    return b;
}
static inline struct sbuf syn_onnx_length_past_end(void)
{
    struct sbuf b = {0};
    pbw_key(&b, 7, 2);
    pbw_varint(&b, 1000);
    sbuf_str(&b, "short");
    return b;
}
static inline struct sbuf syn_onnx_group(void)
{
    struct sbuf b = {0};
    pbw_uint(&b, 1, 8);
    pbw_key(&b, 5, 3);
    return b;
}
static inline struct sbuf syn_onnx_no_graph(void)
{
    struct sbuf b = {0};
    pbw_uint(&b, 1, 8);
    pbw_string(&b, 2, "no graph here");
    return b;
}
static inline struct sbuf syn_onnx_raw_mismatch(void)
{
    static const float w[5];
    int64_t dims[] = {2, 3};
    struct sbuf t = syn_tensor("w", SYN_FLOAT, 2, dims, SYN_F_RAW, w, sizeof w);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_float_for_int(void)
{
    static const float w[2];
    int64_t dims[] = {2};
    struct sbuf t = syn_tensor("w", SYN_INT64, 1, dims, SYN_F_FLOAT, w, sizeof w);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_varint_count(void)
{
    int64_t v[] = {1, -2, 3};
    int64_t dims[] = {4};
    struct sbuf packed = syn_varints(v, 3);
    struct sbuf t = syn_tensor("w", SYN_INT64, 1, dims, SYN_F_INT64, packed.p, packed.len);
    sbuf_free(&packed);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_too_many_dims(void)
{
    int64_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    struct sbuf t = syn_tensor("w", SYN_UINT8, 9, dims, SYN_F_RAW, "x", 1);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_negative_dim(void)
{
    int64_t dims[] = {-4};
    struct sbuf t = syn_tensor("w", SYN_UINT8, 1, dims, SYN_F_RAW, "", 0);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_shape_overflow(void)
{
    int64_t dims[] = {INT64_C(1) << 40, INT64_C(1) << 40};
    struct sbuf t = syn_tensor("w", SYN_FLOAT, 2, dims, SYN_F_RAW, "abcd", 4);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_two_data_fields(void)
{
    static const float w[2];
    int64_t dims[] = {2};
    struct sbuf t = syn_tensor("w", SYN_FLOAT, 1, dims, SYN_F_RAW, w, sizeof w);
    pbw_bytes(&t, SYN_F_FLOAT, w, sizeof w);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_no_data(void)
{
    int64_t dims[] = {3};
    struct sbuf t = {0};
    syn_tensor_head(&t, "w", SYN_FLOAT, 1, dims);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_no_name(void)
{
    int64_t dims[] = {1};
    struct sbuf t = syn_tensor(NULL, SYN_UINT8, 1, dims, SYN_F_RAW, "x", 1);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_complex(void)
{
    static const float w[2];
    int64_t dims[] = {1};
    struct sbuf t = syn_tensor("w", SYN_COMPLEX64, 1, dims, SYN_F_RAW, w, sizeof w);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_duplicate(void)
{
    int64_t dims[] = {1};
    struct sbuf g = {0};
    struct sbuf a = syn_tensor("w", SYN_UINT8, 1, dims, SYN_F_RAW, "x", 1);
    struct sbuf b = syn_tensor("w", SYN_UINT8, 1, dims, SYN_F_RAW, "y", 1);
    syn_graph_add_initializer(&g, &a);
    syn_graph_add_initializer(&g, &b);
    return syn_model(&g);
}
/* If nodes nested deeper than the reader allows. */
static inline struct sbuf syn_onnx_deep(void)
{
    int64_t dims[] = {1};
    struct sbuf g = {0};
    struct sbuf t = syn_tensor("leaf", SYN_UINT8, 1, dims, SYN_F_RAW, "x", 1);
    syn_graph_add_initializer(&g, &t);
    for (int i = 0; i < 40; i++) {
        struct sbuf other = {0}, outer = {0};
        struct sbuf node = syn_if_node("o", &g, &other);
        syn_graph_add_node(&outer, &node);
        g = outer;
    }
    return syn_model(&g);
}
static inline struct sbuf syn_onnx_external_escape(void)
{
    int64_t dims[] = {4};
    struct sbuf t = {0}, e = {0};
    syn_tensor_head(&t, "w", SYN_UINT8, 1, dims);
    pbw_string(&e, 1, "location");
    pbw_string(&e, 2, "../../etc/passwd");
    pbw_msg(&t, 13, &e);
    pbw_uint(&t, 14, 1);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_external_absolute(void)
{
    int64_t dims[] = {4};
    struct sbuf t = {0}, e = {0};
    syn_tensor_head(&t, "w", SYN_UINT8, 1, dims);
    pbw_string(&e, 1, "location");
    pbw_string(&e, 2, "/etc/passwd");
    pbw_msg(&t, 13, &e);
    pbw_uint(&t, 14, 1);
    return syn_model_with(&t);
}
static inline struct sbuf syn_onnx_constant_no_output(void)
{
    int64_t dims[] = {1};
    struct sbuf t = syn_tensor(NULL, SYN_UINT8, 1, dims, SYN_F_RAW, "x", 1);
    struct sbuf node = syn_constant_node("", &t);
    struct sbuf g = {0};
    syn_graph_add_node(&g, &node);
    return syn_model(&g);
}

static inline struct sbuf syn_onnx_name_not_utf8(void)
{
    int64_t dims[] = {1};
    struct sbuf t = syn_tensor("w\xff\xfe", SYN_UINT8, 1, dims, SYN_F_RAW, "x", 1);
    return syn_model_with(&t);
}

static const struct syn_bad_case syn_bad_cases[] = {
    {"st-truncated.safetensors", "truncated", syn_st_tiny},
    {"st-header-past-eof.safetensors", "past the end of the file", syn_st_header_past_eof},
    {"st-header-huge.safetensors", "past the end of the file", syn_st_header_huge},
    {"st-not-json.safetensors", "header JSON", syn_st_not_json},
    {"st-not-object.safetensors", "not a JSON object", syn_st_not_object},
    {"st-out-of-range.safetensors", "out of range", syn_st_out_of_range},
    {"st-overlap.safetensors", "overlap", syn_st_overlap},
    {"st-hole.safetensors", "hole", syn_st_hole},
    {"st-trailing.safetensors", "trailing bytes", syn_st_trailing},
    {"st-dtype-mismatch.safetensors", "need 8", syn_st_dtype_mismatch},
    {"st-too-many-dims.safetensors", "9 dims", syn_st_too_many_dims},
    {"st-shape-overflow.safetensors", "overflows", syn_st_shape_overflow},
    {"st-negative-dim.safetensors", "shape[0]", syn_st_negative_dim},
    {"st-unknown-dtype.safetensors", "unknown dtype", syn_st_unknown_dtype},
    {"st-duplicate.safetensors", "duplicate", syn_st_duplicate},
    {"st-end-before-begin.safetensors", "before begin", syn_st_end_before_begin},
    {"st-bad-offsets.safetensors", "data_offsets", syn_st_bad_offsets},
    {"st-metadata.safetensors", "__metadata__", syn_st_metadata_not_string},
    {"onnx-garbage.onnx", "not a valid ONNX model", syn_onnx_garbage},
    {"onnx-text.onnx", "not", syn_onnx_text},
    {"onnx-truncated.onnx", "past the end", syn_onnx_truncated},
    {"onnx-varint-too-long.onnx", "varint", syn_onnx_varint_too_long},
    {"onnx-varint-overflow.onnx", "varint", syn_onnx_varint_overflow},
    {"onnx-length-past-end.onnx", "past the end", syn_onnx_length_past_end},
    {"onnx-group.onnx", "wire type 3", syn_onnx_group},
    {"onnx-no-graph.onnx", "no graph", syn_onnx_no_graph},
    {"onnx-raw-mismatch.onnx", "need 24", syn_onnx_raw_mismatch},
    {"onnx-float-for-int.onnx", "cannot hold dtype int64", syn_onnx_float_for_int},
    {"onnx-varint-count.onnx", "3 values but the shape has 4", syn_onnx_varint_count},
    {"onnx-too-many-dims.onnx", "more than 8 dims", syn_onnx_too_many_dims},
    {"onnx-negative-dim.onnx", "negative", syn_onnx_negative_dim},
    {"onnx-shape-overflow.onnx", "overflows", syn_onnx_shape_overflow},
    {"onnx-two-data-fields.onnx", "both raw_data and float_data", syn_onnx_two_data_fields},
    {"onnx-no-data.onnx", "no data", syn_onnx_no_data},
    {"onnx-no-name.onnx", "has no name", syn_onnx_no_name},
    {"onnx-complex.onnx", "COMPLEX64", syn_onnx_complex},
    {"onnx-duplicate.onnx", "duplicate tensor name", syn_onnx_duplicate},
    {"onnx-deep.onnx", "nested deeper", syn_onnx_deep},
    {"onnx-external-escape.onnx", "leaves the model's directory", syn_onnx_external_escape},
    {"onnx-external-absolute.onnx", "absolute", syn_onnx_external_absolute},
    {"onnx-constant-no-output.onnx", "without an output", syn_onnx_constant_no_output},
    {"onnx-name-not-utf8.onnx", "not valid UTF-8", syn_onnx_name_not_utf8},
};

#define SYN_N_BAD_CASES (sizeof syn_bad_cases / sizeof syn_bad_cases[0])

#endif
