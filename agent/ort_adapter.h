/* ort_adapter.h - an ONNX Runtime session whose weights are the agent's
 * read-only store mappings, without a private copy.
 *
 * How: the model image is rewritten (onnx_rewrite.h) so every shared tensor
 * is an external-data reference to its own file in the store; each mapping
 * is wrapped in an OrtValue (CreateTensorWithDataAsOrtValue) and handed to
 * the session with AddInitializer, which makes ORT use that buffer instead
 * of deserializing a copy. Constant-node tensors become initializers first.
 *
 * What stays private (measured in README.md): tensors the agent does not
 * map (those under AGENT_MIN_MAPPED_BYTES, shape operands among them, and
 * a load that fell back), and whatever ORT derives from weights: graph
 * optimisations (fusions fold weights into new private initializers) and
 * MLAS pre-packing. Both are off by default so that the weights ORT
 * computes with are exactly the shared pages, unless the store
 * holds the model's derived form (protocol/derived.h): then the session
 * opens that optimised graph with optimisation off and pre-packing on, and
 * ORT maps the pre-packed weights from the store too; a form with an
 * ORT-format part (a model whose packed weights are small) is opened from
 * that part instead, read in place from its store mapping. A form for
 * another runtime version or CPU is not used (one log line). */
#ifndef TETRIS_ORT_ADAPTER_H
#define TETRIS_ORT_ADAPTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent.h"
#include "common/error.h"
#include "common/options.h"
#include "onnxruntime_c_api.h"
#include "protocol/derived.h"

/* The session config entries (each set to "1") under which ONNX Runtime
 * reads an ORT-format model where the caller keeps it, initializers
 * included, with no copy: how an instance opens a derived form's
 * ORT-format part, and so how tetris-derive checks that part opens. */
#define ORT_IN_PLACE_ENTRIES                                                                       \
    {                                                                                              \
        "session.use_ort_model_bytes_directly", "session.use_ort_model_bytes_for_initializers"     \
    }

struct ort_adapter_options {
    int intra_op_threads;   /* 0: ORT's default (one per core) */
    int graph_optimization; /* GraphOptimizationLevel, default ORT_DISABLE_ALL */
    bool prepack;           /* let ORT pre-pack weights (private copies); default false */
    const char *save_optimized; /* write the optimised graph, weights included,
                                   to this ONNX file (ORT's SetOptimizedModelFilePath) */
    enum derived_mode derived;  /* store mode only (protocol/derived.h); default
                                   DERIVED_OFF */
    const char *external_data_folder; /* where external data resolves instead of the
                                         model's folder (a model view's store); NULL:
                                         ONNX Runtime's default */
    bool upgrade;               /* DERIVED_AUTO in a process that lives on (a server): a
                                   missing form is not asked for in the background but
                                   through ort_upgrade, which opens the session that
                                   replaces this one */
};

typedef struct ort_model {
    const OrtApi *api;
    OrtSession *session;
    size_t shared_tensors;  /* weights ORT reads from store mappings */
    uint64_t shared_bytes;
    size_t inline_tensors;  /* left in the image: ORT holds its own copy */
    uint64_t inline_bytes;
    bool derived; /* the session is the store's derived form: optimised
                     at `all`, pre-packed weights mapped from the store */
    bool derived_ort; /* ... its ORT-format part, read in place from the
                         store (weights packed privately) */
    struct ort_model_private *priv;
} ort_model;

/* ONNX Runtime 1.29's Linux build starts a telemetry system with every
 * environment: it keeps a device id and its events in a SQLite database
 * under $HOME/.cache/Microsoft/DeveloperTools/.onnxruntime (written, with
 * fsyncs, at each process's start) and may upload them over HTTPS. A
 * platform's functions should not report to a third party unasked, and
 * the database's writes cost each start about 6 ms (BENCHMARKS.md): the
 * programs that run ONNX Runtime call this first, in main() before any
 * thread starts (it sets ORT_DISABLE_TELEMETRY=1 in their environment).
 * ORT_DISABLE_TELEMETRY already set, to anything, is left as it is: =0
 * keeps ONNX Runtime's default. */
void ort_telemetry_default_off(void);

void ort_adapter_options_init(struct ort_adapter_options *o);

/* Creates a session for the ONNX file model_path. With am (from agent_load
 * on the same file) the tensors am maps from the store are shared; with am
 * NULL, ORT loads the file itself like any application (the baseline). am
 * must outlive the session. The session never reads am's private copies
 * (the tensors the store does not serve come from the model's own bytes):
 * load am with options.map_only, or they are a second copy. A session on
 * the model's derived form reads none of am's mappings: they are unmapped
 * (agent_model_unmap), the references kept. */
int ort_model_open(const char *model_path, agent_model *am, const struct ort_adapter_options *o,
                   ort_model **out, tetris_error *err);
void ort_model_free(ort_model *m);

/* Moving a long-lived session from the plain weights to the store's
 * derived form once the node daemon has made it (DERIVED_AUTO with
 * o->upgrade): one thread asks and waits, then opens a session on the
 * form; the caller swaps sessions between runs, frees the plain one and
 * then unmaps the plain weights (agent_model_unmap). The form's answers
 * are stock ONNX Runtime's at `all` with pre-packing, not the plain
 * graph's (protocol/derived.h). */
typedef struct ort_upgrade ort_upgrade;

/* Hands over the upgrade of m, opened by ort_model_open with o->upgrade:
 * NULL when there is none to make (m is on the form already, found no
 * store, or had a form it could not use) or it was taken. The upgrade
 * reads m's agent model: it must not outlive it. */
ort_upgrade *ort_model_take_upgrade(ort_model *m);
/* Asks the daemon for the form and waits until it is made (at most
 * derived_form.h's DERIVED_FORM_WAIT_MS), then opens *out on it, the plain
 * weights left mapped; a daemon that restarts meanwhile is asked again.
 * TETRIS_E_UNAVAILABLE: cancelled, or no daemon; TETRIS_E_NOTFOUND: a form
 * made but not one this session can open (no plain session is opened);
 * the daemon's code when it could not make one (each said in a log
 * line). */
int ort_upgrade_run(ort_upgrade *u, ort_model **out, tetris_error *err);
/* From another thread: ends ort_upgrade_run's wait for the daemon. */
void ort_upgrade_cancel(ort_upgrade *u);
void ort_upgrade_free(ort_upgrade *u);

/* ONNX Runtime maps a derived form's data file (data_path) itself, one
 * mapping per initializer: this marks them MADV_NOHUGEPAGE once a session
 * is open on the form, so that khugepaged does not undo the 4 KiB pages
 * the daemon wrote it on (store.h, STORE_PUBLISH_SMALL_PAGES). A failure
 * costs speed, not answers: one log line naming model_path. */
void ort_keep_form_small_pages(const char *data_path, const char *model_path);

/* The runtime this process's sessions are, as derived forms name it
 * ("onnxruntime 1.29.0"): what a form must be made by to be opened. */
void ort_runtime_name(char *out, size_t cap);

/* Turns an OrtStatus into a TETRIS_E_RUNTIME error (and releases it);
 * returns 0 when status is NULL. */
int ort_check(const OrtApi *api, OrtStatus *status, const char *what, tetris_error *err);

/* Parses "none", "basic", "extended", "all" into a GraphOptimizationLevel. */
int ort_parse_graph_optimization(const char *s, int *out, tetris_error *err);
/* The command lines' --derived (an opt_spec's parser, into an enum
 * derived_mode): derived_mode_parse. */
int ort_derived_option(const struct opt_spec *spec, const char *label, const char *value,
                       tetris_error *err);

#endif
