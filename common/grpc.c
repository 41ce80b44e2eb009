/* grpc.c - gRPC's message framing, status names and codes, and the
 * percent-encoding of grpc-message (see grpc.h); the server that uses
 * them is grpc_server.c. */
#include "common/grpc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/textbuf.h"

static const char *const status_names[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *grpc_status_name(int status)
{
    if (status < 0 || (size_t)status >= sizeof(status_names) / sizeof(status_names[0]))
        return "UNKNOWN";
    return status_names[status];
}

void grpc_frame_prefix(uint8_t prefix[GRPC_PREFIX_BYTES], uint32_t len)
{
    prefix[0] = 0;
    prefix[1] = (uint8_t)(len >> 24);
    prefix[2] = (uint8_t)(len >> 16);
    prefix[3] = (uint8_t)(len >> 8);
    prefix[4] = (uint8_t)len;
}

int grpc_unframe(const uint8_t *body, size_t body_len, size_t max_len, const uint8_t **msg,
                 size_t *len, tetris_error *err)
{
    if (body_len < GRPC_PREFIX_BYTES) {
        tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                    body_len == 0 ? "the request has no message"
                                  : "the request's message prefix is cut after %zu bytes",
                    body_len);
        return GRPC_INTERNAL;
    }
    uint32_t n = (uint32_t)body[1] << 24 | (uint32_t)body[2] << 16 | (uint32_t)body[3] << 8 |
                 (uint32_t)body[4];
    if (body[0] != 0) {
        tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                    body[0] == 1 ? "compressed messages are not supported"
                                 : "bad compressed flag %u",
                    body[0]);
        return body[0] == 1 ? GRPC_UNIMPLEMENTED : GRPC_INTERNAL;
    }
    if (n > max_len) {
        tetris_fail(err, TETRIS_E_PROTOCOL, 0, "message of %u bytes is over the limit of %zu", n,
                    max_len);
        return GRPC_RESOURCE_EXHAUSTED;
    }
    if ((size_t)n != body_len - GRPC_PREFIX_BYTES) {
        tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                    "the request holds %zu bytes after a prefix announcing %u (one message per "
                    "unary call)",
                    body_len - GRPC_PREFIX_BYTES, n);
        return GRPC_INTERNAL;
    }
    *msg = body + GRPC_PREFIX_BYTES;
    *len = n;
    return 0;
}

void grpc_percent_encode(const char *s, char *out, size_t out_len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    if (out_len == 0)
        return;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        bool plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
        size_t need = plain ? 1 : 3;
        if (o + need >= out_len)
            break;
        if (plain) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
}

void grpc_percent_decode(const char *s, char *out, size_t out_len)
{
    size_t o = 0;
    if (out_len == 0)
        return;
    for (size_t i = 0; s[i] != '\0' && o + 1 < out_len; i++) {
        int hi, lo;
        if (s[i] == '%' && (hi = text_hex_value(s[i + 1])) >= 0 &&
            (lo = text_hex_value(s[i + 2])) >= 0) {
            out[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
}

int grpc_reply_fail(struct grpc_reply *reply, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reply->message, sizeof(reply->message), fmt, ap);
    va_end(ap);
    reply->status = status;
    return status;
}

int grpc_reply_error(struct grpc_reply *reply, const tetris_error *err)
{
    int status;
    switch (err->code) {
    case TETRIS_E_INVAL:
    case TETRIS_E_FORMAT: status = GRPC_INVALID_ARGUMENT; break;
    case TETRIS_E_NOTFOUND: status = GRPC_NOT_FOUND; break;
    case TETRIS_E_FULL:
    case TETRIS_E_NOMEM: status = GRPC_RESOURCE_EXHAUSTED; break;
    case TETRIS_E_DENIED: status = GRPC_PERMISSION_DENIED; break;
    case TETRIS_E_CONFLICT: status = GRPC_ALREADY_EXISTS; break;
    case TETRIS_E_TIMEOUT: status = GRPC_DEADLINE_EXCEEDED; break;
    case TETRIS_E_UNAVAILABLE: status = GRPC_UNAVAILABLE; break;
    default: status = GRPC_INTERNAL; break;
    }
    return grpc_reply_fail(reply, status, "%s", err->msg);
}
