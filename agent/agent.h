/* agent.h - load a model's tensors for a function instance: map what the
 * node's store holds, get the rest ingested (by the node daemon, or directly
 * in single-tenant setups), and fall back to a private load when the store
 * cannot serve. The result is a name -> read-only bytes table a runtime
 * (see ort_adapter.h) can use without copying. */
#ifndef TETRIS_AGENT_H
#define TETRIS_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/options.h"
#include "model/model.h"
#include "tensorstore/store.h"

/* Tensors smaller than a page are read privately even in store modes (they
 * are still published and referenced, so the store holds whole models),
 * unless the model keeps them as external data (agent.c, worth_mapping).
 * Mapping one saves an instance at most a page, and costs its start an
 * open, a read, an mmap and a close here, and the runtime's check of an
 * external-data path (about 13 readlink calls in ONNX Runtime): for a
 * model of many small tensors (ch_ppocr_mobile_v2.0_cls: 123 of its 150
 * tensors of 128 bytes or more are under a page, 75 KB in all) that is a
 * twentieth of its warm start (BENCHMARKS.md, "Small models"). */
#define AGENT_MIN_MAPPED_BYTES 4096

enum agent_mode {
    AGENT_MODE_STORE = 0, /* map from store; missing tensors via daemon */
    AGENT_MODE_DIRECT,    /* map from store; the agent ingests itself */
    AGENT_MODE_PRIVATE,   /* no store: private memory (the baseline) */
};

/* Who computes the digests of a model loaded without a manifest in STORE
 * mode (DIRECT mode always hashes in the agent). */
enum agent_digests {
    AGENT_DIGESTS_AUTO = 0, /* hash one probe tensor: resident (a warm start)
                               -> the agent hashes the rest on its workers;
                               missing -> the daemon hashes while it ingests
                               (DIRECT: each tensor is hashed as the agent
                               publishes it) */
    AGENT_DIGESTS_AGENT,    /* the agent hashes the whole model first */
    AGENT_DIGESTS_DAEMON,   /* the daemon (DIRECT: the publishing worker)
                               hashes every tensor as it writes it */
};

/* Store mappings are populated at load by default (see BENCHMARKS.md, cold
 * start): a warm start then adds no page faults to the first request. */
#define AGENT_POPULATE_DEFAULT STORE_POPULATE_MADVISE

struct agent_options {
    enum agent_mode mode;
    const char *store_dir;     /* default STORE_DEFAULT_DIR */
    const char *tenant;        /* dedicated store, NULL for the shared one */
    const char *manifest_path; /* skip parsing+hashing the model if given */
    const char *daemon_socket; /* default <store>/public/ingest.sock */
    int daemon_timeout_ms;     /* default 30000 */
    bool shuffle;              /* randomise ingest order (default true) */
    const char *label;         /* holder label, default model file name */
    size_t max_mappings;       /* at most this many tensor mappings; 0: what
                                  vm.max_map_count leaves (store_map_budget)
                                  less a margin for the runtime */
    unsigned workers;          /* threads that hash and publish (--direct,
                                  and digests without a manifest); 0: the
                                  CPU allowance (common/workers.h) */
    enum agent_digests digests;   /* no manifest: who hashes */
    enum store_populate populate; /* page tables of the store mappings;
                                     agent_options_init: AGENT_POPULATE_DEFAULT */
    const char *device;           /* "cuda:N": also map the node daemon's shared GPU
                                     copies read-only (STORE mode; docs/GPU.md);
                                     NULL: host memory only */
    const char *libcuda;          /* the CUDA driver, NULL: $TETRIS_LIBCUDA or
                                     libcuda.so.1 */
    int pull_timeout_ms;          /* a model named by reference (oci://): how long
                                     the node daemon may take to pull it; default
                                     600000 */
    bool map_only;                /* the caller never reads the bytes of tensors the
                                     store does not serve (a model view's writer,
                                     view.h; an ONNX Runtime session, ort_adapter.h,
                                     which reads them from the model): they get no
                                     private copy and keep data NULL */
};

/* Where a load's time went, step by step (monotonic milliseconds; a step
 * the load does not take stays 0). agent_load logs them as one
 * event=start-steps line; tetris-function exports them on /metrics. */
struct agent_steps {
    double read_ms;     /* the manifest or the model file read and parsed */
    double store_ms;    /* the store opened and the mappings planned */
    double digests_ms;  /* digests computed here (no manifest) */
    double connect_ms;  /* connected to the node daemon */
    double register_ms; /* the daemon answered the ingest request: our
                           references are held, missing tensors published */
    double watch_ms;    /* the watcher that re-registers after a daemon
                           restart started */
    double map_ms;      /* store mappings made (and populated) */
    double private_ms;  /* tensors read into private memory */
};

/* What the node's store held of the model when the load registered it:
 * every tensor (a hit: a warm start), some (partial: a variant whose
 * backbone is resident) or none (a miss: a cold start). In STORE mode
 * this is the daemon's answer (resident or published per tensor), not
 * something the agent guesses. NONE: no store served the load (private
 * mode, or it fell back before registering). */
enum agent_store_result {
    AGENT_STORE_NONE = 0,
    AGENT_STORE_HIT,
    AGENT_STORE_PARTIAL,
    AGENT_STORE_MISS,
};

struct agent_stats {
    size_t tensors;
    uint64_t bytes;          /* all tensor bytes of the model */
    uint64_t mapped_bytes;   /* served by read-only store mappings */
    uint64_t ingested_bytes; /* published into the store by this load */
    uint64_t private_bytes;  /* copied into private memory (fallback, and
                                tensors under AGENT_MIN_MAPPED_BYTES) */
    double load_ms;
    struct agent_steps steps;
    enum agent_store_result store_result;
    bool fell_back;          /* store mode degraded to private */
    char fallback_reason[256];
    size_t device_tensors;     /* with a device pointer (options.device) */
    uint64_t device_bytes;     /* bytes of the distinct device copies mapped */
    char device_fallback[512]; /* why some or all are not on the device, "" */
};

typedef struct agent_tensor {
    const tensor_desc *desc;
    const void *data; /* read-only; valid until agent_model_free; NULL for a
                         tensor not shared under options.map_only */
    bool shared;      /* true: a store mapping */
    uint64_t device_ptr; /* options.device: the shared read-only device
                            copy (CUdeviceptr), 0 if none */
} agent_tensor;

typedef struct agent_model {
    model *model;
    agent_tensor *tensors; /* model->n_tensors entries, same order */
    struct agent_stats stats;
    struct agent_model_private *priv;
} agent_model;

void agent_options_init(struct agent_options *o);
/* The command lines' --populate (an opt_spec's parser, into an enum
 * store_populate): "none", "map" or "madvise"; else TETRIS_E_INVAL. */
int agent_populate_option(const struct opt_spec *spec, const char *label, const char *value,
                          tetris_error *err);
/* model_path is a model file, or a registry reference
 * (oci://HOST:PORT/REPO[:TAG|@sha256:HEX], protocol/oci.h): then the node
 * daemon pulls the model (STORE mode only) and every tensor is mapped
 * from the store; there is no private fallback, and a pull the daemon
 * refuses is the load's error with the daemon's message. */
int agent_load(const char *model_path, const struct agent_options *o, agent_model **out,
               tetris_error *err);
/* Loads the model named by ref, a registry reference (agent_load); when
 * that fails and file (a model file) is not NULL and readable, logs why in
 * one line (agent_log_pull_fallback) and loads file instead. *loaded is ref or
 * file: the name the caller opens the model by (ort_model_open,
 * view_write). Fails with the pull's error when there is no file, else
 * with the file's. */
int agent_load_ref(const char *ref, const char *file, const struct agent_options *o,
                   agent_model **out, const char **loaded, tetris_error *err);
/* The one warning line of a pull that failed (why) and file used instead:
 * event=fallback reason=pull-failed. For a caller that falls back without
 * agent_load_ref (a private instance, which has no store to pull into). */
void agent_log_pull_fallback(const char *ref, const char *file, const tetris_error *why);
/* The non-weight part of a pulled model (ONNX: its graph, every tensor the
 * store serves external data at "tensors/XX/<hex>"; safetensors: its
 * header), *len its length; NULL (and 0) for a model loaded from a file.
 * Valid until agent_model_free. */
const uint8_t *agent_model_graph(const agent_model *am, size_t *len);
/* The digest of the manifest a model named by reference was pulled as
 * (its tag resolved once, by the node daemon) into *out; false for a
 * model loaded from a file. A caller that must name the same model again
 * (tetris-csi's volume records) keeps this, not the tag. */
bool agent_model_pulled_digest(const agent_model *am, tensor_digest *out);
/* "none", "hit", "partial" or "miss" (the metrics' store label). */
const char *agent_store_result_name(enum agent_store_result r);
const agent_tensor *agent_find_tensor(const agent_model *am, const char *name);
/* The store's public directory (tenant included; tensors/ is in it) the
 * shared tensors are mapped from; NULL when nothing is shared (private
 * load or full fallback). */
const char *agent_store_public_dir(const agent_model *am);
/* Unmaps the model's store mappings and keeps its references (the
 * daemon's holder, and the watcher that registers them again): for a
 * runtime that reads none of these bytes, a session on the model's
 * derived form (ort_adapter.h). Their pages leave the process's RSS and
 * PSS; their data become NULL, shared stays true. Private copies and
 * device mappings stay. */
void agent_model_unmap(agent_model *am);
void agent_model_free(agent_model *am);

#endif
