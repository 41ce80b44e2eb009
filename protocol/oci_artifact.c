/* oci_artifact.c - a model's OCI artifact: the manifest document's decoder
 * and encoder, and the check of its config against its layers (see
 * oci.h for the format and what is refused). */
#include "protocol/oci.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/utf8.h"
#include "model/model.h"

void oci_digest_format(const tensor_digest *d, char out[7 + TENSOR_DIGEST_HEX_LEN + 1])
{
    memcpy(out, "sha256:", 7);
    tensor_digest_to_hex(d, out + 7);
}

int oci_digest_parse(const char *s, tensor_digest *out, tetris_error *err)
{
    if (strncmp(s, "sha256:", 7) != 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "digest '%.80s' is not sha256:", s);
    const char *hex = s + 7;
    size_t n = strlen(hex);
    if (n != TENSOR_DIGEST_HEX_LEN || strspn(hex, "0123456789abcdef") != n)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "digest '%.80s' is not 64 lowercase hex digits after sha256:", s);
    return tensor_digest_from_hex(hex, out, err);
}

uint64_t oci_tensor_blob_size(const tensor_meta *meta)
{
    uint8_t header[TENSOR_DIGEST_HEADER_MAX];
    return tensor_digest_header(meta, header) + meta->nbytes;
}

void oci_artifact_free(oci_artifact *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->n_tensors; i++)
        free(a->tensors[i].name);
    free(a->tensors);
    free(a->model);
    free(a);
}

/* ---- decoding ---- */

static const struct {
    const char *media_type;
    enum oci_layer_kind kind;
    uint64_t max_size;
} layer_types[] = {
    {OCI_ONNX_GRAPH_MEDIA_TYPE, OCI_LAYER_ONNX_GRAPH, OCI_GRAPH_MAX_BYTES},
    {OCI_SAFETENSORS_HEADER_MEDIA_TYPE, OCI_LAYER_SAFETENSORS_HEADER, OCI_GRAPH_MAX_BYTES},
    {OCI_TENSOR_MEDIA_TYPE, OCI_LAYER_TENSOR, OCI_TENSOR_MAX_BYTES + TENSOR_DIGEST_HEADER_MAX},
};

static const char *string_member(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* An annotation's value (NULL when absent); a non-string, an over-long or
 * a non-UTF-8 one is an error. */
static int annotation(const json_t *desc, const char *key, const char *where, char **out,
                      tetris_error *err)
{
    *out = NULL;
    const json_t *ann = json_object_get(desc, "annotations");
    if (ann == NULL)
        return 0;
    if (!json_is_object(ann))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: \"annotations\" is not an object", where);
    const char *k;
    const json_t *v;
    json_object_foreach ((json_t *)ann, k, v) {
        if (!json_is_string(v))
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: annotation \"%.80s\" is not a string",
                               where, k);
    }
    const json_t *v2 = json_object_get(ann, key);
    if (v2 == NULL)
        return 0;
    size_t len = json_string_length(v2);
    const char *s = json_string_value(v2);
    if (len == 0 || len > OCI_NAME_MAX || strlen(s) != len || !utf8_valid(s, len))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: annotation \"%s\" is empty, over %d bytes or not UTF-8", where, key,
                           OCI_NAME_MAX);
    if ((*out = strdup(s)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", where);
    return 0;
}

/* Decodes one descriptor; kind is set from its media type (config: only
 * OCI_CONFIG_MEDIA_TYPE). */
static int descriptor(const json_t *d, const char *where, bool is_config, oci_descriptor *out,
                      tetris_error *err)
{
    if (!json_is_object(d))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not an object", where);
    const char *media_type = string_member(d, "mediaType");
    const char *digest = string_member(d, "digest");
    const json_t *size = json_object_get(d, "size");
    if (media_type == NULL || digest == NULL || !json_is_integer(size))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: needs string \"mediaType\", \"digest\" and integer \"size\"",
                           where);
    uint64_t max_size = 0;
    if (is_config) {
        if (strcmp(media_type, OCI_CONFIG_MEDIA_TYPE) != 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: mediaType \"%.80s\" is not %s", where,
                               media_type, OCI_CONFIG_MEDIA_TYPE);
        out->kind = OCI_LAYER_CONFIG;
        max_size = OCI_CONFIG_MAX_BYTES;
    } else {
        size_t i;
        for (i = 0; i < sizeof layer_types / sizeof layer_types[0]; i++)
            if (strcmp(media_type, layer_types[i].media_type) == 0)
                break;
        if (i == sizeof layer_types / sizeof layer_types[0])
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: unknown mediaType \"%.80s\"", where,
                               media_type);
        out->kind = layer_types[i].kind;
        max_size = layer_types[i].max_size;
    }
    json_int_t n = json_integer_value(size);
    if (n < 0 || (uint64_t)n > max_size)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: size %" JSON_INTEGER_FORMAT " is outside [0, %" PRIu64 "]", where,
                           n, max_size);
    out->size = (uint64_t)n;
    int rc = oci_digest_parse(digest, &out->digest, err);
    if (rc < 0)
        return tetris_wrap(err, "%s", where);
    out->name = NULL;
    if (out->kind == OCI_LAYER_TENSOR)
        return annotation(d, OCI_ANNOTATION_TENSOR_NAME, where, &out->name, err);
    return 0;
}

static int decode(const json_t *root, const char *what, oci_artifact *a, tetris_error *err)
{
    if (!json_is_object(root))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not a JSON object", what);
    const json_t *version = json_object_get(root, "schemaVersion");
    if (!json_is_integer(version) || json_integer_value(version) != 2)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: \"schemaVersion\" is not 2", what);
    const char *media_type = string_member(root, "mediaType");
    if (media_type == NULL || strcmp(media_type, OCI_MANIFEST_MEDIA_TYPE) != 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: \"mediaType\" is not %s", what,
                           OCI_MANIFEST_MEDIA_TYPE);
    const char *artifact_type = string_member(root, "artifactType");
    if (artifact_type == NULL || strcmp(artifact_type, OCI_ARTIFACT_TYPE) != 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: \"artifactType\" is not %s", what,
                           OCI_ARTIFACT_TYPE);
    char where[96];
    snprintf(where, sizeof where, "%s: config", what);
    int rc = descriptor(json_object_get(root, "config"), where, true, &a->config, err);
    if (rc < 0)
        return rc;
    snprintf(where, sizeof where, "%s: manifest", what);
    if ((rc = annotation(root, OCI_ANNOTATION_MODEL, where, &a->model, err)) < 0)
        return rc;

    const json_t *layers = json_object_get(root, "layers");
    if (!json_is_array(layers) || json_array_size(layers) == 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: \"layers\" is not a non-empty array",
                           what);
    size_t n = json_array_size(layers);
    if (n - 1 > OCI_MAX_TENSOR_LAYERS)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: %zu layers, more than %d tensors", what, n,
                           OCI_MAX_TENSOR_LAYERS);
    if ((a->tensors = calloc(n, sizeof *a->tensors)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", what);
    for (size_t i = 0; i < n; i++) {
        oci_descriptor d;
        snprintf(where, sizeof where, "%s: layers[%zu]", what, i);
        if ((rc = descriptor(json_array_get(layers, i), where, false, &d, err)) < 0)
            return rc;
        if (i == 0) {
            if (d.kind == OCI_LAYER_TENSOR) {
                free(d.name);
                return tetris_fail(err, TETRIS_E_FORMAT, 0,
                                   "%s: the first layer is not the model's graph or header", where);
            }
            a->graph = d;
            continue;
        }
        if (d.kind != OCI_LAYER_TENSOR)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: a second non-weight layer", where);
        a->tensors[a->n_tensors++] = d;
    }
    return 0;
}

static int compare_digests(const void *a, const void *b)
{
    return memcmp(((const oci_descriptor *)a)->digest.bytes,
                  ((const oci_descriptor *)b)->digest.bytes, TENSOR_DIGEST_BYTES);
}

/* Refuses a tensor identity listed twice (a copy sorted by digest). */
static int check_distinct(const oci_artifact *a, const char *what, tetris_error *err)
{
    if (a->n_tensors < 2)
        return 0;
    oci_descriptor *sorted = malloc(a->n_tensors * sizeof *sorted);
    if (sorted == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", what);
    memcpy(sorted, a->tensors, a->n_tensors * sizeof *sorted);
    qsort(sorted, a->n_tensors, sizeof *sorted, compare_digests);
    int rc = 0;
    for (size_t i = 1; i < a->n_tensors && rc == 0; i++)
        if (compare_digests(&sorted[i - 1], &sorted[i]) == 0) {
            char hex[7 + TENSOR_DIGEST_HEX_LEN + 1];
            oci_digest_format(&sorted[i].digest, hex);
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: tensor layer %s listed twice", what,
                             hex);
        }
    free(sorted);
    return rc;
}

int oci_artifact_parse(const char *json, size_t len, const char *what, oci_artifact **out,
                       tetris_error *err)
{
    *out = NULL;
    if (len > OCI_MANIFEST_MAX_BYTES)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: %zu bytes, more than %u", what, len,
                           OCI_MANIFEST_MAX_BYTES);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: not JSON: %s (line %d)", what, jerr.text,
                           jerr.line);
    oci_artifact *a = calloc(1, sizeof *a);
    int rc = a == NULL ? tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", what)
                       : decode(root, what, a, err);
    json_decref(root);
    if (rc == 0)
        rc = check_distinct(a, what, err);
    if (rc < 0) {
        oci_artifact_free(a);
        return rc;
    }
    *out = a;
    return 0;
}

/* ---- encoding ---- */

static json_t *descriptor_json(const char *media_type, const oci_descriptor *d)
{
    char digest[7 + TENSOR_DIGEST_HEX_LEN + 1];
    oci_digest_format(&d->digest, digest);
    json_t *j = json_pack("{s:s, s:s, s:I}", "mediaType", media_type, "digest", digest, "size",
                          (json_int_t)d->size);
    if (j != NULL && d->name != NULL &&
        json_object_set_new(j, "annotations",
                            json_pack("{s:s}", OCI_ANNOTATION_TENSOR_NAME, d->name)) < 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

char *oci_artifact_to_json(const oci_artifact *a, size_t *len, tetris_error *err)
{
    const char *graph_type = a->graph.kind == OCI_LAYER_ONNX_GRAPH
                                 ? OCI_ONNX_GRAPH_MEDIA_TYPE
                                 : OCI_SAFETENSORS_HEADER_MEDIA_TYPE;
    json_t *layers = json_array();
    bool ok = layers != NULL &&
              json_array_append_new(layers, descriptor_json(graph_type, &a->graph)) == 0;
    for (size_t i = 0; ok && i < a->n_tensors; i++)
        ok = json_array_append_new(layers,
                                   descriptor_json(OCI_TENSOR_MEDIA_TYPE, &a->tensors[i])) == 0;
    json_t *root = NULL;
    if (ok)
        root = json_pack("{s:i, s:s, s:s, s:o, s:O}", "schemaVersion", 2, "mediaType",
                         OCI_MANIFEST_MEDIA_TYPE, "artifactType", OCI_ARTIFACT_TYPE, "config",
                         descriptor_json(OCI_CONFIG_MEDIA_TYPE, &a->config), "layers", layers);
    json_decref(layers);
    if (root != NULL && a->model != NULL &&
        json_object_set_new(root, "annotations",
                            json_pack("{s:s}", OCI_ANNOTATION_MODEL, a->model)) < 0) {
        json_decref(root);
        root = NULL;
    }
    char *text = root != NULL ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "encoding the OCI manifest"), NULL;
    *len = strlen(text);
    return text;
}

/* ---- the artifact of a model, and a config held to its artifact ---- */

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

static const model *sort_model; /* qsort has no context argument */

static int compare_tensor_index(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int c = memcmp(sort_model->tensors[i].meta.digest.bytes,
                   sort_model->tensors[j].meta.digest.bytes, TENSOR_DIGEST_BYTES);
    return c != 0 ? c : (i > j) - (i < j);
}

/* Marks, per identity, the first tensor of m that has it (sorting indices
 * by digest, then position: 200,000 tensors make a pairwise scan slow). */
static int first_of_each_digest(const model *m, bool **out, tetris_error *err)
{
    static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;
    size_t n = m->n_tensors;
    size_t *order = malloc((n + 1) * sizeof *order);
    bool *first = calloc(n + 1, sizeof *first);
    if (order == NULL || first == NULL) {
        free(order);
        free(first);
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "building the OCI manifest");
    }
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    pthread_mutex_lock(&sort_lock);
    sort_model = m;
    qsort(order, n, sizeof *order, compare_tensor_index);
    pthread_mutex_unlock(&sort_lock);
    for (size_t k = 0; k < n; k++)
        first[order[k]] = k == 0 || !tensor_digest_equal(&m->tensors[order[k - 1]].meta.digest,
                                                         &m->tensors[order[k]].meta.digest);
    free(order);
    *out = first;
    return 0;
}

int oci_artifact_from_model(const model *m, const tensor_digest *config_digest,
                            uint64_t config_size, const tensor_digest *graph_digest,
                            uint64_t graph_size, oci_artifact **out, tetris_error *err)
{
    *out = NULL;
    oci_artifact *a = calloc(1, sizeof *a);
    if (a == NULL || (a->tensors = calloc(m->n_tensors + 1, sizeof *a->tensors)) == NULL ||
        (a->model = strdup(base_name(m->path))) == NULL) {
        oci_artifact_free(a);
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "building the OCI manifest");
    }
    a->config = (oci_descriptor){.kind = OCI_LAYER_CONFIG,
                                 .digest = *config_digest,
                                 .size = config_size};
    a->graph = (oci_descriptor){.kind = strcmp(m->format, "onnx") == 0
                                            ? OCI_LAYER_ONNX_GRAPH
                                            : OCI_LAYER_SAFETENSORS_HEADER,
                                .digest = *graph_digest,
                                .size = graph_size};
    int rc = 0;
    for (size_t i = 0; i < m->n_tensors && rc == 0; i++)
        if (!m->tensors[i].has_digest)
            rc = tetris_fail(err, TETRIS_E_INVAL, 0, "tensor \"%s\" has no digest",
                             m->tensors[i].name);
    bool *first = NULL;
    if (rc == 0)
        rc = first_of_each_digest(m, &first, err);
    for (size_t i = 0; i < m->n_tensors && rc == 0; i++) {
        const tensor_desc *t = &m->tensors[i];
        if (!first[i])
            continue;
        oci_descriptor *d = &a->tensors[a->n_tensors];
        *d = (oci_descriptor){.kind = OCI_LAYER_TENSOR,
                              .digest = t->meta.digest,
                              .size = oci_tensor_blob_size(&t->meta)};
        if ((d->name = strdup(t->name)) == NULL)
            rc = tetris_fail(err, TETRIS_E_NOMEM, errno, "building the OCI manifest");
        else
            a->n_tensors++;
    }
    free(first);
    if (rc < 0) {
        oci_artifact_free(a);
        return rc;
    }
    *out = a;
    return 0;
}

/* The layer of identity d in a sorted copy of a's tensors, NULL if none. */
static const oci_descriptor *find_layer(const oci_descriptor *sorted, size_t n,
                                        const tensor_digest *d)
{
    oci_descriptor key = {.digest = *d};
    return bsearch(&key, sorted, n, sizeof *sorted, compare_digests);
}

int oci_artifact_check_model(const oci_artifact *a, const model *m, tetris_error *err)
{
    enum oci_layer_kind want = strcmp(m->format, "onnx") == 0 ? OCI_LAYER_ONNX_GRAPH
                                                              : OCI_LAYER_SAFETENSORS_HEADER;
    if (a->graph.kind != want)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "artifact: a %s model whose first layer is not its %s", m->format,
                           want == OCI_LAYER_ONNX_GRAPH ? "graph" : "header");
    oci_descriptor *sorted = malloc((a->n_tensors + 1) * sizeof *sorted);
    bool *used = calloc(a->n_tensors + 1, sizeof *used);
    int rc = 0;
    if (sorted == NULL || used == NULL)
        rc = tetris_fail(err, TETRIS_E_NOMEM, errno, "checking the artifact");
    else {
        memcpy(sorted, a->tensors, a->n_tensors * sizeof *sorted);
        qsort(sorted, a->n_tensors, sizeof *sorted, compare_digests);
    }
    for (size_t i = 0; rc == 0 && i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        const oci_descriptor *d = find_layer(sorted, a->n_tensors, &t->meta.digest);
        if (d == NULL)
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0,
                             "artifact: tensor \"%s\" of the config has no layer", t->name);
        else if (d->size != oci_tensor_blob_size(&t->meta))
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0,
                             "artifact: tensor \"%s\": layer size %" PRIu64
                             " is not its header and %" PRIu64 " bytes",
                             t->name, d->size, t->meta.nbytes);
        else
            used[d - sorted] = true;
    }
    for (size_t i = 0; rc == 0 && i < a->n_tensors; i++)
        if (!used[i]) {
            char hex[7 + TENSOR_DIGEST_HEX_LEN + 1];
            oci_digest_format(&sorted[i].digest, hex);
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0,
                             "artifact: layer %s is no tensor of the config", hex);
        }
    free(sorted);
    free(used);
    return rc;
}
