/* fuzz_oip.c - libFuzzer harness for tetris-function's Open Inference
 * Protocol request decoder (function/oip_request.h) and the answer encoder
 * (function/oip_response.h), which run on whatever reaches
 * POST /v2/models/NAME/infer.
 *
 * An input is one selector byte, then (when its bit 2 is set) a 4-byte
 * little-endian Inference-Header-Content-Length value, then the body. The
 * selector's low two bits pick the model signature: every datatype at
 * [-1, 2], a silero-vad-like one (FP32 [-1, -1], FP32 [2, -1, 128], INT64
 * scalar), a fixed FP32 [2, 3], two inputs FP32 [-1, 3] and INT64 [2]; bit 3
 * sends the header length as text that is not a number.
 *
 * A refused input is TETRIS_E_FORMAT (or NOMEM) with a message. An accepted
 * one holds what the model takes (datatypes, ranks, fixed dimensions,
 * sizes, no NaN, BOOL 0/1, well-formed BYTES), and written back as a
 * request, JSON and binary, it decodes to the same bytes; its inputs,
 * answered as outputs, encode. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_common.h"
#include "common/log.h"
#include "common/textbuf.h"
#include "function/oip_request.h"
#include "function/oip_response.h"

static oip_tensor_spec every[OIP_DATATYPE_COUNT];
static char every_names[OIP_DATATYPE_COUNT][16];
static const oip_tensor_spec vad[] = {
    {"input", OIP_FP32, 2, {-1, -1}},
    {"state", OIP_FP32, 3, {2, -1, 128}},
    {"sr", OIP_INT64, 0, {0}},
};
static const oip_tensor_spec fixed[] = {{"x", OIP_FP32, 2, {2, 3}}};
static const oip_tensor_spec two[] = {{"x", OIP_FP32, 2, {-1, 3}}, {"n", OIP_INT64, 1, {2}}};
static oip_signature signatures[4];

static void init(void)
{
    for (int i = 0; i < OIP_DATATYPE_COUNT; i++) {
        snprintf(every_names[i], sizeof(every_names[i]), "in_%s",
                 oip_datatype_name((enum oip_datatype)i));
        every[i] = (oip_tensor_spec){every_names[i], (enum oip_datatype)i, 2, {-1, 2}};
    }
    signatures[0] = (oip_signature){every, OIP_DATATYPE_COUNT, every, OIP_DATATYPE_COUNT};
    signatures[1] = (oip_signature){vad, 3, vad, 3};
    signatures[2] = (oip_signature){fixed, 1, fixed, 1};
    signatures[3] = (oip_signature){two, 2, two, 2};
}

static void check_tensor(const oip_tensor_spec *spec, const oip_tensor *t)
{
    size_t count = 1, size = oip_datatype_size(t->datatype);
    if (t->datatype != spec->datatype || t->ndim != spec->ndim || strcmp(t->name, spec->name) != 0)
        abort();
    for (size_t k = 0; k < t->ndim; k++) {
        if (t->shape[k] < 0 || (spec->shape[k] >= 0 && t->shape[k] != spec->shape[k]))
            abort();
        count *= (size_t)t->shape[k];
    }
    if (count != t->count)
        abort();
    if (t->datatype == OIP_BYTES) {
        tetris_error err;
        if (oip_bytes_check(t->data, t->data_bytes, t->count, &err) < 0)
            abort();
        return;
    }
    if (t->data_bytes != count * size)
        abort();
    for (size_t i = 0; i < count; i++) {
        const uint8_t *e = t->data + i * size;
        float f;
        double d;
        uint16_t h;
        switch (t->datatype) {
        case OIP_BOOL:
            if (*e > 1)
                abort();
            break;
        case OIP_FP32:
            memcpy(&f, e, 4);
            if (!isfinite(f))
                abort();
            break;
        case OIP_FP64:
            memcpy(&d, e, 8);
            if (!isfinite(d))
                abort();
            break;
        case OIP_FP16:
            memcpy(&h, e, 2);
            if (!isfinite(oip_fp16_to_float(h)))
                abort();
            break;
        case OIP_BF16:
            memcpy(&h, e, 2);
            if (!isfinite(oip_bf16_to_float(h)))
                abort();
            break;
        default: break;
        }
    }
}

/* The inputs written back as a request decode to the same bytes. */
static void round_trip(const oip_signature *sig, const oip_request *req, bool binary)
{
    textbuf t = {0};
    tetris_error err = {0};
    char hl[32];
    textbuf_puts(&t, "{\"inputs\":[");
    for (size_t i = 0; i < req->n_inputs; i++) {
        if (i > 0)
            textbuf_puts(&t, ",");
        if (oip_write_tensor(&t, &req->inputs[i], binary, &err) < 0) {
            /* Binary never fails; JSON does for BYTES that are not UTF-8. */
            if (binary || strstr(err.msg, "UTF-8") == NULL)
                abort();
            textbuf_free(&t);
            return;
        }
    }
    textbuf_puts(&t, "]}");
    snprintf(hl, sizeof(hl), "%zu", t.len);
    for (size_t i = 0; binary && i < req->n_inputs; i++)
        textbuf_append(&t, req->inputs[i].data, req->inputs[i].data_bytes);
    size_t len;
    char *text = textbuf_take(&t, &len);
    if (text == NULL)
        return;
    oip_request *again = NULL;
    tetris_error err2 = {0};
    if (oip_request_decode(sig, text, len, binary ? hl : NULL, &again, &err2) == 0) {
        for (size_t i = 0; i < req->n_inputs; i++)
            if (again->inputs[i].data_bytes != req->inputs[i].data_bytes ||
                memcmp(again->inputs[i].data, req->inputs[i].data, req->inputs[i].data_bytes) != 0)
                abort();
    } else if (err2.code != TETRIS_E_NOMEM) {
        fprintf(stderr, "round trip refused: %s\n", err2.msg);
        abort();
    }
    oip_request_free(again);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    if (!ready) {
        init();
        ready = true;
    }
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    const oip_signature *sig = &signatures[sel & 3];
    char header_length[32], *hl = NULL;
    data++, size--;
    if (sel & 4) {
        if (size < 4)
            return 0;
        uint32_t n = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
                     (uint32_t)data[3] << 24;
        data += 4, size -= 4;
        snprintf(header_length, sizeof(header_length), (sel & 8) ? "%ux" : "%u", n);
        hl = header_length;
    }
    /* The HTTP server hands a NUL-terminated copy; the decoder must not
     * rely on it, so this copy has none: a read past it is an overflow. */
    char *body = malloc(size > 0 ? size : 1);
    if (body == NULL)
        return 0;
    memcpy(body, data, size);
    oip_request *req = NULL;
    tetris_error err = {0};
    if (oip_request_decode(sig, body, size, hl, &req, &err) < 0) {
        if ((err.code != TETRIS_E_FORMAT && err.code != TETRIS_E_NOMEM) || err.msg[0] == '\0')
            abort();
        free(body);
        return 0;
    }
    for (size_t i = 0; i < req->n_inputs; i++)
        check_tensor(&sig->inputs[i], &req->inputs[i]);
    round_trip(sig, req, false);
    round_trip(sig, req, true);
    struct oip_response resp;
    if (oip_response_infer("m", NULL, req, req->inputs, &resp, &err) == 0)
        free(resp.body);
    else if (err.code != TETRIS_E_FORMAT)
        abort();
    oip_request_free(req);
    free(body);
    return 0;
}
