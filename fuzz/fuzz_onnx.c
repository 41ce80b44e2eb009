/* fuzz_onnx.c - libFuzzer harness for the ONNX parser and the protobuf
 * reader under it. Accepted tensors must lie inside the input and decode;
 * the model must survive the manifest round trip. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/format_onnx.h"
#include "fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    model *m = NULL;
    tetris_error err;
    if (onnx_parse("fuzz.onnx", data, size, &m, &err) < 0) {
        fuzz_check_error(&err, "fuzz.onnx");
        return 0;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        if (strcmp(t->source, "fuzz.onnx") != 0)
            continue; /* external data: a file next to the model */
        if (t->offset > size || t->length > size - t->offset)
            abort();
        if (t->encoding == TENSOR_ENC_RAW) {
            if (t->length != t->meta.nbytes)
                abort();
            continue;
        }
        /* Each element takes at least one byte of varint, so this is
         * bounded by 8 * size. */
        uint8_t *buf = malloc(t->meta.nbytes + 1);
        if (buf == NULL)
            abort();
        if (onnx_decode_varints(t, data + t->offset, buf, &err) < 0)
            abort(); /* the parser counted these varints: they must decode */
        free(buf);
    }
    fuzz_round_trip(m);
    model_free(m);
    return 0;
}
