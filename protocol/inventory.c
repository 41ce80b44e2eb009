/* inventory.c - the node inventory document (see inventory.h). The encoder
 * prints straight into a memory stream: an inventory of 100k tensors is
 * about 9 MB, rendered once per generation, and a JSON tree of it would
 * cost more than the text. */
#include "protocol/inventory.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/cleanup.h"

/* s as a JSON string literal, malloc'd; NULL when it is not UTF-8. */
static char *json_quote(const char *s)
{
    json_t *j = json_string(s);
    char *text = j != NULL ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    return text;
}

char *inventory_encode(const inventory_doc *doc, size_t *len, tetris_error *err)
{
    bool tenant = doc->tenant != NULL && doc->tenant[0] != '\0';
    cleanup_free char *node_json = json_quote(doc->node);
    cleanup_free char *tenant_json = tenant ? json_quote(doc->tenant) : NULL;
    if (node_json == NULL || (tenant && tenant_json == NULL)) {
        tetris_fail(err, TETRIS_E_INVAL, 0,
                    "inventory: node or tenant name is not valid UTF-8 (or out of memory)");
        return NULL;
    }
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (f == NULL) {
        tetris_fail(err, TETRIS_E_NOMEM, errno, "inventory of %zu tensors", doc->n_tensors);
        return NULL;
    }
    fprintf(f, "{\"node\":%s,", node_json);
    if (tenant)
        fprintf(f, "\"tenant\":%s,", tenant_json);
    fprintf(f,
            "\"generation\":%" PRIu64 ",\"capacity_bytes\":%" PRIu64 ",\"resident_bytes\":%" PRIu64
            ",\"evictable_bytes\":%" PRIu64 ",\"tensors\":[",
            doc->generation, doc->capacity_bytes, doc->resident_bytes, doc->evictable_bytes);
    for (size_t i = 0; i < doc->n_tensors; i++) {
        char hex[TENSOR_DIGEST_HEX_LEN + 1];
        tensor_digest_to_hex(&doc->tensors[i].digest, hex);
        fprintf(f, "%s{\"digest\":\"%s\",\"bytes\":%" PRIu64 "}", i ? "," : "", hex,
                doc->tensors[i].bytes);
    }
    fputs("]}\n", f);
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed) {
        free(text);
        tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "inventory of %zu tensors", doc->n_tensors);
        return NULL;
    }
    *len = size;
    return text;
}

void inventory_etag(uint64_t generation, char buf[INVENTORY_ETAG_MAX])
{
    snprintf(buf, INVENTORY_ETAG_MAX, "\"%" PRIu64 "\"", generation);
}

/* ---- decoding ---- */

static int get_u64(const json_t *obj, const char *key, const char *where, uint64_t *out,
                   tetris_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (v == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "inventory: %s%s is missing", where, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "inventory: %s%s is not a non-negative integer", where, key);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* A string member, malloc'd; absent is "" when optional. */
static int get_string(const json_t *obj, const char *key, bool optional, char **out,
                      tetris_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (v == NULL && optional) {
        *out = strdup("");
    } else if (v == NULL) {
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "inventory: %s is missing", key);
    } else if (!json_is_string(v)) {
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "inventory: %s is not a string", key);
    } else {
        *out = strdup(json_string_value(v));
    }
    if (*out == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "inventory");
    return 0;
}

static int decode_tensor(const json_t *t, size_t i, inventory_tensor *out, tetris_error *err)
{
    char where[48];
    snprintf(where, sizeof where, "tensors[%zu].", i);
    if (!json_is_object(t))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "inventory: tensors[%zu] is not an object",
                           i);
    const json_t *v = json_object_get(t, "digest");
    if (v == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "inventory: tensors[%zu].digest is missing", i);
    const char *digest = json_string_value(v);
    if (digest == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "inventory: tensors[%zu].digest is not a string", i);
    int r = tensor_digest_from_hex(digest, &out->digest, err);
    if (r < 0)
        return tetris_wrap(err, "inventory: tensors[%zu]", i);
    return get_u64(t, "bytes", where, &out->bytes, err);
}

static int decode_doc(const json_t *root, inventory_doc *doc, tetris_error *err)
{
    if (!json_is_object(root))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "inventory: not a JSON object");
    int r;
    if ((r = get_string(root, "node", false, &doc->node, err)) < 0 ||
        (r = get_string(root, "tenant", true, &doc->tenant, err)) < 0 ||
        (r = get_u64(root, "generation", "", &doc->generation, err)) < 0 ||
        (r = get_u64(root, "capacity_bytes", "", &doc->capacity_bytes, err)) < 0 ||
        (r = get_u64(root, "resident_bytes", "", &doc->resident_bytes, err)) < 0)
        return r;
    /* Daemons before evictable_bytes count every resident byte as used. */
    if (json_object_get(root, "evictable_bytes") != NULL &&
        (r = get_u64(root, "evictable_bytes", "", &doc->evictable_bytes, err)) < 0)
        return r;
    if (doc->evictable_bytes > doc->resident_bytes)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "inventory: evictable_bytes exceeds resident_bytes");
    const json_t *tensors = json_object_get(root, "tensors");
    if (tensors == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "inventory: tensors is missing");
    if (!json_is_array(tensors))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "inventory: tensors is not an array");
    size_t n = json_array_size(tensors);
    doc->tensors = malloc((n ? n : 1) * sizeof *doc->tensors);
    if (doc->tensors == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "inventory of %zu tensors", n);
    doc->n_tensors = n;
    for (size_t i = 0; i < n; i++)
        if ((r = decode_tensor(json_array_get(tensors, i), i, &doc->tensors[i], err)) < 0)
            return r;
    return 0;
}

int inventory_decode(const char *json, size_t len, inventory_doc **out, tetris_error *err)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "inventory: not JSON: line %d: %s", je.line,
                           je.text);
    inventory_doc *doc = calloc(1, sizeof *doc);
    int r = doc != NULL ? decode_doc(root, doc, err)
                        : tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "inventory");
    json_decref(root);
    if (r < 0) {
        inventory_doc_free(doc);
        return r;
    }
    *out = doc;
    return 0;
}

void inventory_doc_free(inventory_doc *doc)
{
    if (doc == NULL)
        return;
    free(doc->node);
    free(doc->tenant);
    free(doc->tensors);
    free(doc);
}
