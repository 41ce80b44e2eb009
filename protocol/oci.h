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
    unsigned port;               /* 0: none given (80 for http) */
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
/* "HOST:PORT" (the port 80 when none was given) into out. */
void oci_ref_authority(const oci_ref *r, char *out, size_t cap);
/* HOST[:PORT] (a registry's address, as in a reference), len bytes of s,
 * into host and *port (0 when none is given); TETRIS_E_INVAL naming what
 * is wrong. */
int oci_authority_parse(const char *s, size_t len, char host[OCI_HOST_MAX + 1], unsigned *port,
                        tetris_error *err);

/* ---- a registry's calls (OCI distribution API, plain HTTP) ----
 * Each call is one request with a time limit, its reply capped; a 3xx is
 * never followed, and an upload's Location must name the registry itself
 * (a relative one, or the same scheme, host and port): a registry cannot
 * send our bytes or questions elsewhere. Errors: TETRIS_E_HTTP for an
 * unexpected status (the message has it and the registry's words),
 * TETRIS_E_PROTOCOL for a reply we cannot use, and httpclient.h's. */

/* Whether a request may go to HOST:PORT, and where: 0 with *resolve
 * filled ("HOST:PORT:ADDRESS", the address to connect to, checked once
 * and pinned; "" to let the name resolve), or a failure that stops the
 * request unsent (the node daemon's allow-list, reclaimer/pull.h). */
typedef int (*oci_admit_fn)(void *ctx, const char *host, unsigned port, char *resolve, size_t cap,
                            tetris_error *err);
#define OCI_RESOLVE_MAX (OCI_HOST_MAX + 80)
#define OCI_MAX_REDIRECTS 4 /* a blob's, each to an admitted host */

typedef struct oci_registry {
    char base[OCI_HOST_MAX + 32]; /* "http://HOST:PORT" */
    char host[OCI_HOST_MAX + 1];
    unsigned port;
    char repo[OCI_REPO_MAX + 1];
    long timeout_ms;     /* per request */
    uint64_t requests;   /* requests made (tests count them) */
    uint64_t bytes_sent; /* blob and manifest bytes uploaded */
    /* NULL: any host (tetris-registry push, the user's own command); else
     * asked before every request a pull makes, redirects included. */
    oci_admit_fn admit;
    void *admit_ctx;
} oci_registry;

void oci_registry_init(oci_registry *r, const oci_ref *ref, long timeout_ms);

/* ---- a pull's calls (oci_fetch.c): every request admitted first ---- */

/* GETs the manifest by reference (a tag, or "sha256:<hex>") into *json
 * (malloc'd, NUL-terminated, at most OCI_MANIFEST_MAX_BYTES) and its
 * SHA-256 into *digest. A redirect is TETRIS_E_PROTOCOL (a manifest comes
 * from the registry named), a manifest the registry does not have
 * TETRIS_E_NOTFOUND. The caller compares *digest with a pinned one and
 * decodes the document (oci_artifact_parse checks its media type). */
int oci_manifest_get(oci_registry *r, const char *reference, char **json, size_t *len,
                     tensor_digest *digest, tetris_error *err);

/* Hands blob d's bytes, exactly size of them, to sink in pieces
 * (httpclient.h's sink: it may refuse with a negative code). A redirect
 * (3xx with a Location) is followed by hand, at most OCI_MAX_REDIRECTS
 * times, each target admitted like the registry itself (a relative
 * Location stays on the host that sent it); http:// only. A reply longer
 * than size is cut off and TETRIS_E_CORRUPT, a shorter one (or a broken
 * transfer) TETRIS_E_CORRUPT or TETRIS_E_UNAVAILABLE; a refused redirect
 * TETRIS_E_DENIED. Verifying the bytes is the sink's. */
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
 * the digest. */
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
