/* kube.h - a small Kubernetes REST client (libcurl + jansson + libyaml).
 *
 * Everything tetris asks of the apiserver goes through this header: reading
 * and listing objects (with paging), watching them (resourceVersion,
 * bookmarks, re-list on 410 Gone), creating, deleting and patching them,
 * binding pods and scaling deployments. Objects are jansson values
 * (common/yaml_write.h prints them for `kubectl apply -f -`).
 *
 * Configuration comes from a kubeconfig file (current-context; bearer token,
 * client certificate/key, CA, insecure-skip-tls-verify; inline *-data or file
 * paths) or from the in-cluster service-account files, whose token is re-read
 * whenever the file changes because it rotates.
 *
 * Every request has a connect and a total timeout. Requests the server did
 * not act on (429, 503, connection refused) are retried with exponential
 * backoff, honouring Retry-After; idempotent ones (GET, DELETE) are also
 * retried on other 5xx and dropped connections. A failed request fills
 * tetris_error with the method, path, HTTP status and the reason/message of
 * the apiserver's Status object. Error codes: 404 -> TETRIS_E_NOTFOUND,
 * 409/410 -> TETRIS_E_CONFLICT, 401/403 -> TETRIS_E_DENIED, 400/422 ->
 * TETRIS_E_INVAL, 429/5xx/transport -> TETRIS_E_UNAVAILABLE, timeouts ->
 * TETRIS_E_TIMEOUT.
 *
 * A kube_client may be used from several threads at once. Paths are API
 * paths such as "/api/v1/namespaces/default/pods". */
#ifndef TETRIS_KUBE_H
#define TETRIS_KUBE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/error.h"

typedef struct kube_client kube_client;

/* Loads a kubeconfig (path NULL: $KUBECONFIG, else ~/.kube/config) and uses
 * its current-context. */
int kube_client_from_kubeconfig(const char *path, kube_client **out, tetris_error *err);

/* In-cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT with
 * the service account in sa_dir (NULL: /var/run/secrets/kubernetes.io/
 * serviceaccount; files token, ca.crt, namespace). server overrides the URL
 * when not NULL. */
int kube_client_in_cluster(const char *sa_dir, const char *server, kube_client **out,
                           tetris_error *err);

/* The kubeconfig when path is given, in-cluster otherwise. */
int kube_client_new(const char *kubeconfig_path, kube_client **out, tetris_error *err);

void kube_client_free(kube_client *c);

/* Defaults: connect 5000 ms, total 30000 ms per attempt; 5 attempts,
 * backoff from 200 ms doubling up to 5000 ms (Retry-After up to 30 s). */
void kube_client_set_timeouts(kube_client *c, long connect_ms, long total_ms);
void kube_client_set_retries(kube_client *c, int max_attempts, long base_backoff_ms,
                             long max_backoff_ms);

/* The namespace of the context / service account ("default" if none). */
const char *kube_client_namespace(const kube_client *c);
const char *kube_client_server(const kube_client *c);

/* ---- reading ---- */

/* GET path; *out is the decoded object (caller json_decref()s). */
int kube_get(kube_client *c, const char *path, json_t **out, tetris_error *err);

typedef struct kube_list_opts {
    const char *label_selector; /* e.g. "tetris.io/model", NULL = none */
    const char *field_selector; /* e.g. "spec.nodeName=node-1" */
    long page_size;             /* items per request (limit=); 0 = 500 */
} kube_list_opts;

/* Lists a collection, following continue tokens; restarts from the first
 * page when a continue token expired (410). *items is a JSON array (caller
 * decrefs); *resource_version (malloc'd, may be NULL) is the list's
 * resourceVersion to start a watch from. */
int kube_list(kube_client *c, const char *path, const kube_list_opts *opts, json_t **items,
              char **resource_version, tetris_error *err);

/* ---- watching ---- */

/* Called per event: type is "ADDED", "MODIFIED", "DELETED" (BOOKMARK and
 * ERROR events are handled by the client). Return non-zero to stop. */
typedef int (*kube_watch_fn)(const char *type, json_t *object, void *user);

/* One watch request from *resource_version (updated as events and bookmarks
 * arrive) for up to timeout_seconds. Returns 0 when the server ended the
 * stream or fn asked to stop, -TETRIS_E_CONFLICT when the resource version
 * is gone (HTTP 410 or an ERROR event with code 410): re-list then. */
int kube_watch(kube_client *c, const char *path, const kube_list_opts *opts,
               char **resource_version, int timeout_seconds, kube_watch_fn fn, void *user,
               tetris_error *err);

/* List + watch until fn asks to stop or *stop becomes true: on_list gets the
 * full item array after every (re-)list, fn every event in between. 410
 * leads to a re-list; other failures are logged and retried with backoff. */
typedef int (*kube_list_fn)(json_t *items, void *user);
int kube_list_watch(kube_client *c, const char *path, const kube_list_opts *opts,
                    kube_list_fn on_list, kube_watch_fn fn, void *user, volatile bool *stop,
                    tetris_error *err);

/* ---- writing ---- */

int kube_create(kube_client *c, const char *path, json_t *object, json_t **out,
                tetris_error *err);
int kube_delete(kube_client *c, const char *path, tetris_error *err);

enum kube_patch_type {
    KUBE_PATCH_JSON,      /* application/json-patch+json (RFC 6902) */
    KUBE_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
    KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json */
};
int kube_patch(kube_client *c, const char *path, enum kube_patch_type type, json_t *patch,
               json_t **out, tetris_error *err);

/* POST namespaces/NS/pods/POD/binding to node. */
int kube_bind_pod(kube_client *c, const char *ns, const char *pod, const char *node,
                  tetris_error *err);

/* Reads / sets apps/v1 deployments/NAME/scale spec.replicas. */
int kube_get_scale(kube_client *c, const char *ns, const char *deployment, long *replicas,
                   tetris_error *err);
int kube_scale_deployment(kube_client *c, const char *ns, const char *deployment, long replicas,
                          tetris_error *err);

#endif
