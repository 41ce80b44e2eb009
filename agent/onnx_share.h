/* onnx_share.h - what rewriting an ONNX graph around an agent model's
 * tensors needs, shared by the ONNX Runtime adapter (ort_adapter.c: the
 * store mappings handed to a session in this process) and the model view
 * (view.c: a graph whose weights are the store's files, for a runtime in
 * another process): the model image, and which of the agent's tensors
 * holds the payload of a TensorProto that onnx_rewrite() reports.
 *
 * Private to the agent module. */
#ifndef TETRIS_ONNX_SHARE_H
#define TETRIS_ONNX_SHARE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent.h"
#include "common/error.h"
#include "model/onnx_rewrite.h"

/* Reads the whole file at path into *out (malloc'd). */
int onnx_share_read_image(const char *path, uint8_t **out, size_t *len, tetris_error *err);

/* The image of am's model, to rewrite: a pulled model's graph
 * (agent_model_graph) where it lies, else the model file mapped read-only
 * (MADV_RANDOM: no read-ahead). Not read: a rewrite touches only the
 * graph's own bytes and the payloads it keeps, and skips over those it
 * externalises, so the weights the store serves, most of a file that
 * holds its weights inline (BERT-base: 437 MB), are never read from the
 * file, copied, or held in private memory. (A file truncated while it is
 * rewritten faults the process, as the model parser's mapping would.) */
struct onnx_share_image {
    const uint8_t *bytes;
    size_t len;
    void *map; /* the mapping; NULL for a pulled graph */
};
int onnx_share_image_open(const agent_model *am, const char *model_path,
                          struct onnx_share_image *img, tetris_error *err);
void onnx_share_image_close(struct onnx_share_image *img);

/* Matches protos to tensors: a proto's payload is tensor i's bytes when
 * both are in the same file (the model image, or the external data file
 * its location names relative to the model's folder) at the same offset.
 * In a pulled model's graph a payload is external data at the store name
 * "tensors/XX/<hex>" of its tensor's identity: matched by that. */
struct onnx_share_match {
    const agent_model *am;
    bool pulled;
    char model_dir[PATH_MAX];
    bool *in_file; /* per tensor: its bytes are in the model file itself */
};

int onnx_share_match_init(struct onnx_share_match *m, const agent_model *am, const char *model_path,
                          tetris_error *err);
/* The tensor of am holding ref's payload, NULL if none does. */
const agent_tensor *onnx_share_match_find(const struct onnx_share_match *m,
                                          const struct onnx_tensor_ref *ref);
void onnx_share_match_release(struct onnx_share_match *m);

/* Whether ref's dims and type make exactly t's nbytes: only then can t's
 * bytes stand as ref's external data. */
bool onnx_share_same_size(const struct onnx_tensor_ref *ref, const agent_tensor *t);

#endif
