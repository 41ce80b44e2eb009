/* test_manifest.c - manifests: a parsed model written as JSON and read back
 * is the same model; every malformed manifest (missing fields, wrong types,
 * negative or huge numbers, bad digests, inconsistent sizes, duplicates,
 * overlaps) is TETRIS_E_FORMAT naming the field. One tensor entry encodes
 * and decodes on its own with any source key (the ingest request's), and
 * the identities-only reader checks what it reads as the full one does. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/model/model_synth.h"
#include "model/manifest.h"
#include "model/model.h"
#include "tests/lib/unit.h"

static const char *dir;
static char model_path[256];

static void setup(void)
{
    dir = unit_scratch_dir("test-manifest");
    snprintf(model_path, sizeof model_path, "%s/m.safetensors", dir);
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t v[2] = {7, -8};
    struct sbuf data = {0};
    sbuf_put(&data, w, sizeof w);
    sbuf_put(&data, v, sizeof v);
    struct sbuf b = syn_safetensors(
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"v\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[24,40]},"
        "\"s\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[40,41]}}",
        UINT64_MAX, data.p, data.len + 1);
    ck_assert_int_eq(sbuf_write_file(&b, model_path), 0);
    sbuf_free(&b);
    sbuf_free(&data);
}

static void teardown(void)
{
    unit_remove_tree(dir);
}

static model *indexed_model(void)
{
    model *m = NULL;
    tetris_error err;
    ck_assert_int_eq(model_parse_file(model_path, &m, &err), 0);
    ck_assert_int_eq(model_compute_digests(m, &err), 0);
    return m;
}

/* Every field of y is x's but the source; y was decoded. */
static void assert_same_entry(const tensor_desc *x, const tensor_desc *y)
{
    ck_assert_str_eq(x->name, y->name);
    ck_assert_str_eq(x->meta.dtype, y->meta.dtype);
    ck_assert_int_eq(x->meta.ndim, y->meta.ndim);
    ck_assert_mem_eq(x->meta.shape, y->meta.shape, sizeof x->meta.shape);
    ck_assert_uint_eq(x->meta.nbytes, y->meta.nbytes);
    ck_assert_uint_eq(x->meta.crc32, y->meta.crc32);
    ck_assert(tensor_digest_equal(&x->meta.digest, &y->meta.digest));
    ck_assert_uint_eq(x->offset, y->offset);
    ck_assert_uint_eq(x->length, y->length);
    ck_assert_int_eq(x->encoding, y->encoding);
    ck_assert(y->has_digest);
}

static void assert_same(const model *a, const model *b)
{
    ck_assert_str_eq(a->path, b->path);
    ck_assert_str_eq(a->format, b->format);
    ck_assert_uint_eq(a->n_tensors, b->n_tensors);
    ck_assert_uint_eq(a->total_bytes, b->total_bytes);
    for (size_t i = 0; i < a->n_tensors; i++) {
        assert_same_entry(&a->tensors[i], &b->tensors[i]);
        ck_assert_str_eq(a->tensors[i].source, b->tensors[i].source);
    }
}

START_TEST(round_trip_in_memory_and_on_disk)
{
    model *m = indexed_model();
    tetris_error err;
    char *json = manifest_to_json(m, &err);
    ck_assert_ptr_nonnull(json);
    ck_assert_ptr_nonnull(strstr(json, "\"format\": \"tetris-manifest/1\""));
    ck_assert_ptr_nonnull(strstr(json, "\"digest\": \"sha256:"));
    model *back = NULL;
    ck_assert_msg(manifest_parse(json, strlen(json), &back, &err) == 0, "%s", err.msg);
    assert_same(m, back);
    model_free(back);
    free(json);

    char path[300];
    snprintf(path, sizeof path, "%s/m.manifest.json", dir);
    ck_assert_int_eq(manifest_write_file(m, path, &err), 0);
    ck_assert_int_eq(manifest_read_file(path, &back, &err), 0);
    assert_same(m, back);
    model_free(back);
    unlink(path);
    ck_assert_int_eq(manifest_read_file(path, &back, &err), -TETRIS_E_NOTFOUND);
    model_free(m);
}
END_TEST

START_TEST(writing_needs_digests)
{
    model *m = NULL;
    tetris_error err;
    ck_assert_int_eq(model_parse_file(model_path, &m, &err), 0);
    ck_assert_ptr_null(manifest_to_json(m, &err));
    ck_assert_int_eq(err.code, TETRIS_E_INVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "no digest"));
    model_free(m);
}
END_TEST

/* One mutation of a valid manifest: at tensors[tensor] (or the top level
 * when tensor < 0) set field to the JSON value (delete it when NULL). */
static const struct {
    int tensor;
    const char *field;
    const char *value;
    const char *expect;
} bad[] = {
    {-1, "format", NULL, "\"format\": missing"},
    {-1, "format", "\"tetris-manifest/2\"", "\"format\""},
    {-1, "model", NULL, "\"model\": missing"},
    {-1, "model", "7", "\"model\": must be a string"},
    {-1, "model_format", "\"\"", "\"model_format\": must not be empty"},
    {-1, "tensor_bytes", "-1", "\"tensor_bytes\": must be a non-negative integer"},
    {-1, "tensor_bytes", "41.5", "\"tensor_bytes\""},
    {-1, "tensor_bytes", "40", "\"tensor_bytes\": does not equal"},
    {-1, "tensors", NULL, "\"tensors\": missing"},
    {-1, "tensors", "{}", "\"tensors\": must be an array"},
    {-1, "tensors", "[1]", "tensors[0]"},
    {0, "name", NULL, "tensors[0]: field \"name\": missing"},
    {0, "name", "\"v\"", "duplicate tensor name \"v\""},
    {1, "dtype", "\"float128\"", "\"dtype\": unknown dtype"},
    {1, "dtype", NULL, "\"dtype\": missing"},
    {1, "shape", "[2, -3]", "\"shape\""},
    {1, "shape", "[1,1,1,1,1,1,1,1,1]", "\"shape\": more than 8 dims"},
    {1, "shape", "[4294967296, 4294967296, 4294967296]", "\"shape\": shape overflows"},
    {1, "shape", "\"2x3\"", "\"shape\": must be an array"},
    {1, "source", NULL, "\"source\": missing"},
    {1, "offset", "-8", "\"offset\": must be a non-negative integer"},
    {1, "offset", "9223372036854775807", "overflows"},
    {1, "offset", "1e30", "\"offset\": must be a non-negative integer"},
    {1, "length", "\"24\"", "\"length\""},
    {1, "length", "23", "\"length\": must equal nbytes"},
    {1, "nbytes", "25", "\"nbytes\": does not match"},
    {1, "encoding", "\"zigzag\"", "\"encoding\""},
    {1, "digest", "\"sha256:1234\"", "\"digest\""},
    {1, "digest", "\"md5:00\"", "\"digest\""},
    {1, "digest",
     "\"sha256:zz00000000000000000000000000000000000000000000000000000000000000\"",
     "\"digest\""},
    {1, "digest", NULL, "\"digest\": missing"},
    {1, "crc32", "4294967296", "\"crc32\": 4294967296 exceeds"},
    {1, "crc32", "true", "\"crc32\""},
    {2, "offset", "100", "overlap"},
};

START_TEST(malformed_manifests_name_the_field)
{
    model *m = indexed_model();
    tetris_error err;
    char *json = manifest_to_json(m, &err);
    json_t *root = json_loads(json, 0, NULL);
    ck_assert_ptr_nonnull(root);
    free(json);
    model_free(m);

    json_t *target = root;
    if (bad[_i].tensor >= 0)
        target = json_array_get(json_object_get(root, "tensors"), (size_t)bad[_i].tensor);
    /* Tensors are in file order: w (0..24), v (24..40), s (40..41); the
     * overlap case moves s's region onto v's. */
    if (strcmp(bad[_i].expect, "overlap") == 0) {
        json_object_set_new(target, "offset",
                            json_integer(json_integer_value(json_object_get(
                                json_array_get(json_object_get(root, "tensors"), 1),
                                "offset"))));
    } else if (bad[_i].value == NULL) {
        json_object_del(target, bad[_i].field);
    } else {
        json_t *v = json_loads(bad[_i].value, JSON_DECODE_ANY, NULL);
        ck_assert_ptr_nonnull(v);
        json_object_set_new(target, bad[_i].field, v);
    }
    char *text = json_dumps(root, 0);
    json_decref(root);

    model *out = NULL;
    int ret = manifest_parse(text, strlen(text), &out, &err);
    ck_assert_msg(ret == -TETRIS_E_FORMAT, "case %d: ret %d", _i, ret);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err.msg, bad[_i].expect) != NULL, "case %d: \"%s\" not in: %s", _i,
                  bad[_i].expect, err.msg);
    free(text);
}
END_TEST

START_TEST(not_json_at_all)
{
    static const char *const inputs[] = {"", "{", "[]", "null", "{\"a\":1,\"a\":2}",
                                         "{\"format\":\"tetris-manifest/1\"} trailing"};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        model *m = NULL;
        tetris_error err;
        ck_assert_int_eq(manifest_parse(inputs[i], strlen(inputs[i]), &m, &err),
                         -TETRIS_E_FORMAT);
        ck_assert_ptr_nonnull(strstr(err.msg, "manifest"));
    }
    /* A NUL inside the text is refused, not truncated. */
    model *m = NULL;
    tetris_error err;
    ck_assert_int_eq(manifest_parse("{\"a\":\"x\0y\"}", 11, &m, &err), -TETRIS_E_FORMAT);
}
END_TEST

/* Mutations jansson cannot make (a repeated key, a number past 2^64, a
 * NUL in a string), made in the text of a valid manifest: the first
 * occurrence of `find` becomes `replace`. */
static const struct {
    const char *find, *replace, *expect;
} bad_text[] = {
    {"\"nbytes\"", "\"offset\": 0, \"nbytes\"",
     "manifest: tensors[0]: field \"offset\": duplicate key"},
    {"\"length\": 24", "\"length\": 123456789012345678901234567890",
     "tensors[0] (\"w\"): field \"length\": 123456789012345678901234 exceeds"},
    {"\"name\": \"w\"", "\"name\": \"w\\u0000x\"", "tensors[0]: field \"name\": holds a NUL"},
    {"\"format\"", "\"format\": \"tetris-manifest/1\", \"format\"",
     "field \"format\": duplicate key"},
    /* A key is what it decodes to: an escaped "name" repeats "name". */
    {"\"dtype\"", "\"n\\u0061me\": \"x\", \"dtype\"", "tensors[0]: field \"name\": duplicate key"},
};

START_TEST(text_level_mutations_are_refused)
{
    model *m = indexed_model();
    tetris_error err;
    char *json = manifest_to_json(m, &err);
    model_free(m);
    const char *at = strstr(json, bad_text[_i].find);
    ck_assert_msg(at != NULL, "%s not in %s", bad_text[_i].find, json);
    char *text = NULL;
    ck_assert_int_ge(asprintf(&text, "%.*s%s%s", (int)(at - json), json, bad_text[_i].replace,
                              at + strlen(bad_text[_i].find)),
                     0);
    model *out = NULL;
    ck_assert_int_eq(manifest_parse(text, strlen(text), &out, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err.msg, bad_text[_i].expect) != NULL, "case %d: \"%s\" not in: %s", _i,
                  bad_text[_i].expect, err.msg);
    free(text);
    free(json);
}
END_TEST

START_TEST(print_lists_every_tensor)
{
    model *m = indexed_model();
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tetris_error err;
    ck_assert_int_eq(model_print(m, f, &err), 0);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(text, "format:  safetensors"));
    ck_assert_ptr_nonnull(strstr(text, "tensors: 3 (41 bytes"));
    ck_assert_ptr_nonnull(strstr(text, "[2,3]"));
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(&m->tensors[0].meta.digest, hex);
    hex[16] = '\0';
    ck_assert_ptr_nonnull(strstr(text, hex));
    free(text);
    model_free(m);
}
END_TEST

/* Rewrites m's model path and sources to `to`, as a hand-written or moved
 * manifest would name them. */
static void rename_sources(model *m, const char *to)
{
    free(m->path);
    m->path = strdup(to);
    for (size_t i = 0; i < m->n_tensors; i++) {
        free(m->tensors[i].source);
        m->tensors[i].source = strdup(to);
    }
}

START_TEST(relative_sources_are_relative_to_the_manifest)
{
    model *m = indexed_model(), *back = NULL;
    tetris_error err;
    char manifest[300], expect[300], rel[300];
    rename_sources(m, "m.safetensors");
    snprintf(manifest, sizeof manifest, "%s/m.manifest.json", dir);
    ck_assert_int_eq(manifest_write_file(m, manifest, &err), 0);

    /* From elsewhere, by absolute path: sources next to the manifest. */
    ck_assert_int_eq(chdir("/"), 0);
    ck_assert_msg(manifest_read_file(manifest, &back, &err) == 0, "%s", err.msg);
    snprintf(expect, sizeof expect, "%s/m.safetensors", dir);
    ck_assert_str_eq(back->path, expect);
    for (size_t i = 0; i < back->n_tensors; i++)
        ck_assert_str_eq(back->tensors[i].source, expect);
    model_free(back);

    /* By a relative path: still next to the manifest. */
    snprintf(rel, sizeof rel, "%s/m.manifest.json", dir + 1);
    ck_assert_msg(manifest_read_file(rel, &back, &err) == 0, "%s", err.msg);
    snprintf(expect, sizeof expect, "%s/m.safetensors", dir + 1);
    ck_assert_str_eq(back->tensors[0].source, expect);
    model_free(back);

    /* From its own directory by bare name, and from a buffer: as written. */
    ck_assert_int_eq(chdir(dir), 0);
    ck_assert_int_eq(manifest_read_file("m.manifest.json", &back, &err), 0);
    ck_assert_str_eq(back->tensors[0].source, "m.safetensors");
    model_free(back);
    char *json = manifest_to_json(m, &err);
    ck_assert_int_eq(manifest_parse(json, strlen(json), &back, &err), 0);
    ck_assert_str_eq(back->tensors[0].source, "m.safetensors");
    model_free(back);
    free(json);

    /* Absolute sources are taken as they are. */
    rename_sources(m, model_path);
    ck_assert_int_eq(manifest_write_file(m, manifest, &err), 0);
    ck_assert_int_eq(chdir("/"), 0);
    ck_assert_int_eq(manifest_read_file(manifest, &back, &err), 0);
    assert_same(m, back);
    model_free(back);
    unlink(manifest);
    model_free(m);
}
END_TEST

START_TEST(realpath_makes_sources_absolute)
{
    model *m = NULL;
    tetris_error err;
    char link[300], *real_dir = realpath(dir, NULL), expect[300];
    ck_assert_ptr_nonnull(real_dir);
    snprintf(expect, sizeof expect, "%s/m.safetensors", real_dir);
    snprintf(link, sizeof link, "%s/link.safetensors", dir);
    ck_assert_int_eq(symlink("m.safetensors", link), 0);

    /* A relative path through a symlink: the file itself, absolutely. */
    ck_assert_int_eq(chdir(dir), 0);
    ck_assert_int_eq(model_parse_file("link.safetensors", &m, &err), 0);
    ck_assert_int_eq(model_sources_realpath(m, &err), 0);
    ck_assert_str_eq(m->path, expect);
    for (size_t i = 0; i < m->n_tensors; i++)
        ck_assert_str_eq(m->tensors[i].source, expect);
    model_free(m);

    /* A source that went away is an error naming it. */
    ck_assert_int_eq(model_parse_file("link.safetensors", &m, &err), 0);
    free(m->tensors[1].source);
    m->tensors[1].source = strdup("gone.safetensors");
    ck_assert_int_eq(model_sources_realpath(m, &err), -TETRIS_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "gone.safetensors"));
    model_free(m);
    unlink(link);
    free(real_dir);
}
END_TEST

/* ---- the entry codec and the identities-only reader ---- */

/* e as text, decoded as an ingest request's entry is: a span of it. */
static int decode_entry(const json_t *e, const char *source_key, bool digest_optional,
                        tensor_desc *t, json_span *src, char **text, tetris_error *err)
{
    *text = json_dumps(e, JSON_COMPACT);
    ck_assert_ptr_nonnull(*text);
    json_span doc;
    ck_assert_int_eq(json_scan_document(*text, strlen(*text), &doc, err), 0);
    return manifest_entry_decode(doc, "x", 1, source_key, digest_optional, t, src, err);
}

START_TEST(entry_identity_is_optional_only_when_allowed_and_whole)
{
    model *m = indexed_model();
    tetris_error err = {0};
    json_t *e = manifest_entry_encode(&m->tensors[1], "where", json_integer(7), &err);
    ck_assert_msg(e != NULL, "%s", err.msg);
    json_object_del(e, "digest");
    tensor_desc t = {0};
    json_span src;
    char *text;
    /* Only crc32 left: half an identity is refused even where optional. */
    ck_assert_int_eq(decode_entry(e, "where", true, &t, &src, &text, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"digest\""));
    free(text);
    json_object_del(e, "crc32");
    ck_assert_int_eq(decode_entry(e, "where", false, &t, &src, &text, &err), -TETRIS_E_FORMAT);
    free(text);
    ck_assert_msg(decode_entry(e, "where", true, &t, &src, &text, &err) == 0, "%s", err.msg);
    ck_assert(!t.has_digest);
    ck_assert_uint_eq(t.meta.nbytes, m->tensors[1].meta.nbytes);
    free(text);
    free(t.name);
    json_decref(e);
    model_free(m);
}
END_TEST

START_TEST(entry_codec_round_trips_with_any_source_key)
{
    model *m = indexed_model();
    tetris_error err = {0};
    const tensor_desc *v = &m->tensors[1];
    json_t *e = manifest_entry_encode(v, "where", json_integer(7), &err);
    ck_assert_msg(e != NULL, "%s", err.msg);
    /* The source key takes the place "source" has in a manifest. */
    char *text = json_dumps(e, JSON_COMPACT);
    ck_assert_msg(strstr(text, "\"shape\":[2],\"where\":7,\"offset\":") != NULL, "%s", text);
    free(text);
    tensor_desc t = {0};
    json_span src;
    ck_assert_msg(decode_entry(e, "where", false, &t, &src, &text, &err) == 0, "%s", err.msg);
    assert_same_entry(v, &t);
    ck_assert_ptr_null(t.source);
    uint64_t seven;
    ck_assert_int_eq(json_span_uint(src, &seven), 1);
    ck_assert_uint_eq(seven, 7);
    free(text);
    free(t.name);
    /* A missing field is named along with what an entry needs. */
    json_object_del(e, "where");
    memset(&t, 0, sizeof t);
    ck_assert_int_eq(decode_entry(e, "where", false, &t, &src, &text, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_null(t.name);
    ck_assert_ptr_nonnull(strstr(err.msg, "x: tensors[1] (\"v\"): field \"where\": missing (an "
                                          "entry needs name, dtype, shape, where, offset"));
    free(text);
    json_decref(e);
    model_free(m);
}
END_TEST

START_TEST(identities_only)
{
    model *m = indexed_model();
    tetris_error err = {0};
    char *json = manifest_to_json(m, &err);
    manifest_digests d;
    ck_assert_int_eq(manifest_read_digests(json, strlen(json), "m", true, &d, &err), 0);
    ck_assert_uint_eq(d.n, m->n_tensors);
    for (size_t i = 0; i < d.n; i++) {
        ck_assert(tensor_digest_equal(&d.digests[i], &m->tensors[i].meta.digest));
        ck_assert_uint_eq(d.nbytes[i], m->tensors[i].meta.nbytes);
    }
    manifest_digests_release(&d);
    free(json);
    model_free(m);

    /* A compacted manifest has nothing but what this reader reads. */
    static const char compact[] =
        "{\"format\":\"tetris-manifest/1\",\"tensors\":[{\"digest\":\"sha256:"
        "abababababababababababababababababababababababababababababababab\",\"nbytes\":-1}]}";
    ck_assert_int_eq(manifest_read_digests(compact, strlen(compact), "m", false, &d, &err), 0);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_uint_eq(d.digests[0].bytes[31], 0xab);
    ck_assert_ptr_null(d.nbytes); /* not asked for, not read */
    manifest_digests_release(&d);
    ck_assert_int_eq(manifest_read_digests(compact, strlen(compact), "m", true, &d, &err),
                     -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "m: tensors[0]: field \"nbytes\": must be a "
                                          "non-negative integer (an entry needs digest, nbytes)"));
    ck_assert_ptr_null(d.digests);
}
END_TEST

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define FMT "\"format\":\"tetris-manifest/1\""

static const struct {
    const char *json;
    bool with_nbytes;
    const char *expect;
} bad_identities[] = {
    {"", true, "m: not JSON"},
    {"[]", true, "m: not a JSON object"},
    {"{}", true, "m: field \"format\": missing"},
    {"{\"format\":\"tetris-manifest/2\",\"tensors\":[]}", true, "\"format\": must be"},
    {"{" FMT "}", true, "\"tensors\": missing"},
    {"{" FMT ",\"tensors\":{}}", true, "\"tensors\": must be an array"},
    {"{" FMT ",\"tensors\":[1]}", false, "tensors[0]: field \"tensors\": entry is not an object"},
    {"{" FMT ",\"tensors\":[{\"nbytes\":1}]}", true,
     "tensors[0]: field \"digest\": missing (an entry needs digest, nbytes)"},
    {"{" FMT ",\"tensors\":[{\"nbytes\":1}]}", false,
     "tensors[0]: field \"digest\": missing (an entry needs digest)"},
    {"{" FMT ",\"tensors\":[{\"name\":\"w\",\"digest\":\"sha256:xyz\"}]}", false,
     "tensors[0] (\"w\"): field \"digest\""},
    {"{" FMT ",\"tensors\":[{\"digest\":\"" HEX64 "\"}]}", false, "must be \"sha256:\""},
    {"{" FMT ",\"tensors\":[{\"digest\":\"sha256:" HEX64 "\"}]}", true,
     "field \"nbytes\": missing"},
    {"{" FMT "," FMT ",\"tensors\":[]}", false, "duplicate"},
};

START_TEST(identities_are_checked_like_the_rest)
{
    manifest_digests d;
    tetris_error err = {0};
    const char *json = bad_identities[_i].json;
    ck_assert_int_eq(manifest_read_digests(json, strlen(json), "m", bad_identities[_i].with_nbytes,
                                           &d, &err),
                     -TETRIS_E_FORMAT);
    ck_assert_msg(strstr(err.msg, bad_identities[_i].expect) != NULL,
                  "case %d: \"%s\" not in: %s", _i, bad_identities[_i].expect, err.msg);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, round_trip_in_memory_and_on_disk);
    tcase_add_test(tc, writing_needs_digests);
    tcase_add_loop_test(tc, malformed_manifests_name_the_field, 0,
                        (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, not_json_at_all);
    tcase_add_loop_test(tc, text_level_mutations_are_refused, 0,
                        sizeof bad_text / sizeof bad_text[0]);
    tcase_add_test(tc, print_lists_every_tensor);
    tcase_add_test(tc, relative_sources_are_relative_to_the_manifest);
    tcase_add_test(tc, realpath_makes_sources_absolute);
    tcase_add_test(tc, entry_codec_round_trips_with_any_source_key);
    tcase_add_test(tc, entry_identity_is_optional_only_when_allowed_and_whole);
    tcase_add_test(tc, identities_only);
    tcase_add_loop_test(tc, identities_are_checked_like_the_rest, 0,
                        (int)(sizeof bad_identities / sizeof bad_identities[0]));
}

UNIT_MAIN("manifest")
