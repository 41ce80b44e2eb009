/* json_scan.h - a strict JSON (RFC 8259) reader that walks a text in place
 * without building a tree, for the messages a tree makes expensive: a tree
 * (jansson's) costs about 45 times its text for small objects (an object,
 * a hash table and a string per member) and some 40 bytes per number, so a
 * peer's 4 MiB ingest request of small entries would take about 185 MiB to
 * load whole, and an inference request of millions of numbers as much
 * again. This reader holds nothing beyond what its caller keeps.
 *
 * One engine, used two ways. Pulled value by value, the caller following
 * the grammar it expects (tetris-function's inference requests):
 *
 *   json_scan s;
 *   json_scan_init(&s, text, len, max_depth);
 *   json_scan_object_begin(&s, &err);
 *   for (size_t i = 0; (r = json_scan_object_next(&s, &i, key, sizeof key,
 *                                                 &key_len, &err)) > 0;)
 *       ... read the value: json_scan_string/_number/_literal, a nested
 *           object or array the same way, or json_scan_skip ...
 *   json_scan_end(&s, &err);          // nothing but blanks left
 *
 * Or checked whole, then cut into spans: the members of an object and the
 * elements of an array, each a slice of the text that the caller decodes
 * on its own (the node daemon's ingest requests: jansson on one small
 * element at a time):
 *
 *   json_span doc;
 *   if (json_scan_document(text, len, &doc, err) < 0) ...   // not JSON
 *   json_iter it;
 *   if (!json_iter_object(&it, doc)) ...                    // not an object
 *   json_span key, value;
 *   while (json_iter_next(&it, &key, &value) > 0) {
 *       char name[16];
 *       if (json_span_string(key, name, sizeof(name)) >= 0 && strcmp(name, "x") == 0) ...
 *   }
 *
 * The iterators and json_span_string run the same engine again over the
 * span they are given, so what they hand out is what json_scan_document
 * checked, and a span it did not check is read as far as it is JSON.
 *
 * What it accepts is exactly JSON's grammar: strings of well-formed UTF-8
 * (common/utf8.h: no overlong forms, no surrogates, nothing above
 * U+10FFFF) without raw control characters, escapes including surrogate
 * pairs (a lone surrogate is refused), numbers by JSON's grammar (no
 * leading zeros, no '+', no NaN or hex), the three literals, only blanks
 * around the value. Objects and arrays nest at most max_depth deep
 * (JSON_SCAN_MAX_DEPTH for json_scan_document), so neither the reader nor
 * a caller recursing along with it goes deeper. Duplicate keys are not
 * looked for: a caller checks the members it reads. Every error is
 * TETRIS_E_FORMAT and names the byte offset. No function reads outside
 * [text, text + len), and none allocates except json_scan_string_dup.
 *
 * Where it differs from jansson's json_loadb (JSON_DECODE_ANY), which
 * fuzz/fuzz_json_scan.c holds it to, and why:
 *  - \u0000 is accepted: a string is bytes of a known length (an inference
 *    request's BYTES element may hold NULs; json_scan_string gives them).
 *    json_span_string, which gives a C string, refuses a string holding a
 *    NUL, so a key "op\u0000x" is never read as "op".
 *  - A number is a token of any size: an integer past int64 or a real past
 *    DBL_MAX is accepted and its caller converts it to the type it needs
 *    (an inference request's UINT64 reaches 2^64 - 1; ingest decodes the
 *    elements it uses with jansson, which refuses what does not fit).
 *  - Nesting is limited to max_depth (jansson's limit is 2048).
 *  - A NUL byte is no JSON anywhere (jansson drops one after a number or a
 *    literal: "[1\0]"). */
#ifndef TETRIS_JSON_SCAN_H
#define TETRIS_JSON_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

/* ---- pulled value by value ---- */

typedef struct json_scan {
    const char *text, *p, *end;
    int depth, max_depth;
} json_scan;

enum json_kind {
    JSON_KIND_OBJECT,
    JSON_KIND_ARRAY,
    JSON_KIND_STRING,
    JSON_KIND_NUMBER,
    JSON_KIND_LITERAL, /* true, false or null */
    JSON_KIND_NONE     /* the end of the text, or a byte no value starts with */
};

void json_scan_init(json_scan *s, const char *text, size_t len, int max_depth);
/* The kind of the value starting at the next non-blank byte (blanks skipped). */
enum json_kind json_scan_peek(json_scan *s);
/* Offset of the next byte, for messages. */
size_t json_scan_offset(const json_scan *s);

/* Consumes '{' or '['. TETRIS_E_FORMAT past max_depth. */
int json_scan_object_begin(json_scan *s, tetris_error *err);
int json_scan_array_begin(json_scan *s, tetris_error *err);
/* The next member: 1 with its key decoded into key (at most cap - 1 bytes
 * and a NUL; *key_len is the whole key's length, so a longer key is seen to
 * differ from every shorter name) and the ':' consumed, so its value comes
 * next; 0 when the object ended ('}' consumed). *i counts the members seen
 * (start it at 0). */
int json_scan_object_next(json_scan *s, size_t *i, char *key, size_t cap, size_t *key_len,
                          tetris_error *err);
/* 1 when another element follows (read it next), 0 when the array ended
 * (']' consumed). *i counts the elements seen (start it at 0). */
int json_scan_array_next(json_scan *s, size_t *i, tetris_error *err);

/* A string: up to cap decoded bytes into dst (dst may be NULL with cap 0
 * to measure), *len its whole decoded length. */
int json_scan_string(json_scan *s, char *dst, size_t cap, size_t *len, tetris_error *err);
/* A string, decoded into a malloc'd NUL-terminated copy (it may hold NULs
 * of its own: *len is its length). */
int json_scan_string_dup(json_scan *s, char **out, size_t *len, tetris_error *err);
/* A number: *tok points at its text in the input, *len bytes; *integer
 * when it has neither fraction nor exponent. */
int json_scan_number(json_scan *s, const char **tok, size_t *len, bool *integer, tetris_error *err);
/* true, false or null: *value is 1, 0 or -1. */
int json_scan_literal(json_scan *s, int *value, tetris_error *err);
/* Passes over one value of any kind; *scalars (may be NULL) grows by the
 * strings, numbers and literals in it. */
int json_scan_skip(json_scan *s, size_t *scalars, tetris_error *err);
/* Only blanks remain. */
int json_scan_end(json_scan *s, tetris_error *err);

/* ---- checked whole, then cut into spans ---- */

#define JSON_SCAN_MAX_DEPTH 64

typedef struct json_span {
    const char *p; /* the value's first byte ('{', '"', a digit, ...) */
    size_t len;    /* to its last byte, no whitespace around */
} json_span;

/* Checks that text[0, len) is one JSON value, nested at most
 * JSON_SCAN_MAX_DEPTH deep, with only blanks around it; *value gets its
 * span. Spans point into the caller's text, which must outlive them. */
int json_scan_document(const char *text, size_t len, json_span *value, tetris_error *err);

typedef struct json_iter {
    json_scan s; /* over the container's span, inside it */
    size_t i;    /* members or elements handed out */
    bool object, done;
} json_iter;

/* Starts iterating the members of an object, or the elements of an array;
 * false when v is not one. */
bool json_iter_object(json_iter *it, json_span v);
bool json_iter_array(json_iter *it, json_span v);
/* The next member (key: the key's string literal, quotes included; NULL
 * for arrays) or element: 1; 0 at the end; -1 where the text is not JSON
 * (only in a span json_scan_document did not check). After 0 or -1, 0. */
int json_iter_next(json_iter *it, json_span *key, json_span *value);
/* Elements (or members) left to iterate from a fresh iterator. */
size_t json_iter_count(json_iter it);

bool json_span_is_string(json_span v);
bool json_span_is_array(json_span v);
bool json_span_is_object(json_span v);

/* A non-negative integer literal (digits only: no sign, fraction or
 * exponent) into *out: 1; 0 when v is no such literal; -1 when it is one
 * above UINT64_MAX. */
int json_span_uint(json_span v, uint64_t *out);

/* Decodes a string literal into buf (cap bytes, NUL-terminated): its
 * length, or -1 when v is no string, it does not fit, or it holds a NUL
 * (\u0000: no C string can hold it). */
ssize_t json_span_string(json_span v, char *buf, size_t cap);

#endif
