/* textbuf.c - growable text buffer (see textbuf.h). */
#include "common/textbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

#define TEXTBUF_FIRST_CAP 4096

static bool fail(textbuf *t)
{
    t->failed = true;
    return false;
}

bool textbuf_reserve(textbuf *t, size_t n)
{
    if (t->failed)
        return false;
    if (n >= SIZE_MAX - t->len)
        return fail(t);
    size_t need = t->len + n + 1;
    if (t->max != 0 && need > t->max)
        return fail(t);
    if (need <= t->cap)
        return true;
    size_t cap = t->cap ? t->cap : TEXTBUF_FIRST_CAP;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *data = realloc(t->data, cap);
    if (data == NULL)
        return fail(t);
    t->data = data;
    t->cap = cap;
    t->data[t->len] = '\0';
    return true;
}

bool textbuf_append(textbuf *t, const void *bytes, size_t n)
{
    if (!textbuf_reserve(t, n))
        return false;
    memcpy(t->data + t->len, bytes, n);
    t->len += n;
    t->data[t->len] = '\0';
    return true;
}

bool textbuf_puts(textbuf *t, const char *s)
{
    return textbuf_append(t, s, strlen(s));
}

bool textbuf_printf(textbuf *t, const char *fmt, ...)
{
    /* Try in the room there is; on truncation grow to the size vsnprintf
     * reported and print again. */
    size_t room = t->failed || t->data == NULL ? 0 : t->cap - t->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(room ? t->data + t->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        return fail(t);
    if ((size_t)n < room) {
        t->len += (size_t)n;
        return true;
    }
    if (!textbuf_reserve(t, (size_t)n))
        return false;
    va_start(ap, fmt);
    vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
    return true;
}

char *textbuf_take(textbuf *t, size_t *len)
{
    textbuf_reserve(t, 0);
    char *text = t->failed ? NULL : t->data;
    if (text != NULL && len != NULL)
        *len = t->len;
    if (text == NULL)
        free(t->data);
    *t = (textbuf){.max = t->max};
    return text;
}

void textbuf_free(textbuf *t)
{
    free(t->data);
    *t = (textbuf){.max = t->max};
}

bool textbuf_json_string(textbuf *t, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t left = strlen(s);
    textbuf_append(t, "\"", 1);
    while (left > 0) {
        size_t n = utf8_sequence(u, left);
        if (n == 0)
            textbuf_puts(t, UTF8_REPLACEMENT);
        else if (*u == '"' || *u == '\\')
            textbuf_printf(t, "\\%c", *u);
        else if (*u == '\n')
            textbuf_puts(t, "\\n");
        else if (*u == '\t')
            textbuf_puts(t, "\\t");
        else if (*u < 0x20)
            textbuf_printf(t, "\\u%04x", *u);
        else
            textbuf_append(t, u, n);
        n = n != 0 ? n : 1;
        u += n;
        left -= n;
    }
    return textbuf_append(t, "\"", 1);
}

int text_next_line(const char *text, size_t len, size_t *at, int *lineno, char *line,
                   size_t line_max, const char *name, tetris_error *err)
{
    while (*at < len) {
        const char *nl = memchr(text + *at, '\n', len - *at);
        size_t end = nl != NULL ? (size_t)(nl - text) : len;
        size_t line_len = end - *at;
        (*lineno)++;
        if (line_len > line_max)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s:%d: line longer than %zu bytes", name,
                               *lineno, line_max);
        memcpy(line, text + *at, line_len);
        line[line_len] = '\0';
        *at = end + 1;
        if (strlen(line) != line_len)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s:%d: NUL byte", name, *lineno);
        line[strcspn(line, "\r#")] = '\0';
        if (line[strspn(line, " \t")] != '\0')
            return 1;
    }
    return 0;
}

int text_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}
