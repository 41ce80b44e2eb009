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
 * The messages, their framing and their limits are protocol/ingest.h's. */
#ifndef TETRIS_INGEST_CLIENT_H
#define TETRIS_INGEST_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/model.h"
#include "protocol/ingest.h"

typedef struct ingest_client ingest_client;

/* Connects to the daemon. TETRIS_E_UNAVAILABLE when no daemon listens
 * (ENOENT, ECONNREFUSED); TETRIS_E_TIMEOUT past timeout_ms (<= 0: 30 s).
 * The timeout then applies to every request on the connection. */
int ingest_client_connect(const char *socket_path, int timeout_ms, ingest_client **out,
                          tetris_error *err);

/* Asks the daemon to ingest m's tensors that are missing and to record
 * references to all of them. A tensor without has_digest is sent without
 * its identity: the daemon computes it while it ingests, and its result
 * (not REJECTED) carries it (has_digest, digest, crc32; a reply that does
 * not is TETRIS_E_PROTOCOL). results
 * has m->n_tensors entries (same order); summary may be NULL. Returns 0 when
 * the daemon answered (some tensors may still be REJECTED); TETRIS_E_TIMEOUT
 * if it stalled; TETRIS_E_UNAVAILABLE if it went away; the daemon's error
 * code (TETRIS_E_FORMAT, _INVAL, ...) if it refused the request. After a
 * failure the connection is unusable: close it. */
int ingest_client_ingest(ingest_client *c, const char *label, const model *m,
                         struct ingest_tensor_result *results, struct ingest_summary *summary,
                         tetris_error *err);

/* Asks the daemon for GPU copies (protocol/ingest.h, gpu_attach) of n
 * (1 to INGEST_MAX_GPU_TENSORS) tensors this connection references (from
 * ingest_client_ingest; call before ingest_client_keep_registered), on
 * device "cuda:N". results[0..n) say which were attached; fds[i] is then
 * the exported allocation's descriptor (the caller's to close), -1
 * otherwise. Returns 0 when the daemon answered per tensor; when it
 * refused the whole request for GPU reasons (no such device, GPU sharing
 * unavailable: its code and message), the connection and its host
 * references stay usable; after TIMEOUT, UNAVAILABLE or PROTOCOL it is
 * not. */
int ingest_client_gpu_attach(ingest_client *c, const char *device, const tensor_digest *digests,
                             size_t n, struct ingest_gpu_result *results, int *fds,
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

/* Asks the daemon for the derived form of the share image behind image_fd
 * (protocol/derived.h) for runtime ("onnxruntime 1.22.0"; NULL: the
 * daemon's own) and waits for it, at most timeout_ms: 0 once the daemon
 * has written its index entry, or found one it had made (a form under
 * derivation for another connection is waited for, not made twice). It
 * blocks: a start hands it to a thread of its own, with a connection of
 * its own. *answered: the daemon's answer came (a failure is then its
 * code and message, not a lost connection). */
int ingest_client_derive(ingest_client *c, const char *label, int image_fd, const char *runtime,
                         int timeout_ms, bool *answered, tetris_error *err);

/* Asks the daemon to pull the model at ref (protocol/ingest.h, "pull")
 * and to hold references to all its tensors for as long as c is open;
 * waits at most timeout_ms (<= 0: the connection's timeout). On success
 * fds[0] is the config (the model's manifest) and fds[1] its non-weight
 * layer, read-only, the caller's to close. A refused pull is the daemon's
 * code and message; the connection is closed by the daemon then. */
int ingest_client_pull(ingest_client *c, const char *label, const char *ref, int timeout_ms,
                       struct ingest_pull_result *out, int fds[2], tetris_error *err);

/* Tells the daemon that an agent fell back to a private load (counted in
 * tetris_agent_fallbacks_total). Best effort: one short connection. */
int ingest_report_fallback(const char *socket_path, const char *label, const char *reason,
                           int timeout_ms, tetris_error *err);

/* Ends, from another thread, the exchange a call on c waits in: the
 * connection is shut down, so the call fails (TETRIS_E_UNAVAILABLE) and
 * c is left to close. */
void ingest_client_interrupt(ingest_client *c);

/* Closes the connection (stopping the watcher first, if any): the daemon
 * releases this client's references. */
void ingest_client_close(ingest_client *c);

#endif
