/* textbuf.h - a growable, NUL-terminated text buffer for the replies the
 * programs build piece by piece (/metrics, /inventory, URLs, HTTP bodies).
 *
 * Usage:
 *   textbuf t = {0};                      // or {.max = LIMIT}
 *   textbuf_printf(&t, "%s %d\n", k, v);
 *   textbuf_append(&t, bytes, n);
 *   size_t len;
 *   char *text = textbuf_take(&t, &len);  // NULL if any append failed
 *
 * Failure is sticky: once an append runs out of memory or would pass max,
 * t->failed is set, the appends after it do nothing, and textbuf_take()
 * frees the text and returns NULL. So a writer appends everything and
 * checks once at the end. The fields may be read (data, len); a reader
 * that consumes the text from the front may also lower len and write the
 * NUL itself. */
#ifndef TETRIS_TEXTBUF_H
#define TETRIS_TEXTBUF_H

#include "common/error.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct textbuf {
    char *data;  /* NULL until the first append; then NUL-terminated */
    size_t len;  /* bytes of text, without the NUL */
    size_t cap;  /* bytes allocated */
    size_t max;  /* 0: no limit; else len + 1 never passes it */
    bool failed; /* out of memory or over max */
} textbuf;

/* Makes room for n more bytes of text (and the NUL) at once, for a writer
 * that knows its size; false (and failed) when it cannot. */
bool textbuf_reserve(textbuf *t, size_t n);
/* Appends n bytes; false (and failed) when they do not fit. */
bool textbuf_append(textbuf *t, const void *bytes, size_t n);
bool textbuf_puts(textbuf *t, const char *s);
bool textbuf_printf(textbuf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal, quotes included: '"', '\\' and
 * control characters escaped, and each byte that starts no well-formed
 * UTF-8 sequence written as U+FFFD (a message cut inside a character
 * stays valid JSON). */
bool textbuf_json_string(textbuf *t, const char *s);

/* Hands the text over (malloc'd, NUL-terminated, "" if nothing was
 * appended) and resets t; NULL when an append failed or out of memory. */
char *textbuf_take(textbuf *t, size_t *len);
/* Frees the text and resets t (keeps max). */
void textbuf_free(textbuf *t);

/* The value of one hexadecimal digit (either case), -1 for any other
 * character. */
int text_hex_value(char c);

/* The strict line files the node daemon and tetris-csi read (the pin file,
 * the tenant map): the next line of text[0, len) from *at that says
 * something, copied into line (line_max bytes at most, then the NUL), with
 * a '#' comment and a '\r' cut off; blank lines are skipped. *lineno counts
 * every line read. Returns 1 with a line, 0 at the end, or TETRIS_E_FORMAT
 * "NAME:N: ..." for a line longer than line_max or holding a NUL byte. */
int text_next_line(const char *text, size_t len, size_t *at, int *lineno, char *line,
                   size_t line_max, const char *name, tetris_error *err);

#endif
