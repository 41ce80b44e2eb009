/* fuzz_oci.c - libFuzzer harness for the registry artifact's manifest
 * decoder (protocol/oci.h) and the reference parser. A manifest that
 * decodes must encode and decode again to the same document. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_common.h"
#include "protocol/oci.h"

static void check_reference(const uint8_t *data, size_t size)
{
    char text[600];
    fuzz_text(data, size, text, sizeof text);
    oci_ref r;
    tetris_error err;
    if (oci_ref_parse(text, &r, &err) < 0 &&
        (err.code != TETRIS_E_INVAL || strstr(err.msg, "reference") == NULL))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    oci_artifact *a = NULL;
    tetris_error err;
    check_reference(data, size);
    if (oci_artifact_parse((const char *)data, size, "fuzz", &a, &err) < 0) {
        fuzz_check_error(&err, "fuzz");
        return 0;
    }
    size_t len = 0;
    char *json = oci_artifact_to_json(a, &len, &err);
    if (json == NULL)
        abort();
    oci_artifact *b = NULL;
    if (oci_artifact_parse(json, len, "again", &b, &err) < 0)
        abort();
    size_t len2 = 0;
    char *json2 = oci_artifact_to_json(b, &len2, &err);
    if (json2 == NULL || len2 != len || memcmp(json, json2, len) != 0)
        abort();
    free(json);
    free(json2);
    oci_artifact_free(a);
    oci_artifact_free(b);
    return 0;
}
