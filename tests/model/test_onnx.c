/* test_onnx.c - the ONNX parser: synthetic models built in the test (every
 * data encoding, Constant nodes, If/Loop/graphs subgraphs, external data,
 * skipped tensors, every malformed case of the bad-input corpus, every
 * truncation) and the real models the build fetches into .deps/models
 * (TETRIS_MODELS_DIR overrides): tensor counts and bytes, all bytes decode,
 * Silero VAD v5 and v6 share tensors. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "tests/model/model_synth.h"
#include "model/format_onnx.h"
#include "model/model.h"
#include "common/pbwire.h"
#include "tests/lib/unit.h"

static model *parse_ok(const char *path, const struct sbuf *b)
{
    model *m = NULL;
    tetris_error err;
    int ret = model_parse_buffer(path, b->p, b->len, &m, &err);
    ck_assert_msg(ret == 0, "parse %s: %s", path, ret < 0 ? err.msg : "");
    return m;
}

static const tensor_desc *find(const model *m, const char *name)
{
    for (size_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    ck_abort_msg("tensor %s not found", name);
    return NULL;
}

/* Decodes t from the in-memory image b. */
static void decode(const struct sbuf *b, const tensor_desc *t, void *dst)
{
    tetris_error err;
    ck_assert_uint_le(t->offset + t->length, b->len);
    if (t->encoding == TENSOR_ENC_RAW) {
        memcpy(dst, b->p + t->offset, t->length);
        return;
    }
    ck_assert_int_eq(onnx_decode_varints(t, b->p + t->offset, dst, &err), 0);
}

START_TEST(protobuf_reader_basics)
{
    struct sbuf b = {0};
    pbw_uint(&b, 1, UINT64_MAX);
    pbw_string(&b, 2, "hi");
    pbw_key(&b, 3, 5);
    sbuf_put(&b, "\x01\x02\x03\x04", 4);
    pbw_key(&b, 4, 1);
    sbuf_put(&b, "\x01\0\0\0\0\0\0\x80", 8);
    pb_reader r;
    pb_field f;
    tetris_error err;
    pb_reader_init(&r, b.p, b.len);
    ck_assert_int_eq(pb_next(&r, &f, &err), 1);
    ck_assert_uint_eq(f.number, 1);
    ck_assert_uint_eq(f.value, UINT64_MAX);
    ck_assert_int_eq(pb_next(&r, &f, &err), 1);
    ck_assert_uint_eq(f.len, 2);
    ck_assert_uint_eq(pb_offset(&r, f.data), 13);
    ck_assert_int_eq(pb_next(&r, &f, &err), 1);
    ck_assert_uint_eq(f.value, 0x04030201);
    ck_assert_int_eq(pb_next(&r, &f, &err), 1);
    ck_assert_uint_eq(f.value, 0x8000000000000001ull);
    ck_assert_int_eq(pb_next(&r, &f, &err), 0);
    sbuf_free(&b);

    /* Field number 0 and a truncated fixed32 are errors. */
    pb_reader_init(&r, (const uint8_t *)"\x02\x00", 2);
    ck_assert_int_eq(pb_next(&r, &f, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "field number 0"));
    pb_reader_init(&r, (const uint8_t *)"\x0d\x01\x02", 3);
    ck_assert_int_eq(pb_next(&r, &f, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "truncated"));

    uint64_t n;
    ck_assert_int_eq(pb_count_varints((const uint8_t *)"\x01\x80\x01\x7f", 4, &n, &err), 0);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(pb_count_varints((const uint8_t *)"\x01\x80", 2, &n, &err),
                     -TETRIS_E_FORMAT);
}
END_TEST

START_TEST(every_encoding_decodes)
{
    float f[6] = {1.5f, -2, 3, 4, 5, 6};
    double d[2] = {0.25, -8};
    int64_t i64[3] = {-1, INT64_MAX, INT64_MIN};
    int64_t i32[4] = {-7, 0, 2147483647, -2147483648LL};
    int64_t f16[2] = {0x3c00, 0xc000};
    int64_t u64[2] = {1, (int64_t)UINT64_MAX};
    int64_t bools[3] = {0, 1, 5};
    int64_t dims2x3[] = {2, 3}, dims2[] = {2}, dims3[] = {3}, dims4[] = {4};

    struct sbuf g = {0};
    struct sbuf t = syn_tensor("raw", SYN_FLOAT, 2, dims2x3, SYN_F_RAW, f, sizeof f);
    syn_graph_add_initializer(&g, &t);
    t = syn_tensor("floats", SYN_FLOAT, 2, dims2x3, SYN_F_FLOAT, f, sizeof f);
    syn_graph_add_initializer(&g, &t);
    t = syn_tensor("doubles", SYN_DOUBLE, 1, dims2, SYN_F_DOUBLE, d, sizeof d);
    syn_graph_add_initializer(&g, &t);
    struct sbuf v = syn_varints(i64, 3);
    t = syn_tensor("int64s", SYN_INT64, 1, dims3, SYN_F_INT64, v.p, v.len);
    sbuf_free(&v);
    syn_graph_add_initializer(&g, &t);
    v = syn_varints(i32, 4);
    t = syn_tensor("int32s", SYN_INT32, 1, dims4, SYN_F_INT32, v.p, v.len);
    sbuf_free(&v);
    syn_graph_add_initializer(&g, &t);
    v = syn_varints(f16, 2);
    t = syn_tensor("halves", SYN_FLOAT16, 1, dims2, SYN_F_INT32, v.p, v.len);
    sbuf_free(&v);
    syn_graph_add_initializer(&g, &t);
    v = syn_varints(u64, 2);
    t = syn_tensor("uint64s", SYN_UINT64, 1, dims2, SYN_F_UINT64, v.p, v.len);
    sbuf_free(&v);
    syn_graph_add_initializer(&g, &t);
    v = syn_varints(bools, 3);
    t = syn_tensor("bools", SYN_BOOL, 1, dims3, SYN_F_INT32, v.p, v.len);
    sbuf_free(&v);
    syn_graph_add_initializer(&g, &t);
    /* A scalar stored unpacked (one fixed32 record) is still one region. */
    t = (struct sbuf){0};
    syn_tensor_head(&t, "scalar", SYN_FLOAT, 0, NULL);
    pbw_key(&t, SYN_F_FLOAT, 5);
    sbuf_put(&t, &f[0], 4);
    syn_graph_add_initializer(&g, &t);
    struct sbuf b = syn_model(&g);

    model *m = parse_ok("enc.onnx", &b);
    ck_assert_str_eq(m->format, "onnx");
    ck_assert_uint_eq(m->n_tensors, 9);
    uint8_t out[64];

    const tensor_desc *x = find(m, "raw");
    ck_assert_int_eq(x->encoding, TENSOR_ENC_RAW);
    ck_assert_int_eq(x->meta.ndim, 2);
    decode(&b, x, out);
    ck_assert_mem_eq(out, f, sizeof f);
    x = find(m, "floats");
    ck_assert_int_eq(x->encoding, TENSOR_ENC_RAW);
    decode(&b, x, out);
    ck_assert_mem_eq(out, f, sizeof f);
    x = find(m, "doubles");
    decode(&b, x, out);
    ck_assert_mem_eq(out, d, sizeof d);
    x = find(m, "int64s");
    ck_assert_int_eq(x->encoding, TENSOR_ENC_VARINT);
    ck_assert_uint_eq(x->meta.nbytes, 24);
    decode(&b, x, out);
    ck_assert_mem_eq(out, i64, sizeof i64);
    x = find(m, "int32s");
    decode(&b, x, out);
    int32_t want32[4] = {-7, 0, 2147483647, INT32_MIN};
    ck_assert_mem_eq(out, want32, sizeof want32);
    x = find(m, "halves");
    ck_assert_str_eq(x->meta.dtype, "float16");
    decode(&b, x, out);
    uint16_t want16[2] = {0x3c00, 0xc000};
    ck_assert_mem_eq(out, want16, sizeof want16);
    x = find(m, "uint64s");
    decode(&b, x, out);
    uint64_t want64[2] = {1, UINT64_MAX};
    ck_assert_mem_eq(out, want64, sizeof want64);
    x = find(m, "bools");
    decode(&b, x, out);
    ck_assert_mem_eq(out, "\0\1\1", 3);
    x = find(m, "scalar");
    ck_assert_int_eq(x->meta.ndim, 0);
    ck_assert_uint_eq(x->length, 4);
    decode(&b, x, out);
    ck_assert_mem_eq(out, f, 4);
    model_free(m);
    sbuf_free(&b);
}
END_TEST

START_TEST(constants_and_subgraphs)
{
    int64_t dims[] = {2};
    uint8_t a[2] = {1, 2}, c[2] = {3, 4}, t1[2] = {5, 6}, t2[2] = {7, 8}, l[2] = {9, 10};

    /* Loop body holding an If whose branches hold a Constant and an
     * initializer; a custom node with a `graphs` list; a top-level
     * Constant and initializer. */
    struct sbuf then_g = {0}, else_g = {0}, body = {0}, g = {0};
    struct sbuf t = syn_tensor(NULL, SYN_UINT8, 1, dims, SYN_F_RAW, t1, 2);
    struct sbuf n = syn_constant_node("then_const", &t);
    syn_graph_add_node(&then_g, &n);
    t = syn_tensor("else_init", SYN_UINT8, 1, dims, SYN_F_RAW, t2, 2);
    syn_graph_add_initializer(&else_g, &t);
    n = syn_if_node("if_out", &then_g, &else_g);
    syn_graph_add_node(&body, &n);
    struct sbuf loop = {0}, attr = {0};
    pbw_string(&loop, 2, "loop_out");
    pbw_string(&loop, 4, "Loop");
    pbw_string(&attr, 1, "body");
    pbw_msg(&attr, 6, &body);
    pbw_msg(&loop, 5, &attr);
    syn_graph_add_node(&g, &loop);

    struct sbuf bodies[2] = {{0}, {0}};
    t = syn_tensor("scan_a", SYN_UINT8, 1, dims, SYN_F_RAW, l, 2);
    syn_graph_add_initializer(&bodies[0], &t);
    t = syn_tensor("scan_b", SYN_UINT8, 1, dims, SYN_F_RAW, l, 2);
    syn_graph_add_initializer(&bodies[1], &t);
    n = syn_graphs_node("Custom", bodies, 2);
    syn_graph_add_node(&g, &n);

    t = syn_tensor("ignored_own_name", SYN_UINT8, 1, dims, SYN_F_RAW, c, 2);
    n = syn_constant_node("top_const", &t);
    syn_graph_add_node(&g, &n);
    t = syn_tensor("top_init", SYN_UINT8, 1, dims, SYN_F_RAW, a, 2);
    syn_graph_add_initializer(&g, &t);

    /* A non-Constant node's tensor attribute is not a weight to share. */
    struct sbuf other = {0}, oattr = {0};
    t = syn_tensor("cos_value", SYN_UINT8, 1, dims, SYN_F_RAW, a, 2);
    pbw_string(&other, 2, "cos_out");
    pbw_string(&other, 4, "ConstantOfShape");
    pbw_string(&oattr, 1, "value");
    pbw_msg(&oattr, 5, &t);
    pbw_msg(&other, 5, &oattr);
    syn_graph_add_node(&g, &other);
    struct sbuf b = syn_model(&g);

    model *m = parse_ok("sub.onnx", &b);
    ck_assert_uint_eq(m->n_tensors, 6);
    uint8_t out[2];
    decode(&b, find(m, "then_const"), out);
    ck_assert_mem_eq(out, t1, 2);
    decode(&b, find(m, "else_init"), out);
    ck_assert_mem_eq(out, t2, 2);
    decode(&b, find(m, "top_const"), out);
    ck_assert_mem_eq(out, c, 2);
    decode(&b, find(m, "top_init"), out);
    ck_assert_mem_eq(out, a, 2);
    find(m, "scan_a");
    find(m, "scan_b");
    ck_assert_uint_eq(m->total_bytes, 12);
    model_free(m);
    sbuf_free(&b);
}
END_TEST

START_TEST(strings_sparse_and_unknown_fields_are_skipped)
{
    int64_t dims[] = {1};
    struct sbuf g = {0}, t = {0};
    syn_tensor_head(&t, "words", SYN_STRING, 1, dims);
    pbw_string(&t, SYN_F_STRING, "hello");
    syn_graph_add_initializer(&g, &t);
    struct sbuf sparse = {0}, values = syn_tensor("sp", SYN_FLOAT, 1, dims, SYN_F_RAW, "abcd", 4);
    pbw_msg(&sparse, 1, &values);
    pbw_msg(&g, 15, &sparse);
    t = syn_tensor("w", SYN_UINT8, 1, dims, SYN_F_RAW, "x", 1);
    /* Unknown fields of every wire type inside the tensor and the graph. */
    pbw_uint(&t, 99, 7);
    pbw_key(&t, 100, 1);
    sbuf_put(&t, "12345678", 8);
    pbw_key(&t, 101, 5);
    sbuf_put(&t, "1234", 4);
    pbw_string(&t, 102, "doc");
    syn_graph_add_initializer(&g, &t);
    pbw_string(&g, 200, "unknown");
    struct sbuf b = syn_model(&g);
    model *m = parse_ok("skip.onnx", &b);
    ck_assert_uint_eq(m->n_tensors, 1);
    ck_assert_uint_eq(m->n_skipped, 2);
    ck_assert_str_eq(m->tensors[0].name, "w");
    model_free(m);
    sbuf_free(&b);
}
END_TEST

/* Builds a model whose one tensor (4 uint8) lives in an external file. */
static struct sbuf external_model(const char *location, const char *offset, const char *length)
{
    int64_t dims[] = {4};
    struct sbuf t = {0}, e = {0};
    syn_tensor_head(&t, "ext", SYN_UINT8, 1, dims);
    pbw_string(&e, 1, "location");
    pbw_string(&e, 2, location);
    pbw_msg(&t, 13, &e);
    if (offset != NULL) {
        pbw_string(&e, 1, "offset");
        pbw_string(&e, 2, offset);
        pbw_msg(&t, 13, &e);
    }
    if (length != NULL) {
        pbw_string(&e, 1, "length");
        pbw_string(&e, 2, length);
        pbw_msg(&t, 13, &e);
    }
    pbw_uint(&t, 14, 1);
    return syn_model_with(&t);
}

static int external_parse(const char *dir, struct sbuf *b, model **m, tetris_error *err)
{
    char path[256];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    ck_assert_int_eq(sbuf_write_file(b, path), 0);
    sbuf_free(b);
    int ret = model_parse_file(path, m, err);
    unlink(path);
    return ret;
}

START_TEST(external_data)
{
    char dir[] = "/tmp/tetris-test-onnx-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char weights[300], sub[300], link[300];
    snprintf(weights, sizeof weights, "%s/weights.bin", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(link, sizeof link, "%s/sub/escape.bin", dir);
    struct sbuf w = {0};
    sbuf_str(&w, "..ABCD..");
    ck_assert_int_eq(sbuf_write_file(&w, weights), 0);
    sbuf_free(&w);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    ck_assert_int_eq(symlink("/etc/hostname", link), 0);

    model *m = NULL;
    tetris_error err;
    struct sbuf b = external_model("weights.bin", "2", "4");
    ck_assert_msg(external_parse(dir, &b, &m, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(m->n_tensors, 1);
    ck_assert_str_eq(m->tensors[0].source, weights);
    ck_assert_uint_eq(m->tensors[0].offset, 2);
    ck_assert_int_eq(model_compute_digests(m, &err), 0);
    tensor_meta meta = m->tensors[0].meta;
    ck_assert_int_eq(tensor_digest_compute(&meta, "ABCD", &err), 0);
    ck_assert(tensor_digest_equal(&meta.digest, &m->tensors[0].meta.digest));
    int fd = open(weights, O_RDONLY);
    char got[4];
    ck_assert_int_eq(model_read_tensor(&m->tensors[0], fd, got, &err), 0);
    ck_assert_mem_eq(got, "ABCD", 4);
    close(fd);
    model_free(m);

    static const struct {
        const char *location, *offset, *length, *expect;
        int code;
    } bad[] = {
        {"weights.bin", "6", "4", "past the end", TETRIS_E_FORMAT},
        {"weights.bin", "-1", NULL, "offset", TETRIS_E_FORMAT},
        {"weights.bin", "0", "3", "3 bytes of data", TETRIS_E_FORMAT},
        {"missing.bin", NULL, NULL, "missing.bin", TETRIS_E_NOTFOUND},
        {"sub/escape.bin", NULL, NULL, "outside the model's directory", TETRIS_E_FORMAT},
        {"sub/../../x", NULL, NULL, "leaves the model's directory", TETRIS_E_FORMAT},
        {"sub", NULL, NULL, "not a regular file", TETRIS_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        b = external_model(bad[i].location, bad[i].offset, bad[i].length);
        int ret = external_parse(dir, &b, &m, &err);
        ck_assert_msg(ret == -bad[i].code, "%s: ret %d (%s)", bad[i].location, ret, err.msg);
        ck_assert_msg(strstr(err.msg, bad[i].expect) != NULL, "%s: \"%s\" not in: %s",
                      bad[i].location, bad[i].expect, err.msg);
        ck_assert_ptr_nonnull(strstr(err.msg, "\"ext\""));
    }
    unlink(link);
    rmdir(sub);
    unlink(weights);
    rmdir(dir);
}
END_TEST

/* A varint region larger than the reader's buffer (1 MiB) is decoded in
 * pieces, varints split across them included, with nothing but dst the
 * size of the tensor; a region with bytes to spare, or one short, fails. */
START_TEST(varints_stream_through_a_bounded_buffer)
{
    enum { ELEMS = 300000, OFFSET = 3 };
    char path[] = "/tmp/tetris-test-varint-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    cleanup_free uint8_t *region = malloc(OFFSET + ELEMS * 10 + 1);
    cleanup_free int64_t *want = malloc(ELEMS * sizeof(*want));
    cleanup_free int64_t *got = malloc(ELEMS * sizeof(*got));
    ck_assert(region != NULL && want != NULL && got != NULL);
    size_t len = OFFSET;
    memset(region, 0xee, OFFSET);
    for (uint64_t i = 0; i < ELEMS; i++) {
        uint64_t v = i * 0x9e3779b97f4a7c15ull >> (i % 64); /* 1 to 10 bytes */
        want[i] = (int64_t)v;
        do {
            region[len++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
            v >>= 7;
        } while (v != 0);
    }
    ck_assert_uint_gt(len - OFFSET, 1u << 20); /* more than one buffer */
    region[len] = 0x01;                        /* one byte to spare, for the last case */
    ck_assert_int_eq(pwrite(fd, region, len + 1, 0), (ssize_t)(len + 1));
    tensor_desc t = {.name = "v",
                     .source = "varints",
                     .offset = OFFSET,
                     .length = len - OFFSET,
                     .encoding = TENSOR_ENC_VARINT};
    snprintf(t.meta.dtype, sizeof t.meta.dtype, "int64");
    t.meta.nbytes = ELEMS * sizeof(int64_t);
    tetris_error err;
    ck_assert_msg(model_read_tensor(&t, fd, got, &err) == 0, "%s", err.msg);
    ck_assert_mem_eq(got, want, ELEMS * sizeof(*want));
    t.length++;
    ck_assert_int_eq(model_read_tensor(&t, fd, got, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "left after"));
    t.length -= 2;
    ck_assert_int_eq(model_read_tensor(&t, fd, got, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "malformed or missing"));
    close(fd);
}
END_TEST

START_TEST(malformed_files_fail_clearly)
{
    const struct syn_bad_case *c = &syn_bad_cases[_i];
    if (strncmp(c->file, "onnx-", 5) != 0)
        return;
    struct sbuf b = c->build();
    model *m = NULL;
    tetris_error err;
    int ret = model_parse_buffer(c->file, b.p, b.len, &m, &err);
    ck_assert_msg(ret == -TETRIS_E_FORMAT, "%s: ret %d", c->file, ret);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.msg, c->file) != NULL, "%s: message does not name the file: %s",
                  c->file, err.msg);
    ck_assert_msg(strstr(err.msg, c->expect) != NULL, "%s: expected \"%s\" in: %s", c->file,
                  c->expect, err.msg);
    sbuf_free(&b);
}
END_TEST

START_TEST(every_truncation_is_handled)
{
    int64_t dims[] = {4};
    float w[4] = {1, 2, 3, 4};
    struct sbuf g = {0}, t = syn_tensor("w", SYN_FLOAT, 1, dims, SYN_F_FLOAT, w, sizeof w);
    syn_graph_add_initializer(&g, &t);
    t = syn_tensor(NULL, SYN_FLOAT, 1, dims, SYN_F_RAW, w, sizeof w);
    struct sbuf n = syn_constant_node("c", &t);
    syn_graph_add_node(&g, &n);
    struct sbuf b = syn_model(&g);
    /* A protobuf cut at a field boundary is a valid, shorter message, so
     * some prefixes parse; none may crash or report a tensor past the cut. */
    for (size_t len = 0; len < b.len; len++) {
        model *m = NULL;
        tetris_error err;
        int ret = onnx_parse("cut.onnx", b.p, len, &m, &err);
        ck_assert_msg(ret == 0 || ret == -TETRIS_E_FORMAT, "len %zu: ret %d", len, ret);
        for (size_t i = 0; ret == 0 && i < m->n_tensors; i++)
            ck_assert_uint_le(m->tensors[i].offset + m->tensors[i].length, len);
        model_free(m);
    }
    sbuf_free(&b);
}
END_TEST

/* ---- real models ---- */

static const char *models_dir(void)
{
    const char *d = getenv("TETRIS_MODELS_DIR");
    return d != NULL ? d : ".deps/models";
}

static model *real_model(const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", models_dir(), file);
    model *m = NULL;
    tetris_error err;
    ck_assert_msg(model_parse_file(path, &m, &err) == 0, "%s", err.msg);
    ck_assert_msg(model_compute_digests(m, &err) == 0, "%s", err.msg);
    return m;
}

/* Every tensor's bytes read back from the file hash to its digest. */
static void check_all_decode(const model *m)
{
    int fd = open(m->path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    tetris_error err;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        void *buf = malloc(t->meta.nbytes + 1);
        ck_assert_msg(model_read_tensor(t, fd, buf, &err) == 0, "%s", err.msg);
        tensor_meta meta = t->meta;
        ck_assert_int_eq(tensor_digest_compute(&meta, buf, &err), 0);
        ck_assert(tensor_digest_equal(&meta.digest, &t->meta.digest));
        free(buf);
    }
    close(fd);
}

static const struct {
    const char *file;
    size_t tensors;
    uint64_t bytes;
    const char *sample; /* a tensor that must be found */
} real_models[] = {
    /* PaddleOCR keeps every weight in Constant nodes. */
    {"ch_PP-OCRv4_det_infer.onnx", 342, 4687364, "batch_norm2d_0.w_0"},
    {"ch_PP-OCRv4_rec_infer.onnx", 325, 10761252, NULL},
    {"ch_ppocr_mobile_v2.0_cls_infer.onnx", 250, 534660, "batch_norm_0.w_0"},
    /* Silero VAD v5/v6: Constant nodes inside the If node's branches. */
    {"silero_vad_v5.onnx", 341, 2183632,
     "If_0_else_branch__Inline_0__decoder.rnn.weight_ih"},
    {"silero_vad_v6.onnx", 341, 2183632,
     "If_0_else_branch__Inline_0__decoder.rnn.weight_ih"},
    {"silero_vad_legacy.onnx", 259, 1781160, NULL},
    /* openWakeWord heads: initializers plus a few Constants. */
    {"hello_deepa.onnx", 14, 312212, NULL},
    {"hello_deepa_old.onnx", 14, 299924, NULL},
    {"namaste_deepa.onnx", 14, 299924, NULL},
};

START_TEST(real_model_counts_and_decoding)
{
    model *m = real_model(real_models[_i].file);
    ck_assert_msg(m->n_tensors == real_models[_i].tensors, "%s: %zu tensors",
                  real_models[_i].file, m->n_tensors);
    ck_assert_uint_eq(m->total_bytes, real_models[_i].bytes);
    ck_assert_uint_eq(m->n_skipped, 0);
    if (real_models[_i].sample != NULL)
        find(m, real_models[_i].sample);
    check_all_decode(m);
    model_free(m);
}
END_TEST

START_TEST(silero_v5_subgraph_weights)
{
    model *m = real_model("silero_vad_v5.onnx");
    const tensor_desc *t = find(m, "If_0_else_branch__Inline_0__decoder.rnn.weight_ih");
    ck_assert_str_eq(t->meta.dtype, "float32");
    ck_assert_int_eq(t->meta.ndim, 2);
    ck_assert_int_eq(t->meta.shape[0], 512);
    ck_assert_int_eq(t->meta.shape[1], 128);
    size_t in_if = 0;
    for (size_t i = 0; i < m->n_tensors; i++)
        in_if += strncmp(m->tensors[i].name, "If_0_", 5) == 0;
    ck_assert_uint_eq(in_if, 340);
    model_free(m);
}
END_TEST

static int digest_cmp(const void *a, const void *b)
{
    return memcmp(a, b, TENSOR_DIGEST_BYTES);
}

START_TEST(silero_v5_v6_share_tensors)
{
    model *v5 = real_model("silero_vad_v5.onnx");
    model *v6 = real_model("silero_vad_v6.onnx");
    tensor_digest *d6 = calloc(v6->n_tensors, sizeof *d6);
    for (size_t i = 0; i < v6->n_tensors; i++)
        d6[i] = v6->tensors[i].meta.digest;
    qsort(d6, v6->n_tensors, sizeof *d6, digest_cmp);
    size_t shared = 0;
    uint64_t shared_bytes = 0;
    for (size_t i = 0; i < v5->n_tensors; i++)
        if (bsearch(&v5->tensors[i].meta.digest, d6, v6->n_tensors, sizeof *d6, digest_cmp)) {
            shared++;
            shared_bytes += v5->tensors[i].meta.nbytes;
        }
    /* The files differ, yet most tensors (the STFT basis and most layers)
     * are identical. */
    ck_assert_uint_eq(shared, 313);
    ck_assert_uint_gt(shared_bytes, 0);
    ck_assert_uint_lt(shared_bytes, v5->total_bytes);
    free(d6);
    model_free(v5);
    model_free(v6);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "synthetic", 0);
    tcase_add_test(tc, protobuf_reader_basics);
    tcase_add_test(tc, every_encoding_decodes);
    tcase_add_test(tc, constants_and_subgraphs);
    tcase_add_test(tc, strings_sparse_and_unknown_fields_are_skipped);
    tcase_add_test(tc, external_data);
    tcase_add_test(tc, varints_stream_through_a_bounded_buffer);
    tcase_add_loop_test(tc, malformed_files_fail_clearly, 0, (int)SYN_N_BAD_CASES);
    tcase_add_test(tc, every_truncation_is_handled);
    TCase *real = unit_tcase(s, "real-models", 60);
    tcase_add_loop_test(real, real_model_counts_and_decoding, 0,
                        (int)(sizeof real_models / sizeof real_models[0]));
    tcase_add_test(real, silero_v5_subgraph_weights);
    tcase_add_test(real, silero_v5_v6_share_tensors);
}

UNIT_MAIN("onnx")
