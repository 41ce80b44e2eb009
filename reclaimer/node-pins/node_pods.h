/* node_pods.h - what the function pods on one node need: the distinct
 * tensor digests of the models of the pods scheduled there. The node daemon
 * (tetris-reclaimer) pins these so they stay warm even when an agent crashed
 * before recording its references (the paper's "reclaimer learns from the
 * cluster").
 *
 * A pod counts when it is bound to the node (spec.nodeName), carries the
 * label tetris.io/model (a label, so the apiserver can select on it) and is
 * not finished (phase Succeeded/Failed). Its model's manifest is the
 * ConfigMap labelled tetris.io/model=<model> in manifest_ns (see
 * protocol/names.h). A model without a manifest is skipped and counted. */
#ifndef TETRIS_NODE_PODS_H
#define TETRIS_NODE_PODS_H

#include <stddef.h>

#include "tensorstore/digest.h"
#include "common/error.h"
#include "common/kube.h"

typedef struct node_models {
    size_t n_models;
    char **models;            /* distinct model names in use on the node */
    size_t n_missing;         /* of those, how many had no valid manifest */
    size_t n_digests;
    tensor_digest *digests;   /* distinct, sorted */
} node_models;

/* Lists the node's model pods (all namespaces) and their manifests. */
int node_pods_models(kube_client *kc, const char *node, const char *manifest_ns,
                     node_models **out, tetris_error *err);

void node_models_free(node_models *m);

#endif
