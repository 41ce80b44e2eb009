/* ort_inputs.c - seeded inputs from session metadata, batched along dim 0,
 * and per-request output hashes (see ort_inputs.h). */
#include "agent/ort_inputs.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "common/clock.h"

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, man = x & 0x7fffff;
    if (exp < 113) /* |f| < 2^-14: flush to zero, our values never need subnormals */
        return (uint16_t)sign;
    return (uint16_t)(sign | ((exp - 112) << 10) | (man >> 13));
}

/* Bytes per element of the types we generate; 0 for the others. */
static size_t element_size(ONNXTensorElementDataType t)
{
    switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: return 8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return 4;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: return 2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return 1;
    default: return 0;
    }
}

/* Fills n elements of type t (one element_size() != 0). */
static void fill_values(ONNXTensorElementDataType t, void *data, size_t n, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(rng);
        double u = (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0; /* [-1, 1) */
        int64_t k = (int64_t)(r % 16);
        switch (t) {
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: ((float *)data)[i] = (float)u; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: ((double *)data)[i] = u; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
            ((uint16_t *)data)[i] = float_to_half((float)u);
            break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: {
            float f = (float)u;
            uint32_t x;
            memcpy(&x, &f, sizeof(x));
            ((uint16_t *)data)[i] = (uint16_t)(x >> 16);
            break;
        }
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: ((int64_t *)data)[i] = k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: ((uint64_t *)data)[i] = (uint64_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: ((int32_t *)data)[i] = (int32_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: ((uint32_t *)data)[i] = (uint32_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: ((int16_t *)data)[i] = (int16_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: ((uint16_t *)data)[i] = (uint16_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: ((int8_t *)data)[i] = (int8_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: ((uint8_t *)data)[i] = (uint8_t)k; break;
        default: ((uint8_t *)data)[i] = (uint8_t)(r & 1); break; /* bool */
        }
    }
}

/* Shape metadata of a tensor type: element type, rank, dims (-1 dynamic). */
static int tensor_shape(const OrtApi *api, OrtTypeInfo *ti, const char *name,
                        ONNXTensorElementDataType *et, size_t *ndim, int64_t *dims,
                        tetris_error *err)
{
    const OrtTensorTypeAndShapeInfo *tsi;
    enum ONNXType kind;
    int r = ort_check(api, api->GetOnnxTypeFromTypeInfo(ti, &kind), "type kind", err);
    if (r == 0 && kind != ONNX_TYPE_TENSOR)
        r = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s is not a tensor", name);
    if (r == 0)
        r = ort_check(api, api->CastTypeInfoToTensorInfo(ti, &tsi), "tensor info", err);
    if (r == 0)
        r = ort_check(api, api->GetTensorElementType(tsi, et), "element type", err);
    if (r == 0)
        r = ort_check(api, api->GetDimensionsCount(tsi, ndim), "rank", err);
    if (r == 0 && *ndim > TENSOR_MAX_DIMS)
        r = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s has rank %zu", name, *ndim);
    if (r == 0)
        r = ort_check(api, api->GetDimensions(tsi, dims, *ndim), "dims", err);
    return r;
}

static int describe_input(const ort_model *m, ort_io *io, size_t i, int64_t dynamic_dim,
                          tetris_error *err)
{
    const OrtApi *api = m->api;
    struct ort_input_desc *d = &io->in[i];
    OrtTypeInfo *ti = NULL;
    int r = ort_check(api, api->SessionGetInputTypeInfo(m->session, i, &ti), "input type", err);
    if (r == 0)
        r = tensor_shape(api, ti, io->in_names[i], &d->type, &d->ndim, d->dims, err);
    if (ti != NULL)
        api->ReleaseTypeInfo(ti);
    if (r < 0)
        return tetris_wrap(err, "input %s", io->in_names[i]);
    if (element_size(d->type) == 0)
        io->seedable = false;
    memcpy(d->model_dims, d->dims, sizeof(d->dims));
    bool batch_seen = false;
    d->sample_elements = 1;
    d->leading_dynamic = d->ndim > 0 && d->dims[0] < 0;
    for (size_t k = 0; k < d->ndim; k++) {
        if (d->dims[k] < 0) {
            d->dims[k] = batch_seen ? dynamic_dim : 1;
            batch_seen = true;
        }
        d->sample_elements *= (size_t)d->dims[k];
    }
    return 0;
}

static int describe_output(const ort_model *m, ort_io *io, size_t i, tetris_error *err)
{
    const OrtApi *api = m->api;
    struct ort_output_desc *d = &io->out[i];
    OrtTypeInfo *ti = NULL;
    int r = ort_check(api, api->SessionGetOutputTypeInfo(m->session, i, &ti), "output type", err);
    if (r == 0)
        r = tensor_shape(api, ti, io->out_names[i], &d->type, &d->ndim, d->model_dims, err);
    if (ti != NULL)
        api->ReleaseTypeInfo(ti);
    if (r < 0)
        return tetris_wrap(err, "output %s", io->out_names[i]);
    return 0;
}

/* Copies an ORT-allocated name and frees the original. */
static int take_name(const OrtApi *api, OrtAllocator *alloc, char *name, char **out,
                     tetris_error *err)
{
    *out = strdup(name);
    ort_check(api, api->AllocatorFree(alloc, name), "free name", NULL);
    return *out != NULL ? 0 : tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
}

int ort_io_describe(const ort_model *m, int64_t dynamic_dim, ort_io **out, tetris_error *err)
{
    const OrtApi *api = m->api;
    OrtAllocator *alloc;
    char *name;
    int r;

    *out = NULL;
    if (dynamic_dim < 1)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "dynamic dimension %lld < 1",
                           (long long)dynamic_dim);
    ort_io *io = calloc(1, sizeof(*io));
    if (io == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    r = ort_check(api, api->GetAllocatorWithDefaultOptions(&alloc), "allocator", err);
    if (r == 0)
        r = ort_check(api, api->SessionGetInputCount(m->session, &io->n_in), "inputs", err);
    if (r == 0)
        r = ort_check(api, api->SessionGetOutputCount(m->session, &io->n_out), "outputs", err);
    if (r == 0) {
        io->in_names = calloc(io->n_in + 1, sizeof(char *));
        io->in = calloc(io->n_in + 1, sizeof(*io->in));
        io->out_names = calloc(io->n_out + 1, sizeof(char *));
        io->out = calloc(io->n_out + 1, sizeof(*io->out));
        if (io->in_names == NULL || io->in == NULL || io->out_names == NULL || io->out == NULL)
            r = tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    io->batchable = io->n_in > 0 && io->n_out > 0;
    io->seedable = true;
    for (size_t i = 0; r == 0 && i < io->n_in; i++) {
        r = ort_check(api, api->SessionGetInputName(m->session, i, alloc, &name), "input name",
                      err);
        if (r == 0)
            r = take_name(api, alloc, name, &io->in_names[i], err);
        if (r == 0)
            r = describe_input(m, io, i, dynamic_dim, err);
        if (r == 0 && !io->in[i].leading_dynamic)
            io->batchable = false;
    }
    for (size_t i = 0; r == 0 && i < io->n_out; i++) {
        r = ort_check(api, api->SessionGetOutputName(m->session, i, alloc, &name), "output name",
                      err);
        if (r == 0)
            r = take_name(api, alloc, name, &io->out_names[i], err);
        if (r == 0)
            r = describe_output(m, io, i, err);
        if (r == 0 && !(io->out[i].ndim > 0 && io->out[i].model_dims[0] < 0))
            io->batchable = false;
    }
    if (r < 0) {
        ort_io_free(io);
        return r;
    }
    *out = io;
    return 0;
}

void ort_io_free(ort_io *io)
{
    if (io == NULL)
        return;
    for (size_t i = 0; io->in_names != NULL && i < io->n_in; i++)
        free(io->in_names[i]);
    for (size_t i = 0; io->out_names != NULL && i < io->n_out; i++)
        free(io->out_names[i]);
    free(io->in_names);
    free(io->out_names);
    free(io->in);
    free(io->out);
    free(io);
}

static bool dims_equal(size_t ndim, const int64_t *a, const int64_t *b)
{
    return memcmp(a, b, ndim * sizeof(*a)) == 0;
}

bool ort_io_equal(const ort_io *a, const ort_io *b)
{
    if (a->n_in != b->n_in || a->n_out != b->n_out || a->batchable != b->batchable ||
        a->seedable != b->seedable)
        return false;
    for (size_t i = 0; i < a->n_in; i++) {
        const struct ort_input_desc *x = &a->in[i], *y = &b->in[i];
        if (strcmp(a->in_names[i], b->in_names[i]) != 0 || x->type != y->type ||
            x->ndim != y->ndim || !dims_equal(x->ndim, x->model_dims, y->model_dims))
            return false;
    }
    for (size_t i = 0; i < a->n_out; i++) {
        const struct ort_output_desc *x = &a->out[i], *y = &b->out[i];
        if (strcmp(a->out_names[i], b->out_names[i]) != 0 || x->type != y->type ||
            x->ndim != y->ndim || !dims_equal(x->ndim, x->model_dims, y->model_dims))
            return false;
    }
    return true;
}

void ort_values_release(const ort_model *m, OrtValue **values, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (values[i] != NULL)
            m->api->ReleaseValue(values[i]);
        values[i] = NULL;
    }
}

int ort_inputs_make(const ort_model *m, const ort_io *io, const uint64_t *seeds, size_t n,
                    OrtValue **inputs, tetris_error *err)
{
    const OrtApi *api = m->api;
    OrtAllocator *alloc;
    int r;

    if (n == 0 || (n > 1 && !io->batchable))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "cannot batch %zu requests for this model", n);
    for (size_t i = 0; i < io->n_in; i++)
        if (element_size(io->in[i].type) == 0)
            return tetris_fail(err, TETRIS_E_INVAL, 0,
                               "input %s: element type %d cannot be generated from a seed",
                               io->in_names[i], (int)io->in[i].type);
    uint64_t *rng = malloc(n * sizeof(*rng));
    if (rng == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    memcpy(rng, seeds, n * sizeof(*rng));
    memset(inputs, 0, io->n_in * sizeof(*inputs));
    r = ort_check(api, api->GetAllocatorWithDefaultOptions(&alloc), "allocator", err);
    /* Input by input, request by request: each request's generator walks
     * its inputs in model order, exactly as it would alone. */
    for (size_t i = 0; r == 0 && i < io->n_in; i++) {
        const struct ort_input_desc *d = &io->in[i];
        int64_t dims[TENSOR_MAX_DIMS];
        uint8_t *data = NULL;
        memcpy(dims, d->dims, d->ndim * sizeof(dims[0]));
        if (d->ndim > 0)
            dims[0] *= (int64_t)n;
        r = ort_check(api, api->CreateTensorAsOrtValue(alloc, dims, d->ndim, d->type, &inputs[i]),
                      "create input", err);
        if (r == 0)
            r = ort_check(api, api->GetTensorMutableData(inputs[i], (void **)&data), "input data",
                          err);
        for (size_t j = 0; r == 0 && j < n; j++)
            fill_values(d->type, data + j * d->sample_elements * element_size(d->type),
                        d->sample_elements, &rng[j]);
    }
    free(rng);
    if (r < 0)
        ort_values_release(m, inputs, io->n_in);
    return r;
}

int ort_io_run(const ort_model *m, const ort_io *io, OrtValue *const *inputs,
               OrtValue **outputs, tetris_error *err)
{
    return ort_io_run_some(m, io, inputs, NULL, outputs, err);
}

int ort_io_run_some(const ort_model *m, const ort_io *io, OrtValue *const *inputs,
                    const bool *wanted, OrtValue **outputs, tetris_error *err)
{
    const OrtApi *api = m->api;
    size_t n = 0;
    memset(outputs, 0, io->n_out * sizeof(*outputs));
    if (wanted == NULL)
        return ort_check(api,
                         api->Run(m->session, NULL, (const char *const *)io->in_names,
                                  (const OrtValue *const *)inputs, io->n_in,
                                  (const char *const *)io->out_names, io->n_out, outputs),
                         "run", err);
    const char **names = calloc(io->n_out + 1, sizeof(*names));
    OrtValue **values = calloc(io->n_out + 1, sizeof(*values));
    int r = 0;
    if (names == NULL || values == NULL)
        r = tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    for (size_t i = 0; r == 0 && i < io->n_out; i++)
        if (wanted[i])
            names[n++] = io->out_names[i];
    if (r == 0 && n > 0)
        r = ort_check(api,
                      api->Run(m->session, NULL, (const char *const *)io->in_names,
                               (const OrtValue *const *)inputs, io->n_in, names, n, values),
                      "run", err);
    for (size_t i = 0, k = 0; r == 0 && i < io->n_out; i++)
        if (wanted[i])
            outputs[i] = values[k++];
    free(names);
    free(values);
    return r;
}

/* Request j's byte range [*off, *off + *len) of one output of an n-batch. */
static int output_slice(const OrtApi *api, const OrtValue *v, const char *name, size_t n,
                        size_t j, const uint8_t **data, size_t *len, tetris_error *err)
{
    OrtTensorTypeAndShapeInfo *tsi = NULL;
    int64_t dims[TENSOR_MAX_DIMS];
    size_t ndim = 0, size = 0;
    int is_tensor = 0;
    int r = ort_check(api, api->IsTensor(v, &is_tensor), "output kind", err);
    if (r == 0 && !is_tensor)
        r = tetris_fail(err, TETRIS_E_RUNTIME, 0, "output %s is not a tensor", name);
    if (r == 0)
        r = ort_check(api, api->GetTensorSizeInBytes(v, &size), "output size", err);
    if (r == 0)
        r = ort_check(api, api->GetTensorData(v, (const void **)data), "output data", err);
    if (r == 0 && n > 1) {
        r = ort_check(api, api->GetTensorTypeAndShape(v, &tsi), "output shape", err);
        if (r == 0)
            r = ort_check(api, api->GetDimensionsCount(tsi, &ndim), "output rank", err);
        if (r == 0 && (ndim == 0 || ndim > TENSOR_MAX_DIMS))
            r = tetris_fail(err, TETRIS_E_RUNTIME, 0, "output %s has rank %zu", name, ndim);
        if (r == 0)
            r = ort_check(api, api->GetDimensions(tsi, dims, ndim), "output dims", err);
        if (r == 0 && (dims[0] != (int64_t)n || size % n != 0))
            r = tetris_fail(err, TETRIS_E_RUNTIME, 0,
                            "output %s: first dimension %lld, expected the batch %zu", name,
                            (long long)dims[0], n);
        if (tsi != NULL)
            api->ReleaseTensorTypeAndShapeInfo(tsi);
    }
    if (r < 0)
        return r;
    *len = size / n;
    *data += j * *len;
    return 0;
}

int ort_outputs_sha256(const ort_model *m, const ort_io *io, OrtValue *const *outputs, size_t n,
                       size_t j, char hex[65], uint64_t *out_bytes, tetris_error *err)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned md_len = 0;
    int r = 0;

    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "cannot set up SHA-256");
    }
    *out_bytes = 0;
    for (size_t i = 0; r == 0 && i < io->n_out; i++) {
        const uint8_t *data = NULL;
        size_t len = 0;
        r = output_slice(m->api, outputs[i], io->out_names[i], n, j, &data, &len, err);
        if (r == 0 && len > 0)
            EVP_DigestUpdate(ctx, data, len);
        *out_bytes += len;
    }
    if (r == 0 && EVP_DigestFinal_ex(ctx, md, &md_len) != 1)
        r = tetris_fail(err, TETRIS_E_RUNTIME, 0, "SHA-256 failed");
    EVP_MD_CTX_free(ctx);
    for (unsigned i = 0; r == 0 && i < md_len; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return r;
}

int ort_io_run_repeated(const ort_model *m, const ort_io *io, OrtValue *const *inputs,
                        OrtValue **outputs, int runs, char hex[65], uint64_t *out_bytes,
                        struct ort_run_times *times, tetris_error *err)
{
    *times = (struct ort_run_times){0};
    int r = 0;
    for (int i = 0; r == 0 && i < runs; i++) {
        char got[65];
        ort_values_release(m, outputs, io->n_out);
        double t0 = clock_now_ms();
        r = ort_io_run(m, io, inputs, outputs, err);
        if (r == 0)
            r = ort_outputs_sha256(m, io, outputs, 1, 0, got, out_bytes, err);
        double took = clock_now_ms() - t0;
        if (r < 0)
            break;
        times->mean_ms += took / runs;
        if (i == 0) {
            times->first_ms = took;
            memcpy(hex, got, sizeof(got));
        } else if (strcmp(got, hex) != 0) {
            r = tetris_fail(err, TETRIS_E_RUNTIME, 0, "run %d gave %s, run 1 gave %s", i + 1, got,
                            hex);
        }
    }
    return r;
}
