/* fuzz_manifest.c - libFuzzer harness for the manifest reader. A manifest
 * that parses must be written back and parse again to the same model. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    model *m = NULL;
    tetris_error err;
    if (manifest_parse((const char *)data, size, &m, &err) < 0) {
        fuzz_check_error(&err, "manifest");
        return 0;
    }
    fuzz_round_trip(m);
    model_free(m);
    return 0;
}
