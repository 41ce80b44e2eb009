/* format_onnx.h - ONNX models: the tensors of a ModelProto's graph.
 *
 * Collected, recursively through subgraphs held in node attributes (If,
 * Loop, Scan bodies: attributes `g` and `graphs`):
 *   - graph initializers;
 *   - the `value` tensor of Constant nodes, named after the node's output.
 * Each tensor's region is where its bytes sit in the file: raw_data and
 * packed float_data/double_data are RAW (little-endian fixed width);
 * int32_data/int64_data/uint64_data are VARINT (one varint per element,
 * decoded by onnx_decode_varints); data_location=EXTERNAL tensors point into
 * a file next to the model, which must not resolve outside the model's
 * directory. String tensors and sparse initializers are not shareable and
 * are left out (counted in model.n_skipped); so are the scalar and list
 * attributes of Constant (value_float, value_ints, ...), which are not
 * tensors in the file. Tensor names must be unique across the whole model,
 * subgraphs included, since the model is a name -> tensor table. */
#ifndef TETRIS_FORMAT_ONNX_H
#define TETRIS_FORMAT_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

int onnx_parse(const char *path, const uint8_t *data, size_t len, model **out,
               tetris_error *err);

/* Decodes a VARINT region (t->length bytes at region) into t->meta.nbytes
 * little-endian bytes of t's dtype. Values wider than the dtype are
 * truncated as ONNX Runtime does; a count mismatch is an error. */
int onnx_decode_varints(const tensor_desc *t, const uint8_t *region, void *dst,
                        tetris_error *err);

#endif
