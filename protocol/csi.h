/* csi.h - the Container Storage Interface (CSI v1) messages a node plugin
 * serves, and the kubelet's plugin-registration service
 * (pluginregistration.v1), as protocol buffers (common/pbwire.h) over
 * unary gRPC (common/grpc.h). Only what tetris-csi needs: the Identity
 * service, the Node service's capabilities, info, publish and unpublish,
 * and registration. Field numbers are CSI's (container-storage-interface
 * spec, csi.proto) and the kubelet's (pluginregistration/v1/api.proto);
 * each is named where it is read or written, in csi.c.
 *
 * Decoding: every request is read field by field, unknown fields
 * skipped; strings must be valid UTF-8, at most CSI_MAX_STRING bytes
 * without NUL bytes, maps at most CSI_MAX_MAP_ENTRIES entries with
 * distinct keys. What breaks a rule is TETRIS_E_FORMAT naming the field
 * (the server answers INVALID_ARGUMENT). Required fields are the caller's
 * to check (CSI says which error each missing one gets). Fuzzed by
 * fuzz/fuzz_csi.c, unit-tested in tests/protocol/test_csi.c. */
#ifndef TETRIS_PROTOCOL_CSI_H
#define TETRIS_PROTOCOL_CSI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* The methods' paths (package csi.v1, and the kubelet's package
 * pluginregistration). */
#define CSI_PATH_GET_PLUGIN_INFO "/csi.v1.Identity/GetPluginInfo"
#define CSI_PATH_GET_PLUGIN_CAPABILITIES "/csi.v1.Identity/GetPluginCapabilities"
#define CSI_PATH_PROBE "/csi.v1.Identity/Probe"
#define CSI_PATH_CONTROLLER_GET_CAPABILITIES "/csi.v1.Controller/ControllerGetCapabilities"
#define CSI_PATH_NODE_GET_CAPABILITIES "/csi.v1.Node/NodeGetCapabilities"
#define CSI_PATH_NODE_GET_INFO "/csi.v1.Node/NodeGetInfo"
#define CSI_PATH_NODE_PUBLISH_VOLUME "/csi.v1.Node/NodePublishVolume"
#define CSI_PATH_NODE_UNPUBLISH_VOLUME "/csi.v1.Node/NodeUnpublishVolume"
#define CSI_PATH_REGISTRATION_GET_INFO "/pluginregistration.Registration/GetInfo"
#define CSI_PATH_REGISTRATION_NOTIFY "/pluginregistration.Registration/NotifyRegistrationStatus"

/* What the kubelet puts in a volume's context with podInfoOnMount. */
#define CSI_CONTEXT_PREFIX "csi.storage.k8s.io/"
#define CSI_CONTEXT_POD_NAME "csi.storage.k8s.io/pod.name"
#define CSI_CONTEXT_POD_NAMESPACE "csi.storage.k8s.io/pod.namespace"
#define CSI_CONTEXT_POD_UID "csi.storage.k8s.io/pod.uid"
#define CSI_CONTEXT_SERVICE_ACCOUNT "csi.storage.k8s.io/serviceAccount.name"
#define CSI_CONTEXT_EPHEMERAL "csi.storage.k8s.io/ephemeral"

/* The registration's plugin type and the CSI versions we speak. */
#define CSI_PLUGIN_TYPE "CSIPlugin"
#define CSI_SUPPORTED_VERSION "1.0.0"

#define CSI_MAX_STRING 4096
#define CSI_MAX_MAP_ENTRIES 64

struct csi_kv {
    char *key, *value;
};

/* VolumeCapability.access_type and AccessMode.Mode. */
enum csi_access_type { CSI_ACCESS_NONE = 0, CSI_ACCESS_BLOCK, CSI_ACCESS_MOUNT };

struct csi_publish_request {
    char *volume_id; /* "" when absent, as every string here */
    char *target_path;
    char *staging_target_path;
    bool has_capability;
    enum csi_access_type access_type;
    char *fs_type;
    uint32_t access_mode; /* VolumeCapability.AccessMode.Mode */
    bool readonly;
    struct csi_kv *context; /* volume_context */
    size_t n_context;
    size_t n_secrets; /* counted, never kept */
};

struct csi_unpublish_request {
    char *volume_id;
    char *target_path;
};

struct csi_registration_status {
    bool registered;
    char *error;
};

/* Decoders: 0, or -TETRIS_E_FORMAT / -TETRIS_E_NOMEM; on failure nothing
 * is left to free. The _free calls take what a decoder filled (or a
 * zeroed struct). */
int csi_decode_publish(const uint8_t *buf, size_t len, struct csi_publish_request *out,
                       tetris_error *err);
void csi_publish_request_free(struct csi_publish_request *r);
int csi_decode_unpublish(const uint8_t *buf, size_t len, struct csi_unpublish_request *out,
                         tetris_error *err);
void csi_unpublish_request_free(struct csi_unpublish_request *r);
int csi_decode_registration_status(const uint8_t *buf, size_t len,
                                   struct csi_registration_status *out, tetris_error *err);
void csi_registration_status_free(struct csi_registration_status *r);
/* A request with no fields we read (GetPluginInfoRequest, ProbeRequest,
 * ...): only that it is well-formed protobuf. */
int csi_decode_empty(const uint8_t *buf, size_t len, tetris_error *err);
/* The value of key in r's volume context, NULL if absent. */
const char *csi_context_get(const struct csi_publish_request *r, const char *key);

/* Encoders: *out malloc'd (the gRPC reply's body), 0 or -TETRIS_E_NOMEM. */
int csi_encode_plugin_info(const char *name, const char *version, uint8_t **out, size_t *len,
                           tetris_error *err);
/* No capability: a node plugin without controller service, accessibility
 * constraints or expansion. */
int csi_encode_plugin_capabilities(uint8_t **out, size_t *len, tetris_error *err);
int csi_encode_probe(bool ready, uint8_t **out, size_t *len, tetris_error *err);
/* The Controller service is not offered (GetPluginCapabilities lists no
 * CONTROLLER_SERVICE) and the kubelet never asks, but a CO or a conformance
 * suite may ask for its capabilities: one capability of type UNKNOWN,
 * since an empty list reads as a missing one to Go's protobuf (csi-sanity
 * refuses it). */
int csi_encode_controller_capabilities(uint8_t **out, size_t *len, tetris_error *err);
/* No capability: no staging, stats, expansion. */
int csi_encode_node_capabilities(uint8_t **out, size_t *len, tetris_error *err);
int csi_encode_node_info(const char *node_id, int64_t max_volumes, uint8_t **out, size_t *len,
                         tetris_error *err);
/* An empty message (NodePublishVolumeResponse, RegistrationStatusResponse,
 * ...). */
int csi_encode_empty(uint8_t **out, size_t *len, tetris_error *err);
int csi_encode_registration_info(const char *driver_name, const char *endpoint, uint8_t **out,
                                 size_t *len, tetris_error *err);

#endif
