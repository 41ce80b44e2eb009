/* manifest.h - a model's tensor manifest: what each tensor of a model file
 * is, where its bytes are and what its identity is, as JSON. This file owns
 * the format: its one encoder and its decoders are here, and everyone who
 * writes or reads a manifest (tetris-agent and tetris-profiler index, the
 * agent's --manifest, the scheduler extender's ConfigMap cache,
 * tetris-node-pins) or one of its tensor entries (the ingest request,
 * protocol/ingest.h) goes through them.
 *
 *   {"format":"tetris-manifest/1",      the schema; any other is refused
 *    "model":PATH,                      the model file
 *    "model_format":"onnx"|"safetensors",
 *    "tensor_bytes":N,                  the sum of the tensors' nbytes
 *    "tensors":[ENTRY, ...]}            in model order
 *
 *   ENTRY {"name":S,                    not empty, unique in the model
 *          "dtype":S,                   "float32", "int64", ... (digest.h)
 *          "shape":[D, ...],            at most 8 non-negative dims
 *          "source":PATH,               the file holding the bytes (the model
 *                                       or an external data file)
 *          "offset":N, "length":N,      the region of source (below 2^63)
 *          "nbytes":N,                  product(shape) * size(dtype)
 *          "encoding":"raw"|"varint",   raw: the region is the bytes, so
 *                                       length == nbytes; varint: protobuf
 *                                       packed varints, one per element
 *          "digest":"sha256:HEX",       64 hex digits: the tensor's identity
 *          "crc32":N}                   zlib CRC32 of the bytes (integrity)
 *
 * An ingest request's entry is the same with "source_index" (the position
 * of its source among the request's descriptors) in place of "source".
 *
 * Sources and the model path are best absolute: `tetris-agent index` writes
 * them so (model_sources_realpath), and such a manifest works from any
 * working directory. A relative one in a manifest read from a file is
 * relative to the manifest's directory (manifest_read_file resolves it);
 * manifest_parse, which has no file, leaves it as it is.
 *
 * Decoding trusts nothing: text that is not JSON, a field given twice, a
 * missing or mistyped field, a size that does not add up or overlapping
 * regions are TETRIS_E_FORMAT errors whose message names the input, the
 * entry and the field:
 *   WHAT: tensors[I] ("NAME"): field "F": PROBLEM
 * The text is read in place (common/json_scan.h), not loaded as a tree: a
 * tree of a model's few hundred entries costs an instance's start more
 * than the rest of its manifest work (bench/first-answer: 3 of 4 ms for
 * a 90 KB manifest, most of it the tree's allocations and their page
 * faults). Members no decoder reads are passed over unread.
 *
 * Readers that need only the tensors' identities (the scheduler extender,
 * tetris-node-pins) use manifest_read_digests: the same decoder reading
 * only "format" and each entry's "digest" (and "nbytes"), so a compacted
 * manifest of just those fields serves them too (a ConfigMap holds 1 MiB,
 * about 2,500 full entries). */
#ifndef TETRIS_MANIFEST_H
#define TETRIS_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/error.h"
#include "common/json_scan.h"
#include "common/textbuf.h"
#include "tensorstore/digest.h"

/* model.h's; declared here so that readers of identities only, which
 * never see a model, do not get its type names. */
struct model;
struct tensor_desc;

#define MANIFEST_FORMAT "tetris-manifest/1"

/* Encodes m (every tensor with has_digest) as indented JSON; malloc'd. */
char *manifest_to_json(const struct model *m, tetris_error *err);
/* Writes manifest_to_json's text to a temporary name and renames it, so a
 * reader never sees half a manifest; "-" is stdout. */
int manifest_write_file(const struct model *m, const char *path, tetris_error *err);

/* Decodes a whole manifest into a model (model_check's checks included). */
int manifest_parse(const char *json, size_t len, struct model **out, tetris_error *err);
int manifest_read_file(const char *path, struct model **out, tetris_error *err);

/* Replaces the model path and every tensor's source by its realpath(3). */
int model_sources_realpath(struct model *m, tetris_error *err);

/* ---- one tensor entry ---- */

/* Appends ENTRY for t to b as compact JSON, its source field named
 * source_key with the JSON text source_json (a literal the caller wrote:
 * a number, or a string it escaped); "digest" and "crc32" only when
 * t->has_digest (an ingest request may leave the identity to the daemon).
 * The one encoder of an entry: the hot path (every instance's start sends
 * its model's entries) writes text directly, without a tree.
 * TETRIS_E_INVAL for a region beyond 2^63 or a name that is not UTF-8,
 * TETRIS_E_NOMEM when b could not grow. */
int manifest_entry_write(textbuf *b, const struct tensor_desc *t, const char *source_key,
                         const char *source_json, tetris_error *err);

/* ENTRY for t, with its source field named source_key ("source",
 * "source_index") set to source_value, whose reference it takes (on
 * failure too). TETRIS_E_INVAL when t has no digest, a region beyond 2^63
 * or a name that is not UTF-8. */
json_t *manifest_entry_encode(const struct tensor_desc *t, const char *source_key,
                              json_t *source_value, tetris_error *err);

/* Decodes and checks every field of ENTRY but its source into *t
 * (t->name malloc'd, t->source left alone; nothing allocated on failure).
 * With digest_optional, an entry may leave out both "digest" and "crc32"
 * (t->has_digest false), never only one of them.
 * *source_value is the entry's source_key member, present but of any type:
 * the caller knows what it must be. entry is a span of a text that
 * json_scan_document checked (common/json_scan.h). what and index name the entry in
 * messages (WHAT: tensors[INDEX] ...). */
int manifest_entry_decode(json_span entry, const char *what, size_t index, const char *source_key,
                          bool digest_optional, struct tensor_desc *t, json_span *source_value,
                          tetris_error *err);

/* ---- identities only ---- */

typedef struct manifest_digests {
    size_t n;                /* entries, repeats included */
    tensor_digest *digests;  /* per entry, in order */
    uint64_t *nbytes;        /* per entry; NULL unless with_nbytes */
} manifest_digests;

/* Decodes "format" and, of each entry, "digest" and (with_nbytes)
 * "nbytes", checked as manifest_parse checks them; nothing else is read.
 * what names the manifest in messages. Free with manifest_digests_release. */
int manifest_read_digests(const char *json, size_t len, const char *what, bool with_nbytes,
                          manifest_digests *out, tetris_error *err);
void manifest_digests_release(manifest_digests *d);

#endif
