/* test_safetensors.c - the safetensors parser over files built in the test:
 * valid files (dtypes, metadata, padding, empty tensors, digests and reads
 * from disk) and every malformed case of the bad-input corpus, plus every
 * truncation of a valid file. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/model/model_synth.h"
#include "model/format_safetensors.h"
#include "model/model.h"
#include "tests/lib/unit.h"

static model *parse_ok(const char *path, const struct sbuf *b)
{
    model *m = NULL;
    tetris_error err;
    int ret = model_parse_buffer(path, b->p, b->len, &m, &err);
    ck_assert_msg(ret == 0, "parse %s: %s", path, ret < 0 ? err.msg : "");
    ck_assert_ptr_nonnull(m);
    return m;
}

START_TEST(two_tensors_in_file_order)
{
    /* b is listed first but stored second: the model lists file order. */
    const char *header = "{\"__metadata__\":{\"format\":\"pt\"},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                         "\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}";
    uint8_t data[16];
    for (int i = 0; i < 16; i++)
        data[i] = (uint8_t)i;
    struct sbuf b = syn_safetensors(header, UINT64_MAX, data, sizeof data);
    model *m = parse_ok("two.safetensors", &b);
    uint64_t base = 8 + strlen(header);
    ck_assert_str_eq(m->format, "safetensors");
    ck_assert_uint_eq(m->n_tensors, 2);
    ck_assert_uint_eq(m->total_bytes, 16);
    ck_assert_str_eq(m->tensors[0].name, "a");
    ck_assert_str_eq(m->tensors[0].meta.dtype, "int64");
    ck_assert_int_eq(m->tensors[0].meta.ndim, 1);
    ck_assert_uint_eq(m->tensors[0].offset, base);
    ck_assert_str_eq(m->tensors[1].name, "b");
    ck_assert_str_eq(m->tensors[1].meta.dtype, "float32");
    ck_assert_int_eq(m->tensors[1].meta.shape[0], 2);
    ck_assert_uint_eq(m->tensors[1].offset, base + 8);
    ck_assert_uint_eq(m->tensors[1].length, 8);
    ck_assert_int_eq(m->tensors[1].encoding, TENSOR_ENC_RAW);
    ck_assert_str_eq(m->tensors[1].source, "two.safetensors");
    ck_assert(!m->tensors[0].has_digest);
    model_free(m);
    sbuf_free(&b);
}
END_TEST

START_TEST(every_dtype)
{
    static const char *const names[] = {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8",
                                        "U8", "BOOL", "F8_E4M3", "F8_E5M2", "U16", "U32", "U64"};
    static const char *const canonical[] = {
        "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
        "uint8", "bool", "float8e4m3fn", "float8e5m2", "uint16", "uint32", "uint64"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t size = tensor_dtype_size(canonical[i]);
        ck_assert_uint_gt(size, 0);
        char header[128];
        snprintf(header, sizeof header,
                 "{\"t\":{\"dtype\":\"%s\",\"shape\":[3,1],\"data_offsets\":[0,%zu]}}", names[i],
                 3 * size);
        struct sbuf b = syn_safetensors(header, UINT64_MAX, syn_zeros, 3 * size);
        model *m = parse_ok("dtypes.safetensors", &b);
        ck_assert_str_eq(m->tensors[0].meta.dtype, canonical[i]);
        ck_assert_uint_eq(m->tensors[0].meta.nbytes, 3 * size);
        ck_assert_str_eq(safetensors_dtype_canonical(names[i]), canonical[i]);
        model_free(m);
        sbuf_free(&b);
    }
    ck_assert_ptr_null(safetensors_dtype_canonical("F128"));
}
END_TEST

START_TEST(padding_scalars_and_empty_tensors)
{
    /* Writers pad the header with spaces to align the byte buffer. */
    const char *header = "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                         "\"e\":{\"dtype\":\"F32\",\"shape\":[0,7],\"data_offsets\":[4,4]}}"
                         "        ";
    struct sbuf b = syn_safetensors(header, UINT64_MAX, syn_zeros, 4);
    model *m = parse_ok("pad.safetensors", &b);
    ck_assert_uint_eq(m->n_tensors, 2);
    ck_assert_int_eq(m->tensors[0].meta.ndim, 0);
    ck_assert_uint_eq(m->tensors[0].meta.nbytes, 4);
    ck_assert_str_eq(m->tensors[1].name, "e");
    ck_assert_uint_eq(m->tensors[1].meta.nbytes, 0);
    model_free(m);
    sbuf_free(&b);

    /* An empty header describes an empty model. */
    b = syn_safetensors("{}", UINT64_MAX, NULL, 0);
    m = parse_ok("empty.safetensors", &b);
    ck_assert_uint_eq(m->n_tensors, 0);
    model_free(m);
    sbuf_free(&b);
}
END_TEST

START_TEST(digests_and_reads_from_disk)
{
    char dir[] = "/tmp/tetris-test-st-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    float w[6] = {1, 2, 3, 4, 5, 6};
    int16_t v[3] = {-1, 0, 1};
    const char *header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                         "\"v\":{\"dtype\":\"I16\",\"shape\":[3],\"data_offsets\":[24,30]}}";
    struct sbuf data = {0};
    sbuf_put(&data, w, sizeof w);
    sbuf_put(&data, v, sizeof v);
    struct sbuf b = syn_safetensors(header, UINT64_MAX, data.p, data.len);
    ck_assert_int_eq(sbuf_write_file(&b, path), 0);

    model *m = NULL;
    tetris_error err;
    ck_assert_int_eq(model_parse_file(path, &m, &err), 0);
    ck_assert_int_eq(model_compute_digests(m, &err), 0);
    const void *expect[2] = {w, v};
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    for (size_t i = 0; i < 2; i++) {
        tensor_desc *t = &m->tensors[i];
        ck_assert(t->has_digest);
        tensor_meta meta = t->meta;
        ck_assert_int_eq(tensor_digest_compute(&meta, expect[i], &err), 0);
        ck_assert(tensor_digest_equal(&meta.digest, &t->meta.digest));
        ck_assert_uint_eq(meta.crc32, t->meta.crc32);
        uint8_t got[24];
        ck_assert_int_eq(model_read_tensor(t, fd, got, &err), 0);
        ck_assert_mem_eq(got, expect[i], t->meta.nbytes);
    }
    close(fd);

    /* A file that shrank after parsing is an error, not a short read. */
    ck_assert_int_eq(truncate(path, (off_t)b.len - 2), 0);
    for (size_t i = 0; i < m->n_tensors; i++)
        m->tensors[i].has_digest = false; /* only those are hashed */
    int ret = model_compute_digests(m, &err);
    ck_assert_int_eq(ret, -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"v\""));
    model_free(m);

    /* Missing files are NOTFOUND, directories are refused. */
    ck_assert_int_eq(model_parse_file(dir, &m, &err), -TETRIS_E_INVAL);
    unlink(path);
    ck_assert_int_eq(model_parse_file(path, &m, &err), -TETRIS_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    rmdir(dir);
    sbuf_free(&b);
    sbuf_free(&data);
}
END_TEST

static int is_safetensors_case(size_t i)
{
    return strncmp(syn_bad_cases[i].file, "st-", 3) == 0;
}

START_TEST(malformed_files_fail_clearly)
{
    if (!is_safetensors_case((size_t)_i))
        return;
    const struct syn_bad_case *c = &syn_bad_cases[_i];
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

START_TEST(every_truncation_fails)
{
    const char *header = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                         "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[16,19]}}";
    struct sbuf b = syn_safetensors(header, UINT64_MAX, syn_zeros, 19);
    for (size_t len = 0; len < b.len; len++) {
        model *m = NULL;
        tetris_error err;
        ck_assert_int_eq(safetensors_parse("cut.safetensors", b.p, len, &m, &err),
                         -TETRIS_E_FORMAT);
        ck_assert_ptr_null(m);
    }
    sbuf_free(&b);
}
END_TEST

START_TEST(tensor_names_in_messages)
{
    const char *header = "{\"layer.0.weight\":{\"dtype\":\"F32\",\"shape\":[4],"
                         "\"data_offsets\":[0,12]}}";
    struct sbuf b = syn_safetensors(header, UINT64_MAX, syn_zeros, 12);
    model *m = NULL;
    tetris_error err;
    ck_assert_int_eq(model_parse_buffer("x.safetensors", b.p, b.len, &m, &err),
                     -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "x.safetensors"));
    ck_assert_ptr_nonnull(strstr(err.msg, "\"layer.0.weight\""));
    ck_assert_ptr_nonnull(strstr(err.msg, "16"));
    sbuf_free(&b);
}
END_TEST

START_TEST(content_sniffing_without_extension)
{
    const char *header = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    struct sbuf b = syn_safetensors(header, UINT64_MAX, "xy", 2);
    ck_assert(safetensors_sniff(b.p, b.len));
    model *m = parse_ok("weights.bin", &b);
    ck_assert_str_eq(m->format, "safetensors");
    model_free(m);
    sbuf_free(&b);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, two_tensors_in_file_order);
    tcase_add_test(tc, every_dtype);
    tcase_add_test(tc, padding_scalars_and_empty_tensors);
    tcase_add_test(tc, digests_and_reads_from_disk);
    tcase_add_loop_test(tc, malformed_files_fail_clearly, 0, (int)SYN_N_BAD_CASES);
    tcase_add_test(tc, every_truncation_fails);
    tcase_add_test(tc, tensor_names_in_messages);
    tcase_add_test(tc, content_sniffing_without_extension);
}

UNIT_MAIN("safetensors")
