/* node_pods.h - what the function pods on one node need: the distinct
 * tensor digests of the models of the pods scheduled there, each for the
 * store it is pinned in. The node daemon (tetris-reclaimer) pins these so
 * they stay warm even when an agent crashed before recording its
 * references (the paper's "reclaimer learns from the cluster").
 *
 * A pod counts when it is bound to the node (spec.nodeName), carries the
 * label tetris.io/model (a label, so the apiserver can select on it) and is
 * not finished (phase Succeeded/Failed).
 *
 * Pins follow trust, not labels. A pod is untrusted: it names any model it
 * likes. Its pins therefore go to its tenant's store only, and its tenant
 * is its namespace's label TETRIS_LABEL_TENANT (namespaces are the
 * cluster admin's), never the pod's own label; a namespace without one is
 * the shared store's. The digests come from the model's manifest, the
 * ConfigMap labelled tetris.io/model=<model> in manifest_ns (the
 * operator's; see protocol/names.h): one labelled TETRIS_LABEL_TENANT=<the
 * pod's tenant> first, else one with no tenant label (the operator's for
 * every store); a manifest labelled for another tenant is never used. So
 * one tenant can keep only its own store warm, with what its quota pays
 * for, and never another tenant's tensors. A pod whose model has no such
 * manifest, or whose namespace is gone or names no valid tenant, pins
 * nothing and is counted. */
#ifndef TETRIS_NODE_PODS_H
#define TETRIS_NODE_PODS_H

#include <stddef.h>

#include "tensorstore/digest.h"
#include "common/error.h"
#include "common/kube.h"

/* A tenant's name (tensorstore's store_tenant_check) fits with its NUL. */
#define NODE_PODS_TENANT_SIZE 64

/* One digest to keep in one store. */
typedef struct node_pin {
    char tenant[NODE_PODS_TENANT_SIZE]; /* "": the shared store */
    tensor_digest digest;
} node_pin;

/* A model in use on the node, and the store its pods use. */
typedef struct node_model {
    char tenant[NODE_PODS_TENANT_SIZE]; /* "": the shared store */
    char *name;
} node_model;

typedef struct node_models {
    size_t n_models;
    node_model *models; /* distinct (tenant, model) pairs */
    size_t n_missing;   /* of those, how many had no manifest for the tenant */
    size_t n_skipped;   /* pods skipped: namespace gone or its tenant invalid */
    size_t n_pins;
    node_pin *pins; /* distinct, sorted by tenant, then digest */
} node_models;

/* Lists the node's model pods (all namespaces), their namespaces' tenants
 * and their manifests. A namespace that cannot be read (other than gone)
 * fails the whole call, so a caller keeps its previous pins. */
int node_pods_models(kube_client *kc, const char *node, const char *manifest_ns,
                     node_models **out, tetris_error *err);

void node_models_free(node_models *m);

#endif
