/* oip_ort.c - protocol tensors to and from ONNX Runtime values (see
 * oip_ort.h). */
#include "function/oip_ort.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int oip_ort_signature(const ort_io *io, oip_signature **out, tetris_error *err)
{
    oip_signature *sig = calloc(1, sizeof(*sig));
    oip_tensor_spec *in = calloc(io->n_in + 1, sizeof(*in));
    oip_tensor_spec *outs = calloc(io->n_out + 1, sizeof(*outs));
    if (sig == NULL || in == NULL || outs == NULL) {
        free(sig);
        free(in);
        free(outs);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    for (size_t i = 0; i < io->n_in; i++) {
        in[i].name = io->in_names[i];
        in[i].datatype = oip_datatype_from_onnx((int)io->in[i].type);
        in[i].ndim = io->in[i].ndim;
        memcpy(in[i].shape, io->in[i].model_dims, sizeof(in[i].shape));
    }
    for (size_t i = 0; i < io->n_out; i++) {
        outs[i].name = io->out_names[i];
        outs[i].datatype = oip_datatype_from_onnx((int)io->out[i].type);
        outs[i].ndim = io->out[i].ndim;
        memcpy(outs[i].shape, io->out[i].model_dims, sizeof(outs[i].shape));
    }
    sig->inputs = in;
    sig->n_inputs = io->n_in;
    sig->outputs = outs;
    sig->n_outputs = io->n_out;
    *out = sig;
    return 0;
}

void oip_ort_signature_free(oip_signature *sig)
{
    if (sig == NULL)
        return;
    free((void *)sig->inputs);
    free((void *)sig->outputs);
    free(sig);
}

size_t oip_ort_rows(const oip_request *r)
{
    size_t rows = 0;
    for (size_t i = 0; i < r->n_inputs; i++) {
        const oip_tensor *t = &r->inputs[i];
        if (t->ndim == 0 || t->shape[0] == 0 || (i > 0 && (size_t)t->shape[0] != rows))
            return 0;
        rows = (size_t)t->shape[0];
    }
    return rows;
}

bool oip_ort_concatenable(const oip_request *a, const oip_request *b)
{
    if (oip_ort_rows(a) == 0 || oip_ort_rows(b) == 0)
        return false;
    for (size_t i = 0; i < a->n_inputs; i++)
        if (memcmp(a->inputs[i].shape + 1, b->inputs[i].shape + 1,
                   (a->inputs[i].ndim - 1) * sizeof(int64_t)) != 0)
            return false;
    return true;
}

/* A request's own tensor, its bytes lent to ONNX Runtime. */
static int wrap_tensor(const OrtApi *api, const oip_tensor *t, OrtValue **out, tetris_error *err)
{
    OrtMemoryInfo *cpu = NULL;
    int r = ort_check(api, api->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &cpu),
                      "memory info", err);
    if (r == 0)
        r = ort_check(api,
                      api->CreateTensorWithDataAsOrtValue(cpu, t->data, t->data_bytes, t->shape,
                                                          t->ndim,
                                                          (ONNXTensorElementDataType)
                                                              oip_datatype_to_onnx(t->datatype),
                                                          out),
                      "input tensor", err);
    if (cpu != NULL)
        api->ReleaseMemoryInfo(cpu); /* the value keeps its own copy */
    return r;
}

/* The BYTES elements of input i of reqs[0..n) into a string tensor, in
 * order. */
static int fill_strings(const OrtApi *api, OrtValue *v, const oip_request *const *reqs, size_t n,
                        size_t i, tetris_error *err)
{
    size_t index = 0;
    for (size_t j = 0; j < n; j++) {
        const uint8_t *p = reqs[j]->inputs[i].data;
        for (size_t k = 0; k < reqs[j]->inputs[i].count; k++) {
            uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24;
            char *buf;
            int r = ort_check(api, api->GetResizedStringTensorElementBuffer(v, index++, len, &buf),
                              "string element", err);
            if (r < 0)
                return r;
            memcpy(buf, p + 4, len);
            p += 4 + (size_t)len;
        }
    }
    return 0;
}

/* Input i of the batch: the parts one after the other along dim 0. */
static int concat_input(const ort_model *m, const ort_io *io, size_t i,
                        const oip_request *const *reqs, size_t n, OrtValue **out, tetris_error *err)
{
    const OrtApi *api = m->api;
    const oip_tensor *first = &reqs[0]->inputs[i];
    OrtAllocator *alloc;
    int64_t dims[OIP_MAX_DIMS];
    uint8_t *data = NULL;
    int r;

    memcpy(dims, first->shape, sizeof(dims));
    dims[0] = 0;
    for (size_t j = 0; j < n; j++)
        dims[0] += reqs[j]->inputs[i].shape[0];
    r = ort_check(api, api->GetAllocatorWithDefaultOptions(&alloc), "allocator", err);
    if (r == 0)
        r = ort_check(api,
                      api->CreateTensorAsOrtValue(alloc, dims, first->ndim,
                                                  (ONNXTensorElementDataType)io->in[i].type, out),
                      "input tensor", err);
    if (r == 0 && first->datatype == OIP_BYTES)
        return fill_strings(api, *out, reqs, n, i, err);
    if (r == 0)
        r = ort_check(api, api->GetTensorMutableData(*out, (void **)&data), "input data", err);
    for (size_t j = 0; r == 0 && j < n; j++) {
        memcpy(data, reqs[j]->inputs[i].data, reqs[j]->inputs[i].data_bytes);
        data += reqs[j]->inputs[i].data_bytes;
    }
    return r;
}

int oip_ort_inputs(const ort_model *m, const ort_io *io, const oip_request *const *reqs, size_t n,
                   OrtValue **inputs, tetris_error *err)
{
    int r = 0;
    memset(inputs, 0, io->n_in * sizeof(*inputs));
    for (size_t i = 0; r == 0 && i < io->n_in; i++) {
        const oip_tensor *t = &reqs[0]->inputs[i];
        if (n == 1 && t->datatype != OIP_BYTES)
            r = wrap_tensor(m->api, t, &inputs[i], err);
        else
            r = concat_input(m, io, i, reqs, n, &inputs[i], err);
        if (r < 0)
            tetris_wrap(err, "input %s", io->in_names[i]);
    }
    if (r < 0)
        ort_values_release(m, inputs, io->n_in);
    return r;
}

/* Strings [from, from + count) of a string tensor in the BYTES layout. */
static int copy_strings(const OrtApi *api, const OrtValue *v, size_t from, size_t count,
                        oip_tensor *t, tetris_error *err)
{
    size_t total = 0, len;
    int r = 0;
    for (size_t k = 0; r == 0 && k < count; k++) {
        r = ort_check(api, api->GetStringTensorElementLength(v, from + k, &len), "string", err);
        if (r == 0 && len > UINT32_MAX)
            r = tetris_fail(err, TETRIS_E_RUNTIME, 0, "string element of %zu bytes", len);
        total += 4 + len;
    }
    if (r < 0)
        return r;
    if ((t->data = malloc(total > 0 ? total : 1)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory for %zu bytes", total);
    uint8_t *p = t->data;
    for (size_t k = 0; r == 0 && k < count; k++) {
        r = ort_check(api, api->GetStringTensorElementLength(v, from + k, &len), "string", err);
        if (r == 0)
            r = ort_check(api, api->GetStringTensorElement(v, len, from + k, p + 4), "string", err);
        for (int b = 0; b < 4; b++)
            p[b] = (uint8_t)(len >> (8 * b));
        p += 4 + len;
    }
    t->data_bytes = total;
    return r;
}

int oip_ort_output(const ort_model *m, const ort_io *io, size_t i, const OrtValue *v, size_t first,
                   size_t rows, size_t total, oip_tensor *t, tetris_error *err)
{
    const OrtApi *api = m->api;
    OrtTensorTypeAndShapeInfo *tsi = NULL;
    ONNXTensorElementDataType type;
    int is_tensor = 0;
    size_t count = 0;
    const char *name = io->out_names[i];

    memset(t, 0, sizeof(*t));
    int r = ort_check(api, api->IsTensor(v, &is_tensor), "output kind", err);
    if (r == 0 && !is_tensor)
        r = tetris_fail(err, TETRIS_E_RUNTIME, 0, "output %s is not a tensor", name);
    if (r == 0)
        r = ort_check(api, api->GetTensorTypeAndShape(v, &tsi), "output shape", err);
    if (r == 0)
        r = ort_check(api, api->GetTensorElementType(tsi, &type), "output type", err);
    if (r == 0)
        r = ort_check(api, api->GetDimensionsCount(tsi, &t->ndim), "output rank", err);
    if (r == 0 && t->ndim > OIP_MAX_DIMS)
        r = tetris_fail(err, TETRIS_E_RUNTIME, 0, "output %s has rank %zu", name, t->ndim);
    if (r == 0)
        r = ort_check(api, api->GetDimensions(tsi, t->shape, t->ndim), "output dims", err);
    if (r == 0)
        r = ort_check(api, api->GetTensorShapeElementCount(tsi, &count), "output size", err);
    if (tsi != NULL)
        api->ReleaseTensorTypeAndShapeInfo(tsi);
    if (r == 0 && (t->datatype = oip_datatype_from_onnx((int)type)) == OIP_DATATYPE_NONE)
        r = tetris_fail(err, TETRIS_E_RUNTIME, 0,
                        "output %s: element type %d has no protocol datatype", name, (int)type);
    if (r == 0 && total > 0 && (t->ndim == 0 || t->shape[0] != (int64_t)total))
        r = tetris_fail(err, TETRIS_E_RUNTIME, 0,
                        "output %s: first dimension %lld, expected the batch's %zu", name,
                        t->ndim > 0 ? (long long)t->shape[0] : -1LL, total);
    if (r < 0)
        return r;
    /* Request's rows: a slice of count / total elements each. */
    size_t per_row = total > 0 ? count / total : 0;
    size_t from = total > 0 ? first * per_row : 0;
    t->count = total > 0 ? rows * per_row : count;
    if (total > 0)
        t->shape[0] = (int64_t)rows;
    if ((t->name = strdup(name)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    if (t->datatype == OIP_BYTES) {
        r = copy_strings(api, v, from, t->count, t, err);
    } else {
        size_t size = oip_datatype_size(t->datatype);
        const uint8_t *data = NULL;
        r = ort_check(api, api->GetTensorData(v, (const void **)&data), "output data", err);
        if (r == 0 && (t->data = malloc(t->count * size + 1)) == NULL)
            r = tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
        if (r == 0) {
            memcpy(t->data, data + from * size, t->count * size);
            t->data_bytes = t->count * size;
        }
    }
    if (r < 0)
        oip_tensor_clear(t);
    return r;
}
