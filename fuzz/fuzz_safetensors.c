/* fuzz_safetensors.c - libFuzzer harness for the safetensors parser. A
 * file that parses must also survive the manifest writer and reader and
 * the inspect listing, and come back identical. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/format_safetensors.h"
#include "fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    model *m = NULL;
    tetris_error err;
    if (safetensors_parse("fuzz.safetensors", data, size, &m, &err) < 0) {
        fuzz_check_error(&err, "fuzz.safetensors");
        return 0;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        if (t->offset > size || t->length > size - t->offset || t->length != t->meta.nbytes)
            abort(); /* a region the parser accepted must lie inside the file */
    }
    fuzz_round_trip(m);
    model_free(m);
    return 0;
}
