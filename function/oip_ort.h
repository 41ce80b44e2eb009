/* oip_ort.h - the function's protocol tensors in and out of ONNX Runtime:
 * the signature a model offers the Open Inference Protocol, OrtValues that
 * hold one or several decoded requests' inputs, and each request's share of
 * the outputs as protocol tensors.
 *
 * Several requests run as one batch by concatenation along dimension 0
 * (the batcher decides when, batcher.h): request j's inputs then fill rows
 * [first_j, first_j + rows_j) of every input, rows_j being its own first
 * dimension, and the same rows of every output are its answer. That needs
 * a batchable model (ort_inputs.h) and requests that agree on every other
 * dimension (oip_ort_concatenable). A request alone gets whole outputs, so
 * a model whose outputs do not carry the batch still answers singly.
 *
 * Bytes: a request's input is handed to ONNX Runtime without a copy when it
 * runs alone (its buffer outlives the run), copied into the batch's tensor
 * otherwise; outputs are copied out of ONNX Runtime's buffers, so the
 * batch's values can be released at once. BYTES go through ONNX Runtime's
 * string tensors element by element (lengths exact, NULs kept). */
#ifndef TETRIS_OIP_ORT_H
#define TETRIS_OIP_ORT_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/ort_adapter.h"
#include "agent/ort_inputs.h"
#include "common/error.h"
#include "function/oip_request.h"

/* The model's signature for the protocol (its names are io's, which must
 * outlive it). An input or output whose element type has no protocol
 * datatype gets OIP_DATATYPE_NONE: requests for it are refused. */
int oip_ort_signature(const ort_io *io, oip_signature **out, tetris_error *err);
void oip_ort_signature_free(oip_signature *sig);

/* Rows of a request: its inputs' common first dimension, or 0 when they
 * have none (a scalar input, or inputs that disagree): it runs alone. */
size_t oip_ort_rows(const oip_request *r);
/* Whether b can join a's batch: both have rows, and every input's other
 * dimensions agree. */
bool oip_ort_concatenable(const oip_request *a, const oip_request *b);

/* io->n_in values holding reqs[0..n) concatenated along dimension 0 (n ==
 * 1: that request's tensors as they are). Release with ort_values_release. */
int oip_ort_inputs(const ort_model *m, const ort_io *io, const oip_request *const *reqs, size_t n,
                   OrtValue **inputs, tetris_error *err);

/* Output i of a batch, rows [first, first + rows) of total (total 0: the
 * request ran alone and gets all of it), copied into t (owned: name and
 * data). TETRIS_E_RUNTIME when the output is not a tensor, has no protocol
 * datatype, or its first dimension is not the batch's total. */
int oip_ort_output(const ort_model *m, const ort_io *io, size_t i, const OrtValue *v, size_t first,
                   size_t rows, size_t total, oip_tensor *t, tetris_error *err);

#endif
