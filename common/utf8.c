/* utf8.c - UTF-8 well-formedness (see utf8.h). */
#include "common/utf8.h"

#include <string.h>

size_t utf8_sequence(const unsigned char *s, size_t left)
{
    if (left == 0)
        return 0;
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0; /* no overlong forms */
        else if (c == 0xed)
            hi = 0x9f; /* no surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90; /* no overlong forms */
        else if (c == 0xf4)
            hi = 0x8f; /* nothing above U+10FFFF */
    } else {
        return 0;
    }
    if (left < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

bool utf8_valid(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_sequence(u + i, len - i);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}

void utf8_copy_valid(char *dst, size_t size, const char *src)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t out = 0, left = strlen(src);
    while (left > 0) {
        size_t n = utf8_sequence(s, left);
        const char *piece = n != 0 ? (const char *)s : UTF8_REPLACEMENT;
        size_t len = n != 0 ? n : sizeof UTF8_REPLACEMENT - 1;
        if (out + len >= size)
            break;
        memcpy(dst + out, piece, len);
        out += len;
        left -= n != 0 ? n : 1;
        s += n != 0 ? n : 1;
    }
    dst[out] = '\0';
}
