/* test_pbwire.c - the protocol buffers wire codec (common/pbwire.h) and
 * gRPC's message framing and status text (common/grpc.h): what is
 * written reads back, what is malformed is refused with its offset, what
 * is unknown is skipped, and nothing reads past a buffer. */
#include <stdlib.h>
#include <string.h>

#include "common/grpc.h"
#include "common/pbwire.h"
#include "tests/lib/unit.h"

static uint8_t *encode(pb_writer *w, size_t *len)
{
    uint8_t *out = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(pb_writer_finish(w, &out, len, &err), 0);
    return out;
}

START_TEST(round_trip_every_wire_type)
{
    pb_writer w, sub;
    pb_writer_init(&w, 1024);
    pb_writer_init(&sub, 1024);
    pb_put_varint(&w, 1, 0);
    pb_put_varint(&w, 2, UINT64_MAX);
    pb_put_bool(&w, 3, true);
    pb_put_fixed32(&w, 4, 0xdeadbeef);
    pb_put_fixed64(&w, 5, 0x0102030405060708ull);
    pb_put_string(&w, 6, "héllo");
    pb_put_string(&sub, 1, "k");
    pb_put_string(&sub, 2, "v");
    pb_put_message(&w, PB_MAX_FIELD_NUMBER, &sub);
    pb_put_bytes(&w, 7, "", 0);
    pb_writer_free(&sub);
    size_t len;
    uint8_t *buf = encode(&w, &len);

    pb_reader r;
    struct pb_field f;
    tetris_error err = {0};
    pb_reader_init(&r, buf, len);
    uint64_t want_v[] = {0, UINT64_MAX, 1, 0xdeadbeef, 0x0102030405060708ull};
    enum pb_wire_type want_t[] = {PB_WT_VARINT, PB_WT_VARINT, PB_WT_VARINT, PB_WT_FIXED32,
                                  PB_WT_FIXED64};
    for (unsigned i = 0; i < 5; i++) {
        ck_assert_int_eq(pb_next(&r, &f, &err), 1);
        ck_assert_uint_eq(f.number, i + 1);
        ck_assert_int_eq(f.wire_type, want_t[i]);
        ck_assert(f.value == want_v[i]);
    }
    ck_assert_int_eq(pb_next(&r, &f, &err), 1);
    ck_assert_int_eq(f.wire_type, PB_WT_LEN);
    ck_assert_uint_eq(f.len, strlen("héllo"));
    ck_assert(memcmp(f.data, "héllo", f.len) == 0);
    ck_assert_int_eq(pb_next(&r, &f, &err), 1);
    ck_assert_uint_eq(f.number, PB_MAX_FIELD_NUMBER);
    const uint8_t *k, *v;
    size_t kl, vl;
    ck_assert_int_eq(pb_map_entry(f.data, f.len, &k, &kl, &v, &vl, &err), 0);
    ck_assert(kl == 1 && k[0] == 'k' && vl == 1 && v[0] == 'v');
    ck_assert_int_eq(pb_next(&r, &f, &err), 1);
    ck_assert_uint_eq(f.len, 0);
    ck_assert_int_eq(pb_next(&r, &f, &err), 0);
    free(buf);
}
END_TEST

/* A byte-exact encoding: field 1 varint 150 is 08 96 01 (the format's own
 * example), a string is key, length, bytes. */
START_TEST(known_bytes)
{
    pb_writer w;
    pb_writer_init(&w, 64);
    pb_put_varint(&w, 1, 150);
    pb_put_string(&w, 2, "testing");
    size_t len;
    uint8_t *buf = encode(&w, &len);
    static const uint8_t want[] = {0x08, 0x96, 0x01, 0x12, 0x07, 't', 'e', 's', 't', 'i', 'n', 'g'};
    ck_assert_uint_eq(len, sizeof(want));
    ck_assert(memcmp(buf, want, len) == 0);
    free(buf);
}
END_TEST

static int read_all(const uint8_t *buf, size_t len, tetris_error *err)
{
    pb_reader r;
    struct pb_field f;
    int rc;
    pb_reader_init(&r, buf, len);
    while ((rc = pb_next(&r, &f, err)) > 0)
        ;
    return rc;
}

START_TEST(malformed_is_refused)
{
    tetris_error err = {0};
    static const uint8_t cut_varint[] = {0x08, 0x96};
    static const uint8_t long_varint[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                          0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    static const uint8_t overflow[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                       0xff, 0xff, 0xff, 0xff, 0x02};
    static const uint8_t field_zero[] = {0x00, 0x01};
    static const uint8_t group[] = {0x0b, 0x0c};
    static const uint8_t type_six[] = {0x0e};
    static const uint8_t len_past_end[] = {0x12, 0x05, 'a', 'b'};
    static const uint8_t huge_len[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0x0f};
    static const uint8_t cut_fixed64[] = {0x09, 1, 2, 3};
    static const uint8_t cut_fixed32[] = {0x0d, 1, 2, 3};
    static const uint8_t big_number[] = {0xf8, 0xff, 0xff, 0xff, 0x1f, 0x00};
    struct {
        const uint8_t *b;
        size_t n;
    } cases[] = {
        {cut_varint, sizeof(cut_varint)},
        {long_varint, sizeof(long_varint)},
        {overflow, sizeof(overflow)},
        {field_zero, sizeof(field_zero)},
        {group, sizeof(group)},
        {type_six, sizeof(type_six)},
        {len_past_end, sizeof(len_past_end)},
        {huge_len, sizeof(huge_len)},
        {cut_fixed64, sizeof(cut_fixed64)},
        {cut_fixed32, sizeof(cut_fixed32)},
        {big_number, sizeof(big_number)},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* a copy of exactly n bytes: ASan sees any read past it */
        uint8_t *b = malloc(cases[i].n);
        memcpy(b, cases[i].b, cases[i].n);
        ck_assert_msg(read_all(b, cases[i].n, &err) == -TETRIS_E_FORMAT, "case %zu", i);
        ck_assert_msg(strstr(err.msg, "byte") != NULL, "case %zu: %s", i, err.msg);
        free(b);
    }
    /* the largest varint and the largest field number read */
    static const uint8_t max_varint[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                         0xff, 0xff, 0xff, 0xff, 0x01};
    ck_assert_int_eq(read_all(max_varint, sizeof(max_varint), &err), 0);
    ck_assert_int_eq(read_all(NULL, 0, &err), 0);
}
END_TEST

START_TEST(map_entry_rules)
{
    tetris_error err = {0};
    const uint8_t *k, *v;
    size_t kl, vl;
    /* absent key and value are "", unknown fields skipped */
    static const uint8_t unknown_only[] = {0x18, 0x01};
    ck_assert_int_eq(pb_map_entry(unknown_only, sizeof(unknown_only), &k, &kl, &v, &vl, &err), 0);
    ck_assert(kl == 0 && vl == 0);
    static const uint8_t varint_key[] = {0x08, 0x01};
    ck_assert_int_eq(pb_map_entry(varint_key, sizeof(varint_key), &k, &kl, &v, &vl, &err),
                     -TETRIS_E_FORMAT);
}
END_TEST

START_TEST(writer_limit)
{
    pb_writer w;
    uint8_t *out = NULL;
    size_t len;
    tetris_error err = {0};
    pb_writer_init(&w, 8);
    pb_put_string(&w, 1, "this is longer than eight");
    ck_assert(w.failed);
    ck_assert_int_eq(pb_writer_finish(&w, &out, &len, &err), -TETRIS_E_INVAL);
    ck_assert_ptr_null(out);
    /* an empty message is a real, empty buffer */
    pb_writer_init(&w, 8);
    ck_assert_int_eq(pb_writer_finish(&w, &out, &len, &err), 0);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(len, 0);
    free(out);
}
END_TEST

START_TEST(grpc_framing)
{
    tetris_error err = {0};
    uint8_t body[5 + 3];
    const uint8_t *msg;
    size_t len;
    grpc_frame_prefix(body, 3);
    memcpy(body + 5, "abc", 3);
    ck_assert_int_eq(grpc_unframe(body, sizeof(body), 16, &msg, &len, &err), 0);
    ck_assert(len == 3 && memcmp(msg, "abc", 3) == 0);
    /* the empty message */
    ck_assert_int_eq(grpc_unframe(body, 5, 16, &msg, &len, &err), GRPC_INTERNAL);
    grpc_frame_prefix(body, 0);
    ck_assert_int_eq(grpc_unframe(body, 5, 16, &msg, &len, &err), 0);
    ck_assert_uint_eq(len, 0);
    /* no body, a cut prefix, bytes after the message, too big, compressed */
    ck_assert_int_eq(grpc_unframe(body, 0, 16, &msg, &len, &err), GRPC_INTERNAL);
    ck_assert_int_eq(grpc_unframe(body, 4, 16, &msg, &len, &err), GRPC_INTERNAL);
    grpc_frame_prefix(body, 2);
    ck_assert_int_eq(grpc_unframe(body, sizeof(body), 16, &msg, &len, &err), GRPC_INTERNAL);
    grpc_frame_prefix(body, 3);
    ck_assert_int_eq(grpc_unframe(body, sizeof(body), 2, &msg, &len, &err),
                     GRPC_RESOURCE_EXHAUSTED);
    body[0] = 1;
    ck_assert_int_eq(grpc_unframe(body, sizeof(body), 16, &msg, &len, &err), GRPC_UNIMPLEMENTED);
    body[0] = 7;
    ck_assert_int_eq(grpc_unframe(body, sizeof(body), 16, &msg, &len, &err), GRPC_INTERNAL);
    /* a length of 4 GiB - 1 is refused by the limit, never trusted */
    uint8_t big[5] = {0, 0xff, 0xff, 0xff, 0xff};
    ck_assert_int_eq(grpc_unframe(big, 5, 1u << 20, &msg, &len, &err), GRPC_RESOURCE_EXHAUSTED);
}
END_TEST

START_TEST(grpc_message_encoding)
{
    char enc[64], dec[64];
    grpc_percent_encode("100% bad\nline é", enc, sizeof(enc));
    ck_assert_str_eq(enc, "100%25 bad%0Aline %C3%A9");
    grpc_percent_decode(enc, dec, sizeof(dec));
    ck_assert_str_eq(dec, "100% bad\nline é");
    /* cut to fit, never inside an escape */
    grpc_percent_encode("ab\n", enc, 5);
    ck_assert_str_eq(enc, "ab");
    grpc_percent_decode("%zz%4", dec, sizeof(dec));
    ck_assert_str_eq(dec, "%zz%4");
    ck_assert_str_eq(grpc_status_name(GRPC_ALREADY_EXISTS), "ALREADY_EXISTS");
    ck_assert_str_eq(grpc_status_name(99), "UNKNOWN");
    struct grpc_reply reply = {0};
    tetris_error err = {0};
    tetris_fail(&err, TETRIS_E_FULL, 0, "store full");
    ck_assert_int_eq(grpc_reply_error(&reply, &err), GRPC_RESOURCE_EXHAUSTED);
    ck_assert_str_eq(reply.message, "store full");
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, round_trip_every_wire_type);
    tcase_add_test(tc, known_bytes);
    tcase_add_test(tc, malformed_is_refused);
    tcase_add_test(tc, map_entry_rules);
    tcase_add_test(tc, writer_limit);
    tcase_add_test(tc, grpc_framing);
    tcase_add_test(tc, grpc_message_encoding);
}
UNIT_MAIN("pbwire")
