/* fuzz_json_scan.c - libFuzzer harness for common/json_scan.h, the JSON
 * reader that cuts the node daemon's ingest requests into spans and pulls
 * tetris-function's inference requests value by value, held to jansson
 * (json_loadb, JSON_DECODE_ANY | JSON_ALLOW_NUL): the two accept the same
 * texts, and every member, element, string and number json_scan hands out
 * is the one jansson decodes. The differences json_scan.h decides are the
 * only ones let through, each recognised by jansson's own error code or by
 * json_scan's, never by what the input looks like:
 *  - a number jansson cannot hold (json_error_numeric_overflow) json_scan
 *    accepts; an integer past json_int_t is then compared with what
 *    jansson makes of it as a real (JSON_DECODE_INT_AS_REAL);
 *  - \u0000 in a key (json_error_null_byte_in_key) json_scan accepts; in a
 *    value jansson takes it too, json_scan_string decodes it and
 *    json_span_string must refuse the string;
 *  - nesting past JSON_SCAN_MAX_DEPTH json_scan refuses;
 *  - a NUL byte json_scan refuses anywhere (jansson drops one after a
 *    number or a literal, "[1\0]"). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz/fuzz_common.h"
#include "common/json_scan.h"

/* Set when jansson read the text with JSON_DECODE_INT_AS_REAL. */
static bool ints_as_reals;

static void same_value(json_span v, const json_t *j);

static void same_string(json_span v, const json_t *j)
{
    if (!json_is_string(j))
        abort();
    const char *want = json_string_value(j);
    size_t n = json_string_length(j);
    /* Decoded, a string is never longer than its literal. */
    char *buf = malloc(v.len + 1);
    if (buf == NULL)
        return;
    json_scan s;
    tetris_error err;
    size_t len;
    json_scan_init(&s, v.p, v.len, 0);
    if (json_scan_string(&s, buf, v.len, &len, &err) < 0 || len != n || memcmp(buf, want, n) != 0)
        abort();
    ssize_t c = json_span_string(v, buf, v.len + 1);
    if (memchr(want, '\0', n) != NULL ? c != -1
                                      : c < 0 || (size_t)c != n || memcmp(buf, want, n) != 0)
        abort();
    free(buf);
}

static void same_object(json_span v, const json_t *j)
{
    json_iter it;
    if (!json_is_object(j) || !json_iter_object(&it, v))
        abort();
    size_t members = json_iter_count(it);
    /* jansson keeps the last of duplicate keys: fewer members there. */
    if (members < json_object_size(j))
        abort();
    json_span key, value;
    while (json_iter_next(&it, &key, &value) > 0) {
        char *name = malloc(key.len + 1);
        if (name == NULL)
            return;
        if (json_span_string(key, name, key.len + 1) < 0)
            abort();
        const json_t *jv = json_object_get(j, name);
        if (jv == NULL)
            abort();
        if (members == json_object_size(j))
            same_value(value, jv);
        free(name);
    }
}

static void same_array(json_span v, const json_t *j)
{
    json_iter it;
    if (!json_is_array(j) || !json_iter_array(&it, v) || json_iter_count(it) != json_array_size(j))
        abort();
    json_span e;
    for (size_t i = 0; json_iter_next(&it, NULL, &e) > 0; i++)
        same_value(e, json_array_get(j, i));
}

/* A number token has the kind and value jansson gives it (both convert
 * with strtoll or strtod). */
static void same_number(json_span v, const json_t *j)
{
    char *text = strndup(v.p, v.len);
    if (text == NULL)
        return;
    bool real = strpbrk(text, ".eE") != NULL || ints_as_reals;
    bool same;
    errno = 0;
    if (real)
        same = json_is_real(j) && strtod(text, NULL) == json_real_value(j);
    else
        same = json_is_integer(j) && strtoll(text, NULL, 10) == json_integer_value(j) && errno == 0;
    free(text);
    if (!same)
        abort();
}

static void same_value(json_span v, const json_t *j)
{
    if (v.len == 0)
        abort();
    switch (v.p[0]) {
    case '{': same_object(v, j); return;
    case '[': same_array(v, j); return;
    case '"': same_string(v, j); return;
    case 't':
        if (!json_is_true(j))
            abort();
        return;
    case 'f':
        if (!json_is_false(j))
            abort();
        return;
    case 'n':
        if (!json_is_null(j))
            abort();
        return;
    default: same_number(v, j); return;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    json_span v;
    tetris_error err;
    int rc = json_scan_document(text, size, &v, &err);
    if (rc < 0 && err.code != TETRIS_E_FORMAT)
        abort();
    json_error_t jerr;
    ints_as_reals = false;
    json_t *j = json_loadb(text, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (j == NULL && json_error_code(&jerr) == json_error_numeric_overflow) {
        ints_as_reals = true;
        j = json_loadb(text, size, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL,
                       &jerr);
    }
    if (rc == 0 && j == NULL && json_error_code(&jerr) != json_error_numeric_overflow &&
        json_error_code(&jerr) != json_error_null_byte_in_key) {
        fprintf(stderr, "json_scan accepted what jansson refuses: %s\n", jerr.text);
        abort();
    }
    if (rc < 0 && j != NULL && strstr(err.msg, "nesting deeper than the limit") == NULL &&
        memchr(data, '\0', size) == NULL) {
        fprintf(stderr, "json_scan refused what jansson accepts: %s\n", err.msg);
        abort();
    }
    if (rc == 0 && j != NULL)
        same_value(v, j);
    json_decref(j);
    return 0;
}
