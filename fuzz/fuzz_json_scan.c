/* fuzz_json_scan.c - libFuzzer harness for common/json_scan.h, the JSON
 * reader the node daemon cuts peers' messages with, held to jansson: what
 * json_scan accepts jansson accepts, and what jansson accepts json_scan
 * accepts (but nesting past JSON_SCAN_MAX_DEPTH, and NUL bytes: jansson
 * drops a NUL that follows a number or a literal, "[1\0]", which is no
 * JSON), and every member, element and string json_scan hands out is the
 * one jansson decodes. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/json_span.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same_value(json_span v, const json_t *j);

static void same_string(json_span v, const json_t *j)
{
    if (!json_is_string(j))
        abort();
    char *buf = malloc(v.len + 1);
    if (buf == NULL)
        return;
    ssize_t n = json_span_string(v, buf, v.len + 1);
    if (n < 0 || (size_t)n != json_string_length(j) || memcmp(buf, json_string_value(j), n) != 0)
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

static void same_value(json_span v, const json_t *j)
{
    if (v.len == 0)
        abort();
    switch (v.p[0]) {
    case '{': same_object(v, j); return;
    case '[': same_array(v, j); return;
    case '"': same_string(v, j); return;
    default: break;
    }
    bool real = memchr(v.p, '.', v.len) || memchr(v.p, 'e', v.len) || memchr(v.p, 'E', v.len);
    bool same = v.p[0] == 't'   ? json_is_true(j)
                : v.p[0] == 'f' ? json_is_false(j)
                : v.p[0] == 'n' ? json_is_null(j)
                : real          ? json_is_real(j)
                                : json_is_integer(j);
    if (!same)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    json_span v;
    tetris_error err;
    int rc = json_scan_document(text, size, &v, &err);
    json_error_t jerr;
    json_t *j = json_loadb(text, size, JSON_DECODE_ANY, &jerr);
    if (rc == 0 && j == NULL) {
        fprintf(stderr, "json_scan accepted what jansson refuses: %s\n", jerr.text);
        abort();
    }
    if (rc < 0 && err.code == TETRIS_E_FORMAT && j != NULL &&
        strstr(err.msg, "nested deeper") == NULL && memchr(data, '\0', size) == NULL) {
        fprintf(stderr, "json_scan refused what jansson accepts: %s\n", err.msg);
        abort();
    }
    if (rc < 0 && err.code != TETRIS_E_FORMAT && err.code != TETRIS_E_NOMEM)
        abort();
    if (rc == 0)
        same_value(v, j);
    json_decref(j);
    return 0;
}
