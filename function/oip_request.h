/* oip_request.h - decodes an Open Inference Protocol (KServe V2) inference
 * request, the body of POST /v2/models/NAME/infer, into tensors checked
 * against what the model takes. Pure: no inference runtime, no I/O, no
 * global state, so fuzz/fuzz_oip.c runs it on anything.
 *
 * The format (tensor layouts and JSON forms: protocol/oip.h):
 *
 *   body    = HEADER [BINARY]
 *   HEADER  = {"id": S?, "parameters": P?, "inputs": [INPUT, ...],
 *              "outputs": [OUTPUT, ...]?}
 *   INPUT   = {"name": S, "datatype": D, "shape": [N, ...],
 *              "data": DATA | "parameters": {"binary_data_size": N, ...}}
 *   OUTPUT  = {"name": S, "parameters": {"binary_data": B, ...}?}
 *   P       = {"binary_data_output": B, ...}; every parameter's value is a
 *             string, number or boolean; others than these are ignored
 *
 * Without the Inference-Header-Content-Length header the body is HEADER
 * alone. With it, HEADER is the body's first that many bytes, and BINARY,
 * the rest, holds the inputs that give binary_data_size, one after the
 * other in the order of "inputs", and nothing else.
 *
 * DATA is the tensor's elements in row-major order, either flat or nested
 * exactly as the shape is ([[1, 2], [3, 4]] for [2, 2]). Elements: BOOL
 * true/false; integers as JSON integers within the datatype's range; FP16,
 * BF16, FP32, FP64 as JSON numbers, rounded to nearest (past the largest
 * finite value: refused); BYTES as strings. Binary BOOL bytes are 0 or 1,
 * binary floats finite: the model is never handed a NaN or an infinity.
 *
 * What the model takes (oip_signature): every input exactly once, by
 * name, with the model's datatype (no conversion) and rank, each dimension
 * the model fixes equal to it, the others any size >= 0. "outputs" picks
 * outputs by name (each at most once); without it, every output is
 * answered. An output is answered in binary when its binary_data is true,
 * else when the request's binary_data_output is.
 *
 * Limits: JSON nesting at most OIP_MAX_JSON_DEPTH (so the nesting a
 * client sends never decides how deep anything recurses); numbers at most
 * OIP_MAX_NUMBER_CHARS characters; the body's size is the caller's (the
 * HTTP server's limit). Memory: the tensors' bytes, at most 8 per JSON
 * number (an FP64 or INT64 from "0,") or the binary bytes themselves,
 * plus one allocation per input; nothing else grows with the body.
 *
 * Errors: TETRIS_E_FORMAT with a message naming the input or field and
 * what is wrong (the reply's 400), TETRIS_E_NOMEM. Tests:
 * tests/function/test_oip.c, tests/function/test-oip-bad.sh, fuzz/fuzz_oip.c. */
#ifndef TETRIS_OIP_REQUEST_H
#define TETRIS_OIP_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "protocol/oip.h"

#define OIP_MAX_JSON_DEPTH 16
#define OIP_MAX_NUMBER_CHARS 128

/* A tensor as the model declares it. */
typedef struct oip_tensor_spec {
    const char *name;
    enum oip_datatype datatype; /* OIP_DATATYPE_NONE: a type the protocol cannot carry */
    size_t ndim;
    int64_t shape[OIP_MAX_DIMS]; /* -1: any size */
} oip_tensor_spec;

typedef struct oip_signature {
    const oip_tensor_spec *inputs;
    size_t n_inputs;
    const oip_tensor_spec *outputs;
    size_t n_outputs;
} oip_signature;

typedef struct oip_request {
    char *id; /* NULL when the request has none; may hold NULs: id_len */
    size_t id_len;
    oip_tensor *inputs; /* n_inputs, in the signature's order, owned */
    size_t n_inputs;
    bool *output_wanted; /* n_outputs, in the signature's order */
    bool *output_binary;
    size_t n_outputs;
} oip_request;

/* Decodes body (body_len bytes; header_length is the value of the
 * Inference-Header-Content-Length header or NULL) against sig. *out is
 * owned by the caller (oip_request_free). */
int oip_request_decode(const oip_signature *sig, const char *body, size_t body_len,
                       const char *header_length, oip_request **out, tetris_error *err);
void oip_request_free(oip_request *r);

#endif
