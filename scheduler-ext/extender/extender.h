/* extender.h - the kube-scheduler extender's decisions: /filter and
 * /prioritize in the extender protocol, from model manifests and node
 * inventories. The HTTP program (tetris-scheduler-ext.c) and the benchmark both
 * drive this.
 *
 * Protocol (k8s.io/kube-scheduler/extender/v1; struct fields without JSON
 * tags, so keys are the Go names; embedded API objects use their usual
 * lower-case keys):
 *   ExtenderArgs         {"Pod": Pod, "Nodes": {"items": [Node]} | null,
 *                         "NodeNames": [string] | null}
 *   ExtenderFilterResult {"Nodes": {"items": [...]} | null, "NodeNames": [...] | null,
 *                         "FailedNodes": {name: reason}, "Error": ""}
 *   HostPriorityList     [{"Host": name, "Score": 0..10}]
 * With nodeCacheCapable: true the scheduler sends NodeNames and reads
 * NodeNames back; otherwise it sends and reads full Node objects.
 * Key lookups are case-insensitive, as Go's decoder is. Requests are read
 * without a JSON tree (ext_request.h) and replies written as text: at
 * thousands of nodes a tree costs more than the decision.
 *
 * A pod names its model with the label (or annotation) TETRIS_LABEL_MODEL;
 * a pod labelled TETRIS_LABEL_TENANT has a dedicated store (DIR/tenants/T)
 * and its placement follows that store's inventories, not the shared
 * store's (protocol/names.h).
 *
 * Decisions never block scheduling: a pod without a model, a model without
 * a manifest, a node without a fresh inventory: pass the filter, score 0.
 * Only a malformed request is an error (HTTP 400). */
#ifndef TETRIS_EXTENDER_H
#define TETRIS_EXTENDER_H

#include <jansson.h>

#include "common/error.h"
#include "scheduler-ext/extender/inventory.h"
#include "scheduler-ext/extender/manifests.h"

typedef struct extender extender;

/* The caches and the policy are borrowed; the extender computes each
 * model's θ on each node when a manifest or an inventory changes (their
 * prepare hooks, until extender_free), so a decision is a lookup per
 * node. The caches may already hold entries: those are computed on first
 * use. Free the extender before the caches. Where inventories are fetched
 * from is the business of whoever feeds the inventory cache (the Node
 * watch) and never of a request's Node objects, unless request_urls is
 * set: then (no cluster to watch) they name their URLs, within that
 * policy. */
extender *extender_new(manifest_cache *manifests, inventory_cache *inventories,
                       const inventory_url_policy *request_urls);
void extender_free(extender *x);

/* A request body (ExtenderArgs, len bytes) in, a reply body out (*reply:
 * malloc'd JSON text of *reply_len bytes). The filter's reply is the
 * ExtenderFilterResult; TETRIS_E_FORMAT for a bad request. */
int extender_filter(extender *x, const char *body, size_t len, char **reply, size_t *reply_len,
                    tetris_error *err);
/* The reply is the HostPriorityList. */
int extender_prioritize(extender *x, const char *body, size_t len, char **reply, size_t *reply_len,
                        tetris_error *err);

/* Records one served request for /metrics. */
void extender_observe(extender *x, const char *verb, int status, double seconds);
/* Prometheus text exposition of the extender's metrics (malloc'd). */
char *extender_metrics_text(extender *x, size_t *len);

#endif
