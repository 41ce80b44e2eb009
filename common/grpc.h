/* grpc.h - unary gRPC over HTTP/2 (nghttp2) on a Unix socket: what the
 * kubelet speaks to a CSI driver and to its plugin-registration socket.
 * One server per socket; the messages are protocol buffers, encoded and
 * decoded with common/pbwire.h by the contract that defines them
 * (protocol/csi.h).
 *
 * The wire, as gRPC's HTTP/2 mapping defines it (what this server takes
 * and sends; anything else is refused as said):
 *   request   HEADERS :method POST, :path /<package>.<Service>/<Method>,
 *             content-type application/grpc[+proto|;...], then DATA: one
 *             length-prefixed message, END_STREAM
 *   message   1 byte compressed flag (0; 1 is UNIMPLEMENTED: no
 *             compression is offered), 4 bytes big-endian length, the
 *             protobuf bytes (at most max_message_bytes, else
 *             RESOURCE_EXHAUSTED)
 *   response  HEADERS :status 200, content-type application/grpc; DATA:
 *             one length-prefixed message (status OK only); trailers
 *             grpc-status (decimal) and grpc-message (percent-encoded,
 *             only when not OK). A failure before any message is a
 *             "trailers-only" response: one HEADERS frame with all of it.
 *   refusals  another content-type: HTTP 415; another method: HTTP 405;
 *             an unknown path (or one that is not printable ASCII):
 *             UNIMPLEMENTED; no message, two messages or a cut one:
 *             INTERNAL (what gRPC's own servers answer).
 *   other headers are not looked at: :authority in particular is
 *             whatever the client sends (the kubelet's grpc-go sends the
 *             socket's path).
 * Bytes that are not HTTP/2 (a missing connection preface, a bad frame)
 * end that connection with a GOAWAY; the server keeps serving the others.
 * Only unary calls exist: a handler gets the whole request message and
 * fills one reply.
 *
 * Threads: one accepts, one per connection (at most max_connections; one
 * more is closed at once). Handlers of different connections run at the
 * same time: a handler that touches shared state locks it. A connection
 * idle for idle_timeout_s is closed.
 *
 *   static const struct grpc_method methods[] = {
 *       {"/csi.v1.Identity/Probe", probe}, {NULL, NULL}};
 *   struct grpc_server_options o = {.socket_path = p, .methods = methods,
 *                                   .ctx = state};
 *   grpc_server_start(&o, &srv, err);
 *   ...
 *   grpc_server_stop(srv);                 // joins every thread
 * Tested in tests/common/test_pbwire.c (framing, status text), and end to
 * end in tests/csi/test-csi.sh (tests/lib/grpc_client.c, nghttp2 as the
 * client: garbage, refused calls, limits) and by csi-sanity against
 * tetris-csi (tests/csi/test-csi-sanity.sh). */
#ifndef TETRIS_GRPC_H
#define TETRIS_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

enum grpc_status {
    GRPC_OK = 0,
    GRPC_CANCELLED = 1,
    GRPC_UNKNOWN = 2,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_DEADLINE_EXCEEDED = 4,
    GRPC_NOT_FOUND = 5,
    GRPC_ALREADY_EXISTS = 6,
    GRPC_PERMISSION_DENIED = 7,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_FAILED_PRECONDITION = 9,
    GRPC_ABORTED = 10,
    GRPC_OUT_OF_RANGE = 11,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_INTERNAL = 13,
    GRPC_UNAVAILABLE = 14,
    GRPC_DATA_LOSS = 15,
    GRPC_UNAUTHENTICATED = 16,
};

#define GRPC_PREFIX_BYTES 5
#define GRPC_DEFAULT_MAX_MESSAGE_BYTES (4u << 20) /* gRPC's own default */
#define GRPC_MESSAGE_MAX 1024                     /* a status message, NUL included */

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN" for a code out of range. */
const char *grpc_status_name(int status);

/* ---- framing ---- */

void grpc_frame_prefix(uint8_t prefix[GRPC_PREFIX_BYTES], uint32_t len);
/* The one message of a unary call's body: 0 and *msg, *len pointing into
 * body; else the status to answer (INTERNAL: no message, a cut one or
 * bytes after it; UNIMPLEMENTED: a compressed one; RESOURCE_EXHAUSTED:
 * longer than max_len) with a message in err. */
int grpc_unframe(const uint8_t *body, size_t body_len, size_t max_len, const uint8_t **msg,
                 size_t *len, tetris_error *err);
/* grpc-message's encoding: bytes outside 0x20-0x7e and '%' as %XX. out
 * holds at least 3 * strlen(s) + 1 bytes or the text is cut (never in the
 * middle of an escape). */
void grpc_percent_encode(const char *s, char *out, size_t out_len);
/* The reverse; malformed escapes are kept as they are. */
void grpc_percent_decode(const char *s, char *out, size_t out_len);

/* ---- the server ---- */

/* What a handler answers. status GRPC_OK: body (malloc'd, the server frees
 * it; NULL is an empty message); otherwise message says why. */
struct grpc_reply {
    int status;
    char message[GRPC_MESSAGE_MAX];
    uint8_t *body;
    size_t body_len;
};

/* Sets status and the message (printf-style); returns status. */
int grpc_reply_fail(struct grpc_reply *reply, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A failed call's reply from err: its code's status (tetris_code ->
 * gRPC: INVAL/FORMAT INVALID_ARGUMENT, NOTFOUND NOT_FOUND, FULL/NOMEM
 * RESOURCE_EXHAUSTED, DENIED PERMISSION_DENIED, CONFLICT ALREADY_EXISTS,
 * TIMEOUT DEADLINE_EXCEEDED, UNAVAILABLE UNAVAILABLE, the rest INTERNAL)
 * and its message. */
int grpc_reply_error(struct grpc_reply *reply, const tetris_error *err);

typedef void (*grpc_handler_fn)(void *ctx, const uint8_t *request, size_t len,
                                struct grpc_reply *reply);

struct grpc_method {
    const char *path; /* "/package.Service/Method" */
    grpc_handler_fn handler;
};

struct grpc_server_options {
    const char *socket_path;           /* replaced if it is a socket already */
    const struct grpc_method *methods; /* ends with a NULL path */
    void *ctx;                         /* every handler's first argument */
    size_t max_message_bytes;          /* 0: GRPC_DEFAULT_MAX_MESSAGE_BYTES */
    unsigned max_connections;          /* 0: 16 */
    unsigned socket_mode;              /* 0: 0600 */
    double idle_timeout_s;             /* 0: 300 */
    const char *name;                  /* for logs: "csi", "registration" */
};

typedef struct grpc_server grpc_server;

/* Binds the socket (its parent must exist) and starts serving.
 * TETRIS_E_IO when the socket cannot be made, TETRIS_E_INVAL for a path
 * too long or a file there that is not a socket. */
int grpc_server_start(const struct grpc_server_options *o, grpc_server **out, tetris_error *err);
/* Stops accepting, ends every connection (a handler that runs is waited
 * for), joins the threads, removes the socket and frees s. NULL: no-op. */
void grpc_server_stop(grpc_server *s);

#endif
