/* names.h - the names tetris's programs and the cluster agree on: labels,
 * annotations, the ConfigMaps that carry registration data, the scheduler's
 * name, default ports and paths, and the environment a function container
 * is configured with. Each is written once, here; the Helm chart
 * (charts/tetris) and the scripts spell the same names, and the tests hold
 * both sides to them.
 *
 * Who writes and who reads:
 *
 *   pod label TETRIS_LABEL_MODEL=<model>    the autoscaler's pod template,
 *                                           users' function pods; read by the
 *                                           extender (label, or annotation)
 *                                           and tetris-node-pins (label)
 *   ConfigMap tetris-manifest-<name>        `tetris-profiler job`; read by
 *     label TETRIS_LABEL_MODEL=<model>      the extender and tetris-node-pins
 *     data  manifest.json
 *   ConfigMap tetris-profile-<name>         `tetris-profiler job`; read by
 *     label TETRIS_LABEL_PROFILE=<model>    the autoscaler
 *     data  profile.yaml                    (configmap:NS/tetris-profile-<name>)
 *   namespace TETRIS_LABEL_TENANT=<t>       the cluster's admin; read by
 *                                           tetris-webhook, which gives the
 *                                           namespace's pods <t>'s store (a
 *                                           pod's own label or annotation
 *                                           must agree, or it is denied; the
 *                                           extender goes by the store a pod
 *                                           mounts, never by the label)
 *   Node annotation tetris.io/inventory-url the cluster's admin (else the
 *                                           node's InternalIP and the
 *                                           reclaimer's port); read by the
 *                                           extender
 *
 * <model> is the model's name as profiled (protocol/profile.h's model:),
 * <name> that name made a valid object name (profiler/job.h). */
#ifndef TETRIS_NAMES_H
#define TETRIS_NAMES_H

#include <stdbool.h>

#define TETRIS_STRINGIFY_(x) #x
#define TETRIS_STRINGIFY(x) TETRIS_STRINGIFY_(x)

/* ---- labels ---- */

#define TETRIS_LABEL_MODEL "tetris.io/model"
/* A namespace of a tenant with a dedicated store (DIR/tenants/<tenant>). */
#define TETRIS_LABEL_TENANT "tetris.io/tenant"
#define TETRIS_LABEL_PROFILE "tetris.io/profile"
/* The autoscaler's Deployments: one per function and instance config. */
#define TETRIS_LABEL_CONFIG "tetris.io/config"
/* The autoscaler's sibling Deployments of an OpenFaaS function: the
 * function's name (on the Deployment; faas_function only on its pods, so
 * OpenFaaS does not list it as a function of its own) and which of a
 * config's Deployments it is (OpenFaaS CE caps each at 5 replicas). */
#define TETRIS_LABEL_SIBLING_OF "tetris.io/openfaas-function"
#define TETRIS_LABEL_SET "tetris.io/set"
/* The local cluster's API-only test nodes carry
 * TETRIS_LABEL_NODE_KIND=TETRIS_NODE_KIND_API_ONLY; nothing runs there. */
#define TETRIS_LABEL_NODE_KIND "tetris.io/node-kind"
#define TETRIS_NODE_KIND_API_ONLY "api-only"
/* OpenFaaS's label of a function's Deployment and pods (its gateway's
 * metrics name the function the same way). */
#define TETRIS_LABEL_FUNCTION "faas_function"
#define TETRIS_LABEL_APP_NAME "app.kubernetes.io/name"
#define TETRIS_LABEL_MANAGED_BY "app.kubernetes.io/managed-by"

/* ---- annotations ---- */

/* On a Node: where its reclaimer serves /inventory. */
#define TETRIS_ANNOTATION_INVENTORY_URL "tetris.io/inventory-url"
/* Prometheus's scrape annotations on a pod. */
#define TETRIS_ANNOTATION_SCRAPE "prometheus.io/scrape"
#define TETRIS_ANNOTATION_SCRAPE_PORT "prometheus.io/port"
#define TETRIS_ANNOTATION_SCRAPE_PATH "prometheus.io/path"

/* ---- ConfigMaps and the profiling Job ---- */

#define TETRIS_MANIFEST_CONFIGMAP_PREFIX "tetris-manifest-"
#define TETRIS_MANIFEST_CONFIGMAP_KEY "manifest.json"
/* The profile ConfigMap and the Job that makes it share the name. */
#define TETRIS_PROFILE_CONFIGMAP_PREFIX "tetris-profile-"
#define TETRIS_PROFILE_CONFIGMAP_KEY "profile.yaml"

/* ---- the cluster ---- */

/* The second scheduler, kube-scheduler with the extender. */
#define TETRIS_SCHEDULER_NAME "tetris-scheduler"
/* What a pod that asked for no scheduler in particular gets. */
#define TETRIS_DEFAULT_SCHEDULER_NAME "default-scheduler"
/* tetris-webhook: its Service (the DNS name its certificate is for) and
 * its MutatingWebhookConfiguration (whose caBundle it sets). */
#define TETRIS_WEBHOOK_SERVICE "tetris-webhook"
#define TETRIS_WEBHOOK_CONFIGURATION "tetris-webhook"
#define TETRIS_WEBHOOK_PORT 8443
#define TETRIS_WEBHOOK_LISTEN ":" TETRIS_STRINGIFY(TETRIS_WEBHOOK_PORT)
#define TETRIS_WEBHOOK_PATH "/mutate"
/* Objects tetris-webhook makes carry TETRIS_LABEL_MANAGED_BY=this. */
#define TETRIS_WEBHOOK_MANAGED_BY "tetris-webhook"
/* tetris's own components and, by default, the registration ConfigMaps. */
#define TETRIS_NAMESPACE "tetris-system"
/* Where OpenFaaS keeps functions: the autoscaler's default. */
#define TETRIS_FUNCTION_NAMESPACE "openfaas-fn"

/* ---- ports and paths ---- */

/* The volumes tetris-webhook and the autoscaler give a function pod: the
 * store (hostPath, read-only) and the model's manifest (the ConfigMap,
 * its key TETRIS_MANIFEST_CONFIGMAP_KEY in TETRIS_MANIFEST_MOUNT_DIR). */
#define TETRIS_VOLUME_STORE "tetris-store"
#define TETRIS_VOLUME_MANIFEST "tetris-manifest"
#define TETRIS_MANIFEST_MOUNT_DIR "/etc/tetris/manifest"
/* The CSI way (tetris-webhook --volume csi): the model view as an inline
 * ephemeral CSI volume of driver TETRIS_CSI_DRIVER (below), its attribute
 * TETRIS_CSI_ATTR_MODEL the model (a registry reference or a file the
 * node can read), mounted read-only at TETRIS_MODEL_VIEW_MOUNT_DIR, which
 * TETRIS_ENV_MODEL_VIEW names. */
#define TETRIS_VOLUME_MODEL "tetris-model"
#define TETRIS_CSI_ATTR_MODEL "model"
/* Optional: whether the view carries the store's derived form of the
 * graph ("off", the default; "use"; "auto": ask the node daemon for one
 * when there is none, for the next volume) and for which runtime
 * ("onnxruntime 1.22.0": the one the pod runs). */
#define TETRIS_CSI_ATTR_DERIVED "derived"
#define TETRIS_CSI_ATTR_RUNTIME "runtime"
#define TETRIS_MODEL_VIEW_MOUNT_DIR "/var/run/tetris/model"
/* The pod annotation naming the model's registry reference (oci://...),
 * which the CSI volume then carries instead of a node's file. */
#define TETRIS_ANNOTATION_MODEL_REF "tetris.io/model-ref"
/* The pod annotations the CSI volume's TETRIS_CSI_ATTR_DERIVED and
 * TETRIS_CSI_ATTR_RUNTIME are copied from: the pod's own choice for its
 * own volume, checked by the plugin. */
#define TETRIS_ANNOTATION_DERIVED "tetris.io/derived"
#define TETRIS_ANNOTATION_RUNTIME "tetris.io/runtime"
/* A tenant's dedicated store, under the store directory. */
#define TETRIS_TENANTS_SUBDIR "tenants"

/* The node's tensor store on the host: the node daemon's; function pods
 * mount its public part read-only (tensorstore's STORE_DEFAULT_DIR). */
#define TETRIS_STORE_DIR "/dev/shm/tetris"
/* The part of a store pods mount, read-only: its tensors and the ingest
 * socket (tensorstore/store.h's STORE_PUBLIC_DIR; the rest of the store
 * is the node daemon's). A pod mounts <store>/public at <store>. */
#define TETRIS_STORE_PUBLIC_SUBDIR "public"
/* Model files: a node's host directory (what profiling Jobs mount) and
 * where a function or profiler container finds them. */
#define TETRIS_MODEL_HOST_DIR "/var/lib/tetris/models"
#define TETRIS_MODEL_DIR "/models"
/* The node daemon: /metrics, /healthz and the inventory (its path is
 * protocol/inventory.h's). */
#define TETRIS_RECLAIMER_PORT 9464
#define TETRIS_RECLAIMER_LISTEN "127.0.0.1:" TETRIS_STRINGIFY(TETRIS_RECLAIMER_PORT)
/* The extender, on the scheduler's loopback (the scheduler configuration's
 * urlPrefix). */
#define TETRIS_EXTENDER_PORT 8888
#define TETRIS_EXTENDER_LISTEN "127.0.0.1:" TETRIS_STRINGIFY(TETRIS_EXTENDER_PORT)
/* The CSI driver (tetris-csi): its name (the chart's CSIDriver object and
 * the pods' csi volumes name it too), its socket, and the kubelet's
 * directories it registers in and mounts beneath. */
#define TETRIS_CSI_DRIVER "csi.tetris.io"
#define TETRIS_CSI_SOCKET "/var/lib/kubelet/plugins/" TETRIS_CSI_DRIVER "/csi.sock"
#define TETRIS_KUBELET_REGISTRY_DIR "/var/lib/kubelet/plugins_registry"
#define TETRIS_KUBELET_PODS_DIR "/var/lib/kubelet/pods"
/* A function's HTTP port and the health path of OpenFaaS's watchdog. */
#define TETRIS_FUNCTION_PORT 8080
#define TETRIS_FUNCTION_HEALTH_PATH "/_/health"

/* ---- environment ---- */

/* A function container (tetris-function), as the autoscaler and the
 * profiler set it. */
#define TETRIS_ENV_MODEL "TETRIS_MODEL" /* the model file, or a registry reference */
/* The model's registry reference (oci://...), pulled by the node daemon;
 * TETRIS_MODEL, when set too, is the file used if the pull fails. */
#define TETRIS_ENV_MODEL_REF "TETRIS_MODEL_REF"
#define TETRIS_ENV_STORE "TETRIS_STORE" /* the store, mounted read-only */
#define TETRIS_ENV_TENANT "TETRIS_TENANT"
#define TETRIS_ENV_MANIFEST "TETRIS_MANIFEST"
#define TETRIS_ENV_PORT "TETRIS_PORT"
#define TETRIS_ENV_BATCH "TETRIS_BATCH"
#define TETRIS_ENV_CONCURRENCY "TETRIS_CONCURRENCY"
#define TETRIS_ENV_THREADS "TETRIS_THREADS"
#define TETRIS_ENV_DERIVED "TETRIS_DERIVED" /* derived forms: auto, use, off, make */
#define TETRIS_ENV_MAX_WAIT_MS "TETRIS_MAX_WAIT_MS"
#define TETRIS_ENV_DYNAMIC_DIM "TETRIS_DYNAMIC_DIM"
/* The model view's directory (docs/PROTOCOLS.md, "Model view"), which
 * `tetris-agent exec` sets for the command it runs. */
#define TETRIS_ENV_MODEL_VIEW "TETRIS_MODEL_VIEW"
/* The runtime a view's reader runs ("onnxruntime 1.22.0"): the one whose
 * derived form the view may carry (`tetris-agent exec --runtime`). */
#define TETRIS_ENV_VIEW_RUNTIME "TETRIS_VIEW_RUNTIME"
/* The model's name and version in the Open Inference Protocol's paths
 * (/v2/models/NAME[/versions/VERSION]), and the largest request body. */
#define TETRIS_ENV_MODEL_NAME "TETRIS_MODEL_NAME"
#define TETRIS_ENV_MODEL_VERSION "TETRIS_MODEL_VERSION"
#define TETRIS_ENV_MAX_BODY_BYTES "TETRIS_MAX_BODY_BYTES"
/* OpenFaaS's of-watchdog tells the function its port in "port". */
#define TETRIS_ENV_WATCHDOG_PORT "port"
/* The node a pod runs on (downward API spec.nodeName): the reclaimer and
 * tetris-node-pins. */
#define TETRIS_ENV_NODE_NAME "NODE_NAME"

/* Whether s can be a label's value (1-63 of [A-Za-z0-9._-], alphanumeric
 * at both ends): a model's name must be, to be TETRIS_LABEL_MODEL's. */
bool names_label_value_valid(const char *s);

#endif
