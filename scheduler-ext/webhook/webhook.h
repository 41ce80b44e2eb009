/* webhook.h - tetris-webhook, a MutatingAdmissionWebhook for pods: it gives
 * the pods users deploy through an unmodified OpenFaaS (which can put
 * neither a volume nor a schedulerName on them) what the autoscaler's own
 * pods get: the node's tensor store, the model's manifest and the tetris
 * scheduler.
 *
 * The wire format (admission.k8s.io/v1 and v1beta1 have the same shape;
 * the answer echoes the request's apiVersion and uid):
 *
 *   POST /mutate  {"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
 *                  "request":{"uid":S, "kind":{"kind":"Pod",...},
 *                             "operation":"CREATE", "namespace":NS,
 *                             "object":POD, "dryRun":B, ...}}
 *   200           {"apiVersion":<same>,"kind":"AdmissionReview",
 *                  "response":{"uid":S, "allowed":true
 *                              [, "patchType":"JSONPatch", "patch":BASE64]}}
 *   200           ... "response":{"uid":S, "allowed":false,
 *                                 "status":{"code":403, "message":M, ...}}
 *   400           {"error":"MESSAGE"} for a body that is not such a review
 *
 * Tenants. A pod's tenant is its namespace's TETRIS_LABEL_TENANT label,
 * which the cluster's admin sets on the Namespace object; nothing the pod
 * says chooses it, since pods are not trusted. The webhook denies a
 * selected pod in two cases only (webhook_tenant_decide): its own
 * TETRIS_LABEL_TENANT label or annotation names another tenant than its
 * namespace (or a tenant where the namespace names none), or its
 * namespace names a tenant the operator did not configure (--tenant; the
 * node daemons create and serve exactly those stores). Otherwise a pod it
 * does not select, or cannot mutate safely, is allowed unchanged, and a
 * webhook that is down leaves pods to start without the store
 * (failurePolicy: Ignore), so they load their models privately.
 *
 * Selection: a CREATE of a Pod, in one of the configured namespaces (all
 * when none is configured), carrying the OpenFaaS label TETRIS_LABEL_FUNCTION
 * or the annotation TETRIS_LABEL_MODEL (faas-netes copies a function's
 * request annotations onto its pods: faas-cli deploy --annotation
 * tetris.io/model=NAME). The model is that annotation, else the pod's label.
 *
 * The patch (RFC 6902). Each operation is there only if the pod lacks what
 * it adds, so a pod mutated once gets an empty patch the second time:
 *   volume TETRIS_VOLUME_STORE    hostPath store_dir/store_subdir (a tenant's
 *                                 pod: store_dir/tenants/T/public, never
 *                                 more), type Directory: the node daemon
 *                                 makes it, a pod never does
 *   volume TETRIS_VOLUME_MANIFEST the manifest ConfigMap (optional), when
 *                                 the model has one in the pod's namespace
 *   every container:  the mounts, read-only, at the host's paths (the
 *                     store's layout inside the pod is the node's);
 *                     env TETRIS_STORE=store_dir, TETRIS_TENANT=T,
 *                     TETRIS_MANIFEST=<dir>/manifest.json and TETRIS_MODEL
 *                     (the manifest's model file) unless the container sets
 *                     its own TETRIS_MODEL
 *   label TETRIS_LABEL_MODEL=<model> (the extender and tetris-node-pins read it)
 *   spec.schedulerName=scheduler_name when it is unset or the default
 *
 * The CSI way (csi_driver set; --volume csi), for clusters whose
 * namespaces enforce Pod Security "baseline" or "restricted", which forbid
 * hostPath: instead of the store and manifest volumes and their mounts
 * and environment,
 *   volume TETRIS_VOLUME_MODEL    csi, driver csi_driver, readOnly, attribute
 *                                 TETRIS_CSI_ATTR_MODEL = the pod's
 *                                 TETRIS_ANNOTATION_MODEL_REF, else the
 *                                 manifest's model file (no model: not
 *                                 mutated), and TETRIS_CSI_ATTR_DERIVED and
 *                                 TETRIS_CSI_ATTR_RUNTIME = the pod's
 *                                 TETRIS_ANNOTATION_DERIVED and
 *                                 TETRIS_ANNOTATION_RUNTIME where it has
 *                                 them; the node's CSI plugin builds
 *                                 the model view in it, for the tenant the
 *                                 kubelet's pod identity maps to
 *   every container:  the mount, read-only, at TETRIS_MODEL_VIEW_MOUNT_DIR,
 *                     env TETRIS_ENV_MODEL_VIEW naming it
 *   securityContext   what "restricted" needs, where the pod says nothing:
 *                     runAsNonRoot and seccompProfile RuntimeDefault on the
 *                     pod; allowPrivilegeEscalation false and capabilities
 *                     drop ALL on every container and init container. A
 *                     field the pod sets itself is its choice and is kept
 *                     (admission then judges it).
 * "Lacks" compares what we would add with what is there as a subset (the
 * apiserver defaults fields, e.g. a ConfigMap volume's defaultMode), and
 * an item of ours that differs is replaced, so a pod cannot keep a store
 * volume of its own under our name (nor a mount of its own at our mount's
 * path, which would make two mounts at one path). Tested in tests/webhook/test_webhook.c
 * and tests/webhook/test-webhook.sh. */
#ifndef TETRIS_WEBHOOK_H
#define TETRIS_WEBHOOK_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/error.h"

/* The apiserver sends at most 3 MiB objects; a review is one pod. */
#define WEBHOOK_MAX_REVIEW_BYTES (4u << 20)

/* ---- the review ---- */

typedef struct webhook_review {
    char *api_version; /* "admission.k8s.io/v1" or ".../v1beta1" */
    char *uid;
    char *operation;  /* "CREATE", "UPDATE", ... */
    char *namespace_; /* request.namespace, "" when absent */
    bool is_pod;      /* request.kind.kind is "Pod" */
    bool dry_run;
    json_t *pod; /* request.object (an object), NULL when absent */
} webhook_review;

/* Decodes an AdmissionReview request. TETRIS_E_FORMAT with a message
 * naming the field for anything else (not JSON, another apiVersion or
 * kind, no request, no uid, an object that is not an object). Nothing to
 * release on failure. */
int webhook_review_parse(const char *body, size_t len, webhook_review *out, tetris_error *err);
void webhook_review_release(webhook_review *r);

/* base64 of len bytes, NUL-terminated and malloc'd (the patch and the
 * caBundle travel so); NULL when out of memory. */
char *webhook_base64(const void *data, size_t len);

/* The answer: allowed, with the patch (a JSON array) unless it is NULL or
 * empty. Returns malloc'd text and its length, NULL when out of memory. */
char *webhook_response_encode(const webhook_review *r, const json_t *patch, size_t *len);

/* The answer that denies the pod: allowed false, status code 403 and the
 * message the apiserver shows whoever created the pod. */
char *webhook_response_deny(const webhook_review *r, const char *message, size_t *len);

/* ---- selection and the patch ---- */

struct webhook_config {
    const char *store_dir;         /* the node's store: host path and TETRIS_STORE */
    const char *store_subdir;      /* what a shared pod mounts of it ("" all) */
    const char *scheduler_name;    /* NULL or "": leave schedulerName alone */
    const char *const *namespaces; /* served namespaces; n_namespaces 0: all */
    size_t n_namespaces;
    const char *const *tenants; /* the tenants the operator configured */
    size_t n_tenants;
    const char *csi_driver; /* NULL or "": the store as hostPath; else the CSI way */
};

/* The object that controls a pod: its ownerReference with controller
 * true. The ReplicaSet controller writes it into the pods it creates, so
 * a function's pod names its ReplicaSet when it is admitted (its own uid
 * does not exist yet). The manifest copy in the pod's namespace gets it
 * as an owner, so that the garbage collector removes the copy once the
 * last function using it is gone. */
typedef struct webhook_owner {
    const char *api_version, *kind, *name, *uid; /* uid NULL: no controller */
} webhook_owner;

typedef struct webhook_selection {
    bool selected;
    const char *reason;       /* why not (static), for the log */
    const char *model;        /* annotation, else label TETRIS_LABEL_MODEL; NULL none */
    const char *model_ref;    /* annotation TETRIS_ANNOTATION_MODEL_REF; NULL none */
    const char *derived;      /* annotations TETRIS_ANNOTATION_DERIVED and */
    const char *runtime;      /* TETRIS_ANNOTATION_RUNTIME; NULL none */
    const char *tenant_label; /* what the pod says of its tenant (label and */
    const char *tenant_annotation; /* annotation TETRIS_LABEL_TENANT); NULL none */
    webhook_owner controller; /* webhook_pod_controller's */
} webhook_selection;          /* strings borrowed from the review's pod */

void webhook_select(const struct webhook_config *c, const webhook_review *r,
                    webhook_selection *out);

/* The pod's controller into *out (all NULL when it has none, or one whose
 * apiVersion, kind, name or uid is not a non-empty string); true when found. */
bool webhook_pod_controller(const json_t *pod, webhook_owner *out);

/* The pod's tenant: its namespace's (ns_tenant, NULL when the namespace
 * names none) into *tenant. -TETRIS_E_DENIED, with a message for whoever
 * created the pod, when the pod's own label or annotation says another
 * tenant (a pod cannot choose its store) or ns_tenant is not one of
 * c->tenants (a pod cannot make a tenant exist). An empty label or
 * annotation says nothing. */
int webhook_tenant_decide(const struct webhook_config *c, const webhook_selection *sel,
                          const char *ns_tenant, const char **tenant, tetris_error *err);

/* What the API tells about the pod beyond the pod itself. */
typedef struct webhook_pod_facts {
    const char *model;              /* webhook_selection's */
    const char *tenant;             /* webhook_tenant_decide's; NULL shared */
    const char *manifest_configmap; /* in the pod's namespace; NULL none */
    const char *model_path;         /* the manifest's model file; NULL none */
    const char *model_ref;          /* webhook_selection's */
    const char *derived, *runtime;  /* webhook_selection's */
} webhook_pod_facts;

/* The JSON Patch for the review's pod (an array, empty when nothing is
 * missing). TETRIS_E_INVAL for a tenant that is not a plain name
 * (store_tenant_check), TETRIS_E_FORMAT for a pod without containers or
 * with mistyped fields. */
int webhook_patch_build(const struct webhook_config *c, const webhook_review *r,
                        const webhook_pod_facts *f, json_t **patch, tetris_error *err);

/* ---- certificates ---- */

/* A CA made now and a serving certificate it signs for dns_names (the
 * first is the subject; an entry that parses as an IP address goes in as
 * an IP SAN), valid for days. PEM, malloc'd. */
typedef struct webhook_certs {
    char *ca_pem, *cert_pem, *key_pem;
} webhook_certs;

int webhook_certs_make(const char *const *dns_names, size_t n, int days, webhook_certs *out,
                       tetris_error *err);
void webhook_certs_release(webhook_certs *c);

#endif
