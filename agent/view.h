/* view.h - a model view: a directory that lets a runtime in another process
 * (any language) use the store's copy of a model the agent has loaded,
 * instead of loading a private one. Its layout and tensors.json are the
 * contract in docs/PROTOCOLS.md, "Model view":
 *
 *   DIR/tensors.json               the index; written last, by rename
 *   DIR/model.onnx                 ONNX: the graph, every tensor the store
 *                                  holds as external data
 *                                  "tensors/XX/<hex>" (offset 0)
 *   DIR/tensors/XX/<hex>           symlink to <store public>/tensors/XX/<hex>
 *   DIR/model.safetensors-header   safetensors pulled from a registry: its
 *                                  header, which "model" then names
 *
 * The locations resolve both against DIR (through the links: ONNX Runtime
 * before 1.24 opening DIR/model.onnx) and against the store's public
 * directory itself (the graph's bytes handed to a session whose
 * external-data folder is the store: what ONNX Runtime 1.24 and later
 * require, since they refuse external data that resolves outside the
 * folder). When the store holds nothing of the model (no store, a full
 * store, no daemon, a private load) there is no model.onnx: tensors.json
 * names the original model as the graph and says why ("fallback").
 * A model pulled from a registry has no original: "model" names the
 * view's own model.onnx (or header), "ref" the reference.
 *
 * A view for a mount namespace without the store (view_options's
 * mounted_tensors: tetris-csi's volumes) has no links: its tensors/ is an
 * empty directory on which its user mounts the store's public tensors/
 * (read-only), so the graph's locations name the store's own files
 * there. Its directories are 0755 (the pod's uid reads them through a
 * read-only mount) and its index's "store" and external-data folder are
 * VIEW_SELF, ".": the view directory itself, wherever it is mounted.
 *
 * A view written for a runtime (struct view_options) may also carry the
 * store's derived form of its graph made by that runtime for this CPU
 * (protocol/derived.h): DIR/derived.onnx, the form's graph, whose
 * initializers and pre-packed blobs are in the form's data file, linked
 * at DIR/tensors/XX/<hex> like a tensor; tensors.json's "derived" names
 * them, the runtime and the session options that open them. Its reader
 * opens the form only when it runs that runtime, else the plain graph.
 *
 * The view holds no reference to the model's tensors: the agent_model it
 * was written from does, so a view must be removed (view_remove) before
 * that model is freed. It does hold its derived form's two tensors, until
 * view_remove or view_forget.
 * Invariants: a reader that sees tensors.json sees the whole view; the
 * directory is 0700, tensors.json and model.onnx 0444; view_remove
 * removes only what view_write made, never following a link. */
#ifndef TETRIS_VIEW_H
#define TETRIS_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent.h"
#include "common/error.h"
#include "protocol/derived.h"

#define VIEW_FORMAT "tetris-model-view/1"
#define VIEW_INDEX_NAME "tensors.json"
#define VIEW_GRAPH_NAME "model.onnx"
#define VIEW_SELF "." /* "store" of a view with mounted tensors: the view itself */
#define VIEW_HEADER_NAME "model.safetensors-header"
#define VIEW_DERIVED_GRAPH_NAME "derived.onnx"

typedef struct model_view model_view;

struct view_options {
    enum derived_mode derived; /* whether the view carries a derived form
                                  (protocol/derived.h) */
    const char *runtime;       /* the reader's ("onnxruntime 1.22.0"); needed
                                  unless derived is DERIVED_OFF */
    bool mounted_tensors; /* tensors/ a mount point, 0755, "store": VIEW_SELF (above) */
};

struct view_stats {
    size_t tensors;
    size_t shared_tensors; /* whose bytes are the store's files */
    uint64_t bytes;
    uint64_t shared_bytes;
    bool shared;          /* the graph (safetensors: any tensor) is the store's */
    const char *fallback; /* why not everything is the store's, NULL if it is */
    const char *derived;  /* the runtime of the derived form carried, NULL: none */
};

/* Writes the view of am (from agent_load of model_path) into dir: a new
 * directory, or an existing empty one owned by us that is no link; NULL
 * makes one under $TMPDIR (else /tmp). o NULL: the defaults (no derived
 * form, tensors linked). A form that is missing or cannot be held is no
 * error: the view is the plain one (one log line, derived_form.h), and so
 * is one asked for without a runtime (one log line). TETRIS_E_DENIED for a
 * dir that is not ours, not empty or not a directory; TETRIS_E_FORMAT if
 * the model image is not ONNX after all; TETRIS_E_INVAL for a runtime that
 * cannot be one. On failure nothing of the view is left. */
int view_write(const agent_model *am, const char *model_path, const char *dir,
               const struct view_options *o, model_view **out, tetris_error *err);
/* The view's directory, absolute. */
const char *view_dir(const model_view *v);
const struct view_stats *view_stats(const model_view *v);
/* The store tensors of the derived form v carries (its graph, its data),
 * into d and nbytes: 2, or 0 when it carries none. v holds them until
 * view_remove or view_forget; an owner that keeps the view longer (a
 * tetris-csi volume) takes a kept holder of them first. */
size_t view_derived_tensors(const model_view *v, tensor_digest d[2], uint64_t nbytes[2]);
/* Removes what view_write made (the directory too, once empty) and frees
 * v; what cannot be removed is logged. NULL is a no-op. */
void view_remove(model_view *v);
/* Frees v and leaves the view in place (`tetris-agent view` without
 * --hold: the caller removes it). */
void view_forget(model_view *v);

/* What view_check found in a view that passed. */
struct view_check_result {
    bool shared;
    char fallback[256]; /* "" when null */
    char derived[256];  /* the derived form's runtime, "" when none */
    size_t tensors;
    size_t files;        /* tensors with a file, each checked */
    size_t shared_files; /* of which in the store */
};

/* Checks the view at dir the way a reader must before it trusts it
 * (docs/PROTOCOLS.md, "Model view"): the directory and tensors.json are
 * its uid's or root's and writable by nobody else, tensors.json is
 * well-formed, the graph exists, and every tensor's file resolves to a
 * regular file inside the store (a shared tensor) or the original model's
 * folder (none when the model does not exist: a CSI volume's view seen
 * from its pod), at least offset + length long; a derived form's graph is
 * in the view and its data file in the store, that long. TETRIS_E_DENIED
 * for ownership or
 * modes, TETRIS_E_FORMAT for a bad index, TETRIS_E_NOTFOUND for a file
 * that is missing or resolves elsewhere or is too short; the message
 * names the tensor. */
int view_check(const char *dir, struct view_check_result *out, tetris_error *err);
struct json_t;
/* view_check, and on success *index is the tensors.json it checked (a
 * jansson json_t the caller json_decref()s): a reader uses what passed,
 * without reading the file again. */
int view_check_index(const char *dir, struct view_check_result *out, struct json_t **index,
                     tetris_error *err);

/* The tensors.json text of a view (malloc'd), for view_write and tests:
 * every string JSON-escaped; `graph` NULL for safetensors, store NULL when
 * nothing is shared. */
struct view_index_tensor {
    const char *name;
    const tensor_meta *meta;
    bool has_digest;
    const char *file; /* relative to the view or absolute; NULL: in the graph */
    uint64_t offset, length;
    bool shared;
};
/* A derived form in tensors.json ("derived"). */
struct view_index_derived {
    const derived_entry *entry;
    const char *graph;     /* relative to the view */
    const char *data_file; /* relative to the view: a link into store */
};
struct view_index {
    const char *model;
    const char *ref; /* the registry reference it was pulled by, NULL: a file */
    const char *model_format;
    const char *graph;
    const char *store;
    const char *external_data_folder; /* the folder a session from the graph's
                                         bytes resolves external data against */
    bool shared;
    const char *fallback;
    const struct view_index_tensor *tensors;
    size_t n_tensors;
    const struct view_index_derived *derived; /* NULL: "derived": null */
};
char *view_index_json(const struct view_index *ix, tetris_error *err);

#endif
