/* inventory.h - the extender's cache of node tensor inventories.
 *
 * Each node's tetris-reclaimer serves GET /inventory (the document, its
 * ETag and the tenant query are protocol/inventory.h's). The cache polls
 * every known node in a background thread with If-None-Match, so an
 * unchanged store costs a 304 and no parsing.
 * Scheduling requests only read the cache; a node seen for the first time
 * is fetched right away (all such nodes in parallel, bounded by the fetch
 * timeout) so the first pod after start-up already gets real scores.
 *
 * Where a node's inventory lives: the annotation tetris.io/inventory-url on
 * the Node (API-only test nodes point at 127.0.0.1:PORT), else
 * http://<InternalIP>:<default port>/inventory (the DaemonSet runs with
 * hostNetwork). Whoever can annotate a Node must not be able to point the
 * extender anywhere else (an internal service, the apiserver, a cloud
 * metadata endpoint): an annotation is used only when it is
 * http://HOST:PORT/inventory with HOST one of the Node's InternalIP
 * addresses or 127.0.0.1 and PORT one the policy allows
 * (inventory_url_policy; by default only the daemon's port).
 *
 * Tenants: the cache keeps one inventory per (node, tenant), fetched from
 * the node's URL with ?tenant=T on first use and polled like the shared
 * one; a tenant without an inventory on a node (404) is "unknown" there.
 *
 * An inventory that could not be refreshed for stale_ms is not used: the
 * node is then "unknown" (neutral score, passes the filter). */
#ifndef TETRIS_INVENTORY_H
#define TETRIS_INVENTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/error.h"
#include "protocol/inventory.h"
#include "scheduler-ext/extender/similarity.h"
#include "scheduler-ext/extender/tensor_ids.h"

#define INVENTORY_TENANT_MAX 63  /* as the store allows */
#define INVENTORY_KEY_MAX 320    /* node name (253), '/', tenant, NUL */

typedef struct inventory_opts {
    long refresh_ms;   /* poll period (default 1000) */
    long stale_ms;     /* unusable after this long without contact (30000) */
    long timeout_ms;   /* per fetch (1000) */
    int max_parallel;  /* concurrent fetches (32) */
    size_t max_bytes;  /* largest inventory accepted (64 MiB) */
} inventory_opts;

void inventory_opts_init(inventory_opts *o);

typedef struct inventory_cache inventory_cache;

inventory_cache *inventory_cache_new(tensor_ids *ids, const inventory_opts *o);
/* Stops the poller (if started) and frees. */
void inventory_cache_free(inventory_cache *c);

/* Decodes an /inventory reply (inventory_decode) into the node's tensor ids. */
int inventory_parse(tensor_ids *ids, const char *json, size_t len, node_inventory **out,
                    tetris_error *err);

#define INVENTORY_PORT_RANGES_MAX 8

/* The inventory URLs a Node may name. */
typedef struct inventory_url_policy {
    int default_port; /* the daemon's port, for nodes without an annotation */
    size_t n_ranges;  /* ports an annotation may name: [lo, hi] pairs */
    int ranges[INVENTORY_PORT_RANGES_MAX][2];
} inventory_url_policy;

/* Allows default_port only. */
void inventory_url_policy_init(inventory_url_policy *p, int default_port);
/* Replaces the allowed ports with a list "PORT|LO-HI[,...]";
 * TETRIS_E_INVAL for anything else. */
int inventory_url_policy_ports(inventory_url_policy *p, const char *list, tetris_error *err);

/* The inventory URL of a Node object: its annotation, else its InternalIP
 * and default port. TETRIS_E_NOTFOUND when it has neither; TETRIS_E_DENIED
 * (err says why) when the annotation names a URL the policy refuses. */
int inventory_url_from_node(json_t *node, const inventory_url_policy *p, char *buf, size_t size,
                            tetris_error *err);

/* A tenant name the daemon could serve: 1..63 of [a-z0-9._-], not "."
 * and without "..", as tensorstore validates it. */
bool inventory_tenant_valid(const char *tenant);

/* Where node's inventory is served (its tenants' follow); a changed URL drops the cached one. */
int inventory_cache_set_url(inventory_cache *c, const char *node, const char *url,
                            tetris_error *err);
void inventory_cache_forget(inventory_cache *c, const char *node);

/* Called with every new inventory before it replaces the node's old one,
 * without the cache's lock held: where the extender computes every
 * model's θ on it (the memo), so decisions only look it up. */
typedef void (*inventory_prepare_fn)(void *user, node_inventory *inv);
/* NULL fn: none. */
void inventory_cache_set_prepare(inventory_cache *c, inventory_prepare_fn fn, void *user);

/* Installs an inventory directly (benchmarks, tests). */
int inventory_cache_put(inventory_cache *c, const char *node, node_inventory *inv,
                        tetris_error *err);

/* Fetches, in parallel, those of the nodes that have a URL but no inventory
 * yet (of tenant's store; NULL: the shared one) and were not tried within
 * refresh_ms. Returns when all are done. An invalid tenant fetches
 * nothing. */
void inventory_cache_fetch_missing(inventory_cache *c, const char *const *nodes, size_t n,
                                   const char *tenant);

/* Refreshes every node that is due; what the poller does each period. */
void inventory_cache_refresh(inventory_cache *c);

/* Starts the poller thread. */
int inventory_cache_start(inventory_cache *c, tetris_error *err);

/* Lookups under the read lock; the pointer is valid until unlock. NULL when
 * the node has no inventory or a stale one. */
void inventory_cache_rdlock(inventory_cache *c);
void inventory_cache_unlock(inventory_cache *c);
const node_inventory *inventory_cache_find(inventory_cache *c, const char *node,
                                           const char *tenant);

/* Calls fn for every cached inventory, stale ones too; under the read
 * lock. */
void inventory_cache_each(inventory_cache *c, void (*fn)(void *user, const node_inventory *inv),
                          void *user);

typedef struct inventory_stats {
    uint64_t fetch_ok;           /* 200, parsed */
    uint64_t fetch_not_modified; /* 304 */
    uint64_t fetch_error;        /* transport error, bad status, bad body */
    size_t nodes;                /* nodes with a URL */
    size_t fresh;                /* nodes with a usable inventory */
    size_t bytes;                /* what the cached inventories and their entries hold
                                    (node_inventory_bytes, entry, URL, ETag; not the map) */
} inventory_stats;

void inventory_cache_stats(inventory_cache *c, inventory_stats *out);

#endif
