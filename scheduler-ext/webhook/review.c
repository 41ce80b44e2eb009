/* review.c - the AdmissionReview codec of webhook.h: decoding what the
 * apiserver sends (both API versions, trusting nothing of it) and encoding
 * the answer with its base64 JSON Patch. */
#include "scheduler-ext/webhook/webhook.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

static const char *const api_versions[] = {"admission.k8s.io/v1", "admission.k8s.io/v1beta1"};

static int bad(tetris_error *err, const char *what)
{
    return tetris_fail(err, TETRIS_E_FORMAT, 0, "not an AdmissionReview: %s", what);
}

/* A member that must be a string if present; *out NULL when absent. */
static int optional_string(const json_t *obj, const char *key, const char **out, tetris_error *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "not an AdmissionReview: request.%s is not a string", key);
    *out = json_string_value(v);
    return 0;
}

static bool known_api_version(const char *v)
{
    for (size_t i = 0; i < sizeof api_versions / sizeof *api_versions; i++)
        if (strcmp(v, api_versions[i]) == 0)
            return true;
    return false;
}

static int check_envelope(const json_t *doc, const char **api_version, const json_t **request,
                          tetris_error *err)
{
    if (!json_is_object(doc))
        return bad(err, "the body is not a JSON object");
    const char *v = json_string_value(json_object_get(doc, "apiVersion"));
    if (v == NULL)
        return bad(err, "no apiVersion");
    if (!known_api_version(v))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "apiVersion '%.64s' is not admission.k8s.io/v1 or v1beta1", v);
    const char *kind = json_string_value(json_object_get(doc, "kind"));
    if (kind == NULL || strcmp(kind, "AdmissionReview") != 0)
        return bad(err, "kind is not AdmissionReview");
    *request = json_object_get(doc, "request");
    if (!json_is_object(*request))
        return bad(err, "no request object");
    *api_version = v;
    return 0;
}

int webhook_review_parse(const char *body, size_t len, webhook_review *out, tetris_error *err)
{
    memset(out, 0, sizeof *out);
    if (len > WEBHOOK_MAX_REVIEW_BYTES)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "AdmissionReview of %zu bytes (max %u)", len,
                           WEBHOOK_MAX_REVIEW_BYTES);
    json_error_t jerr;
    json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "body is not JSON: %s (line %d)", jerr.text,
                           jerr.line);
    const char *api_version = NULL, *uid = NULL, *operation = NULL, *ns = NULL;
    const json_t *req = NULL;
    int r = check_envelope(doc, &api_version, &req, err);
    if (r == 0)
        r = optional_string(req, "uid", &uid, err);
    if (r == 0 && (uid == NULL || uid[0] == '\0'))
        r = bad(err, "request.uid is missing or empty");
    if (r == 0)
        r = optional_string(req, "operation", &operation, err);
    if (r == 0)
        r = optional_string(req, "namespace", &ns, err);
    const json_t *kind = json_object_get(req, "kind");
    if (r == 0 && kind != NULL && !json_is_object(kind))
        r = bad(err, "request.kind is not an object");
    const json_t *object = json_object_get(req, "object");
    if (r == 0 && object != NULL && !json_is_null(object) && !json_is_object(object))
        r = bad(err, "request.object is not an object");
    const json_t *dry_run = json_object_get(req, "dryRun");
    if (r == 0 && dry_run != NULL && !json_is_null(dry_run) && !json_is_boolean(dry_run))
        r = bad(err, "request.dryRun is not a boolean");
    if (r < 0) {
        json_decref(doc);
        return r;
    }
    const char *kind_name = json_string_value(json_object_get(kind, "kind"));
    out->api_version = strdup(api_version);
    out->uid = strdup(uid);
    out->operation = strdup(operation != NULL ? operation : "");
    out->namespace_ = strdup(ns != NULL ? ns : "");
    out->is_pod = kind_name != NULL && strcmp(kind_name, "Pod") == 0;
    out->dry_run = json_is_true(dry_run);
    out->pod = json_is_object(object) ? json_incref((json_t *)object) : NULL;
    json_decref(doc);
    if (out->api_version == NULL || out->uid == NULL || out->operation == NULL ||
        out->namespace_ == NULL) {
        webhook_review_release(out);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    return 0;
}

void webhook_review_release(webhook_review *r)
{
    free(r->api_version);
    free(r->uid);
    free(r->operation);
    free(r->namespace_);
    json_decref(r->pod);
    memset(r, 0, sizeof *r);
}

char *webhook_base64(const void *data, size_t len)
{
    char *b64 = malloc(4 * ((len + 2) / 3) + 1);
    if (b64 != NULL)
        EVP_EncodeBlock((unsigned char *)b64, data, (int)len);
    return b64;
}

/* base64 of the patch's compact JSON; NULL on failure. */
static char *patch_base64(const json_t *patch)
{
    char *text = json_dumps(patch, JSON_COMPACT);
    char *b64 = text != NULL ? webhook_base64(text, strlen(text)) : NULL;
    free(text);
    return b64;
}

/* The AdmissionReview around response (taken), as compact text. */
static char *review_text(const webhook_review *r, json_t *response, size_t *len)
{
    json_t *doc = response == NULL ? NULL
                                   : json_pack("{s:s, s:s, s:o}", "apiVersion", r->api_version,
                                               "kind", "AdmissionReview", "response", response);
    char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (text != NULL)
        *len = strlen(text);
    return text;
}

char *webhook_response_encode(const webhook_review *r, const json_t *patch, size_t *len)
{
    json_t *response = json_pack("{s:s, s:b}", "uid", r->uid, "allowed", 1);
    if (response != NULL && patch != NULL && json_array_size(patch) > 0) {
        char *b64 = patch_base64(patch);
        if (b64 == NULL || json_object_set_new(response, "patchType", json_string("JSONPatch")) ||
            json_object_set_new(response, "patch", json_string(b64))) {
            json_decref(response);
            response = NULL;
        }
        free(b64);
    }
    return review_text(r, response, len);
}

char *webhook_response_deny(const webhook_review *r, const char *message, size_t *len)
{
    /* A metav1.Status: the apiserver answers the pod's creator with its
     * code and message. */
    return review_text(r,
                       json_pack("{s:s, s:b, s:{s:s, s:i, s:s, s:s}}", "uid", r->uid, "allowed", 0,
                                 "status", "status", "Failure", "code", 403, "reason", "Forbidden",
                                 "message", message),
                       len);
}
