/* error.c - filling and composing tetris_error objects. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int tetris_fail(tetris_error *err, int code, int errnum, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        err->code = code;
        err->errnum = errnum;
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        if (errnum != 0 && n >= 0 && (size_t)n < sizeof err->msg)
            snprintf(err->msg + n, sizeof err->msg - (size_t)n, ": %s", strerror(errnum));
    }
    return -code;
}

int tetris_wrap(tetris_error *err, const char *fmt, ...)
{
    if (err == NULL)
        return -TETRIS_E_INVAL;
    char prefix[256];
    char old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* A long chain of context may not fit: cut the tail of the old message. */
    snprintf(err->msg, sizeof err->msg, "%s: ", prefix);
    size_t used = strlen(err->msg);
    size_t keep = strnlen(old, sizeof err->msg - used - 1);
    memcpy(err->msg + used, old, keep);
    err->msg[used + keep] = '\0';
    return -err->code;
}

void tetris_error_clear(tetris_error *err)
{
    if (err != NULL) {
        err->code = TETRIS_OK;
        err->errnum = 0;
        err->msg[0] = '\0';
    }
}

const char *tetris_code_name(int code)
{
    static const char *const names[] = {
        [TETRIS_OK] = "ok",
        [TETRIS_E_INVAL] = "invalid",
        [TETRIS_E_IO] = "io",
        [TETRIS_E_FORMAT] = "format",
        [TETRIS_E_NOMEM] = "nomem",
        [TETRIS_E_FULL] = "full",
        [TETRIS_E_NOTFOUND] = "notfound",
        [TETRIS_E_CORRUPT] = "corrupt",
        [TETRIS_E_TIMEOUT] = "timeout",
        [TETRIS_E_UNAVAILABLE] = "unavailable",
        [TETRIS_E_PROTOCOL] = "protocol",
        [TETRIS_E_HTTP] = "http",
        [TETRIS_E_CONFLICT] = "conflict",
        [TETRIS_E_RUNTIME] = "runtime",
        [TETRIS_E_DENIED] = "denied",
    };
    if (code < 0)
        code = -code;
    if ((size_t)code >= sizeof names / sizeof names[0] || names[code] == NULL)
        return "unknown";
    return names[code];
}
