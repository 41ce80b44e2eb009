/* derived.h - derived forms: what a runtime derives from a model's weights
 * (ONNX Runtime's optimised graph and its MLAS pre-packed weights), kept in
 * the store once per node and mapped by every instance instead of being
 * recomputed into private memory at each start. The node daemon writes the
 * index entries (reclaimer/derive.c), the agent reads them
 * (agent/ort_adapter.c, agent/view.c); both go through this file.
 *
 * Trust: a derived form's bytes are two ordinary store tensors (dtype
 * uint8, shape [n]: the graph and its external data file), published and
 * verified like any tensor (written on 4 KiB pages:
 * STORE_PUBLISH_SMALL_PAGES). What is trusted is the index entry that says
 * whose derived form they are, and only the daemon writes it: a pod cannot
 * write the store's public directory, and it cannot say what a transform
 * of some weights is. The daemon makes the form itself, in a child it runs
 * (tetris-derive), from the bytes it read, and names the entry by the
 * digest of those bytes.
 *
 * The source of a derivation is the agent's *share image* of the model:
 * the ONNX graph with every tensor the store holds (128 bytes or more)
 * turned into external data {location "tensors/XX/<hex digest>"} (what
 * ort_adapter.c hands ONNX Runtime anyway). Its bytes name the graph and
 * every source tensor's digest, so their SHA-256 (derived_source_digest)
 * identifies graph and weights at once, and the agent recomputes it at
 * every start without hashing any weight.
 *
 * Identity: SHA-256 over "tetris-derived-v1", NUL, transform, NUL, runtime,
 * NUL, cpu, NUL, the 32 source digest bytes (derived_identity). A form is
 * used only by a runtime of the same version on a CPU with the same
 * features, since the layout of pre-packed weights and of NCHWc blocks
 * follows the kernels MLAS picks for the CPU.
 *
 * Index entry: <public>/derived/<identity hex>, mode 0444, owned by the
 * store's owner, written by rename: one entry per source, transform,
 * runtime and CPU (a daemon may derive with several runtimes, one per
 * ONNX Runtime library its operator lists, so that a view for a function
 * on another runtime, onnxruntime-node's, finds that runtime's form). A
 * reader computes the identity of the form it can use and reads that name
 * only: a form for another runtime or CPU is never even opened.
 *
 *   {"format":"tetris-derived/1","transform":"ort-optimize-all-prepack",
 *    "runtime":"onnxruntime 1.29.0","cpu":"x86_64 avx avx2 fma ...",
 *    "source":"sha256:HEX","identity":"sha256:HEX",
 *    "graph":{"digest":"sha256:HEX","nbytes":N,"crc32":C},
 *    "data":{"digest":"sha256:HEX","nbytes":N,"crc32":C},
 *    "data_location":"derived.data",
 *    "ort":{"digest":"sha256:HEX","nbytes":N,"crc32":C}}
 *
 * data_location is the external-data location the graph names for every
 * initializer (ONNX Runtime writes one data file; its pre-packed blobs are
 * offsets in the same file as their initializer, "prepacked_N" entries),
 * which a reader points at the data tensor's store file.
 *
 * "ort" (optional): the same optimised model in ONNX Runtime's own ORT
 * format, one file with its initializers inside, which a session reads in
 * place from a mapping of the store file (session.use_ort_model_bytes_
 * directly and _for_initializers): no graph to parse and no external data
 * to resolve, so it starts sooner. The format cannot hold pre-packed
 * weights, so each instance packs its own: the daemon adds this part only
 * when they are small (DERIVED_ORT_MAX_PREPACKED_BYTES) and the form is not
 * large (DERIVED_ORT_MAX_BYTES), and a session in
 * the agent uses it when it is there. A view (another process's runtime)
 * uses the graph and data.
 *
 * Decoding trusts nothing: unknown keys, a wrong type, a malformed digest,
 * an identity that does not match the fields, a file not owned by the
 * store's owner or writable by others: TETRIS_E_FORMAT or TETRIS_E_DENIED
 * naming why. */
#ifndef TETRIS_PROTOCOL_DERIVED_H
#define TETRIS_PROTOCOL_DERIVED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "tensorstore/digest.h"

#define DERIVED_FORMAT "tetris-derived/1"
#define DERIVED_DIR "derived"
#define DERIVED_TRANSFORM_ORT "ort-optimize-all-prepack"
#define DERIVED_DATA_LOCATION "derived.data"
#define DERIVED_ENTRY_MAX_BYTES (64 << 10)
#define DERIVED_NAME_MAX 256 /* transform, runtime, cpu; NUL included */
/* What ONNX Runtime keeps inline in a derived graph: initializers smaller
 * than this stay in the graph (shape operands must be inline). */
#define DERIVED_MIN_EXTERNAL_BYTES 128
/* The most pre-packed bytes a form's weights may have for the daemon to
 * add its ORT-format part ("ort" above): each instance opened from that
 * part packs them again, at its start and in private memory. Measured
 * (BENCHMARKS.md, "The ORT-format part"): PP-OCRv4 det (9.6 KB packed)
 * and ch_ppocr_mobile_v2.0_cls (12.8 KB) start sooner from it; PP-OCRv4
 * rec (4.1 MB) starts no sooner and would hold 4 MB more per instance;
 * BERT-base's (about 330 MB) the graph and data share instead. */
#define DERIVED_ORT_MAX_PREPACKED_BYTES (1u << 20)
/* And the largest form (its data file) that gets one: the part holds the
 * weights a third time on the node (the plain tensors, the data file, the
 * part), and a FlatBuffers file cannot pass 2 GB. */
#define DERIVED_ORT_MAX_BYTES (256ull << 20)
/* The file tetris-derive writes the ORT-format part to, beside the graph
 * and data. */
#define DERIVED_ORT_FILE "model.ort"

struct derived_part {
    tensor_digest digest;
    uint64_t nbytes;
    uint32_t crc32;
};

/* A form's parts, in the order the daemon publishes and readers
 * reference them. */
enum derived_part_index { DERIVED_PART_GRAPH, DERIVED_PART_DATA, DERIVED_PART_ORT, DERIVED_PARTS };

typedef struct derived_entry {
    char transform[DERIVED_NAME_MAX];
    char runtime[DERIVED_NAME_MAX];
    char cpu[DERIVED_NAME_MAX];
    tensor_digest source;
    tensor_digest identity;
    struct derived_part graph, data;
    char data_location[DERIVED_NAME_MAX];
    bool has_ort; /* the optional ORT-format part */
    struct derived_part ort;
} derived_entry;

/* Whether an instance uses the store's derived form of its model: a
 * session in this process (agent/ort_adapter.h) or a view for a runtime in
 * another (agent/view.h). A form's graph is optimised at `all`: its answers
 * are stock ONNX Runtime's, not the plain graph's, so replicas of one
 * function would answer differently once a form appears between their
 * starts; a function opts in (TETRIS_DERIVED, --derived). */
enum derived_mode {
    DERIVED_OFF = 0, /* never: the default */
    DERIVED_USE,     /* when the store has one for the runtime and CPU */
    DERIVED_AUTO,    /* USE; without one, ask the daemon in the background (a
                        detached thread: no start waits, a failure is one log
                        line; the next instance finds it) */
    DERIVED_MAKE,    /* USE; without one, ask the daemon and wait for it */
};
/* The mode named s ("off", "use", "auto", "make") in *out; else
 * TETRIS_E_INVAL, the message naming label and the modes. */
int derived_mode_parse(const char *label, const char *s, enum derived_mode *out, tetris_error *err);

/* SHA-256 of a share image (see above). */
void derived_source_digest(const void *image, size_t len, tensor_digest *out);
/* The identity of a derived form (see above). */
void derived_identity(const char *transform, const char *runtime, const char *cpu,
                      const tensor_digest *source, tensor_digest *out);
/* This machine's CPU as far as MLAS's kernel choice goes: the
 * architecture, then the /proc/cpuinfo flags MLAS dispatches on, in a
 * fixed order ("x86_64 sse4_1 avx avx2 fma f16c avx512f ..."). */
int derived_cpu_features(char *out, size_t cap, tetris_error *err);
/* "onnxruntime VERSION" for the version string ORT reports. */
void derived_runtime_name(const char *ort_version, char *out, size_t cap);
/* Whether s may be a transform, runtime or cpu: 1 to DERIVED_NAME_MAX - 1
 * bytes, no control character, no slash. */
bool derived_name_valid(const char *s);

/* A part's name in logs and ingest requests ("derived graph", "derived
 * data", "derived ORT format"); a string literal (the type a tensor_desc's
 * name has). */
char *derived_part_label(enum derived_part_index i);
/* How many parts e has: DERIVED_PARTS with its ORT-format part, else
 * DERIVED_PART_ORT. */
size_t derived_entry_parts(const derived_entry *e);
/* e's part i (i < derived_entry_parts(e)). */
const struct derived_part *derived_entry_part(const derived_entry *e, enum derived_part_index i);

/* Encodes e as its index entry (malloc'd JSON and a newline; NULL when out
 * of memory). */
char *derived_entry_encode(const derived_entry *e);
/* Decodes an index entry and checks that its identity matches its fields. */
int derived_entry_decode(const char *json, size_t len, derived_entry *e, tetris_error *err);
/* Reads the entry named identity from the store's public directory: the
 * file must be a regular file owned by the directory's owner and not
 * writable by group or others, and its identity the one it is named by.
 * TETRIS_E_NOTFOUND when there is none. */
int derived_entry_read(const char *public_dir, const tensor_digest *identity, derived_entry *e,
                       tetris_error *err);
/* derived_entry_read of the form of source made by transform with runtime
 * for cpu (its identity). */
int derived_entry_lookup(const char *public_dir, const char *transform, const char *runtime,
                         const char *cpu, const tensor_digest *source, derived_entry *e,
                         tetris_error *err);
/* "<public_dir>/derived/<identity hex>" */
void derived_entry_path(const char *public_dir, const tensor_digest *identity, char *out,
                        size_t cap);

#endif
