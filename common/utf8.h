/* utf8.h - well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF), the one check every writer of peer-supplied
 * text (Prometheus label values, JSON strings) and the JSON reader
 * (common/json_scan.h) share. Tested in tests/common/test_common.c. */
#ifndef TETRIS_UTF8_H
#define TETRIS_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* U+FFFD, what writers put for a byte that starts no sequence. */
#define UTF8_REPLACEMENT "\xef\xbf\xbd"

/* The length (1-4) of the well-formed UTF-8 sequence at s, of which at
 * most left bytes may be read; 0 when s does not start one (or left is
 * 0): no overlong forms, no surrogates, nothing above U+10FFFF. */
size_t utf8_sequence(const unsigned char *s, size_t left);

/* Whether the len bytes at s are well-formed UTF-8. */
bool utf8_valid(const char *s, size_t len);

/* Copies src into dst (size > 0 bytes, NUL included) as well-formed
 * UTF-8: bytes that start no well-formed sequence become U+FFFD, and a
 * text too long is cut before the code point that does not fit, never
 * inside one. */
void utf8_copy_valid(char *dst, size_t size, const char *src);

#endif
