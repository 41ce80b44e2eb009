/* test_oci.c - the registry artifact (protocol/oci.h): a model's artifact
 * round-trips, its tensor layers' digests are the tensors' identities and
 * its sizes what their headers and bytes make, every malformed or lying
 * manifest is refused with a message, and references parse strictly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/manifest.h"
#include "model/model.h"
#include "protocol/oci.h"
#include "tests/lib/unit.h"

#define HEX_A "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HEX_B "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HEX_C "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

/* A manifest document with the given layers' JSON (after the graph's). */
static char *doc(const char *config_type, const char *graph_type, const char *tensors)
{
    char *s = NULL;
    ck_assert_int_ge(asprintf(&s,
                              "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MANIFEST_MEDIA_TYPE "\","
                              "\"artifactType\":\"" OCI_ARTIFACT_TYPE "\","
                              "\"config\":{\"mediaType\":\"%s\",\"digest\":\"" HEX_A
                              "\",\"size\":10},"
                              "\"layers\":[{\"mediaType\":\"%s\",\"digest\":\"" HEX_B
                              "\",\"size\":20}%s]}",
                              config_type, graph_type, tensors),
                     0);
    return s;
}

static void refused(const char *json, const char *needle)
{
    oci_artifact *a = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(oci_artifact_parse(json, strlen(json), "m", &a, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_null(a);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "'%s' lacks '%s'", err.msg, needle);
}

START_TEST(parses_a_valid_manifest)
{
    char *json = doc(OCI_CONFIG_MEDIA_TYPE, OCI_ONNX_GRAPH_MEDIA_TYPE,
                     ",{\"mediaType\":\"" OCI_TENSOR_MEDIA_TYPE "\",\"digest\":\"" HEX_C
                     "\",\"size\":37,\"annotations\":{\"" OCI_ANNOTATION_TENSOR_NAME "\":\"w\"}}");
    oci_artifact *a = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(oci_artifact_parse(json, strlen(json), "m", &a, &err), 0);
    ck_assert_int_eq(a->graph.kind, OCI_LAYER_ONNX_GRAPH);
    ck_assert_int_eq(a->n_tensors, 1);
    ck_assert_str_eq(a->tensors[0].name, "w");
    ck_assert_int_eq(a->tensors[0].size, 37);
    size_t len = 0;
    char *again = oci_artifact_to_json(a, &len, &err);
    ck_assert_ptr_nonnull(again);
    ck_assert_str_eq(again, json);
    free(again);
    oci_artifact_free(a);
    free(json);
}
END_TEST

START_TEST(refuses_what_is_not_ours)
{
    char *j;
    refused("[]", "not a JSON object");
    refused("{\"a\":1,\"a\":2}", "not JSON");
    refused("{\"schemaVersion\":1}", "schemaVersion");
    j = doc("application/vnd.oci.image.config.v1+json", OCI_ONNX_GRAPH_MEDIA_TYPE, "");
    refused(j, "config: mediaType");
    free(j);
    j = doc(OCI_CONFIG_MEDIA_TYPE, "application/vnd.oci.image.layer.v1.tar", "");
    refused(j, "unknown mediaType");
    free(j);
    j = doc(OCI_CONFIG_MEDIA_TYPE, OCI_TENSOR_MEDIA_TYPE, "");
    refused(j, "first layer");
    free(j);
    /* ... named, as a tensor layer is: the name decoded is freed (a leak
     * the fuzzer found). */
    refused("{\"schemaVersion\":2,\"mediaType\":\"" OCI_MANIFEST_MEDIA_TYPE "\","
            "\"artifactType\":\"" OCI_ARTIFACT_TYPE "\","
            "\"config\":{\"mediaType\":\"" OCI_CONFIG_MEDIA_TYPE "\",\"digest\":\"" HEX_A
            "\",\"size\":10},\"layers\":[{\"mediaType\":\"" OCI_TENSOR_MEDIA_TYPE
            "\",\"digest\":\"" HEX_C "\",\"size\":37,\"annotations\":{\"" OCI_ANNOTATION_TENSOR_NAME
            "\":\"w\"}}]}",
            "first layer");
    j = doc(OCI_CONFIG_MEDIA_TYPE, OCI_ONNX_GRAPH_MEDIA_TYPE,
            ",{\"mediaType\":\"" OCI_SAFETENSORS_HEADER_MEDIA_TYPE "\",\"digest\":\"" HEX_C
            "\",\"size\":1}");
    refused(j, "second non-weight");
    free(j);
    j = doc(OCI_CONFIG_MEDIA_TYPE, OCI_ONNX_GRAPH_MEDIA_TYPE,
            ",{\"mediaType\":\"" OCI_TENSOR_MEDIA_TYPE "\",\"digest\":\"" HEX_C "\",\"size\":40},"
            "{\"mediaType\":\"" OCI_TENSOR_MEDIA_TYPE "\",\"digest\":\"" HEX_C "\",\"size\":40}");
    refused(j, "listed twice");
    free(j);
    j = doc(OCI_CONFIG_MEDIA_TYPE, OCI_ONNX_GRAPH_MEDIA_TYPE,
            ",{\"mediaType\":\"" OCI_TENSOR_MEDIA_TYPE "\",\"digest\":\"sha256:ABC\",\"size\":4}");
    refused(j, "64 lowercase hex");
    free(j);
    j = doc(OCI_CONFIG_MEDIA_TYPE, OCI_ONNX_GRAPH_MEDIA_TYPE,
            ",{\"mediaType\":\"" OCI_TENSOR_MEDIA_TYPE "\",\"digest\":\"" HEX_C "\",\"size\":-1}");
    refused(j, "size");
    free(j);
    j = doc(OCI_CONFIG_MEDIA_TYPE, OCI_ONNX_GRAPH_MEDIA_TYPE,
            ",{\"mediaType\":\"" OCI_TENSOR_MEDIA_TYPE "\",\"digest\":\"sha512:" HEX_C
            "\",\"size\":4}");
    refused(j, "not sha256");
    free(j);
}
END_TEST

/* The artifact of a real model: one layer per distinct identity, each
 * layer's size its header and bytes, and the check holds the config (the
 * model) to the layers, refusing a layer size that lies. */
START_TEST(artifact_of_a_model_checks_against_its_config)
{
    model *m = NULL;
    tetris_error err = {0};
    const char *dir = getenv("TETRIS_MODELS_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/silero_vad_v5.onnx", dir != NULL ? dir : ".deps/models");
    ck_assert_int_eq(model_parse_file(path, &m, &err), 0);
    ck_assert_int_eq(model_compute_digests(m, &err), 0);
    tensor_digest zero = {{0}};
    oci_artifact *a = NULL;
    ck_assert_int_eq(oci_artifact_from_model(m, &zero, 1, &zero, 1, &a, &err), 0);
    ck_assert_int_gt(a->n_tensors, 0);
    ck_assert_int_le(a->n_tensors, m->n_tensors);
    for (size_t i = 0; i < a->n_tensors; i++)
        ck_assert_int_gt(a->tensors[i].size, 17);
    /* the header and bytes hash to the identity */
    const tensor_desc *t = &m->tensors[m->n_tensors - 1];
    uint8_t header[TENSOR_DIGEST_HEADER_MAX];
    size_t hlen = tensor_digest_header(&t->meta, header);
    ck_assert_int_eq(oci_tensor_blob_size(&t->meta), hlen + t->meta.nbytes);
    ck_assert_int_eq(oci_artifact_check_model(a, m, &err), 0);
    a->tensors[0].size++;
    ck_assert_int_eq(oci_artifact_check_model(a, m, &err), -TETRIS_E_FORMAT);
    ck_assert(strstr(err.msg, "layer size") != NULL);
    a->tensors[0].size--;
    a->n_tensors--;
    ck_assert_int_eq(oci_artifact_check_model(a, m, &err), -TETRIS_E_FORMAT);
    ck_assert(strstr(err.msg, "has no layer") != NULL);
    a->n_tensors++;
    /* a round trip through the document keeps it */
    size_t len = 0;
    char *json = oci_artifact_to_json(a, &len, &err);
    oci_artifact *b = NULL;
    ck_assert_int_eq(oci_artifact_parse(json, len, "m", &b, &err), 0);
    ck_assert_int_eq(oci_artifact_check_model(b, m, &err), 0);
    free(json);
    oci_artifact_free(b);
    oci_artifact_free(a);
    model_free(m);
}
END_TEST

START_TEST(references)
{
    oci_ref r;
    tetris_error err = {0};
    char auth[300];
    ck_assert_int_eq(oci_ref_parse("oci://reg.example:5000/models/bert-base:v1", &r, &err), 0);
    ck_assert_str_eq(r.host, "reg.example");
    ck_assert_int_eq(r.port, 5000);
    ck_assert_str_eq(r.repo, "models/bert-base");
    ck_assert_str_eq(r.tag, "v1");
    oci_ref_authority(&r, auth, sizeof auth);
    ck_assert_str_eq(auth, "reg.example:5000");
    ck_assert_int_eq(oci_ref_parse("oci://127.0.0.1/a/b", &r, &err), 0);
    ck_assert_str_eq(r.tag, "latest");
    ck_assert_int_eq(r.port, 0);
    oci_ref_authority(&r, auth, sizeof auth); /* no port: a registry's, 443 */
    ck_assert_str_eq(auth, "127.0.0.1:443");
    ck_assert_int_eq(oci_ref_parse("oci://[::1]:80/a@" HEX_A, &r, &err), 0);
    ck_assert(r.has_digest);
    ck_assert_str_eq(r.host, "[::1]");
    const char *bad[] = {"http://h/a",         "oci://h",      "oci://h:0/a",  "oci://h:99999/a",
                         "oci://h/A",          "oci://h/a:",   "oci://h/a:-x", "oci://h/a@sha256:1",
                         "oci://h/a:t@" HEX_A, "oci://h/a//b", "oci://h/a..b", "oci://-h/a",
                         "oci://h:x/a",        "oci:///a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(oci_ref_parse(bad[i], &r, &err) == -TETRIS_E_INVAL, "%s accepted", bad[i]);
    ck_assert(oci_ref_is("oci://x/y"));
    ck_assert(!oci_ref_is("/models/x.onnx"));
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, parses_a_valid_manifest);
    tcase_add_test(tc, refuses_what_is_not_ours);
    tcase_add_test(tc, artifact_of_a_model_checks_against_its_config);
    tcase_add_test(tc, references);
}

UNIT_MAIN("oci")
