/* ingest.h - the ingest protocol between a function instance's agent
 * (agent/ingest_client.h) and the node daemon (tetris-reclaimer), spoken
 * over the daemon's Unix socket <store>/ingest.sock. Both sides frame,
 * encode and decode through this file.
 *
 * Function instances mount the store read-only, so they cannot publish
 * tensors or record references themselves: an instance sends its model's
 * tensor list with an open descriptor of each source file, and the daemon
 * reads, hashes and publishes the missing tensors itself and records the
 * instance's references to all of them for as long as the connection
 * stays open.
 *
 * Framing (both directions): a 4-byte little-endian length, then that many
 * bytes of JSON (at most INGEST_MAX_MESSAGE_BYTES). A request's descriptors
 * (SCM_RIGHTS, at most INGEST_MAX_SOURCES) ride on its first byte.
 *
 *   request  {"op":"ingest","label":S,"sources":[PATH, ...],
 *             "tensors":[ENTRY, ...]}
 *            + one descriptor per sources[] entry, in order
 *            ENTRY is a manifest entry (model/manifest.h) with
 *            "source_index":I (0 <= I < len(sources)) in place of "source";
 *            it may leave out both "digest" and "crc32" (never only one):
 *            the daemon then computes them while it reads the bytes, in
 *            one pass (read, hash, write into a private temp file that is
 *            published under the digest computed), so a client that has
 *            no manifest does not hash the file itself first. The daemon
 *            trusts only what it computes either way: a client cannot
 *            choose the identity of the bytes it sends.
 *            label: at most 255 bytes, no control characters (it names the
 *            instance's holder and its metrics); at most INGEST_MAX_TENSORS
 *            entries. The paths are informational (logs); the daemon only
 *            trusts the descriptors, which must be readable regular files
 *            holding every region their entries name.
 *   reply    {"ok":true,"holder":ID,"ingested_bytes":N,
 *             "tensors":[{"status":"resident"|"ingested"|"rejected",
 *                         "error":CODE,"reason":S (rejected only)}, ...]}
 *            one result per entry, in request order; CODE "full" when the
 *            store is at capacity, "corrupt" when the bytes do not hash to
 *            the claimed digest. A result for an entry sent without a
 *            digest that is not rejected carries "digest":"sha256:HEX" and
 *            "crc32":N, what the daemon computed. A digest-less entry is
 *            charged like any missing tensor before it is read (it may
 *            turn out resident: its copy is then discarded), so on a full
 *            store it is rejected "full" unread: a client that may be
 *            loading a resident model hashes it itself (tetris-agent
 *            does, see docs/programs/tetris-agent.md).
 *   request  {"op":"report_fallback","label":S,"reason":S}   no descriptors
 *   reply    {"ok":true}; once per connection (a second one is the error
 *            reply "denied"), reason at most INGEST_MAX_REASON bytes
 *   request  {"op":"gpu_attach","device":"cuda:N","digests":["sha256:HEX", ...]}
 *            no descriptors; 1 to INGEST_MAX_GPU_TENSORS digests, each of a
 *            tensor this connection references (an earlier ingest on it
 *            that was not rejected), so the device copy is filled from the
 *            verified store copy. Opt-in per request: a client that never
 *            sends it never touches a GPU.
 *   reply    {"ok":true,"device":"cuda:N",
 *             "tensors":[{"status":"attached","size":S,"nbytes":N}
 *                        | {"status":"rejected","error":CODE,"reason":S}, ...]}
 *            + one descriptor per "attached" entry, in order: a CUDA VMM
 *            allocation exported as a POSIX file descriptor
 *            (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) of S bytes (nbytes
 *            padded to the device's allocation granularity), holding the
 *            tensor's nbytes at offset 0 and nothing of any other tensor.
 *            The client imports and maps it whole (tensorstore/gpu/gpu.h),
 *            read-only. The daemon keeps one allocation per digest per
 *            device, shared by every client, and counts the connection's
 *            reference to it until the connection closes. CODE "full" when
 *            the device (or --gpu-capacity) has no room.
 *            A refusal of the whole request that concerns only the GPU
 *            (device unknown or not "cuda:N", GPU sharing unavailable on
 *            this node, a digest the connection does not reference) is the
 *            error reply below, but the connection stays open: its host
 *            references are untouched. A malformed request closes it, as
 *            any other does.
 *   request  {"op":"derive","label":S,"transform":"ort-optimize-all-prepack",
 *             "runtime":"onnxruntime 1.22.0" (optional)}
 *            + one descriptor: the model's share image (protocol/derived.h)
 *            at most INGEST_MAX_DERIVE_IMAGE bytes, a regular file or memfd.
 *            runtime (derived_name_valid) names the runtime the form is
 *            for, one of those the daemon derives with (its own
 *            tetris-derive's, and the libraries of --derive-runtimes);
 *            absent: tetris-derive's own. A pod only picks among the
 *            operator's runtimes, it never names a library.
 *   reply    {"ok":true} once the daemon has made the derived form (in a
 *            child it runs, tetris-derive), published its two tensors and
 *            written its index entry, or found one there already; the
 *            error reply otherwise ("unavailable": derivation is off on
 *            this node; "notfound": no such runtime here; "full": no room;
 *            "runtime": the runtime refused the graph; "timeout"). The
 *            connection stays open either way. It may take minutes: a
 *            client asks from a thread that no start waits for. One
 *            derivation per connection at a time.
 *   request  {"op":"pull","label":S,"ref":"oci://HOST:PORT/REPO[:TAG|@sha256:HEX]"}
 *            no descriptors; ref at most INGEST_MAX_REF bytes (protocol/oci.h's
 *            grammar). The daemon fetches the model from a registry it may
 *            reach (its --registries; reclaimer/pull.h): the manifest (a
 *            tag resolved to a digest once), its config and non-weight
 *            layer, then only the tensors the store lacks, each verified
 *            before it is published, and records the connection's
 *            references to all of the model's tensors, as an ingest does.
 *   reply    {"ok":true,"holder":ID,"digest":"sha256:HEX","tensors":N,
 *             "pulled_tensors":N,"pulled_bytes":N,"skipped_bytes":N}
 *            + two descriptors, read-only: the config (the model's manifest,
 *            model/manifest.h, every tensor with its identity) and the
 *            non-weight layer (ONNX: the graph, its weights external at
 *            "tensors/XX/<hex>"; safetensors: the header), each verified
 *            against its digest. digest names the manifest; tensors counts
 *            its tensor layers, pulled_* those fetched, skipped_bytes the
 *            layer bytes the store had. A pull that fails holds nothing:
 *            the error reply ("denied": a registry not listed, a redirect
 *            elsewhere; "corrupt": bytes that are not their digest or
 *            size; "format": a manifest or config that is not a model;
 *            "notfound"; "unavailable", "timeout", "http": the registry),
 *            and the connection closes, as after any error.
 *   error    {"ok":false,"error":CODE,"message":S}, after which the daemon
 *            closes the connection. CODE is tetris_code_name() of the
 *            failure. A daemon at its connection limit sends this
 *            ("unavailable") at once, without reading the request.
 *
 * Limits (every request is held to them; what is refused gets the error
 * reply, or a "rejected" result for one tensor, with the CODE below):
 *   message       at most INGEST_MAX_MESSAGE_BYTES of JSON     "protocol"
 *   descriptors   at most INGEST_MAX_SOURCES per request        "protocol"
 *   tensors       at most INGEST_MAX_TENSORS entries           "format"
 *   label         at most INGEST_MAX_LABEL bytes               "format"
 *   element       one value the daemon decodes (an entry, a    "format"
 *                 source path, the label, the reason): at most
 *                 INGEST_MAX_ELEMENT_BYTES of JSON. The daemon
 *                 never loads a message whole (json_scan.h), so
 *                 what decoding costs follows the message's size
 *                 and entries, never a tree of it.
 *   varint region 1 to 10 bytes per element of the tensor      "format"
 *   references    at most INGEST_MAX_HOLDER_REFS distinct      "denied"
 *                 tensors held by one connection (a tensor is
 *                 referenced once, however often it is asked)
 *   request bytes the daemon reads at most --max-request-bytes  "denied" (per
 *                 (default: the store's capacity) for one      tensor)
 *                 request: a tensor it would read (the larger
 *                 of length and nbytes) past that is refused
 *   capacity      each tensor is charged its file rounded up  "full" (per
 *                 to pages plus an inode (store.h), against    tensor)
 *                 the node's capacity and its store's quota;
 *                 bytes cold at the last pass count as room
 *   unverified    a claim (a tensor the daemon reads and       "denied" (per
 *                 verifies) holds its charge while read; a     tensor)
 *                 store's and a uid's claims hold at most
 *                 --max-unverified-bytes(-per-uid) at once: a
 *                 claim waits for room under them, one larger
 *                 than them is not read
 *   backoff       a uid whose claim failed verification has   "denied" (per
 *                 its claims refused unread for 1 s, doubling  tensor)
 *                 to 60 s
 *   time          a request past the daemon's --ingest-timeout "timeout" (per
 *                 gets its remaining tensors rejected          tensor)
 *   connections   per node, per peer uid, per peer process     "unavailable"
 *                 (SO_PEERCRED); see tetris-reclaimer's flags
 *   idle          a connection that holds no tensor and sends  "timeout"
 *                 no request within --request-timeout is closed
 * Sources must be regular files ("format" otherwise): a pipe, socket or
 * device would let the client pace the daemon's reads.
 *
 * Decoding trusts nothing: a malformed message is a TETRIS_E_FORMAT (the
 * daemon's side) or TETRIS_E_PROTOCOL (the agent's) error whose message
 * names the offending field. */
#ifndef TETRIS_PROTOCOL_INGEST_H
#define TETRIS_PROTOCOL_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/model.h"

#define INGEST_SOCKET_NAME "ingest.sock"
#define INGEST_HEADER_BYTES 4
#define INGEST_MAX_MESSAGE_BYTES (64u << 20) /* requests and replies */
#define INGEST_MAX_TENSORS 200000
#define INGEST_MAX_SOURCES 64 /* descriptors per request */
#define INGEST_MAX_LABEL 255
#define INGEST_MAX_HOLDER_REFS INGEST_MAX_TENSORS /* distinct per connection */
#define INGEST_REASON_MAX 160 /* a rejection's reason, NUL included */
#define INGEST_MAX_GPU_TENSORS 64 /* digests per gpu_attach (descriptors back) */
#define INGEST_DEVICE_MAX 16      /* "cuda:N", NUL included */
/* One element of a request the daemon decodes (a tensor entry, a source
 * path, the label, the reason): at most this much JSON text. */
#define INGEST_MAX_ELEMENT_BYTES (64 << 10)
#define INGEST_MAX_REASON 1024 /* report_fallback's reason */

/* ---- framing ---- */

/* Writes a message's length prefix. */
void ingest_frame_header(uint8_t header[INGEST_HEADER_BYTES], uint32_t len);

/* Sends one message (length prefix + json) with fds attached (n_fds may
 * be 0), retrying short writes, waiting at most until deadline_ms
 * (clock_mono_ms(); 0: no deadline). TETRIS_E_UNAVAILABLE
 * when the peer is gone. */
int ingest_send_message(int sock, const char *json, size_t len, const int *fds, size_t n_fds,
                        int64_t deadline_ms, tetris_error *err);
/* Receives one message; the caller frees *json (NUL-terminated). Received
 * descriptors go to fds (at most max_fds; extra ones are closed and make it
 * fail with TETRIS_E_PROTOCOL). A message over max_len is
 * TETRIS_E_PROTOCOL. An orderly close before the first byte is
 * TETRIS_E_UNAVAILABLE, one within the message TETRIS_E_PROTOCOL. */
int ingest_recv_message(int sock, size_t max_len, char **json, size_t *len, int *fds,
                        size_t max_fds, size_t *n_fds, int64_t deadline_ms, tetris_error *err);
/* Waits until sock is ready for events (poll(2)'s) or the deadline passes
 * (TETRIS_E_TIMEOUT). */
int ingest_wait_ready(int sock, short events, int64_t deadline_ms, tetris_error *err);

/* ---- requests ---- */

enum ingest_op {
    INGEST_OP_INGEST,
    INGEST_OP_REPORT_FALLBACK,
    INGEST_OP_GPU_ATTACH,
    INGEST_OP_DERIVE,
    INGEST_OP_PULL,
};
#define INGEST_MAX_REF 1024                 /* a pull's reference */
#define INGEST_MAX_DERIVE_IMAGE (64u << 20) /* a derive request's share image */

typedef struct ingest_request_tensor {
    /* name owned by the request; source is INGEST_SOURCE_DESCRIPTOR, for
     * messages: the bytes come from the descriptor, whatever path the
     * client named */
    tensor_desc desc;
    size_t source_index; /* < n_sources */
} ingest_request_tensor;

#define INGEST_SOURCE_DESCRIPTOR "client descriptor"

typedef struct ingest_request {
    enum ingest_op op;
    char *label;  /* "" when absent */
    char *reason; /* report_fallback's; "" when absent */
    char *transform; /* derive's; "" when absent */
    char *runtime;   /* derive's; "" when absent (the daemon's own) */
    char *ref;       /* pull's; "" when absent */
    size_t n_sources;
    char **sources; /* informational paths */
    size_t n_tensors;
    ingest_request_tensor *tensors;
    char device[INGEST_DEVICE_MAX]; /* gpu_attach's, not checked further */
    size_t n_digests;               /* gpu_attach's */
    tensor_digest *digests;
} ingest_request;

/* The ingest request for every tensor of m (those without has_digest sent
 * without an identity), sources
 * numbered in order of first use (a tensor without a source is in
 * m->path). *json is malloc'd; sources[0..*n_sources) point into m and say
 * which descriptors to attach, in order (sources has INGEST_MAX_SOURCES
 * slots; more sources are TETRIS_E_INVAL). */
int ingest_request_encode(const char *label, const model *m, char **json,
                          const char *sources[INGEST_MAX_SOURCES], size_t *n_sources,
                          tetris_error *err);
/* {"op":"report_fallback",...}; malloc'd, NULL when out of memory. */
char *ingest_fallback_encode(const char *label, const char *reason);
/* {"op":"derive",...}, runtime left out when NULL; malloc'd, NULL when out
 * of memory. */
char *ingest_derive_encode(const char *label, const char *transform, const char *runtime);
/* {"op":"pull",...}; malloc'd, NULL when out of memory. */
char *ingest_pull_encode(const char *label, const char *ref);
/* {"op":"gpu_attach",...} for digests[0..n); malloc'd, NULL when out of
 * memory. */
char *ingest_gpu_attach_encode(const char *device, const tensor_digest *digests, size_t n);

/* Decodes a request that arrived with n_fds descriptors: op, label and
 * every tensor entry (model/manifest.h's entry decoder); sources must
 * match the descriptors one for one. What needs the descriptors themselves
 * (their type, their size) is the daemon's to check. */
int ingest_request_decode(const char *json, size_t len, size_t n_fds, ingest_request **out,
                          tetris_error *err);
void ingest_request_free(ingest_request *rq);

/* ---- replies ---- */

enum ingest_status {
    INGEST_RESIDENT = 0, /* already in the store; reference recorded */
    INGEST_INGESTED,     /* published by this request; reference recorded */
    INGEST_REJECTED,     /* not published: see reason (digest mismatch, full, ...) */
};

struct ingest_tensor_result {
    enum ingest_status status;
    int code;                       /* tetris_code of a rejection (FULL, CORRUPT, ...) */
    char reason[INGEST_REASON_MAX]; /* human-readable rejection reason */
    bool has_digest;                /* the daemon computed the identity (the
                                       entry had none): digest, crc32 */
    tensor_digest digest;
    uint32_t crc32;
};

struct ingest_summary {
    size_t resident;
    size_t ingested;
    size_t rejected;
    size_t rejected_full; /* of the rejected: store capacity */
    uint64_t ingested_bytes;
};

/* The daemon's answers; malloc'd, NULL when out of memory. */
char *ingest_reply_encode(const char *holder, uint64_t ingested_bytes,
                          const struct ingest_tensor_result *results, size_t n);
char *ingest_ack_encode(void);
char *ingest_error_encode(int code, const char *message);

/* Decodes the reply to an ingest request of n tensors into results[0..n)
 * and summary (may be NULL). An error reply returns its code (an unknown
 * one: TETRIS_E_PROTOCOL) with "node daemon refused: MESSAGE"; a reply
 * that is not one of the above is TETRIS_E_PROTOCOL. */
int ingest_reply_decode(const char *json, size_t len, size_t n,
                        struct ingest_tensor_result *results, struct ingest_summary *summary,
                        tetris_error *err);
/* Decodes the reply to report_fallback: 0 for {"ok":true}, else as above. */
int ingest_ack_decode(const char *json, size_t len, tetris_error *err);

struct ingest_gpu_result {
    bool attached; /* else rejected: code, reason */
    uint64_t size; /* the allocation's (padded) */
    uint64_t nbytes;
    int code;
    char reason[INGEST_REASON_MAX];
};

/* The answer to a pull (its descriptors ride with it). */
struct ingest_pull_result {
    char holder[128];
    tensor_digest digest; /* the manifest's */
    uint64_t tensors, pulled_tensors, pulled_bytes, skipped_bytes;
};
char *ingest_pull_reply_encode(const struct ingest_pull_result *r);
/* Decodes the reply to a pull that came with n_fds descriptors (two,
 * else TETRIS_E_PROTOCOL); an error reply as ingest_reply_decode. */
int ingest_pull_reply_decode(const char *json, size_t len, size_t n_fds,
                             struct ingest_pull_result *out, tetris_error *err);

char *ingest_gpu_reply_encode(const char *device, const struct ingest_gpu_result *results,
                              size_t n);
/* Decodes the reply to a gpu_attach of n digests that came with n_fds
 * descriptors: one per attached result, else TETRIS_E_PROTOCOL. */
int ingest_gpu_reply_decode(const char *json, size_t len, size_t n, size_t n_fds,
                            struct ingest_gpu_result *results, tetris_error *err);

#endif
