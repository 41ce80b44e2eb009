/* grpc_client.h - a unary gRPC client over HTTP/2 (nghttp2) on a Unix
 * socket, for tests only: the kubelet's side of common/grpc.h, so that the
 * unit tests and tetris-test-csi-client drive the server through a real
 * HTTP/2 implementation other than the server's own code paths. One
 * connection per call. */
#ifndef TETRIS_TESTS_GRPC_CLIENT_H
#define TETRIS_TESTS_GRPC_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct grpc_call_result {
    int http_status;    /* :status */
    int grpc_status;    /* grpc-status (headers or trailers); -1 if none */
    char message[1024]; /* grpc-message, percent-decoded */
    uint8_t *body;      /* the DATA received, prefix included (malloc'd) */
    size_t body_len;
    const uint8_t *msg; /* the reply message inside body (grpc_status 0) */
    size_t msg_len;
};

/* Calls path with one message (framed here). 0 with *out filled (free
 * with grpc_call_result_free), or TETRIS_E_UNAVAILABLE / TETRIS_E_PROTOCOL
 * / TETRIS_E_TIMEOUT when no answer came. */
int grpc_client_call(const char *socket_path, const char *path, const uint8_t *msg, size_t len,
                     struct grpc_call_result *out, tetris_error *err);
/* As grpc_client_call, but body is sent as is (no prefix added) with the
 * given content-type and method: for malformed calls. */
int grpc_client_call_raw(const char *socket_path, const char *method, const char *path,
                         const char *content_type, const uint8_t *body, size_t body_len,
                         struct grpc_call_result *out, tetris_error *err);
void grpc_call_result_free(struct grpc_call_result *r);

#endif
