/* onnx_rewrite.h - rewrite an ONNX model image so that chosen tensor
 * payloads leave the protobuf: their TensorProto keeps name, type and shape
 * but its data becomes an external-data reference, so a runtime that is
 * handed the bytes from elsewhere (ort_adapter.c: the store mappings) never
 * holds a second copy. Tensors held in `Constant` nodes are turned into
 * graph initializers named after the node's output, so they can be supplied
 * the same way. Works on main-graph and subgraph (If/Loop/Scan) tensors.
 *
 * Private to the agent module. */
#ifndef TETRIS_ONNX_REWRITE_H
#define TETRIS_ONNX_REWRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorstore/digest.h"
#include "common/error.h"

/* One tensor payload found in the image, or in an external data file. */
struct onnx_tensor_ref {
    uint64_t offset;   /* of its data field's payload in the image, or in
                          the external file */
    uint64_t length;   /* of that payload */
    const char *location; /* external data file (relative to the model's
                             directory, not NUL-terminated); NULL: in the image */
    size_t location_len;
    int data_type;     /* TensorProto.DataType (== ONNXTensorElementDataType) */
    int ndim;
    int64_t dims[TENSOR_MAX_DIMS];
    const char *name;  /* initializer name, or the Constant node's output */
    size_t name_len;
    bool from_constant; /* held in a Constant node */
};

/* Where an externalised tensor's bytes are: a file relative to the folder
 * the runtime resolves external data against, and the offset in it. */
struct onnx_external {
    char location[256];
    uint64_t offset;
    /* Keep the tensor's "prepacked_N" external-data entries (ONNX Runtime's
     * pre-packed blobs, offsets in the same file: protocol/derived.h), for
     * a tensor moved to another file with the same bytes. */
    bool keep_prepacked;
    /* With keep_prepacked, if set: writes into out (cap bytes, NUL-ended)
     * the value that replaces a kept entry's value (len bytes, not
     * NUL-ended); false refuses the image (TETRIS_E_FORMAT). */
    bool (*map_prepacked)(void *ctx, const char *value, size_t len, char *out, size_t cap);
    void *map_ctx;
};

/* Decides whether t leaves the image; returns true to externalise it and
 * fills ext. The ref (and its name) is only valid during the call. */
typedef bool (*onnx_share_fn)(void *ctx, const struct onnx_tensor_ref *t,
                              struct onnx_external *ext);

/* Writes the rewritten image to *out (malloc'd). TETRIS_E_FORMAT if the
 * image is not a well-formed ONNX protobuf. */
int onnx_rewrite(const uint8_t *image, size_t len, onnx_share_fn share, void *ctx, uint8_t **out,
                 size_t *out_len, tetris_error *err);

#endif
