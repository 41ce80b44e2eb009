/* test_derived.c - derived forms' identities and index entries
 * (protocol/derived.h): an entry round-trips, is found under the identity
 * of its source, transform, runtime and CPU and under no other, and is
 * refused when its identity does not match its fields or its name, when
 * it is writable by others, or malformed. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "protocol/derived.h"
#include "tests/lib/unit.h"

#define CPU "x86_64 sse4_1 avx avx2 fma f16c"
#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static derived_entry sample(const char *runtime)
{
    derived_entry e = {0};
    snprintf(e.transform, sizeof(e.transform), "%s", DERIVED_TRANSFORM_ORT);
    snprintf(e.runtime, sizeof(e.runtime), "%s", runtime);
    snprintf(e.cpu, sizeof(e.cpu), "%s", CPU);
    snprintf(e.data_location, sizeof(e.data_location), "%s", DERIVED_DATA_LOCATION);
    derived_source_digest("image", 5, &e.source);
    memset(e.graph.digest.bytes, 0x11, sizeof(e.graph.digest.bytes));
    memset(e.data.digest.bytes, 0x22, sizeof(e.data.digest.bytes));
    e.graph.nbytes = 58013;
    e.data.nbytes = 15024640;
    e.graph.crc32 = 456;
    e.data.crc32 = 123;
    derived_identity(e.transform, e.runtime, e.cpu, &e.source, &e.identity);
    return e;
}

/* Writes e as the daemon does: under its identity's name, mode 0444. */
static void write_entry(const char *pub, const derived_entry *e, const tensor_digest *name)
{
    char dir[4096], path[4096];
    snprintf(dir, sizeof(dir), "%s/%s", pub, DERIVED_DIR);
    mkdir(dir, 0755);
    derived_entry_path(pub, name, path, sizeof(path));
    char *text = derived_entry_encode(e);
    ck_assert_ptr_nonnull(text);
    unlink(path);
    unit_write_text(path, text);
    ck_assert_int_eq(chmod(path, 0444), 0);
    free(text);
}

START_TEST(entries_round_trip)
{
    derived_entry e = sample("onnxruntime 1.29.0"), back;
    tetris_error err = {0};
    char *text = derived_entry_encode(&e);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(derived_entry_decode(text, strlen(text), &back, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(back.runtime, "onnxruntime 1.29.0");
    ck_assert(tensor_digest_equal(&back.identity, &e.identity));
    ck_assert(back.data.nbytes == 15024640 && back.graph.crc32 == 456);
    ck_assert(!back.has_ort && strstr(text, "\"ort\"") == NULL);
    free(text);
    /* With the ORT-format part: it comes back, and the identity is the
     * same (the part is what the daemon made, not what the form is of). */
    e.has_ort = true;
    memset(e.ort.digest.bytes, 0x33, sizeof(e.ort.digest.bytes));
    e.ort.nbytes = 812345;
    e.ort.crc32 = 789;
    text = derived_entry_encode(&e);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(derived_entry_decode(text, strlen(text), &back, &err) == 0, "%s", err.msg);
    ck_assert(back.has_ort && back.ort.nbytes == 812345 && back.ort.crc32 == 789);
    ck_assert(tensor_digest_equal(&back.ort.digest, &e.ort.digest));
    ck_assert(tensor_digest_equal(&back.identity, &e.identity));
    free(text);
}
END_TEST

START_TEST(identity_covers_every_field)
{
    derived_entry a = sample("onnxruntime 1.29.0"), b = sample("onnxruntime 1.22.0");
    ck_assert(!tensor_digest_equal(&a.identity, &b.identity));
    tensor_digest other;
    derived_identity(a.transform, a.runtime, CPU " amx_tile", &a.source, &other);
    ck_assert(!tensor_digest_equal(&a.identity, &other));
    /* The fields are NUL-separated: moving a byte across a border is
     * another identity. */
    derived_identity(a.transform, "onnxruntime 1.29.0 x", "86_64", &a.source, &other);
    tensor_digest moved;
    derived_identity(a.transform, "onnxruntime 1.29.0", "x86_64", &a.source, &moved);
    ck_assert(!tensor_digest_equal(&moved, &other));
}
END_TEST

START_TEST(lookup_finds_only_its_own_runtime_and_cpu)
{
    const char *pub = unit_scratch_dir("derived");
    derived_entry a = sample("onnxruntime 1.29.0"), b = sample("onnxruntime 1.22.0"), got;
    tetris_error err = {0};
    write_entry(pub, &a, &a.identity);
    write_entry(pub, &b, &b.identity);
    ck_assert_msg(derived_entry_lookup(pub, DERIVED_TRANSFORM_ORT, "onnxruntime 1.22.0", CPU,
                                       &a.source, &got, &err) == 0,
                  "%s", err.msg);
    ck_assert_str_eq(got.runtime, "onnxruntime 1.22.0");
    ck_assert_int_eq(derived_entry_lookup(pub, DERIVED_TRANSFORM_ORT, "onnxruntime 1.29.0", CPU,
                                          &a.source, &got, &err),
                     0);
    ck_assert_str_eq(got.runtime, "onnxruntime 1.29.0");
    ck_assert_int_eq(derived_entry_lookup(pub, DERIVED_TRANSFORM_ORT, "onnxruntime 1.23.0", CPU,
                                          &a.source, &got, &err),
                     -TETRIS_E_NOTFOUND);
    ck_assert_int_eq(derived_entry_lookup(pub, DERIVED_TRANSFORM_ORT, "onnxruntime 1.29.0",
                                          CPU " amx_tile", &a.source, &got, &err),
                     -TETRIS_E_NOTFOUND);
}
END_TEST

START_TEST(entries_that_do_not_check_are_refused)
{
    const char *pub = unit_scratch_dir("derived-bad");
    derived_entry a = sample("onnxruntime 1.29.0"), b = sample("onnxruntime 1.22.0"), got;
    tetris_error err = {0};
    /* Another runtime's entry under this one's name. */
    write_entry(pub, &b, &a.identity);
    ck_assert_int_eq(derived_entry_read(pub, &a.identity, &got, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "another identity"));
    /* Fields changed under the same identity. */
    derived_entry forged = a;
    snprintf(forged.runtime, sizeof(forged.runtime), "onnxruntime 1.22.0");
    write_entry(pub, &forged, &a.identity);
    ck_assert_int_eq(derived_entry_read(pub, &a.identity, &got, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "identity does not match"));
    /* Writable by others. */
    char path[4096];
    write_entry(pub, &a, &a.identity);
    ck_assert_int_eq(derived_entry_read(pub, &a.identity, &got, &err), 0);
    derived_entry_path(pub, &a.identity, path, sizeof(path));
    ck_assert_int_eq(chmod(path, 0666), 0);
    ck_assert_int_eq(derived_entry_read(pub, &a.identity, &got, &err), -TETRIS_E_DENIED);
    /* Malformed: a name with a slash, an unknown key. */
    static const char *const bad[] = {
        "{\"format\":\"tetris-derived/1\"}",
        "[]",
        "{\"format\":\"tetris-derived/1\",\"runtime\":\"a/b\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_int_eq(derived_entry_decode(bad[i], strlen(bad[i]), &got, &err),
                         -TETRIS_E_FORMAT);
    char *text = derived_entry_encode(&a);
    char *extra = NULL;
    ck_assert_int_gt(asprintf(&extra, "{\"x\":1,%s", text + 1), 0);
    ck_assert_int_eq(derived_entry_decode(extra, strlen(extra), &got, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown key"));
    free(extra);
    /* An ORT-format part that is not a part. */
    static const char *const bad_ort[] = {"1", "{}",
                                          "{\"digest\":\"sha256:00\",\"nbytes\":1,\"crc32\":0}",
                                          "{\"digest\":\"sha256:" HEX64
                                          "\",\"nbytes\":0,\"crc32\":0}"};
    for (size_t i = 0; i < sizeof(bad_ort) / sizeof(bad_ort[0]); i++) {
        ck_assert_int_gt(asprintf(&extra, "{\"ort\":%s,%s", bad_ort[i], text + 1), 0);
        ck_assert_int_eq(derived_entry_decode(extra, strlen(extra), &got, &err), -TETRIS_E_FORMAT);
        ck_assert_ptr_nonnull(strstr(err.msg, "ort"));
        free(extra);
    }
    free(text);
}
END_TEST

START_TEST(names)
{
    ck_assert(derived_name_valid("onnxruntime 1.22.0"));
    ck_assert(!derived_name_valid(NULL));
    ck_assert(!derived_name_valid(""));
    ck_assert(!derived_name_valid("a/b"));
    ck_assert(!derived_name_valid("a\tb"));
    ck_assert(!derived_name_valid("a\x7f"));
    char long_name[DERIVED_NAME_MAX + 1];
    memset(long_name, 'x', DERIVED_NAME_MAX);
    long_name[DERIVED_NAME_MAX] = '\0';
    ck_assert(!derived_name_valid(long_name));
    long_name[DERIVED_NAME_MAX - 1] = '\0';
    ck_assert(derived_name_valid(long_name));
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, entries_round_trip);
    tcase_add_test(tc, identity_covers_every_field);
    tcase_add_test(tc, lookup_finds_only_its_own_runtime_and_cpu);
    tcase_add_test(tc, entries_that_do_not_check_are_refused);
    tcase_add_test(tc, names);
}

UNIT_MAIN("derived")
