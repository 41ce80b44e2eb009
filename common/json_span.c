/* json_span.c - JSON checked and cut into spans, without a tree (see
 * json_span.h). The checker is a recursive descent, one function per rule
 * of RFC 8259's grammar, its depth bounded by JSON_SCAN_MAX_DEPTH; the
 * iterators then walk text the checker accepted, skipping values by their
 * brackets and quotes. Nothing is allocated but the copy of a number too
 * long for the stack, while it is converted. */
#include "common/json_span.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

struct scanner {
    const char *p;
    size_t len;
    size_t pos;
    tetris_error *err;
};

static int scan_value(struct scanner *s, int depth);

static int fail_at(struct scanner *s, const char *what)
{
    return tetris_fail(s->err, TETRIS_E_FORMAT, 0, "%s at byte %zu", what, s->pos);
}

static bool at_end(const struct scanner *s)
{
    return s->pos >= s->len;
}

static unsigned char peek(const struct scanner *s)
{
    return at_end(s) ? 0 : (unsigned char)s->p[s->pos];
}

static bool is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void skip_ws(struct scanner *s)
{
    while (!at_end(s) && is_ws(peek(s)))
        s->pos++;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Four hex digits after "\u" at s->pos; -1 if they are not. */
static long read_hex4(const struct scanner *s, size_t at)
{
    if (at + 4 > s->len)
        return -1;
    long v = 0;
    for (size_t i = 0; i < 4; i++) {
        int h = hex_value((unsigned char)s->p[at + i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* One "\u" escape (s->pos at the backslash), a surrogate pair taken
 * whole: a lone surrogate, or U+0000, is refused as jansson does. */
static int scan_unicode_escape(struct scanner *s)
{
    long v = read_hex4(s, s->pos + 2);
    if (v < 0)
        return fail_at(s, "bad \\u escape");
    if (v == 0)
        return fail_at(s, "\\u0000 is not allowed");
    if (v >= 0xDC00 && v <= 0xDFFF)
        return fail_at(s, "lone low surrogate");
    if (v >= 0xD800 && v <= 0xDBFF) {
        long lo = -1;
        if (s->pos + 8 <= s->len && s->p[s->pos + 6] == '\\' && s->p[s->pos + 7] == 'u')
            lo = read_hex4(s, s->pos + 8);
        if (lo < 0xDC00 || lo > 0xDFFF)
            return fail_at(s, "high surrogate without its low one");
        s->pos += 6;
    }
    s->pos += 6;
    return 0;
}

static int scan_string(struct scanner *s)
{
    s->pos++; /* the opening quote */
    for (;;) {
        if (at_end(s))
            return fail_at(s, "unterminated string");
        unsigned char c = peek(s);
        if (c == '"') {
            s->pos++;
            return 0;
        }
        if (c < 0x20)
            return fail_at(s, "control character in a string");
        if (c == '\\') {
            unsigned char e = s->pos + 1 < s->len ? (unsigned char)s->p[s->pos + 1] : 0;
            if (e == 'u') {
                int rc = scan_unicode_escape(s);
                if (rc < 0)
                    return rc;
                continue;
            }
            if (e == 0 || strchr("\"\\/bfnrt", e) == NULL)
                return fail_at(s, "bad escape in a string");
            s->pos += 2;
            continue;
        }
        if (c < 0x80) {
            s->pos++;
            continue;
        }
        size_t n = utf8_sequence((const unsigned char *)s->p + s->pos, s->len - s->pos);
        if (n == 0)
            return fail_at(s, "invalid UTF-8 in a string");
        s->pos += n;
    }
}

static bool digit(const struct scanner *s)
{
    unsigned char c = peek(s);
    return !at_end(s) && c >= '0' && c <= '9';
}

/* The number from start to s->pos must fit what jansson makes of it: an
 * integer a json_int_t (long long), a real a finite double. */
static int check_number_range(struct scanner *s, size_t start, bool integer)
{
    size_t n = s->pos - start;
    char small[64];
    char *text = n < sizeof(small) ? small : malloc(n + 1);
    if (text == NULL)
        return tetris_fail(s->err, TETRIS_E_NOMEM, ENOMEM, "number of %zu digits", n);
    memcpy(text, s->p + start, n);
    text[n] = '\0';
    errno = 0;
    bool over;
    if (integer) {
        (void)strtoll(text, NULL, 10);
        over = errno == ERANGE;
    } else {
        double d = strtod(text, NULL);
        over = errno == ERANGE && (d == HUGE_VAL || d == -HUGE_VAL);
    }
    if (text != small)
        free(text);
    if (over) {
        s->pos = start;
        return fail_at(s, integer ? "integer too big" : "real number overflow");
    }
    return 0;
}

static int scan_number(struct scanner *s)
{
    size_t start = s->pos;
    bool integer = true;
    if (peek(s) == '-')
        s->pos++;
    if (!digit(s))
        return fail_at(s, "bad number");
    if (peek(s) == '0')
        s->pos++;
    else
        while (digit(s))
            s->pos++;
    if (!at_end(s) && peek(s) == '.') {
        integer = false;
        s->pos++;
        if (!digit(s))
            return fail_at(s, "bad number: no digit after the point");
        while (digit(s))
            s->pos++;
    }
    if (!at_end(s) && (peek(s) == 'e' || peek(s) == 'E')) {
        integer = false;
        s->pos++;
        if (!at_end(s) && (peek(s) == '+' || peek(s) == '-'))
            s->pos++;
        if (!digit(s))
            return fail_at(s, "bad number: no digit in the exponent");
        while (digit(s))
            s->pos++;
    }
    return check_number_range(s, start, integer);
}

static int scan_literal(struct scanner *s, const char *word)
{
    size_t n = strlen(word);
    if (s->len - s->pos < n || memcmp(s->p + s->pos, word, n) != 0)
        return fail_at(s, "unexpected character");
    s->pos += n;
    return 0;
}

/* '{' or '[' at s->pos: members ("key": value) or elements, separated by
 * commas, up to the closing bracket. */
static int scan_container(struct scanner *s, int depth, bool object)
{
    if (depth >= JSON_SCAN_MAX_DEPTH)
        return tetris_fail(s->err, TETRIS_E_FORMAT, 0, "nested deeper than %d levels at byte %zu",
                           JSON_SCAN_MAX_DEPTH, s->pos);
    char close = object ? '}' : ']';
    s->pos++;
    skip_ws(s);
    if (!at_end(s) && peek(s) == (unsigned char)close) {
        s->pos++;
        return 0;
    }
    for (;;) {
        int rc;
        if (object) {
            if (peek(s) != '"' || at_end(s))
                return fail_at(s, "expected a string key");
            if ((rc = scan_string(s)) < 0)
                return rc;
            skip_ws(s);
            if (at_end(s) || peek(s) != ':')
                return fail_at(s, "expected ':'");
            s->pos++;
            skip_ws(s);
        }
        if ((rc = scan_value(s, depth + 1)) < 0)
            return rc;
        skip_ws(s);
        if (at_end(s))
            return fail_at(s, object ? "unterminated object" : "unterminated array");
        if (peek(s) == (unsigned char)close) {
            s->pos++;
            return 0;
        }
        if (peek(s) != ',')
            return fail_at(s, object ? "expected ',' or '}'" : "expected ',' or ']'");
        s->pos++;
        skip_ws(s);
    }
}

static int scan_value(struct scanner *s, int depth)
{
    if (at_end(s))
        return fail_at(s, "unexpected end of text");
    switch (peek(s)) {
    case '{': return scan_container(s, depth, true);
    case '[': return scan_container(s, depth, false);
    case '"': return scan_string(s);
    case 't': return scan_literal(s, "true");
    case 'f': return scan_literal(s, "false");
    case 'n': return scan_literal(s, "null");
    default:
        if (peek(s) == '-' || digit(s))
            return scan_number(s);
        return fail_at(s, "unexpected character");
    }
}

int json_scan_document(const char *text, size_t len, json_span *value, tetris_error *err)
{
    struct scanner s = {.p = text, .len = len, .err = err};
    skip_ws(&s);
    size_t start = s.pos;
    int rc = scan_value(&s, 0);
    if (rc < 0)
        return rc;
    *value = (json_span){text + start, s.pos - start};
    skip_ws(&s);
    if (!at_end(&s))
        return fail_at(&s, "text after the value");
    return 0;
}

/* ---- iterating accepted text ---- */

/* The end of the value starting at pos (accepted text: strings are
 * terminated and brackets balanced). */
static size_t skip_value(const char *p, size_t len, size_t pos)
{
    int depth = 0;
    bool in_string = false;
    for (; pos < len; pos++) {
        char c = p[pos];
        if (in_string) {
            if (c == '\\')
                pos++;
            else if (c == '"') {
                in_string = false;
                if (depth == 0)
                    return pos + 1;
            }
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0)
                return pos; /* the end of a scalar before its container's close */
            if (--depth == 0)
                return pos + 1;
        } else if (depth == 0 && (c == ',' || is_ws((unsigned char)c))) {
            return pos;
        }
    }
    return pos;
}

static void iter_ws(json_iter *it)
{
    while (it->pos < it->len && is_ws((unsigned char)it->p[it->pos]))
        it->pos++;
}

static bool iter_start(json_iter *it, json_span v, char open, bool object)
{
    if (v.len < 2 || v.p[0] != open)
        return false;
    *it = (json_iter){.p = v.p, .len = v.len - 1, .pos = 1, .object = object};
    return true;
}

bool json_iter_object(json_iter *it, json_span v)
{
    return iter_start(it, v, '{', true);
}

bool json_iter_array(json_iter *it, json_span v)
{
    return iter_start(it, v, '[', false);
}

int json_iter_next(json_iter *it, json_span *key, json_span *value)
{
    iter_ws(it);
    if (it->pos < it->len && it->p[it->pos] == ',') {
        it->pos++;
        iter_ws(it);
    }
    if (it->pos >= it->len)
        return 0;
    if (it->object) {
        size_t k = it->pos;
        it->pos = skip_value(it->p, it->len, it->pos);
        if (key != NULL)
            *key = (json_span){it->p + k, it->pos - k};
        iter_ws(it);
        it->pos++; /* ':' */
        iter_ws(it);
    } else if (key != NULL) {
        *key = (json_span){NULL, 0};
    }
    size_t v = it->pos;
    it->pos = skip_value(it->p, it->len, it->pos);
    *value = (json_span){it->p + v, it->pos - v};
    return 1;
}

size_t json_iter_count(json_iter it)
{
    size_t n = 0;
    json_span v;
    while (json_iter_next(&it, NULL, &v) > 0)
        n++;
    return n;
}

bool json_span_is_string(json_span v)
{
    return v.len >= 2 && v.p[0] == '"';
}

bool json_span_is_array(json_span v)
{
    return v.len >= 2 && v.p[0] == '[';
}

bool json_span_is_object(json_span v)
{
    return v.len >= 2 && v.p[0] == '{';
}

/* Appends code point cp as UTF-8; false if it does not fit (NUL kept). */
static bool put_utf8(char *buf, size_t cap, size_t *n, uint32_t cp)
{
    char tmp[4];
    size_t k;
    if (cp < 0x80) {
        tmp[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        tmp[0] = (char)(0xC0 | cp >> 6);
        tmp[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        tmp[0] = (char)(0xE0 | cp >> 12);
        tmp[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        tmp[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        tmp[0] = (char)(0xF0 | cp >> 18);
        tmp[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        tmp[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        tmp[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    if (*n + k >= cap)
        return false;
    memcpy(buf + *n, tmp, k);
    *n += k;
    return true;
}

static uint32_t hex4(const char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = v * 16 + (uint32_t)hex_value((unsigned char)p[i]);
    return v;
}

ssize_t json_span_string(json_span v, char *buf, size_t cap)
{
    if (!json_span_is_string(v) || cap == 0)
        return -1;
    size_t n = 0;
    for (size_t i = 1; i + 1 < v.len; i++) {
        char c = v.p[i];
        if (c != '\\') {
            if (n + 1 >= cap)
                return -1;
            buf[n++] = c;
            continue;
        }
        char e = v.p[++i];
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *k = strchr(from, e);
        uint32_t cp;
        if (e == 'u') {
            cp = hex4(v.p + i + 1);
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* its low half follows (checked) */
                cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(v.p + i + 3) - 0xDC00);
                i += 6;
            }
        } else {
            cp = (uint32_t)(unsigned char)to[k - from];
        }
        if (!put_utf8(buf, cap, &n, cp))
            return -1;
    }
    buf[n] = '\0';
    return (ssize_t)n;
}
