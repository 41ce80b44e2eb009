/* oip_response.h - encodes tetris-function's Open Inference Protocol
 * (KServe V2) answers: the inference response, the model metadata and the
 * server metadata. Pure (no runtime, no I/O), like the request decoder.
 *
 * The inference response:
 *
 *   {"model_name": S, "model_version": S (when the model has one),
 *    "id": S (when the request had one), "outputs": [OUTPUT, ...]}
 *
 * with the outputs the request asked for, in the model's order, each in
 * the JSON form of protocol/oip.h. When some are asked for in binary, those
 * carry "parameters": {"binary_data_size": N} instead of "data", and their
 * bytes follow the JSON header one after the other in the order of
 * "outputs"; the reply then goes out as application/octet-stream with the
 * header's length in Inference-Header-Content-Length.
 *
 * Model metadata: {"name", "versions" (when versioned), "platform":
 * "onnx_onnxv1", "inputs": [{"name", "datatype", "shape"}], "outputs"},
 * -1 for the dimensions the model leaves open. Server metadata: {"name":
 * "tetris-function", "version", "extensions": ["binary_tensor_data"]}. */
#ifndef TETRIS_OIP_RESPONSE_H
#define TETRIS_OIP_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "function/oip_request.h"
#include "protocol/oip.h"

#define OIP_PLATFORM "onnx_onnxv1"
#define OIP_SERVER_NAME "tetris-function"

struct oip_response {
    char *body; /* malloc'd */
    size_t body_len;
    size_t header_len; /* the JSON header's length (body_len when !binary) */
    bool binary;       /* binary outputs follow the header */
};

/* The response to req from outputs (req->n_outputs entries in the
 * signature's order; those req->output_wanted are answered). model_version
 * NULL: none. TETRIS_E_FORMAT when an output cannot be written as asked (a
 * BYTES element that is not UTF-8 in JSON), TETRIS_E_NOMEM. */
int oip_response_infer(const char *model_name, const char *model_version, const oip_request *req,
                       const oip_tensor *outputs, struct oip_response *out, tetris_error *err);

/* The metadata documents, malloc'd JSON (NULL: out of memory or a name
 * that is not UTF-8). */
char *oip_response_model_metadata(const char *name, const char *version, const oip_signature *sig,
                                  size_t *len);
char *oip_response_server_metadata(const char *version, size_t *len);

#endif
