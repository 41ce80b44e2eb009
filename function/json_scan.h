/* json_scan.h - a strict JSON (RFC 8259) reader that walks a text in place
 * without building a tree, for the inference requests whose tensors hold
 * millions of numbers: a tree (jansson's) costs some 40 bytes per number,
 * this reader nothing beyond what its caller decodes the numbers into.
 *
 * The caller follows the grammar it expects:
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
 * What it accepts is exactly JSON: strings of well-formed UTF-8 without raw
 * control characters, escapes including surrogate pairs (a lone surrogate is
 * refused), numbers by JSON's grammar (no leading zeros, no '+', no NaN or
 * hex), the three literals. Objects and arrays nest at most max_depth deep,
 * so neither the reader nor a caller recursing along with it goes deeper.
 * Every error is TETRIS_E_FORMAT and names the byte offset. No function
 * reads outside [text, text + len), and none allocates except
 * json_scan_string_dup. */
#ifndef TETRIS_JSON_SCAN_H
#define TETRIS_JSON_SCAN_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

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

#endif
