/* error.h - the error object every fallible call takes as its last argument.
 *
 * Pattern (from crun): a function that can fail returns 0 on success or a
 * negative tetris_code on failure and fills *err with the code, the errno it
 * saw (0 if none) and a human-readable message. The caller that handles the
 * error logs it once; everyone in between just propagates it. */
#ifndef TETRIS_ERROR_H
#define TETRIS_ERROR_H

#include <stddef.h>

enum tetris_code {
    TETRIS_OK = 0,
    TETRIS_E_INVAL = 1,       /* bad argument or usage */
    TETRIS_E_IO = 2,          /* a syscall failed */
    TETRIS_E_FORMAT = 3,      /* malformed model file, manifest, request */
    TETRIS_E_NOMEM = 4,
    TETRIS_E_FULL = 5,        /* the store's capacity would be exceeded */
    TETRIS_E_NOTFOUND = 6,
    TETRIS_E_CORRUPT = 7,     /* stored bytes do not match their digest/crc */
    TETRIS_E_TIMEOUT = 8,
    TETRIS_E_UNAVAILABLE = 9, /* a peer (daemon, apiserver) is not there */
    TETRIS_E_PROTOCOL = 10,   /* a peer answered something we cannot use */
    TETRIS_E_HTTP = 11,       /* an HTTP peer answered with an error status */
    TETRIS_E_CONFLICT = 12,   /* a resource changed under us (410, 409) */
    TETRIS_E_RUNTIME = 13,    /* the inference runtime failed */
    TETRIS_E_DENIED = 14,     /* permission or policy refusal */
};

typedef struct tetris_error {
    int code;      /* enum tetris_code */
    int errnum;    /* errno at the failure, 0 if not a syscall error */
    char msg[512]; /* human-readable, includes strerror(errnum) when set */
} tetris_error;

/* Fills err (if not NULL) and returns -code, so `return tetris_fail(...)`. */
int tetris_fail(tetris_error *err, int code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prefixes err->msg with more context, keeps code and errnum; returns -code. */
int tetris_wrap(tetris_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void tetris_error_clear(tetris_error *err);

/* Short stable name of a code, e.g. "format", "full"; used in logs and JSON. */
const char *tetris_code_name(int code);

#endif
