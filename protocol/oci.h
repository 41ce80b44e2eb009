/* oci.h - a model as an OCI artifact in a registry, and the references that
 * name one. This header owns the format (docs/PROTOCOLS.md, "Registry
 * artifact"): `tetris-registry push` encodes it, the node daemon's pull
 * decodes it, and both go through the functions here.
 *
 * The artifact is an OCI image manifest (schemaVersion 2, mediaType
 * OCI_MANIFEST_MEDIA_TYPE) whose artifactType is OCI_ARTIFACT_TYPE:
 *
 *   config   OCI_CONFIG_MEDIA_TYPE: the model's tensor manifest
 *            (model/manifest.h), whose digests name the tensor layers
 *   layers   exactly one non-weight layer, first:
 *              OCI_ONNX_GRAPH_MEDIA_TYPE: the ONNX graph, every tensor the
 *              manifest lists (raw or varint in the file) external data at
 *              location "tensors/XX/<hex>" offset 0 (the model view's form)
 *              OCI_SAFETENSORS_HEADER_MEDIA_TYPE: the 8-byte length and
 *              JSON header of a safetensors file, offsets as in the file
 *            then one OCI_TENSOR_MEDIA_TYPE layer per distinct tensor, in
 *            manifest order, annotated OCI_ANNOTATION_TENSOR_NAME (the
 *            first tensor of the manifest with that identity)
 *
 * A tensor layer's blob is the input of the tensor's identity
 * (tensorstore/digest.h): the domain tag, dtype, shape header
 * (tensor_digest_header) followed by the tensor's little-endian bytes. Its
 * OCI digest (SHA-256 of the blob) is therefore exactly the tensor's
 * identity: a registry and a store agree on what a tensor is, a HEAD by
 * identity says whether the registry has it, and one hash verifies the
 * bytes for both. Its size is the header's length plus nbytes. The other
 * blobs are plain bytes and their digests plain SHA-256.
 *
 * Decoding trusts nothing (a registry is no more trusted than a pod): the
 * document is at most OCI_MANIFEST_MAX_BYTES, duplicate keys, a wrong
 * schemaVersion, mediaType or artifactType, an unknown layer media type, a
 * digest that is not "sha256:" and 64 lowercase hex digits, a size beyond
 * its kind's limit, a repeated tensor digest, a second non-weight layer or
 * more than OCI_MAX_TENSOR_LAYERS tensors are TETRIS_E_FORMAT errors that
 * name the field. oci_artifact_check_model then holds the decoded config
 * to the layers: the same set of identities, each layer's size what its
 * tensor's dtype and shape make, the non-weight layer of the model's
 * format.
 *
 * A reference: oci://HOST[:PORT]/REPO[:TAG|@sha256:HEX]. HOST is a DNS
 * name, an IPv4 address or a bracketed IPv6 one; REPO is lowercase path
 * components of [a-z0-9] separated by '.', '_', '__' or '-' runs, joined by
 * '/'; a TAG matches [A-Za-z0-9_][A-Za-z0-9._-]{0,127}; no tag and no
 * digest means "latest". */
#ifndef TETRIS_OCI_H
#define TETRIS_OCI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/httpclient.h"
#include "tensorstore/digest.h"

struct model;

#define OCI_MANIFEST_MEDIA_TYPE "application/vnd.oci.image.manifest.v1+json"
#define OCI_ARTIFACT_TYPE "application/vnd.tetris.model.v1"
#define OCI_CONFIG_MEDIA_TYPE "application/vnd.tetris.manifest.v1+json"
#define OCI_TENSOR_MEDIA_TYPE "application/vnd.tetris.tensor.v1"
#define OCI_ONNX_GRAPH_MEDIA_TYPE "application/vnd.tetris.onnx-graph.v1"
#define OCI_SAFETENSORS_HEADER_MEDIA_TYPE "application/vnd.tetris.safetensors-header.v1"
#define OCI_ANNOTATION_TENSOR_NAME "io.tetris.tensor.name"
#define OCI_ANNOTATION_MODEL "io.tetris.model"

/* Limits (a registry's answer is held to them before anything is read). */
#define OCI_MANIFEST_MAX_BYTES (4u << 20) /* distribution's own limit */
#define OCI_CONFIG_MAX_BYTES (64u << 20)  /* an ingest message's */
#define OCI_GRAPH_MAX_BYTES (2ull << 30)  /* protobuf's 2 GiB */
#define OCI_TENSOR_MAX_BYTES (1ull << 40) /* one tensor: 1 TiB */
#define OCI_MAX_TENSOR_LAYERS 200000      /* an ingest request's */
#define OCI_NAME_MAX 1024                 /* an annotation's value */

enum oci_layer_kind {
    OCI_LAYER_CONFIG = 0,
    OCI_LAYER_ONNX_GRAPH,
    OCI_LAYER_SAFETENSORS_HEADER,
    OCI_LAYER_TENSOR,
};

typedef struct oci_descriptor {
    enum oci_layer_kind kind;
    tensor_digest digest;
    uint64_t size;
    char *name; /* OCI_ANNOTATION_TENSOR_NAME, NULL if none (or not a tensor) */
} oci_descriptor;

typedef struct oci_artifact {
    oci_descriptor config;
    oci_descriptor graph; /* the non-weight layer: ONNX graph or safetensors header */
    size_t n_tensors;
    oci_descriptor *tensors; /* distinct identities, in layer order */
    char *model;             /* OCI_ANNOTATION_MODEL, NULL if none */
} oci_artifact;

/* Decodes and checks a manifest document (what = its name in messages). */
int oci_artifact_parse(const char *json, size_t len, const char *what, oci_artifact **out,
                       tetris_error *err);
/* Encodes a (as the push sends it: compact, fields in the order above);
 * malloc'd, *len set. */
char *oci_artifact_to_json(const oci_artifact *a, size_t *len, tetris_error *err);
void oci_artifact_free(oci_artifact *a);

/* Builds the artifact of m (digests computed) whose config blob and
 * non-weight layer are the given digests and sizes: one tensor layer per
 * distinct identity, in model order. */
int oci_artifact_from_model(const struct model *m, const tensor_digest *config_digest,
                            uint64_t config_size, const tensor_digest *graph_digest,
                            uint64_t graph_size, oci_artifact **out, tetris_error *err);

/* Holds the config, decoded (manifest_parse), to a: see the top. */
int oci_artifact_check_model(const oci_artifact *a, const struct model *m, tetris_error *err);

/* A tensor layer's size for meta: tensor_digest_header's length + nbytes. */
uint64_t oci_tensor_blob_size(const tensor_meta *meta);

/* "sha256:" + 64 lowercase hex digits into *out; TETRIS_E_FORMAT else. */
int oci_digest_parse(const char *s, tensor_digest *out, tetris_error *err);
/* "sha256:<hex>" into out. */
void oci_digest_format(const tensor_digest *d, char out[7 + TENSOR_DIGEST_HEX_LEN + 1]);

/* ---- references ---- */

#define OCI_HOST_MAX 255
#define OCI_REPO_MAX 255
#define OCI_TAG_MAX 128

typedef struct oci_ref {
    char host[OCI_HOST_MAX + 1]; /* as written, brackets of an IPv6 address included */
    unsigned port;               /* 0: none given (443) */
    char repo[OCI_REPO_MAX + 1];
    char tag[OCI_TAG_MAX + 1]; /* "" when pinned by digest */
    bool has_digest;
    tensor_digest digest;
} oci_ref;

/* Parses oci://HOST[:PORT]/REPO[:TAG|@sha256:HEX]; TETRIS_E_INVAL naming
 * what is wrong. */
int oci_ref_parse(const char *s, oci_ref *out, tetris_error *err);
/* Whether s starts with "oci://" (a reference, not a file). */
bool oci_ref_is(const char *s);
/* "HOST:PORT" (the port 443 when none was given) into out. */
void oci_ref_authority(const oci_ref *r, char *out, size_t cap);
/* HOST[:PORT] (a registry's address, as in a reference), len bytes of s,
 * into host and *port (0 when none is given); TETRIS_E_INVAL naming what
 * is wrong. */
int oci_authority_parse(const char *s, size_t len, char host[OCI_HOST_MAX + 1], unsigned *port,
                        tetris_error *err);

/* ---- credentials and trust (oci_auth.c) ----
 *
 * Credentials come from a file in the form of a Kubernetes Secret of type
 * kubernetes.io/dockerconfigjson (its .dockerconfigjson key, what
 * `docker login` writes to config.json):
 *
 *   {"auths": {"registry.example:5000": {"auth": "<base64 of user:password>"},
 *              "https://other.example": {"username": "u", "password": "p"}}}
 *
 * A key is a registry's HOST[:PORT], optionally after "http://" or
 * "https://" and before a path (both ignored); no port means 443, as in a
 * reference. An entry has "auth", or "username" and "password", or all
 * three agreeing; "email" is ignored, "identitytoken" and "registrytoken"
 * (OAuth refresh tokens) are refused as unsupported, any other key is an
 * error. Top-level members other than "auths" (a docker config.json's
 * credsStore, credHelpers, ...) are ignored: no helper is ever run. The
 * file is at most OCI_CREDENTIALS_FILE_MAX bytes, at most
 * OCI_CREDENTIALS_MAX entries, a registry named once; a username is
 * non-empty without ':' and neither it nor the password holds a control
 * character (they become a header). Errors are TETRIS_E_FORMAT naming the
 * entry and field, never a value: a secret is never in a message or log. */

#define OCI_CREDENTIALS_FILE_MAX (256u << 10)
#define OCI_CREDENTIALS_MAX 256
#define OCI_USERNAME_MAX 256
#define OCI_PASSWORD_MAX 8192
#define OCI_TOKEN_MAX (16u << 10)       /* a bearer token */
#define OCI_TOKEN_REPLY_MAX (64u << 10) /* the token server's whole reply */
#define OCI_CHALLENGE_PARAM_MAX 1024    /* a challenge's realm, service or scope */
#define OCI_CA_FILE_MAX (4u << 20)

typedef struct oci_credential {
    char host[OCI_HOST_MAX + 1]; /* lowercase */
    unsigned port;               /* 0: none written (443) */
    char *username, *password;
} oci_credential;

typedef struct oci_credentials {
    size_t n;
    oci_credential *entries;
} oci_credentials;

/* Decodes a credentials document (what = its name in messages). */
int oci_credentials_parse(const char *json, size_t len, const char *what, oci_credentials **out,
                          tetris_error *err);
/* Reads and decodes the file at path; TETRIS_E_NOTFOUND, TETRIS_E_IO as
 * file_read_all's. */
int oci_credentials_read(const char *path, oci_credentials **out, tetris_error *err);
/* The entry for host:port (port 0: 443), host compared without case; NULL
 * if none. */
const oci_credential *oci_credentials_find(const oci_credentials *c, const char *host,
                                           unsigned port);
/* Frees c, its secrets overwritten first. */
void oci_credentials_free(oci_credentials *c);

/* A registry's WWW-Authenticate challenge (RFC 7235: one challenge, its
 * parameters tokens or quoted strings): Basic, or Bearer with the token
 * server's realm (an absolute http(s) URL), service and scope. */
enum oci_auth_scheme {
    OCI_AUTH_BASIC = 1,
    OCI_AUTH_BEARER,
};

typedef struct oci_challenge {
    enum oci_auth_scheme scheme;
    char realm[OCI_CHALLENGE_PARAM_MAX];
    char service[OCI_CHALLENGE_PARAM_MAX];
    char scope[OCI_CHALLENGE_PARAM_MAX];
} oci_challenge;

/* TETRIS_E_PROTOCOL naming what is wrong: another scheme, a parameter
 * twice or too long, Bearer without a realm. */
int oci_challenge_parse(const char *header, oci_challenge *out, tetris_error *err);
/* The token server's reply ({"token": ...} or {"access_token": ...}, at
 * most OCI_TOKEN_REPLY_MAX bytes; "token" wins when both are there): the
 * token, malloc'd. TETRIS_E_PROTOCOL if it is not JSON, has neither, has
 * a key twice, or a token that is empty, longer than OCI_TOKEN_MAX or not
 * visible ASCII (it becomes a header). The message never quotes it. */
int oci_token_parse(const char *json, size_t len, char **token, tetris_error *err);

/* Whether path is a readable PEM file (at most OCI_CA_FILE_MAX) holding
 * at least one certificate: a CA bundle, checked when it is named rather
 * than at the first TLS handshake. */
int oci_ca_file_check(const char *path, tetris_error *err);

/* ---- a registry's calls (OCI distribution API) ----
 * Every call goes through oci_send (oci_transport.c): one request with a
 * time limit, its reply capped; a 3xx is never followed by libcurl, and an
 * upload's Location must name the registry itself (a relative one, or the
 * same scheme, host and port): a registry cannot send our bytes or
 * questions elsewhere. Errors: TETRIS_E_HTTP for an unexpected status (the
 * message has it and the registry's words), TETRIS_E_DENIED for a refused
 * authentication or target, TETRIS_E_PROTOCOL for a reply we cannot use,
 * and httpclient.h's.
 *
 * Schemes (decided as docker does): https:// unless the operator says a
 * host is plain HTTP (the daemon's --registries entry "http://HOST:PORT");
 * a loopback host (127.0.0.0/8, ::1, localhost) and a push's --insecure
 * registry are tried over TLS first and fall back to plain HTTP only when
 * the host does not speak TLS at all (never when its certificate fails).
 * A redirect or token realm that is plain http:// must name a host that
 * may be plain HTTP. A reference without a port means 443.
 *
 * Authentication follows the registry's WWW-Authenticate challenge: a
 * request answered 401 is sent again with credentials (Basic: the
 * credentials file's entry for the registry; Bearer: a token from the
 * realm, asked with those credentials or anonymously, for the challenge's
 * service and scope), at most twice. The credentials go only to the
 * registry's own host:port and its token realm (which, for the daemon,
 * must be on the list like any host), never to a redirect's target. A
 * token is shared by the registry's copies (a pull's threads) and asked
 * again when the registry stops taking it. */

/* How a host may be reached. */
enum oci_scheme {
    OCI_SCHEME_HTTPS = 0,     /* TLS only */
    OCI_SCHEME_HTTP,          /* plain HTTP: the operator said so */
    OCI_SCHEME_HTTPS_OR_HTTP, /* TLS, or plain HTTP if the host does not speak TLS */
};

/* Whether a request may go to HOST:PORT, and how: 0 with *resolve filled
 * ("HOST:PORT:ADDRESS", the address to connect to, checked once and
 * pinned; "" to let the name resolve) and *scheme, or a failure that stops
 * the request unsent (the node daemon's allow-list, reclaimer/pull.h). */
typedef int (*oci_admit_fn)(void *ctx, const char *host, unsigned port, char *resolve, size_t cap,
                            enum oci_scheme *scheme, tetris_error *err);
#define OCI_RESOLVE_MAX (OCI_HOST_MAX + 80)
#define OCI_MAX_REDIRECTS 4 /* a blob's, each to an admitted host */

/* Retries (oci_call, a blob's download, an upload): 429, 5xx and
 * transport failures (no connection, a dropped one, a timeout) are tried
 * again, at most OCI_MAX_ATTEMPTS times in all, after an exponential
 * backoff from OCI_BACKOFF_BASE_MS to OCI_BACKOFF_MAX_MS with jitter in
 * [d/2, d], or the reply's Retry-After (seconds) when it gives one, at
 * most OCI_RETRY_AFTER_MAX_S. */
#define OCI_MAX_ATTEMPTS 5
#define OCI_BACKOFF_BASE_MS 250
#define OCI_BACKOFF_MAX_MS 8000
#define OCI_RETRY_AFTER_MAX_S 30

typedef struct oci_options {
    long timeout_ms;                    /* per request */
    const char *ca_file;                /* NULL: the system's CA certificates */
    const oci_credentials *credentials; /* borrowed, outlives the registry; NULL: none */
    bool insecure; /* without admit: the registry may fall back to plain HTTP */
    /* NULL: any host (tetris-registry push, the user's own command); else
     * asked before every request, redirects and token realms included. */
    oci_admit_fn admit;
    void *admit_ctx;
} oci_options;

typedef struct oci_session oci_session; /* oci_transport.c */

typedef struct oci_registry {
    char base[OCI_HOST_MAX + 32]; /* "https://HOST:PORT", or http:// once it is plain */
    char host[OCI_HOST_MAX + 1];
    unsigned port;
    char repo[OCI_REPO_MAX + 1];
    long timeout_ms;     /* per request */
    uint64_t requests;   /* requests made (tests count them) */
    uint64_t bytes_sent; /* blob and manifest bytes uploaded */
    oci_admit_fn admit;
    void *admit_ctx;
    /* The scheme found, the credentials and the current Authorization,
     * shared by copies of this registry (one per thread): only the
     * oci_registry_open'ed one is closed. */
    oci_session *session;
} oci_registry;

int oci_registry_open(oci_registry *r, const oci_ref *ref, const oci_options *o, tetris_error *err);
void oci_registry_close(oci_registry *r);

/* ---- the transport the calls share (oci_transport.c) ---- */

#define OCI_SEND_ANONYMOUS 1u /* the token request: no session credentials, no 401 handling */

/* One request to rq->url (absolute), as described above: the target
 * admitted and pinned, its scheme held to its host's (falling back once
 * to plain HTTP where allowed), the registry's own requests given the
 * session's Authorization and their 401 answered. The reply's status is
 * the caller's to judge, but for 401 after authenticating
 * (TETRIS_E_DENIED). */
int oci_send(oci_registry *r, httpclient_request *rq, unsigned flags, tetris_error *err);
/* oci_send, tried again as OCI_MAX_ATTEMPTS says. A 429 or 5xx still
 * there after the last attempt is TETRIS_E_UNAVAILABLE. For requests
 * that may be repeated as they are (not a PATCH of an upload, nor a
 * download handing bytes to a sink). */
int oci_call(oci_registry *r, httpclient_request *rq, unsigned flags, tetris_error *err);
/* Whether the outcome (rc of oci_send, rq's reply) is worth another try;
 * and how long to wait before try number attempt + 1. */
bool oci_retryable(const httpclient_request *rq, int rc);
long oci_retry_delay_ms(const httpclient_request *rq, int attempt);

/* ---- a pull's calls (oci_fetch.c): every request admitted first ---- */

/* GETs the manifest by reference (a tag, or "sha256:<hex>") into *json
 * (malloc'd, NUL-terminated, at most OCI_MANIFEST_MAX_BYTES) and its
 * SHA-256 into *digest. A redirect is TETRIS_E_PROTOCOL (a manifest comes
 * from the registry named), a manifest the registry does not have
 * TETRIS_E_NOTFOUND. The caller compares *digest with a pinned one and
 * decodes the document (oci_artifact_parse checks its media type). */
int oci_manifest_get(oci_registry *r, const char *reference, char **json, size_t *len,
                     tensor_digest *digest, tetris_error *err);

/* Hands blob d's bytes, exactly size of them, to sink in pieces, each
 * byte once and in order (httpclient.h's sink: it may refuse with a
 * negative code). A redirect (3xx with a Location) is followed by hand, at
 * most OCI_MAX_REDIRECTS times, each target admitted like the registry
 * itself (a relative Location stays on the host that sent it) and sent no
 * credentials. A transfer that breaks (a dropped connection, a timeout,
 * 429, 5xx) is tried again as OCI_MAX_ATTEMPTS says, from the registry's
 * URL, resumed where it stopped: "Range: bytes=N-", whose 206 must start
 * at N; a 200 sends the whole blob again and its first N bytes are passed
 * over. A reply longer than size is cut off and TETRIS_E_CORRUPT, one
 * still short after the last attempt TETRIS_E_CORRUPT ("ended after"), a
 * refused redirect TETRIS_E_DENIED. Verifying the bytes (the whole blob's
 * digest) is the sink's. */
int oci_blob_get(oci_registry *r, const tensor_digest *d, uint64_t size,
                 int (*sink)(void *ctx, const void *data, size_t len, tetris_error *err),
                 void *sink_ctx, tetris_error *err);

/* HEAD the blob: *present, and its size when present. */
int oci_blob_exists(oci_registry *r, const tensor_digest *d, bool *present, uint64_t *size,
                    tetris_error *err);
/* Asks the registry to mount the blob from repository `from`: *mounted
 * says whether it did (a registry that does not is no error). */
int oci_blob_mount(oci_registry *r, const tensor_digest *d, const char *from, bool *mounted,
                   tetris_error *err);
/* Uploads len bytes as blob d: in one PUT when chunk is 0 or len <= chunk,
 * else in PATCHes of chunk bytes and a closing PUT. The registry checks
 * the digest. A step that meets what oci_retryable retries starts the
 * whole upload again from its POST (a session's state is the registry's),
 * at most OCI_MAX_ATTEMPTS times. */
int oci_blob_upload(oci_registry *r, const tensor_digest *d, const void *data, size_t len,
                    size_t chunk, tetris_error *err);
/* PUTs the manifest under reference (a tag or "sha256:..."); *digest is
 * its digest (the SHA-256 of json, checked against what the registry
 * answers when it answers one). */
int oci_manifest_put(oci_registry *r, const char *reference, const char *json, size_t len,
                     tensor_digest *digest, tetris_error *err);

/* The plain SHA-256 of len bytes (the digest of a blob that is not a
 * tensor, and of a manifest). */
int oci_sha256(const void *data, size_t len, tensor_digest *out, tetris_error *err);

#endif
