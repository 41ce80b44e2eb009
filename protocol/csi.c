/* csi.c - encoding and decoding the CSI and plugin-registration messages
 * of csi.h. Field numbers are written where they are used, with the
 * message and field they belong to. */
#include "protocol/csi.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/pbwire.h"
#include "common/utf8.h"

/* Replies are small: a name, a node id, an endpoint. */
#define CSI_MAX_REPLY_BYTES (64u << 10)

/* ---- decoding ---- */

/* A LEN field as a string of ours: UTF-8, no NUL, bounded. */
static int take_string(const struct pb_field *f, const char *what, char **out, tetris_error *err)
{
    if (f->wire_type != PB_WT_LEN)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not a string (wire type %d)", what,
                           (int)f->wire_type);
    if (f->len > CSI_MAX_STRING)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: %zu bytes, over the limit of %d", what,
                           f->len, CSI_MAX_STRING);
    if (memchr(f->data, '\0', f->len) != NULL || !utf8_valid((const char *)f->data, f->len))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not a UTF-8 string without NUL bytes",
                           what);
    char *s = malloc(f->len + 1);
    if (s == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    memcpy(s, f->data, f->len);
    s[f->len] = '\0';
    free(*out); /* a repeated scalar field: the last one wins */
    *out = s;
    return 0;
}

static int take_bool(const struct pb_field *f, const char *what, bool *out, tetris_error *err)
{
    if (f->wire_type != PB_WT_VARINT)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not a bool", what);
    *out = f->value != 0;
    return 0;
}

/* Missing strings read as "". */
static int default_string(char **s, tetris_error *err)
{
    if (*s == NULL && (*s = strdup("")) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    return 0;
}

/* A map<string, string> entry into a bounded list of distinct keys. */
static int take_map_entry(const struct pb_field *f, const char *what, struct csi_kv **list,
                          size_t *n, tetris_error *err)
{
    if (f->wire_type != PB_WT_LEN)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not a map entry", what);
    if (*n == CSI_MAX_MAP_ENTRIES)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: more than %d entries", what,
                           CSI_MAX_MAP_ENTRIES);
    const uint8_t *k, *v;
    size_t klen, vlen;
    int r = pb_map_entry(f->data, f->len, &k, &klen, &v, &vlen, err);
    if (r < 0)
        return tetris_wrap(err, "%s", what);
    struct pb_field kf = {.wire_type = PB_WT_LEN, .data = k, .len = klen};
    struct pb_field vf = {.wire_type = PB_WT_LEN, .data = v, .len = vlen};
    struct csi_kv kv = {0};
    if ((r = take_string(&kf, what, &kv.key, err)) < 0 ||
        (r = take_string(&vf, what, &kv.value, err)) < 0) {
        free(kv.key);
        return r;
    }
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*list)[i].key, kv.key) == 0) {
            r = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: key %s twice", what, kv.key);
            free(kv.key);
            free(kv.value);
            return r;
        }
    struct csi_kv *l = realloc(*list, (*n + 1) * sizeof(**list));
    if (l == NULL) {
        free(kv.key);
        free(kv.value);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    }
    l[(*n)++] = kv;
    *list = l;
    return 0;
}

/* VolumeCapability: block = 1 (BlockVolume, empty), mount = 2
 * (MountVolume: fs_type = 1, mount_flags = 2, volume_mount_group = 3),
 * access_mode = 3 (AccessMode: mode = 1). */
static int decode_capability(const struct pb_field *cap, struct csi_publish_request *out,
                             tetris_error *err)
{
    pb_reader r, sub;
    struct pb_field f, g;
    int rc;
    if (cap->wire_type != PB_WT_LEN)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "volume_capability: not a message");
    pb_reader_init(&r, cap->data, cap->len);
    while ((rc = pb_next(&r, &f, err)) > 0) {
        if (f.number < 1 || f.number > 3)
            continue;
        if (f.wire_type != PB_WT_LEN)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "volume_capability: field %u is not a "
                               "message",
                               f.number);
        pb_reader_init(&sub, f.data, f.len);
        if (f.number == 1)
            out->access_type = CSI_ACCESS_BLOCK;
        else if (f.number == 2)
            out->access_type = CSI_ACCESS_MOUNT;
        while ((rc = pb_next(&sub, &g, err)) > 0) {
            if (f.number == 2 && g.number == 1 &&
                (rc = take_string(&g, "volume_capability.mount.fs_type", &out->fs_type, err)) < 0)
                return rc;
            if (f.number == 3 && g.number == 1) {
                if (g.wire_type != PB_WT_VARINT || g.value > UINT32_MAX)
                    return tetris_fail(err, TETRIS_E_FORMAT, 0,
                                       "volume_capability.access_mode.mode: not an enum");
                out->access_mode = (uint32_t)g.value;
            }
        }
        if (rc < 0)
            return tetris_wrap(err, "volume_capability");
    }
    if (rc < 0)
        return tetris_wrap(err, "volume_capability");
    out->has_capability = true;
    return 0;
}

/* NodePublishVolumeRequest: volume_id = 1, publish_context = 2,
 * staging_target_path = 3, target_path = 4, volume_capability = 5,
 * readonly = 6, secrets = 7, volume_context = 8. */
static int decode_publish_fields(const uint8_t *buf, size_t len, struct csi_publish_request *out,
                                 tetris_error *err)
{
    pb_reader r;
    struct pb_field f;
    int rc;
    pb_reader_init(&r, buf, len);
    while ((rc = pb_next(&r, &f, err)) > 0) {
        switch (f.number) {
        case 1: rc = take_string(&f, "volume_id", &out->volume_id, err); break;
        case 3: rc = take_string(&f, "staging_target_path", &out->staging_target_path, err); break;
        case 4: rc = take_string(&f, "target_path", &out->target_path, err); break;
        case 5: rc = decode_capability(&f, out, err); break;
        case 6: rc = take_bool(&f, "readonly", &out->readonly, err); break;
        case 7:
            /* Secrets are never kept; only counted, so none is logged. */
            if (f.wire_type != PB_WT_LEN || ++out->n_secrets > CSI_MAX_MAP_ENTRIES)
                rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "secrets: bad or too many entries");
            break;
        case 8:
            rc = take_map_entry(&f, "volume_context", &out->context, &out->n_context, err);
            break;
        default: break; /* publish_context, and what a newer CSI adds */
        }
        if (rc < 0)
            return rc;
    }
    if (rc < 0)
        return rc;
    if ((rc = default_string(&out->volume_id, err)) < 0 ||
        (rc = default_string(&out->target_path, err)) < 0 ||
        (rc = default_string(&out->staging_target_path, err)) < 0 ||
        (rc = default_string(&out->fs_type, err)) < 0)
        return rc;
    return 0;
}

int csi_decode_publish(const uint8_t *buf, size_t len, struct csi_publish_request *out,
                       tetris_error *err)
{
    memset(out, 0, sizeof(*out));
    int rc = decode_publish_fields(buf, len, out, err);
    if (rc < 0) {
        csi_publish_request_free(out);
        return tetris_wrap(err, "NodePublishVolumeRequest");
    }
    return 0;
}

void csi_publish_request_free(struct csi_publish_request *r)
{
    free(r->volume_id);
    free(r->target_path);
    free(r->staging_target_path);
    free(r->fs_type);
    for (size_t i = 0; i < r->n_context; i++) {
        free(r->context[i].key);
        free(r->context[i].value);
    }
    free(r->context);
    memset(r, 0, sizeof(*r));
}

const char *csi_context_get(const struct csi_publish_request *r, const char *key)
{
    for (size_t i = 0; i < r->n_context; i++)
        if (strcmp(r->context[i].key, key) == 0)
            return r->context[i].value;
    return NULL;
}

/* NodeUnpublishVolumeRequest: volume_id = 1, target_path = 2. */
int csi_decode_unpublish(const uint8_t *buf, size_t len, struct csi_unpublish_request *out,
                         tetris_error *err)
{
    pb_reader r;
    struct pb_field f;
    int rc;
    memset(out, 0, sizeof(*out));
    pb_reader_init(&r, buf, len);
    while ((rc = pb_next(&r, &f, err)) > 0) {
        if (f.number == 1)
            rc = take_string(&f, "volume_id", &out->volume_id, err);
        else if (f.number == 2)
            rc = take_string(&f, "target_path", &out->target_path, err);
        if (rc < 0)
            break;
    }
    if (rc == 0 && (rc = default_string(&out->volume_id, err)) == 0)
        rc = default_string(&out->target_path, err);
    if (rc < 0) {
        csi_unpublish_request_free(out);
        return tetris_wrap(err, "NodeUnpublishVolumeRequest");
    }
    return 0;
}

void csi_unpublish_request_free(struct csi_unpublish_request *r)
{
    free(r->volume_id);
    free(r->target_path);
    memset(r, 0, sizeof(*r));
}

/* RegistrationStatus: plugin_registered = 1, error = 2. */
int csi_decode_registration_status(const uint8_t *buf, size_t len,
                                   struct csi_registration_status *out, tetris_error *err)
{
    pb_reader r;
    struct pb_field f;
    int rc;
    memset(out, 0, sizeof(*out));
    pb_reader_init(&r, buf, len);
    while ((rc = pb_next(&r, &f, err)) > 0) {
        if (f.number == 1)
            rc = take_bool(&f, "plugin_registered", &out->registered, err);
        else if (f.number == 2)
            rc = take_string(&f, "error", &out->error, err);
        if (rc < 0)
            break;
    }
    if (rc == 0)
        rc = default_string(&out->error, err);
    if (rc < 0) {
        csi_registration_status_free(out);
        return tetris_wrap(err, "RegistrationStatus");
    }
    return 0;
}

void csi_registration_status_free(struct csi_registration_status *r)
{
    free(r->error);
    memset(r, 0, sizeof(*r));
}

int csi_decode_empty(const uint8_t *buf, size_t len, tetris_error *err)
{
    pb_reader r;
    struct pb_field f;
    int rc;
    pb_reader_init(&r, buf, len);
    while ((rc = pb_next(&r, &f, err)) > 0)
        ;
    return rc;
}

/* ---- encoding ---- */

/* GetPluginInfoResponse: name = 1, vendor_version = 2. */
int csi_encode_plugin_info(const char *name, const char *version, uint8_t **out, size_t *len,
                           tetris_error *err)
{
    pb_writer w;
    pb_writer_init(&w, CSI_MAX_REPLY_BYTES);
    pb_put_string(&w, 1, name);
    pb_put_string(&w, 2, version);
    return pb_writer_finish(&w, out, len, err);
}

/* GetPluginCapabilitiesResponse: capabilities = 1, none listed. */
int csi_encode_plugin_capabilities(uint8_t **out, size_t *len, tetris_error *err)
{
    return csi_encode_empty(out, len, err);
}

/* ProbeResponse: ready = 1, a google.protobuf.BoolValue (value = 1). */
int csi_encode_probe(bool ready, uint8_t **out, size_t *len, tetris_error *err)
{
    pb_writer w, value;
    pb_writer_init(&w, CSI_MAX_REPLY_BYTES);
    pb_writer_init(&value, CSI_MAX_REPLY_BYTES);
    if (ready)
        pb_put_bool(&value, 1, true);
    pb_put_message(&w, 1, &value);
    pb_writer_free(&value);
    return pb_writer_finish(&w, out, len, err);
}

/* ControllerGetCapabilitiesResponse: capabilities = 1, one
 * ControllerServiceCapability whose rpc = 1 is an RPC of type = 1 UNKNOWN
 * (0, the default, so the RPC message is empty). */
int csi_encode_controller_capabilities(uint8_t **out, size_t *len, tetris_error *err)
{
    pb_writer w, cap, rpc;
    pb_writer_init(&w, CSI_MAX_REPLY_BYTES);
    pb_writer_init(&cap, CSI_MAX_REPLY_BYTES);
    pb_writer_init(&rpc, CSI_MAX_REPLY_BYTES);
    pb_put_message(&cap, 1, &rpc);
    pb_put_message(&w, 1, &cap);
    pb_writer_free(&cap);
    pb_writer_free(&rpc);
    return pb_writer_finish(&w, out, len, err);
}

/* NodeGetCapabilitiesResponse: capabilities = 1, none listed. */
int csi_encode_node_capabilities(uint8_t **out, size_t *len, tetris_error *err)
{
    return csi_encode_empty(out, len, err);
}

/* NodeGetInfoResponse: node_id = 1, max_volumes_per_node = 2 (int64). */
int csi_encode_node_info(const char *node_id, int64_t max_volumes, uint8_t **out, size_t *len,
                         tetris_error *err)
{
    pb_writer w;
    pb_writer_init(&w, CSI_MAX_REPLY_BYTES);
    pb_put_string(&w, 1, node_id);
    if (max_volumes > 0)
        pb_put_varint(&w, 2, (uint64_t)max_volumes);
    return pb_writer_finish(&w, out, len, err);
}

int csi_encode_empty(uint8_t **out, size_t *len, tetris_error *err)
{
    pb_writer w;
    pb_writer_init(&w, CSI_MAX_REPLY_BYTES);
    return pb_writer_finish(&w, out, len, err);
}

/* PluginInfo: type = 1, name = 2, endpoint = 3, supported_versions = 4. */
int csi_encode_registration_info(const char *driver_name, const char *endpoint, uint8_t **out,
                                 size_t *len, tetris_error *err)
{
    pb_writer w;
    pb_writer_init(&w, CSI_MAX_REPLY_BYTES);
    pb_put_string(&w, 1, CSI_PLUGIN_TYPE);
    pb_put_string(&w, 2, driver_name);
    pb_put_string(&w, 3, endpoint);
    pb_put_string(&w, 4, CSI_SUPPORTED_VERSION);
    return pb_writer_finish(&w, out, len, err);
}
