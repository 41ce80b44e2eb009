/* inventory.h - a node store's tensor inventory: what the node daemon
 * (tetris-reclaimer) serves at GET /inventory and the scheduler extender
 * polls to score nodes by tensor similarity. The daemon encodes it and the
 * extender decodes it through this file.
 *
 *   {"node":NAME,                 the daemon's node name
 *    "tenant":T,                  only in a tenant's store's inventory
 *    "generation":G,              changes whenever the resident set does
 *    "capacity_bytes":C,          the node's capacity, all stores together
 *                                 (0: unlimited)
 *    "resident_bytes":R,          what the store's resident tensors are
 *                                 charged against C: each file rounded up
 *                                 to pages plus an inode (store.h)
 *    "evictable_bytes":E,         of R, the bytes of tensors no live holder
 *                                 or pin referenced at the daemon's last
 *                                 pass: it evicts them when an ingest needs
 *                                 room, so a scheduler may count them as
 *                                 free (optional: absent means 0; E <= R)
 *    "tensors":[{"digest":HEX,    64 hex digits (no "sha256:"), one entry
 *                "bytes":N}, ...]} per resident tensor, N its tensor bytes
 *   and a newline.
 *
 * GET /inventory is the shared store's; GET /inventory?tenant=T is the
 * dedicated store of tenant T (DIR/tenants/T): 404 when the node serves no
 * such store, 400 when T could not be a tenant name (1-63 characters of
 * [a-z0-9._-]). A 200 carries ETag: "G" (inventory_etag); a request whose
 * If-None-Match equals it gets 304 with that ETag and no body, so polling
 * an unchanged store costs neither side any rendering or parsing.
 * Generations start at the daemon's start time in milliseconds, so an ETag
 * from before a restart never matches.
 *
 * Decoding trusts nothing: a missing or mistyped field, a malformed digest
 * or a duplicate key is a TETRIS_E_FORMAT error naming the field. */
#ifndef TETRIS_PROTOCOL_INVENTORY_H
#define TETRIS_PROTOCOL_INVENTORY_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "tensorstore/digest.h"

#define INVENTORY_PATH "/inventory"
#define INVENTORY_TENANT_PARAM "tenant"
#define INVENTORY_ETAG_MAX 24 /* "G" with its quotes and NUL */

typedef struct inventory_tensor {
    tensor_digest digest;
    uint64_t bytes;
} inventory_tensor;

/* To encode, point the strings and the tensors at the caller's; a decoded
 * one owns them (inventory_doc_free). */
typedef struct inventory_doc {
    char *node;
    char *tenant; /* "" for the shared store */
    uint64_t generation;
    uint64_t capacity_bytes;
    uint64_t resident_bytes;
    uint64_t evictable_bytes;
    size_t n_tensors;
    inventory_tensor *tensors;
} inventory_doc;

/* The document, malloc'd, *len bytes (NUL-terminated). TETRIS_E_INVAL
 * for a name that is not UTF-8. */
char *inventory_encode(const inventory_doc *doc, size_t *len, tetris_error *err);

/* The ETag of a generation: "G", quotes included. */
void inventory_etag(uint64_t generation, char buf[INVENTORY_ETAG_MAX]);

int inventory_decode(const char *json, size_t len, inventory_doc **out, tetris_error *err);
void inventory_doc_free(inventory_doc *doc);

#endif
