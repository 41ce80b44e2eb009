/* json_span.h - reads JSON text without building a tree of it.
 *
 * Why: a JSON tree costs about 45 times its text (jansson: an object, a
 * hash table and a string per member), so a peer that sends a 4 MiB
 * message full of small objects makes a decoder that loads it whole take
 * about 185 MiB. json_span checks the text and cuts it into spans instead:
 * the members of an object and the elements of an array, each a slice of
 * the text that the caller decodes on its own (jansson on one small
 * element at a time), so what a decoder holds is the text plus what it
 * keeps, never a tree of the whole.
 *
 * It accepts what jansson's json_loadb accepts with JSON_DECODE_ANY
 * (RFC 8259; UTF-8 checked, overlong forms, surrogates and code points past
 * U+10FFFF refused; escapes, \u0000 refused, surrogate pairs checked;
 * integers that fit a json_int_t, reals that do not overflow a double),
 * except that nesting is limited to JSON_SCAN_MAX_DEPTH and duplicate keys
 * are not looked for: a caller checks the members it reads.
 * fuzz/fuzz_json_scan.c holds it to jansson.
 *
 * Usage:
 *   json_span doc;
 *   if (json_scan_document(text, len, &doc, err) < 0) ...   // not JSON
 *   json_iter it;
 *   if (!json_iter_object(&it, doc)) ...                    // not an object
 *   json_span key, value;
 *   while (json_iter_next(&it, &key, &value) > 0) {
 *       char name[16];
 *       if (json_span_string(key, name, sizeof(name)) >= 0 && strcmp(name, "x") == 0) ...
 *   }
 * Spans point into the caller's text, which must outlive them. Iterating a
 * span json_scan_document did not accept is undefined. */
#ifndef TETRIS_JSON_SPAN_H
#define TETRIS_JSON_SPAN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/error.h"

#define JSON_SCAN_MAX_DEPTH 64

typedef struct json_span {
    const char *p; /* the value's first byte ('{', '"', a digit, ...) */
    size_t len;    /* to its last byte, no whitespace around */
} json_span;

/* Checks that text[0, len) is one JSON value with only whitespace around
 * it; *value gets its span. TETRIS_E_FORMAT naming what is wrong and the
 * byte offset where. */
int json_scan_document(const char *text, size_t len, json_span *value, tetris_error *err);

typedef struct json_iter {
    const char *p;
    size_t len;
    size_t pos;
    bool object;
} json_iter;

/* Starts iterating the members of an object, or the elements of an array;
 * false when v is not one. */
bool json_iter_object(json_iter *it, json_span v);
bool json_iter_array(json_iter *it, json_span v);
/* The next member (key: the key's string literal, quotes included; NULL
 * for arrays) or element: 1, or 0 at the end. */
int json_iter_next(json_iter *it, json_span *key, json_span *value);
/* Elements (or members) left to iterate from a fresh iterator. */
size_t json_iter_count(json_iter it);

bool json_span_is_string(json_span v);
bool json_span_is_array(json_span v);
bool json_span_is_object(json_span v);

/* Decodes a string literal into buf (cap bytes, NUL-terminated): its
 * length, or -1 when v is no string or it does not fit. */
ssize_t json_span_string(json_span v, char *buf, size_t cap);

#endif
