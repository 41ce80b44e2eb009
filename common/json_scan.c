/* json_scan.c - the in-place strict JSON reader (see json_scan.h). One
 * engine: the pull functions check as they go; the span functions are the
 * same functions run over a whole text (json_scan_document: skip one value,
 * then the end) or over a span of it (an iterator: the container's members
 * one json_scan_skip at a time; json_span_string: json_scan_string). */
#include "common/json_scan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

void json_scan_init(json_scan *s, const char *text, size_t len, int max_depth)
{
    s->text = s->p = text;
    s->end = text + len;
    s->depth = 0;
    s->max_depth = max_depth;
}

size_t json_scan_offset(const json_scan *s)
{
    return (size_t)(s->p - s->text);
}

static int syntax(json_scan *s, tetris_error *err, const char *what)
{
    if (s->p >= s->end)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "JSON: %s at the end of the text", what);
    return tetris_fail(err, TETRIS_E_FORMAT, 0, "JSON: %s at offset %zu", what,
                       json_scan_offset(s));
}

static void skip_blanks(json_scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

enum json_kind json_scan_peek(json_scan *s)
{
    skip_blanks(s);
    if (s->p >= s->end)
        return JSON_KIND_NONE;
    switch (*s->p) {
    case '{': return JSON_KIND_OBJECT;
    case '[': return JSON_KIND_ARRAY;
    case '"': return JSON_KIND_STRING;
    case 't':
    case 'f':
    case 'n': return JSON_KIND_LITERAL;
    default:
        return *s->p == '-' || (*s->p >= '0' && *s->p <= '9') ? JSON_KIND_NUMBER : JSON_KIND_NONE;
    }
}

static int open_container(json_scan *s, char c, tetris_error *err)
{
    skip_blanks(s);
    if (s->p >= s->end || *s->p != c)
        return syntax(s, err, c == '{' ? "expected an object" : "expected an array");
    if (s->depth >= s->max_depth)
        return syntax(s, err, "nesting deeper than the limit");
    s->p++;
    s->depth++;
    return 0;
}

int json_scan_object_begin(json_scan *s, tetris_error *err)
{
    return open_container(s, '{', err);
}

int json_scan_array_begin(json_scan *s, tetris_error *err)
{
    return open_container(s, '[', err);
}

/* After an element (i > 0): ',' (another follows) or the closing byte. */
static int next_in(json_scan *s, size_t *i, char close, tetris_error *err)
{
    skip_blanks(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return 0;
    }
    if (*i > 0) {
        if (s->p >= s->end || *s->p != ',')
            return syntax(s, err, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
        s->p++;
    }
    (*i)++;
    return 1;
}

/* A member's name and the ':' after it, the name decoded as
 * json_scan_object_next says; *literal (may be NULL) gets the name's
 * string literal, quotes included. */
static int member_name(json_scan *s, char *key, size_t cap, size_t *key_len, json_span *literal,
                       tetris_error *err)
{
    if (json_scan_peek(s) != JSON_KIND_STRING)
        return syntax(s, err, "expected a member name");
    const char *start = s->p;
    int r = json_scan_string(s, key, cap, key_len, err);
    if (r < 0)
        return r;
    if (cap > 0)
        key[*key_len < cap ? *key_len : cap - 1] = '\0';
    if (literal != NULL)
        *literal = (json_span){start, (size_t)(s->p - start)};
    skip_blanks(s);
    if (s->p >= s->end || *s->p != ':')
        return syntax(s, err, "expected ':'");
    s->p++;
    return 0;
}

int json_scan_object_next(json_scan *s, size_t *i, char *key, size_t cap, size_t *key_len,
                          tetris_error *err)
{
    int r = next_in(s, i, '}', err);
    if (r <= 0)
        return r;
    if ((r = member_name(s, key, cap, key_len, NULL, err)) < 0)
        return r;
    return 1;
}

int json_scan_array_next(json_scan *s, size_t *i, tetris_error *err)
{
    return next_in(s, i, ']', err);
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* Writes the UTF-8 form of cp into out, returns its length. */
static size_t utf8_encode(unsigned cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* The code point of the escape at s->p ('\\' already consumed), surrogate
 * pairs joined; s->p moves past it. */
static int escape(json_scan *s, unsigned *cp, tetris_error *err)
{
    static const char simple[] = "\"\\/bfnrt", meaning[] = "\"\\/\b\f\n\r\t";
    if (s->p >= s->end)
        return syntax(s, err, "unfinished escape");
    const char *k = memchr(simple, *s->p, sizeof(simple) - 1);
    if (k != NULL) {
        *cp = (unsigned char)meaning[k - simple];
        s->p++;
        return 0;
    }
    if (*s->p != 'u')
        return syntax(s, err, "unknown escape");
    if (s->end - s->p < 5 || hex4(s->p + 1, cp) < 0)
        return syntax(s, err, "\\u needs four hex digits");
    s->p += 5;
    if (*cp >= 0xdc00 && *cp <= 0xdfff)
        return syntax(s, err, "lone low surrogate");
    if (*cp >= 0xd800 && *cp <= 0xdbff) {
        unsigned lo;
        if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u' || hex4(s->p + 2, &lo) < 0 ||
            lo < 0xdc00 || lo > 0xdfff)
            return syntax(s, err, "high surrogate without its low half");
        s->p += 6;
        *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    return 0;
}

/* Appends n bytes to dst (cap) at *len, counting what does not fit. */
static void put(char *dst, size_t cap, size_t *len, const char *bytes, size_t n)
{
    if (*len < cap)
        memcpy(dst + *len, bytes, cap - *len < n ? cap - *len : n);
    *len += n;
}

int json_scan_string(json_scan *s, char *dst, size_t cap, size_t *len, tetris_error *err)
{
    skip_blanks(s);
    *len = 0;
    if (s->p >= s->end || *s->p != '"')
        return syntax(s, err, "expected a string");
    s->p++;
    for (;;) {
        const char *run = s->p;
        while (s->p < s->end && *s->p != '"' && *s->p != '\\' && (unsigned char)*s->p >= 0x20 &&
               (unsigned char)*s->p < 0x80)
            s->p++;
        put(dst, cap, len, run, (size_t)(s->p - run));
        if (s->p >= s->end)
            return syntax(s, err, "unterminated string");
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            return 0;
        }
        if (c < 0x20)
            return syntax(s, err, "control character in a string");
        if (c == '\\') {
            unsigned cp;
            char utf8[4];
            s->p++;
            int r = escape(s, &cp, err);
            if (r < 0)
                return r;
            put(dst, cap, len, utf8, utf8_encode(cp, utf8));
            continue;
        }
        size_t n = utf8_sequence((const unsigned char *)s->p, (size_t)(s->end - s->p));
        if (n == 0)
            return syntax(s, err, "string is not UTF-8");
        put(dst, cap, len, s->p, n);
        s->p += n;
    }
}

int json_scan_string_dup(json_scan *s, char **out, size_t *len, tetris_error *err)
{
    json_scan probe = *s;
    int r = json_scan_string(&probe, NULL, 0, len, err);
    if (r < 0) {
        *s = probe;
        return r;
    }
    char *copy = malloc(*len + 1);
    if (copy == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    json_scan_string(s, copy, *len, len, err);
    copy[*len] = '\0';
    *out = copy;
    return 0;
}

static bool digit(const json_scan *s)
{
    return s->p < s->end && *s->p >= '0' && *s->p <= '9';
}

static void digits(json_scan *s)
{
    while (digit(s))
        s->p++;
}

int json_scan_number(json_scan *s, const char **tok, size_t *len, bool *integer, tetris_error *err)
{
    skip_blanks(s);
    const char *start = s->p;
    *integer = true;
    if (s->p < s->end && *s->p == '-')
        s->p++;
    if (!digit(s))
        return syntax(s, err, "expected a number");
    if (*s->p++ != '0')
        digits(s);
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        *integer = false;
        if (!digit(s))
            return syntax(s, err, "expected digits after '.'");
        digits(s);
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        *integer = false;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (!digit(s))
            return syntax(s, err, "expected digits in the exponent");
        digits(s);
    }
    *tok = start;
    *len = (size_t)(s->p - start);
    return 0;
}

int json_scan_literal(json_scan *s, int *value, tetris_error *err)
{
    static const struct {
        const char *text;
        int value;
    } literals[] = {{"true", 1}, {"false", 0}, {"null", -1}};
    skip_blanks(s);
    for (size_t i = 0; i < sizeof(literals) / sizeof(literals[0]); i++) {
        size_t n = strlen(literals[i].text);
        if ((size_t)(s->end - s->p) >= n && memcmp(s->p, literals[i].text, n) == 0) {
            s->p += n;
            *value = literals[i].value;
            return 0;
        }
    }
    return syntax(s, err, "expected a value");
}

int json_scan_skip(json_scan *s, size_t *scalars, tetris_error *err)
{
    size_t i = 0, len, key_len;
    const char *tok;
    bool integer;
    int r, v;

    switch (json_scan_peek(s)) {
    case JSON_KIND_OBJECT:
        if ((r = json_scan_object_begin(s, err)) < 0)
            return r;
        while ((r = json_scan_object_next(s, &i, NULL, 0, &key_len, err)) > 0)
            if ((r = json_scan_skip(s, scalars, err)) < 0)
                return r;
        return r;
    case JSON_KIND_ARRAY:
        if ((r = json_scan_array_begin(s, err)) < 0)
            return r;
        while ((r = json_scan_array_next(s, &i, err)) > 0)
            if ((r = json_scan_skip(s, scalars, err)) < 0)
                return r;
        return r;
    case JSON_KIND_STRING: r = json_scan_string(s, NULL, 0, &len, err); break;
    case JSON_KIND_NUMBER: r = json_scan_number(s, &tok, &len, &integer, err); break;
    case JSON_KIND_LITERAL: r = json_scan_literal(s, &v, err); break;
    default: return syntax(s, err, "expected a value");
    }
    if (r == 0 && scalars != NULL)
        (*scalars)++;
    return r;
}

int json_scan_end(json_scan *s, tetris_error *err)
{
    skip_blanks(s);
    return s->p == s->end ? 0 : syntax(s, err, "unexpected text after the value");
}

/* ---- spans ---- */

int json_scan_document(const char *text, size_t len, json_span *value, tetris_error *err)
{
    json_scan s;
    json_scan_init(&s, text, len, JSON_SCAN_MAX_DEPTH);
    skip_blanks(&s);
    const char *start = s.p;
    int r = json_scan_skip(&s, NULL, err);
    if (r < 0)
        return r;
    *value = (json_span){start, (size_t)(s.p - start)};
    return json_scan_end(&s, err);
}

/* The iterator is a scanner over the container's span, past its opening
 * bracket: the depth it may still go is what the span's own nesting
 * needs, never more than json_scan_document allowed. */
static bool iter_start(json_iter *it, json_span v, bool object)
{
    if (object ? !json_span_is_object(v) : !json_span_is_array(v))
        return false;
    *it = (json_iter){.object = object};
    json_scan_init(&it->s, v.p, v.len, JSON_SCAN_MAX_DEPTH);
    it->s.p++;
    it->s.depth = 1;
    return true;
}

bool json_iter_object(json_iter *it, json_span v)
{
    return iter_start(it, v, true);
}

bool json_iter_array(json_iter *it, json_span v)
{
    return iter_start(it, v, false);
}

int json_iter_next(json_iter *it, json_span *key, json_span *value)
{
    tetris_error err;
    size_t key_len;
    json_span name = {NULL, 0};
    if (it->done)
        return 0;
    int r = next_in(&it->s, &it->i, it->object ? '}' : ']', &err);
    if (r > 0 && it->object)
        r = member_name(&it->s, NULL, 0, &key_len, &name, &err) < 0 ? -1 : 1;
    if (r > 0) {
        skip_blanks(&it->s);
        const char *start = it->s.p;
        r = json_scan_skip(&it->s, NULL, &err) < 0 ? -1 : 1;
        *value = (json_span){start, (size_t)(it->s.p - start)};
        if (key != NULL)
            *key = name;
    }
    if (r <= 0) {
        it->done = true;
        return r < 0 ? -1 : 0;
    }
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

int json_span_uint(json_span v, uint64_t *out)
{
    if (v.len == 0 || (v.len > 1 && v.p[0] == '0'))
        return 0;
    uint64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        unsigned d = (unsigned char)v.p[i] - '0';
        if (d > 9)
            return 0;
        if (n > (UINT64_MAX - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    *out = n;
    return 1;
}

ssize_t json_span_string(json_span v, char *buf, size_t cap)
{
    if (!json_span_is_string(v) || cap == 0)
        return -1;
    json_scan s;
    tetris_error err;
    size_t len;
    json_scan_init(&s, v.p, v.len, 0);
    if (json_scan_string(&s, buf, cap - 1, &len, &err) < 0 || json_scan_end(&s, &err) < 0 ||
        len >= cap || memchr(buf, '\0', len) != NULL)
        return -1;
    buf[len] = '\0';
    return (ssize_t)len;
}
