/* test_webhook.c - tetris-webhook's review codec and patch (webhook.h):
 * both API versions, which pods are selected, whose tenant a pod gets (its
 * namespace's, never what it says) and what a tenant's pod mounts (never
 * the store root), that applying the patch and reviewing the pod
 * again gives an empty patch, that malformed reviews are refused with a
 * message naming what is wrong, and that the certificates chain. The
 * patches are applied here by a small RFC 6902 interpreter, so the tests
 * check the pod the apiserver would store, not the operations' spelling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "protocol/names.h"
#include "scheduler-ext/webhook/webhook.h"
#include "tests/lib/unit.h"

static const struct webhook_config plain = {
    .store_dir = "/dev/shm/tetris",
    .store_subdir = "",
    .scheduler_name = TETRIS_SCHEDULER_NAME,
};

static char *review_text(const char *api_version, const char *ns, const char *op, const json_t *pod)
{
    json_t *doc = json_pack("{s:s, s:s, s:{s:s, s:{s:s, s:s, s:s}, s:s, s:s, s:O}}", "apiVersion",
                            api_version, "kind", "AdmissionReview", "request", "uid", "uid-1",
                            "kind", "group", "", "version", "v1", "kind", "Pod", "operation", op,
                            "namespace", ns, "object", pod);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    return text;
}

/* The usual faas-netes pod: one container, its env, the OpenFaaS label. */
static json_t *function_pod(void)
{
    return json_pack("{s:{s:s, s:{s:s}, s:{s:s}}, s:{s:s, s:[{s:s, s:s, s:[{s:s, s:s}]}]}}",
                     "metadata", "name", "fn-abc", "labels", TETRIS_LABEL_FUNCTION, "fn",
                     "annotations", TETRIS_LABEL_MODEL, "m1", "spec", "schedulerName",
                     TETRIS_DEFAULT_SCHEDULER_NAME, "containers", "name", "fn", "image", "img",
                     "env", "name", "fprocess", "value", "x");
}

static void parse_ok(const char *text, webhook_review *rv)
{
    tetris_error err = {0};
    int r = webhook_review_parse(text, strlen(text), rv, &err);
    ck_assert_msg(r == 0, "parse: %s", err.msg);
}

/* The patch for pod in namespace ns under c, with facts f (the model
 * taken from the selection, no tenant, when f is NULL). */
static json_t *patch_for(const struct webhook_config *c, const char *ns, const json_t *pod,
                         const webhook_pod_facts *f)
{
    char *text = review_text("admission.k8s.io/v1", ns, "CREATE", pod);
    webhook_review rv;
    parse_ok(text, &rv);
    free(text);
    webhook_selection sel;
    webhook_select(c, &rv, &sel);
    ck_assert_msg(sel.selected, "not selected: %s", sel.reason);
    webhook_pod_facts dflt = {.model = sel.model};
    json_t *patch = NULL;
    tetris_error err = {0};
    int r = webhook_patch_build(c, &rv, f != NULL ? f : &dflt, &patch, &err);
    ck_assert_msg(r == 0, "patch: %s", err.msg);
    webhook_review_release(&rv);
    return patch;
}

/* ---- a JSON Patch interpreter for the operations the webhook uses ---- */

static void unescape(char *tok)
{
    char *w = tok;
    for (char *s = tok; *s != '\0'; s++, w++) {
        if (s[0] == '~' && s[1] == '1')
            *w = '/', s++;
        else if (s[0] == '~' && s[1] == '0')
            *w = '~', s++;
        else
            *w = *s;
    }
    *w = '\0';
}

static void apply_op(json_t *doc, const json_t *op)
{
    const char *kind = json_string_value(json_object_get(op, "op"));
    char path[512];
    snprintf(path, sizeof path, "%s", json_string_value(json_object_get(op, "path")));
    json_t *value = json_object_get(op, "value");
    char *last = strrchr(path, '/');
    ck_assert_ptr_nonnull(last);
    *last++ = '\0';
    unescape(last);
    json_t *parent = doc;
    char *save = NULL;
    for (char *tok = strtok_r(path, "/", &save); tok != NULL; tok = strtok_r(NULL, "/", &save)) {
        unescape(tok);
        parent = json_is_array(parent) ? json_array_get(parent, strtoul(tok, NULL, 10))
                                       : json_object_get(parent, tok);
        ck_assert_msg(parent != NULL, "patch path %s: no %s", path, tok);
    }
    if (strcmp(kind, "test") == 0)
        return;
    if (json_is_array(parent)) {
        if (strcmp(last, "-") == 0) {
            ck_assert_str_eq(kind, "add");
            json_array_append(parent, value);
        } else {
            size_t i = strtoul(last, NULL, 10);
            ck_assert_str_eq(kind, "replace");
            ck_assert_uint_lt(i, json_array_size(parent));
            json_array_set(parent, i, value);
        }
    } else {
        ck_assert(json_is_object(parent));
        if (strcmp(kind, "replace") == 0)
            ck_assert_ptr_nonnull(json_object_get(parent, last));
        json_object_set(parent, last, value);
    }
}

static void apply_patch(json_t *doc, const json_t *patch)
{
    size_t i;
    json_t *op;
    json_array_foreach (patch, i, op)
        apply_op(doc, op);
}

static json_t *named(const json_t *array, const char *name)
{
    size_t i;
    json_t *item;
    json_array_foreach (array, i, item)
        if (strcmp(json_string_value(json_object_get(item, "name")), name) == 0)
            return item;
    return NULL;
}

static const char *env_value(const json_t *container, const char *name)
{
    return json_string_value(
        json_object_get(named(json_object_get(container, "env"), name), "value"));
}

static const json_t *spec_of(const json_t *pod)
{
    return json_object_get(pod, "spec");
}

static const json_t *container0(const json_t *pod)
{
    return json_array_get(json_object_get(spec_of(pod), "containers"), 0);
}

static const char *store_host_path(const json_t *pod)
{
    const json_t *v = named(json_object_get(spec_of(pod), "volumes"), TETRIS_VOLUME_STORE);
    return json_string_value(json_object_get(json_object_get(v, "hostPath"), "path"));
}

/* Mutates pod in place and checks that a second review changes nothing. */
static void mutate_twice(const struct webhook_config *c, json_t *pod, const webhook_pod_facts *f)
{
    json_t *patch = patch_for(c, "openfaas-fn", pod, f);
    ck_assert_uint_gt(json_array_size(patch), 0);
    apply_patch(pod, patch);
    json_decref(patch);
    patch = patch_for(c, "openfaas-fn", pod, f);
    char *text = json_dumps(patch, JSON_COMPACT);
    ck_assert_msg(json_array_size(patch) == 0, "second patch not empty: %s", text);
    free(text);
    json_decref(patch);
}

/* ---- tests ---- */

START_TEST(both_api_versions_answered)
{
    static const char *const versions[] = {"admission.k8s.io/v1", "admission.k8s.io/v1beta1"};
    for (size_t v = 0; v < 2; v++) {
        json_t *pod = function_pod();
        char *text = review_text(versions[v], "openfaas-fn", "CREATE", pod);
        webhook_review rv;
        parse_ok(text, &rv);
        ck_assert_str_eq(rv.api_version, versions[v]);
        ck_assert(rv.is_pod);
        webhook_selection sel;
        webhook_select(&plain, &rv, &sel);
        ck_assert(sel.selected);
        webhook_pod_facts f = {.model = sel.model};
        json_t *patch = NULL;
        tetris_error err = {0};
        ck_assert_int_eq(webhook_patch_build(&plain, &rv, &f, &patch, &err), 0);
        size_t len = 0;
        char *answer = webhook_response_encode(&rv, patch, &len);
        ck_assert_ptr_nonnull(answer);
        json_t *doc = json_loadb(answer, len, 0, NULL);
        ck_assert_str_eq(json_string_value(json_object_get(doc, "apiVersion")), versions[v]);
        json_t *resp = json_object_get(doc, "response");
        ck_assert_str_eq(json_string_value(json_object_get(resp, "uid")), "uid-1");
        ck_assert(json_is_true(json_object_get(resp, "allowed")));
        ck_assert_str_eq(json_string_value(json_object_get(resp, "patchType")), "JSONPatch");
        /* The base64 patch decodes to the patch built. */
        const char *b64 = json_string_value(json_object_get(resp, "patch"));
        unsigned char *raw = malloc(strlen(b64));
        int n = EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)strlen(b64));
        ck_assert_int_gt(n, 0);
        while (n > 0 && raw[n - 1] == '\0')
            n--; /* EVP_DecodeBlock counts the padding's zero bytes */
        json_t *decoded = json_loadb((const char *)raw, (size_t)n, 0, NULL);
        ck_assert(json_equal(decoded, patch));
        json_decref(decoded);
        free(raw);
        json_decref(doc);
        free(answer);
        json_decref(patch);
        webhook_review_release(&rv);
        free(text);
        json_decref(pod);
    }
}
END_TEST

START_TEST(empty_patch_answer_has_no_patch)
{
    json_t *pod = function_pod();
    char *text = review_text("admission.k8s.io/v1beta1", "x", "CREATE", pod);
    webhook_review rv;
    parse_ok(text, &rv);
    json_t *empty = json_array();
    size_t len;
    char *answer = webhook_response_encode(&rv, empty, &len);
    ck_assert_ptr_null(strstr(answer, "patch"));
    ck_assert_ptr_nonnull(strstr(answer, "\"allowed\":true"));
    free(answer);
    json_decref(empty);
    webhook_review_release(&rv);
    free(text);
    json_decref(pod);
}
END_TEST

START_TEST(function_pod_gets_store_model_scheduler)
{
    json_t *pod = function_pod();
    webhook_pod_facts f = {.model = "m1",
                           .manifest_configmap = "tetris-manifest-m1",
                           .model_path = "/models/m1.onnx"};
    mutate_twice(&plain, pod, &f);
    const json_t *c = container0(pod);
    ck_assert_str_eq(store_host_path(pod), "/dev/shm/tetris");
    const json_t *mount = named(json_object_get(c, "volumeMounts"), TETRIS_VOLUME_STORE);
    ck_assert(json_is_true(json_object_get(mount, "readOnly")));
    ck_assert_str_eq(json_string_value(json_object_get(mount, "mountPath")), "/dev/shm/tetris");
    ck_assert_str_eq(env_value(c, "fprocess"), "x"); /* the pod's own env is kept */
    ck_assert_str_eq(env_value(c, TETRIS_ENV_STORE), "/dev/shm/tetris");
    ck_assert_str_eq(env_value(c, TETRIS_ENV_MODEL), "/models/m1.onnx");
    ck_assert_str_eq(env_value(c, TETRIS_ENV_MANIFEST),
                     TETRIS_MANIFEST_MOUNT_DIR "/" TETRIS_MANIFEST_CONFIGMAP_KEY);
    ck_assert_ptr_null(env_value(c, TETRIS_ENV_TENANT));
    const json_t *mv = named(json_object_get(spec_of(pod), "volumes"), TETRIS_VOLUME_MANIFEST);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(mv, "configMap"), "name")),
                     "tetris-manifest-m1");
    ck_assert_str_eq(json_string_value(
                         json_object_get(json_object_get(json_object_get(pod, "metadata"),
                                                         "labels"),
                                         TETRIS_LABEL_MODEL)),
                     "m1");
    ck_assert_str_eq(json_string_value(json_object_get(spec_of(pod), "schedulerName")),
                     TETRIS_SCHEDULER_NAME);
    json_decref(pod);
}
END_TEST

/* Fields the apiserver defaults on what we added (a ConfigMap volume's
 * defaultMode, a label map made by someone else) must not make the second
 * review add it again; neither must several containers or none of the
 * arrays existing. */
START_TEST(idempotent_after_defaults)
{
    json_t *pod = json_pack("{s:{s:s}, s:{s:[{s:s}, {s:s, s:[], s:[]}]}}", "metadata",
                            "generateName", "fn-", "spec", "containers", "name", "a", "name", "b",
                            "env", "volumeMounts");
    json_object_set_new(json_object_get(pod, "metadata"), "annotations",
                        json_pack("{s:s}", TETRIS_LABEL_MODEL, "m1"));
    webhook_pod_facts f = {.model = "m1", .manifest_configmap = "cm", .model_path = "/m"};
    json_t *patch = patch_for(&plain, "ns", pod, &f);
    apply_patch(pod, patch);
    json_decref(patch);
    json_t *cmv = json_object_get(named(json_object_get(spec_of(pod), "volumes"),
                                        TETRIS_VOLUME_MANIFEST),
                                  "configMap");
    json_object_set_new(cmv, "defaultMode", json_integer(420));
    json_object_set_new(json_object_get(named(json_object_get(spec_of(pod), "volumes"),
                                              TETRIS_VOLUME_STORE),
                                        "hostPath"),
                        "extra", json_string("defaulted"));
    patch = patch_for(&plain, "ns", pod, &f);
    ck_assert_uint_eq(json_array_size(patch), 0);
    json_decref(patch);
    for (size_t i = 0; i < 2; i++) {
        const json_t *c = json_array_get(json_object_get(spec_of(pod), "containers"), i);
        ck_assert_str_eq(env_value(c, TETRIS_ENV_STORE), "/dev/shm/tetris");
        ck_assert_ptr_nonnull(named(json_object_get(c, "volumeMounts"), TETRIS_VOLUME_MANIFEST));
    }
    json_decref(pod);
}
END_TEST

START_TEST(selection)
{
    static const char *const served[] = {"openfaas-fn"};
    struct webhook_config c = plain;
    c.namespaces = served;
    c.n_namespaces = 1;
    struct {
        const char *ns, *op;
        json_t *pod;
        bool selected;
        const char *model;
    } cases[] = {
        {"openfaas-fn", "CREATE", function_pod(), true, "m1"},
        {"other", "CREATE", function_pod(), false, NULL},
        {"openfaas-fn", "UPDATE", function_pod(), false, NULL},
        /* the annotation alone opts in; the model label alone does not */
        {"openfaas-fn", "CREATE",
         json_pack("{s:{s:{s:s}}, s:{}}", "metadata", "annotations", TETRIS_LABEL_MODEL, "m2",
                   "spec"),
         true, "m2"},
        {"openfaas-fn", "CREATE",
         json_pack("{s:{s:{s:s}}, s:{}}", "metadata", "labels", TETRIS_LABEL_MODEL, "m2", "spec"),
         false, NULL},
        /* a function without a model: the store and scheduler, no model */
        {"openfaas-fn", "CREATE",
         json_pack("{s:{s:{s:s}}, s:{}}", "metadata", "labels", TETRIS_LABEL_FUNCTION, "f", "spec"),
         true, NULL},
        {"openfaas-fn", "CREATE", json_pack("{s:{}, s:{}}", "metadata", "spec"), false, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *text = review_text("admission.k8s.io/v1", cases[i].ns, cases[i].op, cases[i].pod);
        webhook_review rv;
        parse_ok(text, &rv);
        webhook_selection sel;
        webhook_select(&c, &rv, &sel);
        ck_assert_msg(sel.selected == cases[i].selected, "case %zu", i);
        if (cases[i].model != NULL)
            ck_assert_str_eq(sel.model, cases[i].model);
        else
            ck_assert_ptr_null(sel.model);
        ck_assert(sel.selected || sel.reason != NULL);
        webhook_review_release(&rv);
        free(text);
        json_decref(cases[i].pod);
    }
    /* Not a pod. */
    const char *deploy = "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
                         "\"request\":{\"uid\":\"u\",\"kind\":{\"kind\":\"Deployment\"},"
                         "\"operation\":\"CREATE\",\"object\":{}}}";
    webhook_review rv;
    parse_ok(deploy, &rv);
    webhook_selection sel;
    webhook_select(&plain, &rv, &sel);
    ck_assert(!sel.selected);
    webhook_review_release(&rv);
}
END_TEST

/* The pod's controller, as the ReplicaSet controller writes it into the
 * pods it creates: the manifest copy's owner. Only a reference marked
 * controller counts, and only with every field a non-empty string. */
START_TEST(controller_of_pod)
{
    static const char *const rs = "{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\","
                                  "\"name\":\"fn-6d5\",\"uid\":\"u-1\",\"controller\":true}";
    struct {
        const char *refs; /* metadata.ownerReferences, NULL: absent */
        const char *uid;  /* the controller's, NULL: none */
    } cases[] = {
        {NULL, NULL},
        {"[]", NULL},
        {"{}", NULL},
        {"[{\"apiVersion\":\"v1\",\"kind\":\"X\",\"name\":\"x\",\"uid\":\"u-0\"}]", NULL},
        {"[{\"apiVersion\":\"v1\",\"kind\":\"X\",\"name\":\"x\",\"uid\":\"u-0\","
         "\"controller\":false}, %s]",
         "u-1"},
        {"[%s]", "u-1"},
        {"[{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"fn\","
         "\"uid\":\"\",\"controller\":true}]",
         NULL},
        {"[{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"uid\":\"u-2\","
         "\"controller\":true}]",
         NULL},
        {"[{\"apiVersion\":\"apps/v1\",\"kind\":7,\"name\":\"fn\",\"uid\":\"u-2\","
         "\"controller\":true}]",
         NULL},
        {"[\"not an object\", %s]", "u-1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *pod = function_pod();
        if (cases[i].refs != NULL) {
            char text[1024];
            snprintf(text, sizeof text, cases[i].refs, rs);
            json_error_t jerr;
            json_t *refs = json_loads(text, 0, &jerr);
            ck_assert_msg(refs != NULL, "case %zu: %s", i, jerr.text);
            json_object_set_new(json_object_get(pod, "metadata"), "ownerReferences", refs);
        }
        webhook_owner o;
        bool found = webhook_pod_controller(pod, &o);
        ck_assert_msg(found == (cases[i].uid != NULL), "case %zu", i);
        if (found) {
            ck_assert_str_eq(o.uid, cases[i].uid);
            ck_assert_str_eq(o.kind, "ReplicaSet");
            ck_assert_str_eq(o.name, "fn-6d5");
            ck_assert_str_eq(o.api_version, "apps/v1");
        } else {
            ck_assert_ptr_null(o.uid);
        }
        /* The selection carries it for the manifest copy. */
        char *review = review_text("admission.k8s.io/v1", "ns", "CREATE", pod);
        webhook_review rv;
        parse_ok(review, &rv);
        webhook_selection sel;
        webhook_select(&plain, &rv, &sel);
        ck_assert(sel.selected);
        if (found)
            ck_assert_str_eq(sel.controller.uid, cases[i].uid);
        else
            ck_assert_ptr_null(sel.controller.uid);
        webhook_review_release(&rv);
        free(review);
        json_decref(pod);
    }
}
END_TEST

/* A tenant's pod mounts its own store only, whatever the subdirectory
 * shared pods mount, from a directory the node daemon made (Directory,
 * never DirectoryOrCreate); the tenant comes through the facts (its
 * namespace's, webhook_tenant_decide). */
START_TEST(tenant_gets_only_its_store)
{
    struct webhook_config c = plain;
    c.store_subdir = "public";
    json_t *pod = function_pod();
    webhook_pod_facts f = {.model = "m1", .tenant = "acme"};
    mutate_twice(&c, pod, &f);
    ck_assert_str_eq(store_host_path(pod), "/dev/shm/tetris/tenants/acme/public");
    const json_t *volume = named(json_object_get(spec_of(pod), "volumes"), TETRIS_VOLUME_STORE);
    ck_assert_str_eq(json_string_value(
                         json_object_get(json_object_get(volume, "hostPath"), "type")),
                     "Directory");
    const json_t *mount = named(json_object_get(container0(pod), "volumeMounts"),
                                TETRIS_VOLUME_STORE);
    ck_assert_str_eq(json_string_value(json_object_get(mount, "mountPath")),
                     "/dev/shm/tetris/tenants/acme/public");
    ck_assert_str_eq(env_value(container0(pod), TETRIS_ENV_TENANT), "acme");
    ck_assert_str_eq(env_value(container0(pod), TETRIS_ENV_STORE), "/dev/shm/tetris");
    json_decref(pod);

    /* A volume of ours that the daemon would not make is replaced: an
     * older webhook's DirectoryOrCreate becomes Directory. */
    pod = function_pod();
    json_object_set_new(json_object_get(pod, "spec"), "volumes",
                        json_pack("[{s:s, s:{s:s, s:s}}]", "name", TETRIS_VOLUME_STORE, "hostPath",
                                  "path", "/dev/shm/tetris/tenants/acme/public", "type",
                                  "DirectoryOrCreate"));
    mutate_twice(&c, pod, &f);
    volume = named(json_object_get(spec_of(pod), "volumes"), TETRIS_VOLUME_STORE);
    ck_assert_str_eq(json_string_value(
                         json_object_get(json_object_get(volume, "hostPath"), "type")),
                     "Directory");
    json_decref(pod);

    /* A shared pod sees the configured part of the store. */
    pod = function_pod();
    mutate_twice(&c, pod, NULL);
    ck_assert_str_eq(store_host_path(pod), "/dev/shm/tetris/public");
    json_decref(pod);

    /* Names that would leave tenants/ are refused: no patch at all. */
    static const char *const hostile[] = {"..", "../..", "a/../../b", "A", "", "a b", "x/y"};
    for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
        pod = function_pod();
        char *text = review_text("admission.k8s.io/v1", "openfaas-fn", "CREATE", pod);
        webhook_review rv;
        parse_ok(text, &rv);
        webhook_pod_facts hf = {.model = "m1", .tenant = hostile[i]};
        json_t *patch = NULL;
        tetris_error err = {0};
        ck_assert_int_eq(webhook_patch_build(&c, &rv, &hf, &patch, &err), -TETRIS_E_INVAL);
        ck_assert_ptr_null(patch);
        ck_assert_ptr_nonnull(strstr(err.msg, "tenant"));
        webhook_review_release(&rv);
        free(text);
        json_decref(pod);
    }
}
END_TEST

/* The tenant is the namespace's: what the pod says (label or annotation)
 * must agree with it or the pod is denied, with a message that says why;
 * a namespace naming a tenant the operator did not configure is denied
 * too, so no pod makes a tenant exist. */
START_TEST(pod_cannot_choose_its_tenant)
{
    static const char *const configured[] = {"alpha", "beta"};
    struct webhook_config c = plain;
    c.tenants = configured;
    c.n_tenants = 2;
    static const struct {
        const char *label, *annotation, *ns_tenant;
        const char *want; /* the tenant; NULL with denied: none */
        bool denied;
        const char *says; /* in the denial's message */
    } cases[] = {
        {NULL, NULL, "alpha", "alpha", false, NULL},
        {"alpha", NULL, "alpha", "alpha", false, NULL},
        {NULL, "alpha", "alpha", "alpha", false, NULL},
        {"alpha", "alpha", "alpha", "alpha", false, NULL},
        {"", "", "alpha", "alpha", false, NULL},
        {NULL, NULL, NULL, NULL, false, NULL},
        {"beta", NULL, "alpha", NULL, true, "label says 'beta'"},
        {NULL, "beta", "alpha", NULL, true, "annotation says 'beta'"},
        {"alpha", "beta", "alpha", NULL, true, "annotation says 'beta'"},
        {"beta", NULL, NULL, NULL, true, "belongs to no tenant"},
        {NULL, "alpha", NULL, NULL, true, "belongs to no tenant"},
        {"..", NULL, "alpha", NULL, true, "label says '..'"},
        {NULL, NULL, "gamma", NULL, true, "names tenant 'gamma'"},
        {"gamma", NULL, "gamma", NULL, true, "not configured"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *pod = function_pod();
        json_t *meta = json_object_get(pod, "metadata");
        if (cases[i].label != NULL)
            json_object_set_new(json_object_get(meta, "labels"), TETRIS_LABEL_TENANT,
                                json_string(cases[i].label));
        if (cases[i].annotation != NULL)
            json_object_set_new(json_object_get(meta, "annotations"), TETRIS_LABEL_TENANT,
                                json_string(cases[i].annotation));
        char *text = review_text("admission.k8s.io/v1", "ns-a", "CREATE", pod);
        webhook_review rv;
        parse_ok(text, &rv);
        webhook_selection sel;
        webhook_select(&c, &rv, &sel);
        ck_assert(sel.selected);
        const char *tenant = "unset";
        tetris_error err = {0};
        int r = webhook_tenant_decide(&c, &sel, cases[i].ns_tenant, &tenant, &err);
        if (cases[i].denied) {
            ck_assert_msg(r == -TETRIS_E_DENIED, "case %zu: %d", i, r);
            ck_assert_msg(strstr(err.msg, cases[i].says) != NULL, "case %zu: %s", i, err.msg);
            ck_assert_ptr_null(tenant);
            /* The answer the apiserver gets: not allowed, 403, the message. */
            size_t len = 0;
            char *answer = webhook_response_deny(&rv, err.msg, &len);
            json_t *doc = json_loadb(answer, len, 0, NULL);
            json_t *resp = json_object_get(doc, "response");
            ck_assert_str_eq(json_string_value(json_object_get(resp, "uid")), "uid-1");
            ck_assert(json_is_false(json_object_get(resp, "allowed")));
            ck_assert_ptr_null(json_object_get(resp, "patch"));
            json_t *status = json_object_get(resp, "status");
            ck_assert_int_eq(json_integer_value(json_object_get(status, "code")), 403);
            ck_assert_str_eq(json_string_value(json_object_get(status, "message")), err.msg);
            json_decref(doc);
            free(answer);
        } else {
            ck_assert_msg(r == 0, "case %zu: %s", i, err.msg);
            if (cases[i].want == NULL)
                ck_assert_ptr_null(tenant);
            else
                ck_assert_str_eq(tenant, cases[i].want);
        }
        webhook_review_release(&rv);
        free(text);
        json_decref(pod);
    }
}
END_TEST

/* What the pod brings under our names is replaced (a writable store root
 * under our volume's name), what is the pod's own choice is kept (its
 * scheduler, its TETRIS_MODEL). */
START_TEST(pod_cannot_keep_its_own_store_volume)
{
    json_t *pod = function_pod();
    json_t *spec = json_object_get(pod, "spec");
    json_object_set_new(spec, "volumes",
                        json_pack("[{s:s, s:{s:s}}, {s:s, s:{}}]", "name", TETRIS_VOLUME_STORE,
                                  "hostPath", "path", "/", "name", "other", "emptyDir"));
    json_t *c = json_array_get(json_object_get(spec, "containers"), 0);
    json_object_set_new(c, "volumeMounts",
                        json_pack("[{s:s, s:s}]", "name", TETRIS_VOLUME_STORE, "mountPath",
                                  "/dev/shm/tetris"));
    json_array_append_new(json_object_get(c, "env"),
                          json_pack("{s:s, s:s}", "name", TETRIS_ENV_MODEL, "value", "/mine"));
    json_object_set_new(spec, "schedulerName", json_string("my-scheduler"));
    webhook_pod_facts f = {.model = "m1", .model_path = "/models/m1.onnx"};
    mutate_twice(&plain, pod, &f);
    ck_assert_str_eq(store_host_path(pod), "/dev/shm/tetris");
    ck_assert_uint_eq(json_array_size(json_object_get(spec, "volumes")), 2);
    const json_t *mount = named(json_object_get(c, "volumeMounts"), TETRIS_VOLUME_STORE);
    ck_assert(json_is_true(json_object_get(mount, "readOnly")));
    ck_assert_str_eq(env_value(c, TETRIS_ENV_MODEL), "/mine");
    ck_assert_str_eq(json_string_value(json_object_get(spec, "schedulerName")), "my-scheduler");
    json_decref(pod);

    /* A writable mount of its own at the store's path, under another name:
     * two mounts at one path would get the pod refused, so ours replaces it. */
    pod = function_pod();
    c = json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0);
    json_object_set_new(c, "volumeMounts",
                        json_pack("[{s:s, s:s}, {s:s, s:s}]", "name", "mine", "mountPath",
                                  "/dev/shm/tetris", "name", "data", "mountPath", "/data"));
    mutate_twice(&plain, pod, NULL);
    json_t *mounts = json_object_get(c, "volumeMounts");
    ck_assert_uint_eq(json_array_size(mounts), 2);
    ck_assert_ptr_null(named(mounts, "mine"));
    ck_assert(json_is_true(json_object_get(named(mounts, TETRIS_VOLUME_STORE), "readOnly")));
    ck_assert_ptr_nonnull(named(mounts, "data"));
    json_decref(pod);
}
END_TEST

START_TEST(malformed_reviews_refused)
{
    static const struct {
        const char *body, *msg;
    } cases[] = {
        {"", "not JSON"},
        {"{", "not JSON"},
        {"[]", "not a JSON object"},
        {"{\"kind\":\"AdmissionReview\"}", "no apiVersion"},
        {"{\"apiVersion\":\"admission.k8s.io/v2\",\"kind\":\"AdmissionReview\"}", "v2"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"Pod\"}", "kind"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\"}", "request"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":[]}",
         "request"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{}}",
         "uid"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
         "\"request\":{\"uid\":7}}",
         "uid"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
         "\"request\":{\"uid\":\"u\",\"object\":\"pod\"}}",
         "object"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
         "\"request\":{\"uid\":\"u\",\"kind\":\"Pod\"}}",
         "kind"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
         "\"request\":{\"uid\":\"u\",\"operation\":1}}",
         "operation"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
         "\"request\":{\"uid\":\"u\",\"dryRun\":\"yes\"}}",
         "dryRun"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"apiVersion\":\"admission.k8s.io/v1\"}",
         "duplicate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        webhook_review rv;
        tetris_error err = {0};
        int r = webhook_review_parse(cases[i].body, strlen(cases[i].body), &rv, &err);
        ck_assert_msg(r == -TETRIS_E_FORMAT, "case %zu accepted", i);
        ck_assert_msg(strstr(err.msg, cases[i].msg) != NULL, "case %zu: '%s' lacks '%s'", i,
                      err.msg, cases[i].msg);
    }
}
END_TEST

/* Pods the apiserver would never send still get an error, not a crash. */
START_TEST(malformed_pods_refused)
{
    static const char *const pods[] = {
        "{\"metadata\":{\"labels\":{\"faas_function\":\"f\"}}}",
        "{\"metadata\":{\"labels\":{\"faas_function\":\"f\"}},\"spec\":{\"containers\":[]}}",
        "{\"metadata\":{\"labels\":{\"faas_function\":\"f\"}},\"spec\":{\"containers\":[1]}}",
        "{\"metadata\":{\"labels\":{\"faas_function\":\"f\"}},\"spec\":{\"containers\":[{}],"
        "\"volumes\":{}}}",
        "{\"metadata\":{\"labels\":{\"faas_function\":\"f\"}},\"spec\":{\"containers\":[{\"env\":"
        "\"x\"}]}}",
        "{\"metadata\":{\"labels\":{\"faas_function\":\"f\"}},\"spec\":{\"containers\":[{}],"
        "\"schedulerName\":5}}",
    };
    for (size_t i = 0; i < sizeof pods / sizeof *pods; i++) {
        json_t *pod = json_loads(pods[i], 0, NULL);
        ck_assert_ptr_nonnull(pod);
        char *text = review_text("admission.k8s.io/v1", "ns", "CREATE", pod);
        webhook_review rv;
        parse_ok(text, &rv);
        webhook_selection sel;
        webhook_select(&plain, &rv, &sel);
        ck_assert(sel.selected);
        webhook_pod_facts f = {0};
        json_t *patch = NULL;
        tetris_error err = {0};
        ck_assert_msg(webhook_patch_build(&plain, &rv, &f, &patch, &err) == -TETRIS_E_FORMAT,
                      "pod %zu", i);
        ck_assert_ptr_nonnull(strstr(err.msg, "pod: "));
        webhook_review_release(&rv);
        free(text);
        json_decref(pod);
    }
}
END_TEST

/* The CSI way reads the pod's security settings: ones of the wrong type
 * are refused like any mistyped field, never patched over. */
START_TEST(malformed_security_contexts_refused)
{
    static const char *const specs[] = {
        "{\"containers\":[{}],\"securityContext\":\"x\"}",
        "{\"containers\":[{\"securityContext\":[]}]}",
        "{\"containers\":[{\"securityContext\":{\"capabilities\":1}}]}",
        "{\"containers\":[{\"securityContext\":{\"capabilities\":{\"drop\":\"ALL\"}}}]}",
        "{\"containers\":[{}],\"initContainers\":{}}",
        "{\"containers\":[{}],\"initContainers\":[7]}",
    };
    struct webhook_config csi = plain;
    csi.csi_driver = "csi.tetris.io";
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        json_t *pod = json_pack("{s:{s:{s:s}, s:{s:s}}, s:o}", "metadata", "labels",
                                "faas_function", "f", "annotations", "tetris.io/model-ref",
                                "oci://r.example/m:1", "spec", json_loads(specs[i], 0, NULL));
        ck_assert_ptr_nonnull(pod);
        char *text = review_text("admission.k8s.io/v1", "ns", "CREATE", pod);
        webhook_review rv;
        parse_ok(text, &rv);
        webhook_selection sel;
        webhook_select(&csi, &rv, &sel);
        ck_assert(sel.selected);
        webhook_pod_facts f = {.model_ref = sel.model_ref};
        json_t *patch = NULL;
        tetris_error err = {0};
        ck_assert_msg(webhook_patch_build(&csi, &rv, &f, &patch, &err) == -TETRIS_E_FORMAT,
                      "spec %zu: %s", i, err.msg);
        ck_assert_ptr_nonnull(strstr(err.msg, "pod: "));
        webhook_review_release(&rv);
        free(text);
        json_decref(pod);
    }
}
END_TEST

START_TEST(certificates_chain)
{
    const char *names[] = {"tetris-webhook.tetris-system.svc", "tetris-webhook", "127.0.0.1"};
    webhook_certs certs;
    tetris_error err = {0};
    ck_assert_int_eq(webhook_certs_make(names, 3, 2, &certs, &err), 0);
    BIO *b = BIO_new_mem_buf(certs.ca_pem, -1);
    X509 *ca = PEM_read_bio_X509(b, NULL, NULL, NULL);
    BIO_free(b);
    b = BIO_new_mem_buf(certs.cert_pem, -1);
    X509 *cert = PEM_read_bio_X509(b, NULL, NULL, NULL);
    BIO_free(b);
    ck_assert_ptr_nonnull(ca);
    ck_assert_ptr_nonnull(cert);
    ck_assert_int_eq(X509_verify(cert, X509_get0_pubkey(ca)), 1);
    ck_assert_int_eq(X509_check_host(cert, "tetris-webhook.tetris-system.svc", 0, 0, NULL), 1);
    ck_assert_int_eq(X509_check_ip_asc(cert, "127.0.0.1", 0), 1);
    ck_assert_int_ne(X509_check_host(cert, "evil.example", 0, 0, NULL), 1);
    ck_assert_int_eq(X509_check_ca(ca), 1);
    ck_assert_int_eq(X509_check_ca(cert), 0);
    X509_free(ca);
    X509_free(cert);
    webhook_certs_release(&certs);

    const char *bad[] = {"a,DNS:evil.example"};
    ck_assert_int_eq(webhook_certs_make(bad, 1, 2, &certs, &err), -TETRIS_E_INVAL);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, both_api_versions_answered);
    tcase_add_test(tc, empty_patch_answer_has_no_patch);
    tcase_add_test(tc, function_pod_gets_store_model_scheduler);
    tcase_add_test(tc, idempotent_after_defaults);
    tcase_add_test(tc, selection);
    tcase_add_test(tc, controller_of_pod);
    tcase_add_test(tc, tenant_gets_only_its_store);
    tcase_add_test(tc, pod_cannot_choose_its_tenant);
    tcase_add_test(tc, pod_cannot_keep_its_own_store_volume);
    tcase_add_test(tc, malformed_reviews_refused);
    tcase_add_test(tc, malformed_pods_refused);
    tcase_add_test(tc, malformed_security_contexts_refused);
    tcase_add_test(tc, certificates_chain);
}

UNIT_MAIN("webhook")
