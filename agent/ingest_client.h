/* ingest_client.h - the agent's side of the node daemon's ingest protocol.
 *
 * Function instances mount the store read-only, so they cannot publish
 * tensors or record references themselves. They connect to the daemon's
 * Unix socket (<store>/ingest.sock), send the model's tensor list with an
 * open descriptor of each source file (SCM_RIGHTS), and the daemon reads,
 * hashes and publishes the missing tensors itself and records the
 * instance's references to all of them. The references last as long as the
 * connection: keep the ingest_client open while the model is mapped, close
 * it when the model is dropped. Use:
 *
 *   ingest_client *c;
 *   if (ingest_client_connect(sock, timeout_ms, &c, &err) < 0)   // UNAVAILABLE/TIMEOUT
 *       -> private load ("daemon absent")
 *   struct ingest_tensor_result *res = calloc(m->n_tensors, sizeof *res);
 *   if (ingest_client_ingest(c, label, m, res, &summary, &err) < 0)
 *       -> private load (TIMEOUT: daemon stalled; FULL: store full; ...)
 *   map every tensor whose res[i].status is RESIDENT or INGESTED;
 *   load the REJECTED ones privately (or all of them privately);
 *   ingest_client_keep_registered(c, &err);  // optional: survive daemon restarts
 *   ... run ...
 *   ingest_client_close(c);  // releases the references
 *
 * Wire format (both directions): a 4-byte little-endian length, then that
 * many bytes of JSON. The request's descriptors ride on its first byte.
 *   request  {"op":"ingest","label":S,"sources":[path...],
 *             "tensors":[{"name","dtype","shape":[..],"source_index",
 *             "offset","length","nbytes","encoding":"raw"|"varint",
 *             "digest":"sha256:HEX","crc32":N}, ...]}
 *            + one fd per sources[] entry, in order
 *   reply    {"ok":true,"holder":ID,"ingested_bytes":N,
 *             "tensors":[{"status":"resident"|"ingested"|"rejected",
 *                         "error":CODE,"reason":S (rejected only)}, ...]}
 *            (request order; CODE "full" when the store is at capacity,
 *            "corrupt" when the bytes do not hash to the claimed digest)
 *   error    {"ok":false,"error":CODE,"message":S}; the daemon then closes
 *            the connection. CODE is tetris_code_name() of the failure. A
 *            daemon at its connection limit sends this ("unavailable") at
 *            once, without reading the request.
 *   request  {"op":"report_fallback","label":S,"reason":S}
 *   reply    {"ok":true}
 * The sources' paths are informational (logs); the daemon only trusts the
 * descriptors. */
#ifndef TETRIS_INGEST_CLIENT_H
#define TETRIS_INGEST_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/model.h"

#define INGEST_SOCKET_NAME "ingest.sock"
#define INGEST_MAX_MESSAGE_BYTES (64u << 20) /* requests and replies */
#define INGEST_MAX_TENSORS 200000
#define INGEST_MAX_SOURCES 64 /* descriptors per request */

enum ingest_status {
    INGEST_RESIDENT = 0, /* already in the store; reference recorded */
    INGEST_INGESTED,     /* published by this request; reference recorded */
    INGEST_REJECTED,     /* not published: see reason (digest mismatch, full, ...) */
};

struct ingest_tensor_result {
    enum ingest_status status;
    int code;         /* tetris_code of a rejection (TETRIS_E_FULL, _CORRUPT, ...) */
    char reason[128]; /* human-readable rejection reason */
};

struct ingest_summary {
    size_t resident;
    size_t ingested;
    size_t rejected;
    size_t rejected_full; /* of the rejected: store capacity */
    uint64_t ingested_bytes;
};

typedef struct ingest_client ingest_client;

/* Connects to the daemon. TETRIS_E_UNAVAILABLE when no daemon listens
 * (ENOENT, ECONNREFUSED); TETRIS_E_TIMEOUT past timeout_ms (<= 0: 30 s).
 * The timeout then applies to every request on the connection. */
int ingest_client_connect(const char *socket_path, int timeout_ms, ingest_client **out,
                          tetris_error *err);

/* Asks the daemon to ingest m's tensors that are missing and to record
 * references to all of them. Every tensor must have has_digest set. results
 * has m->n_tensors entries (same order); summary may be NULL. Returns 0 when
 * the daemon answered (some tensors may still be REJECTED); TETRIS_E_TIMEOUT
 * if it stalled; TETRIS_E_UNAVAILABLE if it went away; the daemon's error
 * code (TETRIS_E_FORMAT, _INVAL, ...) if it refused the request. After a
 * failure the connection is unusable: close it. */
int ingest_client_ingest(ingest_client *c, const char *label, const model *m,
                         struct ingest_tensor_result *results, struct ingest_summary *summary,
                         tetris_error *err);

/* Keeps the references of the last successful ingest held for as long as
 * c is open, across daemon restarts. A thread watches the connection; when
 * the daemon's end goes away it reconnects, with backoff (about 0.1 s,
 * doubling to 5 s), and sends that ingest request again, so the new daemon
 * holds the references in a holder of its own even when it could not
 * adopt the old one (no view of the client's pid). The caller's mappings
 * are never touched. The ingest's model must stay valid until
 * ingest_client_close, and from this call on only ingest_client_close may
 * use c. TETRIS_E_INVAL if nothing was ingested on c yet. */
int ingest_client_keep_registered(ingest_client *c, tetris_error *err);

/* Tells the daemon that an agent fell back to a private load (counted in
 * tetris_agent_fallbacks_total). Best effort: one short connection. */
int ingest_report_fallback(const char *socket_path, const char *label, const char *reason,
                           int timeout_ms, tetris_error *err);

/* Closes the connection (stopping the watcher first, if any): the daemon
 * releases this client's references. */
void ingest_client_close(ingest_client *c);

/* ---- framing, shared with the daemon ---- */

/* Sends one message (length prefix + json) with fds attached (n_fds may
 * be 0), retrying short writes, waiting at most until deadline_ms
 * (clock_mono_ms(); 0: no deadline). */
int ingest_send_message(int sock, const char *json, size_t len, const int *fds, size_t n_fds,
                        int64_t deadline_ms, tetris_error *err);
/* Receives one message; the caller frees *json. Received descriptors go to
 * fds (at most max_fds; extra ones are closed and make it fail with
 * TETRIS_E_PROTOCOL). A message over max_len is TETRIS_E_PROTOCOL. An
 * orderly close before the first byte is TETRIS_E_UNAVAILABLE. */
int ingest_recv_message(int sock, size_t max_len, char **json, size_t *len, int *fds,
                        size_t max_fds, size_t *n_fds, int64_t deadline_ms, tetris_error *err);

#endif
