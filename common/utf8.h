/* utf8.h - well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF), the one check every writer of peer-supplied
 * text (Prometheus labels, JSON strings) and the JSON reader
 * (common/json_scan.h) share. Tested in tests/unit/test_common.c. */
#ifndef TETRIS_UTF8_H
#define TETRIS_UTF8_H

#include <stddef.h>

/* The length (1-4) of the well-formed sequence at s, of which at most left
 * bytes may be read; 0 when s does not start one (or left is 0). */
size_t utf8_seq(const unsigned char *s, size_t left);

/* U+FFFD, what writers put for a byte that starts no sequence. */
#define UTF8_REPLACEMENT "\xef\xbf\xbd"

#endif
