/* test_digest.c - tensor identity: known SHA-256/CRC32 vectors for the
 * documented digest input encoding, hex round trips, meta validation.
 *
 * Expected values were computed independently of this code, e.g.
 *   printf 'tetris-tensor-v1\0float32\0\x01\0\0\0\x02\0\0\0\0\0\0\0'\
 *          '\x00\x00\x80\x3f\x00\x00\x00\x40' | sha256sum
 *   printf '\x00\x00\x80\x3f\x00\x00\x00\x40' | gzip -c | tail -c8 | od -An -tx4
 * (the gzip trailer's first word is the CRC32 of the input). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "tensorstore/crc32.h"
#include "tensorstore/digest.h"
#include "tests/lib/unit.h"

static tensor_meta meta_of(const char *dtype, int ndim, const int64_t *shape, uint64_t nbytes)
{
    tensor_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.dtype, sizeof m.dtype, "%s", dtype);
    m.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        m.shape[i] = shape[i];
    m.nbytes = nbytes;
    return m;
}

static void check_digest(tensor_meta *m, const void *bytes, const char *hex, uint32_t crc)
{
    tetris_error err;
    ck_assert_int_eq(tensor_digest_compute(m, bytes, &err), 0);
    char got[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(&m->digest, got);
    ck_assert_str_eq(got, hex);
    ck_assert_uint_eq(m->crc32, crc);
}

static const uint8_t one_two_f32[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40};

START_TEST(vector_float32_vector)
{
    int64_t shape[] = {2};
    tensor_meta m = meta_of("float32", 1, shape, 8);
    check_digest(&m, one_two_f32, "530bf3b50eab5d304d865052a7fc80c19034c5d7561a0f30c2de7b45c60956b0",
                 0x2e3fa576);
}
END_TEST

START_TEST(vector_shape_is_part_of_identity)
{
    int64_t shape[] = {1, 2};
    tensor_meta m = meta_of("float32", 2, shape, 8);
    check_digest(&m, one_two_f32, "07de19ac9ca841fb9e4ca2fc7a65441710337078713cc11dd7893a396409140e",
                 0x2e3fa576);
}
END_TEST

START_TEST(vector_dtype_is_part_of_identity)
{
    /* Same 8 bytes read as int32[2]: different identity, same crc. */
    int64_t shape[] = {2};
    tensor_meta a = meta_of("float32", 1, shape, 8);
    tensor_meta b = meta_of("int32", 1, shape, 8);
    tetris_error err;
    ck_assert_int_eq(tensor_digest_compute(&a, one_two_f32, &err), 0);
    ck_assert_int_eq(tensor_digest_compute(&b, one_two_f32, &err), 0);
    ck_assert(!tensor_digest_equal(&a.digest, &b.digest));
    ck_assert_uint_eq(a.crc32, b.crc32);
}
END_TEST

START_TEST(vector_scalar)
{
    uint8_t v = 0x2a;
    tensor_meta m = meta_of("int8", 0, NULL, 1);
    check_digest(&m, &v, "13712c800f5a82b69b9f95eb8235c6119ca36ff2ce2a20c815d3c477cf287481",
                 0x09b9265b);
}
END_TEST

START_TEST(vector_empty)
{
    int64_t shape[] = {0};
    tensor_meta m = meta_of("uint8", 1, shape, 0);
    check_digest(&m, "", "ac117d7c4ceb95d821f9b716d55f8b22d1ed01a007b1cb53c8bb24b7d08e083b", 0);
}
END_TEST

/* 1 MiB spans many internal hash chunks; bytes are i % 251. */
START_TEST(vector_large_streamed)
{
    size_t n = 1u << 20;
    uint8_t *buf = malloc(n);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(i % 251);
    int64_t shape[] = {(int64_t)n};
    tensor_meta m = meta_of("uint8", 1, shape, n);
    const char *want = "d27b2c1fd4be6e40f0454f8d4337373fc0f7196cb0521f74e4fd35806b7db400";
    check_digest(&m, buf, want, 0xef0e6054);

    /* Streaming in odd-sized pieces gives the same answer. */
    tetris_error err;
    tensor_hasher *h = NULL;
    ck_assert_int_eq(tensor_hasher_new(&m, &h, &err), 0);
    size_t off = 0, step = 1;
    while (off < n) {
        size_t len = step < n - off ? step : n - off;
        tensor_hasher_update(h, buf + off, len);
        off += len;
        step = step * 3 + 7;
    }
    tensor_digest d;
    uint32_t crc;
    tensor_hasher_finish(h, &d, &crc);
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(&d, hex);
    ck_assert_str_eq(hex, want);
    ck_assert_uint_eq(crc, 0xef0e6054);
    free(buf);
}
END_TEST

START_TEST(crc32_matches_zlib)
{
    /* The folding path must equal zlib's crc32 for every length (the fold
     * starts at 256 bytes), alignment and starting value. */
    size_t n = 70000;
    unsigned char *buf = malloc(n + 16);
    ck_assert_ptr_nonnull(buf);
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < n + 16; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    for (size_t len = 0; len < 1200; len++)
        for (size_t off = 0; off < 4; off++)
            ck_assert_uint_eq(crc32_update(0x1234567u, buf + off, len),
                              (uint32_t)crc32_z(0x1234567u, buf + off, len));
    ck_assert_uint_eq(crc32_update(0, buf, n), (uint32_t)crc32_z(0, buf, n));
    /* Chaining: crc(a || b) from crc(a). */
    ck_assert_uint_eq(crc32_update(crc32_update(0, buf, 1000), buf + 1000, n - 1000),
                      (uint32_t)crc32_z(0, buf, n));
    ck_assert_uint_eq(crc32_update(0, NULL, 0), 0);
    free(buf);
}
END_TEST

START_TEST(hex_round_trip)
{
    const char *hex = "530bf3b50eab5d304d865052a7fc80c19034c5d7561a0f30c2de7b45c60956b0";
    tensor_digest d, e;
    tetris_error err;
    ck_assert_int_eq(tensor_digest_from_hex(hex, &d, &err), 0);
    char back[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(&d, back);
    ck_assert_str_eq(back, hex);
    ck_assert_int_eq(
        tensor_digest_from_hex("sha256:530BF3B50EAB5D304D865052A7FC80C19034C5D7561A0F30C2DE7B45C60956B0",
                               &e, &err),
        0);
    ck_assert(tensor_digest_equal(&d, &e));
}
END_TEST

START_TEST(hex_rejects_garbage)
{
    tensor_digest d;
    tetris_error err;
    const char *bad[] = {
        "",
        "530bf3b5",
        "530bf3b50eab5d304d865052a7fc80c19034c5d7561a0f30c2de7b45c60956b",   /* 63 */
        "530bf3b50eab5d304d865052a7fc80c19034c5d7561a0f30c2de7b45c60956b00", /* 65 */
        "g30bf3b50eab5d304d865052a7fc80c19034c5d7561a0f30c2de7b45c60956b0",
        "sha1:530bf3b50eab5d304d865052a7fc80c19034c5d7561a0f30c2de7b45c6095",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(tensor_digest_from_hex(bad[i], &d, &err), -TETRIS_E_FORMAT);
        ck_assert_int_eq(err.code, TETRIS_E_FORMAT);
    }
    ck_assert_int_eq(tensor_digest_from_hex(NULL, &d, &err), -TETRIS_E_FORMAT);
}
END_TEST

START_TEST(dtype_sizes)
{
    ck_assert_uint_eq(tensor_dtype_size("float32"), 4);
    ck_assert_uint_eq(tensor_dtype_size("bfloat16"), 2);
    ck_assert_uint_eq(tensor_dtype_size("float64"), 8);
    ck_assert_uint_eq(tensor_dtype_size("bool"), 1);
    ck_assert_uint_eq(tensor_dtype_size("float8e5m2"), 1);
    ck_assert_uint_eq(tensor_dtype_size("complex64"), 0);
    ck_assert_uint_eq(tensor_dtype_size("Float32"), 0);
    ck_assert_uint_eq(tensor_dtype_size(""), 0);
    ck_assert_uint_eq(tensor_dtype_size(NULL), 0);
}
END_TEST

START_TEST(meta_validation)
{
    tetris_error err;
    int64_t ok_shape[] = {3, 4};
    tensor_meta m = meta_of("float16", 2, ok_shape, 24);
    ck_assert_int_eq(tensor_meta_validate(&m, &err), 0);

    m.nbytes = 23; /* dtype/length mismatch */
    ck_assert_int_eq(tensor_meta_validate(&m, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "needs 24 bytes"));

    m = meta_of("complex64", 2, ok_shape, 96);
    ck_assert_int_eq(tensor_meta_validate(&m, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown dtype"));

    memset(m.dtype, 'x', sizeof m.dtype); /* not terminated */
    ck_assert_int_eq(tensor_meta_validate(&m, &err), -TETRIS_E_FORMAT);

    m = meta_of("float32", 2, ok_shape, 48);
    m.ndim = TENSOR_MAX_DIMS + 1;
    ck_assert_int_eq(tensor_meta_validate(&m, &err), -TETRIS_E_FORMAT);
    m.ndim = -1;
    ck_assert_int_eq(tensor_meta_validate(&m, &err), -TETRIS_E_FORMAT);

    int64_t negative[] = {3, -4};
    m = meta_of("float32", 2, negative, 48);
    ck_assert_int_eq(tensor_meta_validate(&m, &err), -TETRIS_E_FORMAT);

    /* Element count overflows u64. */
    int64_t absurd[] = {INT64_MAX, INT64_MAX, 4};
    m = meta_of("uint8", 3, absurd, 0);
    ck_assert_int_eq(tensor_meta_validate(&m, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "overflow"));

    /* Count fits, count * element size does not. */
    int64_t wide[] = {INT64_MAX};
    m = meta_of("float64", 1, wide, 0);
    ck_assert_int_eq(tensor_meta_validate(&m, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "overflow"));

    /* A zero dimension makes any other dimension harmless. */
    int64_t zero[] = {0, INT64_MAX};
    m = meta_of("float64", 2, zero, 0);
    ck_assert_int_eq(tensor_meta_validate(&m, &err), 0);

    /* The hasher refuses invalid meta rather than hashing a wrong header. */
    tensor_hasher *h = NULL;
    m = meta_of("float32", 2, ok_shape, 47);
    ck_assert_int_eq(tensor_hasher_new(&m, &h, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_null(h);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, vector_float32_vector);
    tcase_add_test(tc, vector_shape_is_part_of_identity);
    tcase_add_test(tc, vector_dtype_is_part_of_identity);
    tcase_add_test(tc, vector_scalar);
    tcase_add_test(tc, vector_empty);
    tcase_add_test(tc, vector_large_streamed);
    tcase_add_test(tc, hex_round_trip);
    tcase_add_test(tc, crc32_matches_zlib);
    tcase_add_test(tc, hex_rejects_garbage);
    tcase_add_test(tc, dtype_sizes);
    tcase_add_test(tc, meta_validation);
}

UNIT_MAIN("digest")
