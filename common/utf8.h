/* utf8.h - well-formed UTF-8 (RFC 3629), for the text that crosses into
 * formats that must hold it: Prometheus label values, JSON strings. */
#ifndef TETRIS_UTF8_H
#define TETRIS_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* The length (1-4) of the well-formed UTF-8 sequence at s, of which at
 * most left bytes may be read (left >= 1); 0 when s does not start one:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
size_t utf8_sequence(const unsigned char *s, size_t left);

/* Whether the len bytes at s are well-formed UTF-8. */
bool utf8_valid(const char *s, size_t len);

/* Copies src into dst (size > 0 bytes, NUL included) as well-formed
 * UTF-8: bytes that start no well-formed sequence become U+FFFD, and a
 * text too long is cut before the code point that does not fit, never
 * inside one. */
void utf8_copy_valid(char *dst, size_t size, const char *src);

#endif
