/* test_common.c - the small shared pieces of common/: option-value
 * parsing (every way a value is refused), text buffer growth and limits,
 * Prometheus text (escaping, histograms), JSON strings written and JSON
 * read without a tree (json_scan: what it accepts and refuses, pulled
 * value by value, spans, iteration, keys), clock conversions, and GETs
 * against a real HTTP server on a loopback port (status, ETag, size cap,
 * timeout, several at once). */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/httpclient.h"
#include "common/httpserver.h"
#include "common/json_scan.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/textbuf.h"
#include "common/utf8.h"
#include "common/workers.h"
#include "tests/lib/unit.h"

/* ---- cli ---- */

/* s must be refused with a message naming the option and the value. */
static void refused_u64(const char *s, uint64_t min, uint64_t max)
{
    tetris_error err = {0};
    uint64_t v = 42;
    ck_assert_int_eq(cli_parse_u64("--count", s, min, max, &v, &err), -TETRIS_E_INVAL);
    ck_assert_int_eq(err.code, TETRIS_E_INVAL);
    ck_assert_msg(strncmp(err.msg, "--count: '", 10) == 0, "message: %s", err.msg);
    ck_assert_ptr_nonnull(strstr(err.msg, s));
    ck_assert_uint_eq(v, 42);
}

START_TEST(test_cli_u64)
{
    tetris_error err = {0};
    uint64_t v;
    ck_assert_int_eq(cli_parse_u64("--count", "0", 0, 10, &v, &err), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(cli_parse_u64("--count", "18446744073709551615", 0, UINT64_MAX, &v, &err),
                     0);
    ck_assert_uint_eq(v, UINT64_MAX);
    refused_u64("", 0, 10);
    refused_u64("12x", 0, 100);
    refused_u64("1.5", 0, 100);
    refused_u64("18446744073709551616", 0, UINT64_MAX); /* overflow */
    refused_u64("-1", 0, UINT64_MAX);                   /* strtoull would wrap it */
    refused_u64("+1", 0, 10);
    refused_u64(" 1", 0, 10);
    refused_u64("0x10", 0, 100);
    refused_u64("0", 1, 10);  /* below */
    refused_u64("11", 1, 10); /* above */
    cli_parse_u64("--count", "11", 1, 10, &v, &err);
    ck_assert_str_eq(err.msg, "--count: '11' is not an integer in [1, 10]");
    /* Without a name, for callers that say where the value came from. */
    cli_parse_u64(NULL, "x", 1, 10, &v, &err);
    ck_assert_str_eq(err.msg, "'x' is not an integer in [1, 10]");
}
END_TEST

static void refused_i64(const char *s, int64_t min, int64_t max)
{
    tetris_error err = {0};
    int64_t v = 42;
    ck_assert_int_eq(cli_parse_i64("--seed", s, min, max, &v, &err), -TETRIS_E_INVAL);
    ck_assert_msg(strncmp(err.msg, "--seed: '", 9) == 0, "message: %s", err.msg);
    ck_assert_int_eq(v, 42);
}

START_TEST(test_cli_i64)
{
    tetris_error err = {0};
    int64_t v;
    ck_assert_int_eq(cli_parse_i64("--seed", "-5", -10, 10, &v, &err), 0);
    ck_assert_int_eq(v, -5);
    ck_assert_int_eq(cli_parse_i64("--seed", "+7", -10, 10, &v, &err), 0);
    ck_assert_int_eq(v, 7);
    ck_assert_int_eq(cli_parse_i64("--seed", "-9223372036854775808", INT64_MIN, 0, &v, &err), 0);
    ck_assert_int_eq(v, INT64_MIN);
    refused_i64("", INT64_MIN, INT64_MAX);
    refused_i64("-", INT64_MIN, INT64_MAX);
    refused_i64("7 ", INT64_MIN, INT64_MAX);
    refused_i64("9223372036854775808", INT64_MIN, INT64_MAX);  /* overflow */
    refused_i64("-9223372036854775809", INT64_MIN, INT64_MAX); /* underflow */
    refused_i64("-1", 0, 10);
    refused_i64("11", 0, 10);
    cli_parse_i64("--seed", "-1", 0, 10, &v, &err);
    ck_assert_str_eq(err.msg, "--seed: '-1' is not an integer in [0, 10]");

    int i;
    ck_assert_int_eq(cli_parse_int("--batch", "1024", 1, 1024, &i, &err), 0);
    ck_assert_int_eq(i, 1024);
    ck_assert_int_eq(cli_parse_int("--batch", "1025", 1, 1024, &i, &err), -TETRIS_E_INVAL);
    ck_assert_str_eq(err.msg, "--batch: '1025' is not an integer in [1, 1024]");
    ck_assert_int_eq(cli_parse_int("--batch", "4294967297", 1, 1024, &i, &err), -TETRIS_E_INVAL);
}
END_TEST

static void refused_double(const char *s, double min, double max)
{
    tetris_error err = {0};
    double v = 42;
    ck_assert_int_eq(cli_parse_double("--rate", s, min, max, &v, &err), -TETRIS_E_INVAL);
    ck_assert_msg(strncmp(err.msg, "--rate: '", 9) == 0, "message: %s", err.msg);
    ck_assert(v == 42);
}

START_TEST(test_cli_double)
{
    tetris_error err = {0};
    double v;
    ck_assert_int_eq(cli_parse_double("--rate", "0.25", 0, 1, &v, &err), 0);
    ck_assert(v == 0.25);
    ck_assert_int_eq(cli_parse_double("--rate", "1e3", 0, INFINITY, &v, &err), 0);
    ck_assert(v == 1000);
    ck_assert_int_eq(cli_parse_double("--rate", ".5", 0, 1, &v, &err), 0);
    ck_assert(v == 0.5);
    refused_double("", 0, INFINITY);
    refused_double("1.5s", 0, INFINITY);
    refused_double(" 1", 0, INFINITY);
    refused_double("nan", 0, INFINITY);
    refused_double("inf", 0, INFINITY);
    refused_double("1e999", 0, INFINITY); /* overflow */
    refused_double("1e-999", 0, INFINITY); /* underflow */
    refused_double("-0.5", 0, INFINITY);
    refused_double("2", 0, 1);
    cli_parse_double("--rate", "x", 0.001, INFINITY, &v, &err);
    ck_assert_str_eq(err.msg, "--rate: 'x' is not a number >= 0.001");
    cli_parse_double("--rate", "2", 0, 1, &v, &err);
    ck_assert_str_eq(err.msg, "--rate: '2' is not a number in [0, 1]");
}
END_TEST

/* ---- textbuf ---- */

START_TEST(test_textbuf_growth)
{
    textbuf t = {0};
    size_t expect = 0;
    /* Past the first allocation several times, by printf and by append. */
    for (int i = 0; i < 5000; i++) {
        ck_assert(textbuf_printf(&t, "%05d,", i));
        expect += 6;
        ck_assert_uint_eq(t.len, expect);
    }
    char big[10000];
    memset(big, 'x', sizeof big);
    ck_assert(textbuf_append(&t, big, sizeof big));
    ck_assert(textbuf_puts(&t, "end"));
    ck_assert(!t.failed);
    size_t len;
    char *text = textbuf_take(&t, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(len, 5000 * 6 + sizeof big + 3);
    ck_assert_uint_eq(strlen(text), len);
    ck_assert(strncmp(text, "00000,00001,", 12) == 0);
    ck_assert(strncmp(text + 4999 * 6, "04999,xx", 8) == 0);
    ck_assert_str_eq(text + len - 3, "end");
    ck_assert_ptr_null(t.data);
    free(text);

    /* A printf longer than the room left: truncated, grown, printed again. */
    textbuf u = {0};
    ck_assert(textbuf_printf(&u, "ab"));
    ck_assert(textbuf_printf(&u, "%.*s", 9000, big));
    ck_assert_uint_eq(u.len, 9002);
    ck_assert_uint_eq(strlen(u.data), 9002);
    ck_assert(strncmp(u.data, "abxxx", 5) == 0);
    textbuf_free(&u);

    textbuf e = {0};
    text = textbuf_take(&e, &len);
    ck_assert_str_eq(text, "");
    ck_assert_uint_eq(len, 0);
    free(text);
}
END_TEST

START_TEST(test_textbuf_max)
{
    textbuf t = {.max = 8};
    ck_assert(textbuf_puts(&t, "1234567")); /* 7 + NUL fits */
    ck_assert(!textbuf_puts(&t, "8"));
    ck_assert(t.failed);
    /* Sticky: a later append that would fit does nothing. */
    ck_assert(!textbuf_append(&t, "", 0));
    ck_assert(!textbuf_printf(&t, "%s", ""));
    ck_assert_uint_eq(t.len, 7);
    size_t len = 99;
    ck_assert_ptr_null(textbuf_take(&t, &len));
    ck_assert_uint_eq(len, 99);
    ck_assert(!t.failed);
    ck_assert_uint_eq(t.max, 8);

    textbuf p = {.max = 8};
    ck_assert(!textbuf_printf(&p, "%d", 12345678));
    ck_assert(p.failed);
    textbuf_free(&p);
}
END_TEST

/* ---- log ---- */

START_TEST(test_log_quote_escapes)
{
    char buf[64];
    ck_assert_str_eq(log_quote("a \"b\" c\\d", buf, sizeof buf), "\"a \\\"b\\\" c\\\\d\"");
    ck_assert_str_eq(log_quote("x\nts=0 level=error\r\t", buf, sizeof buf),
                     "\"x\\nts=0 level=error\\r\\t\"");
    ck_assert_str_eq(log_quote("\x1b[31m\x7f\x01", buf, sizeof buf), "\"\\x1b[31m\\x7f\\x01\"");
    ck_assert_str_eq(log_quote("caf\xc3\xa9", buf, sizeof buf), "\"caf\xc3\xa9\"");
    /* Cut to fit, never inside an escape. */
    char small[8];
    ck_assert_str_eq(log_quote("abcd\x1b", small, sizeof small), "\"abcd\"");
    ck_assert_str_eq(log_quote("abc\n", small, sizeof small), "\"abc\\n\"");
    ck_assert_str_eq(log_quote("abcdefgh", small, sizeof small), "\"abcde\"");
    ck_assert_str_eq(log_quote("", small, 3), "\"\"");
    ck_assert_str_eq(log_quote("abc", small, 2), "");
}
END_TEST

/* ---- prom ---- */

static char *take(textbuf *t)
{
    char *text = textbuf_take(t, NULL);
    ck_assert_ptr_nonnull(text);
    return text;
}

START_TEST(test_prom_escaping)
{
    textbuf t = {0};
    prom_label_value(&t, "a\\b\"c\nd");
    char *text = take(&t);
    ck_assert_str_eq(text, "a\\\\b\\\"c\\nd");
    free(text);

    prom_sample(&t, "x_total", (prom_label[]){{"model", "m\"1\n"}, {"tenant", "t\\"}}, 2, 7);
    prom_sample(&t, "x_total", NULL, 0, 18446744073709551615u);
    prom_sample_double(&t, "x_seconds", (prom_label[]){{"k", ""}}, 1, "%.3f", 1.5);
    text = take(&t);
    ck_assert_str_eq(text, "x_total{model=\"m\\\"1\\n\",tenant=\"t\\\\\"} 7\n"
                           "x_total 18446744073709551615\n"
                           "x_seconds{k=\"\"} 1.500\n");
    free(text);
}
END_TEST

/* Prometheus rejects a whole scrape for one label value that is not
 * UTF-8: client bytes that start no well-formed sequence become U+FFFD,
 * and a cut never splits a code point. */
START_TEST(test_prom_labels_stay_utf8)
{
    textbuf t = {0};
    /* invalid lead, lone continuation, overlong '/', surrogate, > U+10FFFF,
     * truncated 3-byte sequence at the end */
    prom_label_value(&t, "a\xff\x80\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\xc3\xa9\xe2\x82");
    char *text = take(&t);
#define R "\xef\xbf\xbd"
    /* one U+FFFD per byte of each ill-formed sequence: 1 + 1 + 2 + 3 + 4, then 2 */
    ck_assert_str_eq(text, "a" R R R R R R R R R R R "\xc3\xa9" R R);
#undef R
    free(text);

    char buf[8];
    prom_copy_label(buf, sizeof buf, "ab\xe2\x82\xac\xe2\x82\xac"); /* 8 bytes: one too many */
    ck_assert_str_eq(buf, "ab\xe2\x82\xac");
    prom_copy_label(buf, sizeof buf, "\xf0\x9f\x98\x80\xf0\x9f\x98\x80");
    ck_assert_str_eq(buf, "\xf0\x9f\x98\x80");
    prom_copy_label(buf, sizeof buf, "abcdef\xff"); /* no room for U+FFFD */
    ck_assert_str_eq(buf, "abcdef");
    prom_copy_label(buf, sizeof buf,
                    "a\xff"
                    "b");
    ck_assert_str_eq(buf, "a\xef\xbf\xbd"
                          "b");
    prom_copy_label(buf, 1, "abc");
    ck_assert_str_eq(buf, "");
}
END_TEST

/* ---- JSON without a tree ---- */

/* A JSON string literal stays valid whatever the bytes: quotes and
 * control characters escaped, ill-formed UTF-8 (a message cut inside a
 * character) as U+FFFD. */
START_TEST(test_json_string_written)
{
    textbuf t = {0};
    textbuf_json_string(&t, "a\"b\\c\nd\te\x01"
                            "f\xc3\xa9\xe2\x82");
    char *text = take(&t);
    ck_assert_str_eq(text, "\"a\\\"b\\\\c\\nd\\te\\u0001f\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\"");
    free(text);
    ck_assert_uint_eq(utf8_sequence((const unsigned char *)"\xf0\x9f\x98\x80", 4), 4);
    ck_assert_uint_eq(utf8_sequence((const unsigned char *)"\xf0\x9f\x98\x80", 3), 0); /* cut */
    ck_assert_uint_eq(utf8_sequence((const unsigned char *)"\xed\xa0\x80", 3), 0); /* surrogate */
    ck_assert_uint_eq(utf8_sequence((const unsigned char *)"a", 0), 0);
}
END_TEST

static bool scans(const char *text)
{
    json_span v;
    tetris_error err;
    return json_scan_document(text, strlen(text), &v, &err) == 0;
}

/* What jansson accepts, json_scan accepts; what it refuses, json_scan
 * refuses with a message that says where, but for the differences
 * json_scan.h decides: \u0000 and numbers of any size are accepted. */
START_TEST(test_json_scan_accepts_what_jansson_does)
{
    static const char *const good[] = {
        "{}",
        "[]",
        " {\"a\" : [1, -0, 2.5e-3, 1E+2, true, false, null, \"x\"]}\n",
        "\"s\"",
        "0",
        "-12",
        "9223372036854775807",
        "1e308",
        "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"",
        "\"\xc3\xa9\xf0\x9f\x98\x80\"",
        "{\"a\":{\"a\":{}}}",
        /* Not jansson's: the caller converts a number, or takes a NUL. */
        "9223372036854775808",
        "18446744073709551615",
        "-9223372036854775809",
        "1e309",
        "\"\\u0000\"",
    };
    static const char *const bad[] = {
        "",
        " ",
        "{",
        "[1,]",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{1:2}",
        "[1 2]",
        "01",
        "1.",
        ".5",
        "-",
        "1e",
        "+1",
        "tru",
        "nul",
        "\"abc",
        "\"a\nb\"",
        "\"\\x\"",
        "\"\\u12\"",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"\\ud800\\u0041\"",
        "\"\xc0\xaf\"",
        "\"\xed\xa0\x80\"",
        "\"\xf4\x90\x80\x80\"",
        "\"\xff\"",
        "{} {}",
        "[1]x",
        "[\"a\"\x01]",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        ck_assert_msg(scans(good[i]), "refused: %s", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(!scans(bad[i]), "accepted: %s", bad[i]);
    json_span v;
    tetris_error err;
    ck_assert_int_eq(json_scan_document("[1, x]", 6, &v, &err), -TETRIS_E_FORMAT);
    ck_assert_str_eq(err.msg, "JSON: expected a value at offset 4");
    /* A NUL is no JSON anywhere (jansson drops one that follows a number
     * or a literal: the fuzzer's first finding). */
    ck_assert_int_eq(json_scan_document("[[1\0]]", 6, &v, &err), -TETRIS_E_FORMAT);
    /* A length, not a NUL, ends the text. */
    ck_assert_int_eq(json_scan_document("[1]", 2, &v, &err), -TETRIS_E_FORMAT);
    ck_assert_int_eq(json_scan_document("[1] trailing", 3, &v, &err), 0);
}
END_TEST

START_TEST(test_json_scan_depth_is_bounded)
{
    char deep[2 * JSON_SCAN_MAX_DEPTH + 3];
    size_t n = 0;
    for (int i = 0; i < JSON_SCAN_MAX_DEPTH; i++)
        deep[n++] = '[';
    for (int i = 0; i < JSON_SCAN_MAX_DEPTH; i++)
        deep[n++] = ']';
    json_span v;
    tetris_error err;
    ck_assert_int_eq(json_scan_document(deep, n, &v, &err), 0);
    memmove(deep + 1, deep, n);
    deep[0] = '[';
    deep[++n] = ']';
    n++;
    ck_assert_int_eq(json_scan_document(deep, n, &v, &err), -TETRIS_E_FORMAT);
    ck_assert_str_eq(err.msg, "JSON: nesting deeper than the limit at offset 64");
}
END_TEST

/* json_span_uint: only digits are an unsigned integer, up to UINT64_MAX. */
START_TEST(test_json_span_uint)
{
    static const struct {
        const char *text;
        int want;
        uint64_t value;
    } cases[] = {
        {"0", 1, 0},
        {"7", 1, 7},
        {"18446744073709551615", 1, UINT64_MAX},
        {"18446744073709551616", -1, 0},
        {"99999999999999999999999", -1, 0},
        {"-1", 0, 0},
        {"-0", 0, 0},
        {"1.0", 0, 0},
        {"1e3", 0, 0},
        {"01", 0, 0},
        {"\"7\"", 0, 0},
        {"true", 0, 0},
        {"", 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t v = 12345;
        json_span span = {cases[i].text, strlen(cases[i].text)};
        ck_assert_msg(json_span_uint(span, &v) == cases[i].want, "%s", cases[i].text);
        ck_assert_uint_eq(v, cases[i].want == 1 ? cases[i].value : 12345);
    }
}
END_TEST

/* Members and elements come out as spans of the text, in order, keys
 * decoded; nested values are skipped whole. */
START_TEST(test_json_scan_iterates)
{
    const char *text =
        " { \"op\" : \"ingest\", \"t\\u0065nsors\":[ {\"a\":\"]}\"} , [2,[3]], \"x,y\" ,4 ],"
        "\"long key that does not fit\":null, \"n\": -1.5e3 } ";
    json_span doc, key, value;
    tetris_error err;
    ck_assert_int_eq(json_scan_document(text, strlen(text), &doc, &err), 0);
    ck_assert(json_span_is_object(doc));
    json_iter it;
    ck_assert(json_iter_object(&it, doc));
    json_iter not_array;
    ck_assert(!json_iter_array(&not_array, doc));
    ck_assert_uint_eq(json_iter_count(it), 4);
    char name[16];
    ck_assert_int_eq(json_iter_next(&it, &key, &value), 1);
    ck_assert_int_eq(json_span_string(key, name, sizeof(name)), 2);
    ck_assert_str_eq(name, "op");
    ck_assert_int_eq(json_span_string(value, name, sizeof(name)), 6);
    ck_assert_str_eq(name, "ingest");
    ck_assert_int_eq(json_iter_next(&it, &key, &value), 1);
    ck_assert_int_eq(json_span_string(key, name, sizeof(name)), 7);
    ck_assert_str_eq(name, "tensors");
    json_iter arr;
    ck_assert(json_iter_array(&arr, value));
    ck_assert_uint_eq(json_iter_count(arr), 4);
    static const char *const elems[] = {"{\"a\":\"]}\"}", "[2,[3]]", "\"x,y\"", "4"};
    for (size_t i = 0; i < 4; i++) {
        json_span e;
        ck_assert_int_eq(json_iter_next(&arr, NULL, &e), 1);
        ck_assert_uint_eq(e.len, strlen(elems[i]));
        ck_assert(memcmp(e.p, elems[i], e.len) == 0);
    }
    json_span e;
    ck_assert_int_eq(json_iter_next(&arr, NULL, &e), 0);
    ck_assert_int_eq(json_iter_next(&it, &key, &value), 1);
    ck_assert_int_eq(json_span_string(key, name, sizeof(name)), -1); /* does not fit */
    ck_assert_int_eq(json_iter_next(&it, &key, &value), 1);
    ck_assert_uint_eq(value.len, 6);
    ck_assert(memcmp(value.p, "-1.5e3", 6) == 0);
    ck_assert_int_eq(json_iter_next(&it, &key, &value), 0);
    /* Empty containers; a scalar is neither. */
    ck_assert(json_iter_array(&arr, (json_span){"[ ]", 3}));
    ck_assert_uint_eq(json_iter_count(arr), 0);
    ck_assert(!json_iter_object(&it, (json_span){"\"{}\"", 4}));
    /* Escapes and surrogate pairs come out as UTF-8. */
    const char *s = "\"\\ud83d\\ude00\\u00e9\\n\"";
    char out[16];
    ck_assert_int_eq(json_span_string((json_span){s, strlen(s)}, out, sizeof(out)), 7);
    ck_assert_str_eq(out, "\xf0\x9f\x98\x80\xc3\xa9\n");
    /* No C string holds a NUL: a key "op\u0000x" is never "op". */
    s = "\"op\\u0000x\"";
    ck_assert_int_eq(json_span_string((json_span){s, strlen(s)}, out, sizeof(out)), -1);
    /* A span that is not JSON ends an iteration with -1, then 0. */
    ck_assert(json_iter_array(&arr, (json_span){"[1,,2]", 6}));
    ck_assert_int_eq(json_iter_next(&arr, NULL, &e), 1);
    ck_assert_int_eq(json_iter_next(&arr, NULL, &e), -1);
    ck_assert_int_eq(json_iter_next(&arr, NULL, &e), 0);
}
END_TEST

/* Pulled value by value: strings decoded, escapes and surrogate pairs as
 * UTF-8; what is no JSON, or nests past the caller's limit, refused with
 * an error that says it is JSON's. */
START_TEST(test_json_scan_pulls)
{
    json_scan s;
    tetris_error err;
    char buf[16];
    size_t len;
    const char text[] = "\"a\\u00e9\\ud83d\\ude00\\n\"";
    json_scan_init(&s, text, sizeof(text) - 1, 4);
    ck_assert_int_eq(json_scan_string(&s, buf, sizeof(buf), &len, &err), 0);
    ck_assert_uint_eq(len, 8);
    ck_assert_int_eq(memcmp(buf, "a\xc3\xa9\xf0\x9f\x98\x80\n", 8), 0);
    static const char *const bad[] = {
        "\"\\ud83d\"", "\"\\ude00\"", "\"\x01\"", "\"\xff\"", "\"\xc0\x80\"", "01",
        "1.",          "-",           "1e",       "+1",       "[1,]",         "{\"a\" 1}",
        "[[[[[1]]]]]", "tru",         "\"abc",    "NaN",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = 0;
        json_scan_init(&s, bad[i], strlen(bad[i]), 4);
        int r = json_scan_skip(&s, &n, &err);
        if (r == 0)
            r = json_scan_end(&s, &err);
        ck_assert_msg(r < 0, "accepted %s", bad[i]);
        ck_assert_int_eq(err.code, TETRIS_E_FORMAT);
        ck_assert_msg(strstr(err.msg, "JSON") != NULL, "%s: %s", bad[i], err.msg);
    }
}
END_TEST

START_TEST(test_prom_histogram)
{
    static const double bounds[] = {0.5, 1, 2.5};
    uint64_t counts[4] = {0};
    double sum = 0;
    static const double seen[] = {0.1, 0.5, 0.7, 3, 100, 2.5};
    for (size_t i = 0; i < sizeof seen / sizeof seen[0]; i++) {
        counts[prom_bucket(bounds, 3, seen[i])]++;
        sum += seen[i];
    }
    ck_assert_uint_eq(counts[0], 2); /* v <= bound falls in that bound's bucket */
    ck_assert_uint_eq(counts[3], 2);
    textbuf t = {0};
    prom_header(&t, "h_seconds", "histogram", "Some times.");
    prom_histogram(&t, "h_seconds", (prom_label[]){{"verb", "filter"}}, 1, bounds, counts, 3, sum,
                   "%.6f");
    prom_histogram(&t, "h_seconds", NULL, 0, bounds, counts, 3, sum, "%.9g");
    char *text = take(&t);
    ck_assert_str_eq(text, "# HELP h_seconds Some times.\n"
                           "# TYPE h_seconds histogram\n"
                           "h_seconds_bucket{verb=\"filter\",le=\"0.5\"} 2\n"
                           "h_seconds_bucket{verb=\"filter\",le=\"1\"} 3\n"
                           "h_seconds_bucket{verb=\"filter\",le=\"2.5\"} 4\n"
                           "h_seconds_bucket{verb=\"filter\",le=\"+Inf\"} 6\n"
                           "h_seconds_sum{verb=\"filter\"} 106.800000\n"
                           "h_seconds_count{verb=\"filter\"} 6\n"
                           "h_seconds_bucket{le=\"0.5\"} 2\n"
                           "h_seconds_bucket{le=\"1\"} 3\n"
                           "h_seconds_bucket{le=\"2.5\"} 4\n"
                           "h_seconds_bucket{le=\"+Inf\"} 6\n"
                           "h_seconds_sum 106.8\n"
                           "h_seconds_count 6\n");
    free(text);
}
END_TEST

/* ---- clock ---- */

/* ---- workers ---- */

static void count_item(void *ctx, size_t i)
{
    atomic_uint *hits = ctx;
    atomic_fetch_add(&hits[i], 1);
}

START_TEST(test_workers_run_each_item_once)
{
    enum { N = 1000 };
    static atomic_uint hits[N];
    for (size_t i = 0; i < N; i++)
        atomic_init(&hits[i], 0);
    struct worker_slots slots;
    worker_slots_init(&slots, 2);
    unsigned ran = workers_run(N, 8, &slots, count_item, hits);
    ck_assert_uint_ge(ran, 1);
    ck_assert_uint_le(ran, 3); /* the caller and at most the 2 slots */
    ck_assert_uint_eq(slots.free, 2); /* every slot given back */
    for (size_t i = 0; i < N; i++)
        ck_assert_uint_eq(atomic_load(&hits[i]), 1);
    /* An empty pool: the caller alone, still every item. */
    worker_slots_init(&slots, 0);
    ck_assert_uint_eq(workers_run(N, 8, &slots, count_item, hits), 1);
    for (size_t i = 0; i < N; i++)
        ck_assert_uint_eq(atomic_load(&hits[i]), 2);
    worker_slots_destroy(&slots);
    ck_assert_uint_eq(workers_run(0, 4, NULL, count_item, hits), 1);
}
END_TEST

/* Writes root/<our cgroup>/cpu.max, making the directories on the way. */
static void fake_cpu_max(const char *root, const char *line)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    ck_assert_ptr_nonnull(f);
    char cg[1024] = "";
    while (fgets(cg, sizeof(cg), f) != NULL && strncmp(cg, "0::", 3) != 0)
        ;
    fclose(f);
    cg[strcspn(cg, "\n")] = '\0';
    char path[4096];
    size_t at = (size_t)snprintf(path, sizeof(path), "%s", root);
    /* mkdir -p root<cgroup>: one component at a time. */
    for (const char *p = cg + 3; *p != '\0';) {
        size_t n = strcspn(p + 1, "/") + 1;
        ck_assert_uint_lt(at + n, sizeof(path));
        memcpy(path + at, p, n);
        at += n;
        path[at] = '\0';
        ck_assert_msg(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s", path);
        p += n;
    }
    char *text = NULL;
    ck_assert_int_ge(asprintf(&text, "%s\n", line), 0);
    ck_assert_int_lt(snprintf(path + at, sizeof(path) - at, "/cpu.max"), (int)(sizeof(path) - at));
    unit_write_text(path, text);
    free(text);
}

START_TEST(test_cpu_allowance_quota)
{
    struct cpu_allowance a;
    cpu_allowance_read(NULL, &a);
    ck_assert_uint_ge(a.workers, 1);
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[1024] = "";
    bool v2 = false;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        v2 = v2 || strncmp(line, "0::", 3) == 0;
    if (f != NULL)
        fclose(f);
    if (!v2)
        return; /* no cgroup v2 line: nothing to fake */
    const char *root = unit_scratch_dir("cg");
    fake_cpu_max(root, "50000 100000"); /* half a CPU: one worker */
    cpu_allowance_read(root, &a);
    ck_assert_uint_eq(a.workers, 1);
    ck_assert(fabs(a.quota_cpus - 0.5) < 1e-9);
    fake_cpu_max(root, "max 100000"); /* no quota: the affinity */
    cpu_allowance_read(root, &a);
    ck_assert(a.quota_cpus == 0);
    ck_assert_uint_eq(a.workers, a.affinity > 0 ? a.affinity : 1);
    fake_cpu_max(root, "garbage"); /* unreadable: no limit, never fails */
    cpu_allowance_read(root, &a);
    ck_assert_uint_ge(a.workers, 1);
    unit_remove_tree(root);
}
END_TEST

START_TEST(test_clock)
{
    int64_t ms = clock_mono_ms();
    double now = clock_now_ms();
    int64_t us = clock_mono_us();
    ck_assert(now >= (double)ms);
    ck_assert(us / 1000 >= ms);
    ck_assert(clock_now_ms() >= now);
    ck_assert(clock_wall_ms() > 0);

    struct timespec ts = clock_timespec(1234.5);
    ck_assert_int_eq(ts.tv_sec, 1);
    ck_assert_int_eq(ts.tv_nsec, 234500000);
    /* Just under a whole second must not give tv_nsec = 1e9. */
    ts = clock_timespec(1999.99999999999);
    ck_assert(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L);
    ts = clock_timespec(0);
    ck_assert(ts.tv_sec == 0 && ts.tv_nsec == 0);
}
END_TEST

/* ---- httpclient ---- */

static sem_t release_slow; /* posted by the test once its GET gave up */

static void handle_doc(void *ctx, const http_request *req, http_response *resp)
{
    (void)ctx;
    const char *inm = http_request_header(req, "If-None-Match");
    if (inm != NULL && strcmp(inm, "\"v7\"") == 0) {
        http_response_empty(resp, 304);
        return;
    }
    http_response_set_body(resp, 200, "text/plain", "hello", 5);
    http_response_add_header(resp, "ETag", "\"v7\"");
}

static void handle_big(void *ctx, const http_request *req, http_response *resp)
{
    (void)ctx, (void)req;
    static char big[100000];
    memset(big, 'b', sizeof big);
    http_response_set_body(resp, 200, "text/plain", big, sizeof big);
}

static void handle_slow(void *ctx, const http_request *req, http_response *resp)
{
    (void)ctx, (void)req;
    /* Bounded only so that a broken test cannot hang the suite. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    sem_timedwait(&release_slow, &until);
    http_response_set_body(resp, 200, "text/plain", "late", 4);
}

static http_server *start_server(char *base, size_t len)
{
    struct http_server_options o;
    http_server_options_init(&o);
    o.listen = "127.0.0.1:0";
    http_server *s = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(http_server_new(&o, &s, &err), 0);
    ck_assert_int_eq(http_server_route(s, "GET", "/doc", handle_doc, NULL, &err), 0);
    ck_assert_int_eq(http_server_route(s, "GET", "/big", handle_big, NULL, &err), 0);
    ck_assert_int_eq(http_server_route(s, "GET", "/slow", handle_slow, NULL, &err), 0);
    ck_assert_int_eq(http_server_start(s, &err), 0);
    snprintf(base, len, "http://127.0.0.1:%u", http_server_port(s));
    return s;
}

/* Both forms of Retry-After (RFC 9110 10.2.3), the HTTP-date in each of
 * the three formats a recipient must accept, and what is neither. */
START_TEST(test_httpclient_retry_after)
{
    time_t now = 784111777; /* Sun, 06 Nov 1994 08:49:37 GMT */
    ck_assert_int_eq(httpclient_retry_after_s("120", now), 120);
    ck_assert_int_eq(httpclient_retry_after_s(" 0\r\n", now), 0);
    ck_assert_int_eq(httpclient_retry_after_s("Sun, 06 Nov 1994 08:49:40 GMT", now), 3);
    ck_assert_int_eq(httpclient_retry_after_s(" Sunday, 06-Nov-94 08:50:37 GMT\r\n", now), 60);
    ck_assert_int_eq(httpclient_retry_after_s("Sun Nov  6 08:49:47 1994", now), 10);
    ck_assert_int_eq(httpclient_retry_after_s("Sun, 06 Nov 1994 08:00:00 GMT", now), 0);
    const char *bad[] = {"",
                         " ",
                         "-1",
                         "12abc",
                         "soon",
                         "99999999999999999999999",
                         "Sun, 99 Nov 1994 08:49:37 GMT"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(httpclient_retry_after_s(bad[i], now) == HTTPCLIENT_RETRY_AFTER_NONE,
                      "'%s' read as %ld", bad[i], httpclient_retry_after_s(bad[i], now));
}
END_TEST

START_TEST(test_httpclient_status_etag)
{
    char base[64], url[128], missing[128];
    http_server *s = start_server(base, sizeof base);
    snprintf(url, sizeof url, "%s/doc", base);
    snprintf(missing, sizeof missing, "%s/nothing", base);
    tetris_error err = {0};

    httpclient_request rq = {.url = url, .timeout_ms = 30000, .max_body = 1024};
    ck_assert_int_eq(httpclient_get(&rq, &err), 0);
    ck_assert_int_eq(rq.status, 200);
    ck_assert_str_eq(rq.body, "hello");
    ck_assert_uint_eq(rq.len, 5);
    ck_assert_str_eq(rq.etag, "\"v7\"");

    /* Run again with the ETag: the reply of the first run is replaced. */
    rq.if_none_match = "\"v7\"";
    ck_assert_int_eq(httpclient_get(&rq, &err), 0);
    ck_assert_int_eq(rq.status, 304);
    ck_assert_str_eq(rq.body, "");
    ck_assert_uint_eq(rq.len, 0);
    httpclient_request_clear(&rq);

    /* Any status is a reply; the caller judges it. */
    httpclient_request nf = {.url = missing, .timeout_ms = 30000};
    ck_assert_int_eq(httpclient_get(&nf, &err), 0);
    ck_assert_int_eq(nf.status, 404);
    ck_assert_ptr_null(nf.etag);
    httpclient_request_clear(&nf);
    http_server_free(s);
}
END_TEST

START_TEST(test_httpclient_body_cap)
{
    char base[64], url[128];
    http_server *s = start_server(base, sizeof base);
    snprintf(url, sizeof url, "%s/big", base);
    tetris_error err = {0};
    httpclient_request rq = {.url = url, .timeout_ms = 30000, .max_body = 65536};
    ck_assert_int_eq(httpclient_get(&rq, &err), -TETRIS_E_PROTOCOL);
    ck_assert_ptr_nonnull(strstr(err.msg, "larger than 65536 bytes"));
    ck_assert_ptr_nonnull(strstr(err.msg, url));
    ck_assert_ptr_null(rq.body);
    ck_assert_int_eq(rq.status, 0);
    /* The same document fits a larger cap (100000 bytes and the NUL). */
    rq.max_body = 100001;
    ck_assert_int_eq(httpclient_get(&rq, &err), 0);
    ck_assert_uint_eq(rq.len, 100000);
    httpclient_request_clear(&rq);
    http_server_free(s);
}
END_TEST

START_TEST(test_httpclient_timeout)
{
    char base[64], url[128];
    ck_assert_int_eq(sem_init(&release_slow, 0, 0), 0);
    http_server *s = start_server(base, sizeof base);
    snprintf(url, sizeof url, "%s/slow", base);
    tetris_error err = {0};
    httpclient_request rq = {.url = url, .timeout_ms = 200, .connect_timeout_ms = 30000};
    ck_assert_int_eq(httpclient_get(&rq, &err), -TETRIS_E_TIMEOUT);
    ck_assert_ptr_nonnull(strstr(err.msg, url));
    ck_assert_ptr_null(rq.body);
    sem_post(&release_slow);
    httpclient_request_clear(&rq);
    http_server_free(s);
    sem_destroy(&release_slow);
}
END_TEST

START_TEST(test_httpclient_many)
{
    char base[64], doc[128], big[128], refused[128];
    http_server *s = start_server(base, sizeof base);
    snprintf(doc, sizeof doc, "%s/doc", base);
    snprintf(big, sizeof big, "%s/big", base);
    /* A port that is bound but not listening: connections are refused,
     * and no other process can take the port meanwhile. */
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(sock, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sa_len = sizeof sa;
    ck_assert_int_eq(bind(sock, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(getsockname(sock, (struct sockaddr *)&sa, &sa_len), 0);
    snprintf(refused, sizeof refused, "http://127.0.0.1:%u/doc", ntohs(sa.sin_port));
    httpclient_request rqs[6], *p[6];
    for (size_t i = 0; i < 6; i++) {
        rqs[i] = (httpclient_request){.url = i == 4 ? big : i == 5 ? refused : doc,
                                      .timeout_ms = 30000, .max_body = 1024,
                                      .user_agent = "test_common"};
        p[i] = &rqs[i];
    }
    httpclient_get_all(p, 6, 2);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(rqs[i].rc, 0);
        ck_assert_int_eq(rqs[i].status, 200);
        ck_assert_str_eq(rqs[i].body, "hello");
    }
    ck_assert_int_eq(rqs[4].rc, -TETRIS_E_PROTOCOL);
    ck_assert_int_eq(rqs[4].err.code, TETRIS_E_PROTOCOL);
    ck_assert_int_eq(rqs[5].rc, -TETRIS_E_UNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(rqs[5].err.msg, refused));
    for (size_t i = 0; i < 6; i++)
        httpclient_request_clear(&rqs[i]);
    close(sock);
    http_server_free(s);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 120);
    tcase_add_test(tc, test_cli_u64);
    tcase_add_test(tc, test_cli_i64);
    tcase_add_test(tc, test_cli_double);
    tcase_add_test(tc, test_textbuf_growth);
    tcase_add_test(tc, test_textbuf_max);
    tcase_add_test(tc, test_prom_escaping);
    tcase_add_test(tc, test_log_quote_escapes);
    tcase_add_test(tc, test_prom_labels_stay_utf8);
    tcase_add_test(tc, test_prom_histogram);
    tcase_add_test(tc, test_json_string_written);
    tcase_add_test(tc, test_json_scan_accepts_what_jansson_does);
    tcase_add_test(tc, test_json_scan_depth_is_bounded);
    tcase_add_test(tc, test_json_scan_iterates);
    tcase_add_test(tc, test_json_span_uint);
    tcase_add_test(tc, test_json_scan_pulls);
    tcase_add_test(tc, test_clock);
    tcase_add_test(tc, test_workers_run_each_item_once);
    tcase_add_test(tc, test_cpu_allowance_quota);
    tcase_add_test(tc, test_httpclient_retry_after);
    tcase_add_test(tc, test_httpclient_status_etag);
    tcase_add_test(tc, test_httpclient_body_cap);
    tcase_add_test(tc, test_httpclient_timeout);
    tcase_add_test(tc, test_httpclient_many);
}

UNIT_MAIN("common")
