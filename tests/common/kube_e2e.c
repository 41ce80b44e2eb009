/* kube_e2e.c - the Kubernetes client against a real apiserver: TLS with a
 * token, a client certificate or service-account files; create, get, paged
 * list, watch from a list's resourceVersion, the three PATCH types, Status
 * errors, delete, pods/binding and deployments/scale. Driven by
 * tests/k8s/test-extender-kubeclient.sh.
 *
 * usage: kube-e2e NAMESPACE NODE (--kubeconfig FILE | --sa-dir DIR --server URL)
 * Exit status: 0 all checks passed (or --help, --version), 1 a check failed,
 * 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/kube.h"
#include "common/log.h"

static const char usage_text[] =
    "usage: kube-e2e NAMESPACE NODE (--kubeconfig FILE | --sa-dir DIR --server URL)\n"
    "\n"
    "Runs the Kubernetes client against a real apiserver: creates, lists, watches,\n"
    "patches and deletes ConfigMaps in NAMESPACE, binds a pod to NODE and scales a\n"
    "deployment. Credentials from a kubeconfig, or from service-account files in\n"
    "DIR (token, ca.crt) with the apiserver at URL.\n"
    "\n"
    "  -h, --help     this text         --version   the version\n"
    "\n"
    "Exit status: 0 all checks passed; 1 a check failed; 2 usage.\n";

static int failures;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

#define MUST(call, err)                                                                    \
    do {                                                                                   \
        if ((call) < 0) {                                                                  \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, (err).msg); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static const char *data_of(json_t *cm, const char *key)
{
    return json_string_value(json_object_get(json_object_get(cm, "data"), key));
}

typedef struct watch_seen {
    int modified;
    int added;
} watch_seen;

static int on_event(const char *type, json_t *object, void *user)
{
    watch_seen *s = user;
    const char *name = json_string_value(json_object_get(json_object_get(object, "metadata"), "name"));
    if (strcmp(type, "ADDED") == 0)
        s->added++;
    if (strcmp(type, "MODIFIED") == 0 && name != NULL && strcmp(name, "e2e-cm-0") == 0) {
        s->modified++;
        return 1; /* seen what we waited for */
    }
    return 0;
}

static void configmaps(kube_client *kc, const char *ns)
{
    tetris_error err = {0};
    char path[512], item[600];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps", ns);
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "e2e-cm-%d", i);
        json_t *cm = json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:{s:s}}", "apiVersion", "v1", "kind",
                               "ConfigMap", "metadata", "name", name, "labels", "e2e", "paging",
                               "data", "i", name);
        json_t *out = NULL;
        MUST(kube_create(kc, path, cm, &out, &err), err);
        CHECK(json_string_value(json_object_get(json_object_get(out, "metadata"), "uid")) != NULL,
              "created object has no uid");
        json_decref(out);
        if (i == 0) {
            CHECK(kube_create(kc, path, cm, NULL, &err) == -TETRIS_E_CONFLICT,
                  "duplicate create: %s", err.msg);
            CHECK(strstr(err.msg, "AlreadyExists") != NULL, "message: %s", err.msg);
        }
        json_decref(cm);
    }

    json_t *items = NULL;
    char *rv = NULL;
    kube_list_opts opts = {.label_selector = "e2e=paging", .page_size = 2};
    MUST(kube_list(kc, path, &opts, &items, &rv, &err), err);
    CHECK(json_array_size(items) == 5, "paged list returned %zu items", json_array_size(items));
    CHECK(rv != NULL && rv[0] != '\0', "list has no resourceVersion");
    json_decref(items);

    /* merge, JSON and strategic-merge patches on e2e-cm-0 */
    snprintf(item, sizeof item, "%s/e2e-cm-0", path);
    json_t *merge = json_pack("{s:{s:s}}", "data", "m", "merge");
    json_t *jsonp = json_pack("[{s:s,s:s,s:s}]", "op", "add", "path", "/data/j", "value", "json");
    json_t *strategic = json_pack("{s:{s:s}}", "data", "s", "strategic");
    MUST(kube_patch(kc, item, KUBE_PATCH_MERGE, merge, NULL, &err), err);
    MUST(kube_patch(kc, item, KUBE_PATCH_JSON, jsonp, NULL, &err), err);
    MUST(kube_patch(kc, item, KUBE_PATCH_STRATEGIC, strategic, NULL, &err), err);
    json_decref(merge);
    json_decref(jsonp);
    json_decref(strategic);
    json_t *cm = NULL;
    MUST(kube_get(kc, item, &cm, &err), err);
    CHECK(data_of(cm, "m") && strcmp(data_of(cm, "m"), "merge") == 0, "merge patch lost");
    CHECK(data_of(cm, "j") && strcmp(data_of(cm, "j"), "json") == 0, "json patch lost");
    CHECK(data_of(cm, "s") && strcmp(data_of(cm, "s"), "strategic") == 0, "strategic lost");
    CHECK(data_of(cm, "i") && strcmp(data_of(cm, "i"), "e2e-cm-0") == 0, "patch clobbered data");
    json_decref(cm);
    json_t *bad = json_pack("[{s:s,s:s}]", "op", "remove", "path", "/data/nope");
    CHECK(kube_patch(kc, item, KUBE_PATCH_JSON, bad, NULL, &err) < 0, "bad json patch accepted");
    json_decref(bad);

    /* A watch from the list's resourceVersion replays the patches. */
    watch_seen seen = {0};
    MUST(kube_watch(kc, path, &opts, &rv, 20, on_event, &seen, &err), err);
    CHECK(seen.modified == 1, "watch saw %d MODIFIED events of e2e-cm-0", seen.modified);
    CHECK(seen.added == 0, "watch from the list's version replayed %d ADDED", seen.added);
    free(rv);

    for (int i = 0; i < 5; i++) {
        snprintf(item, sizeof item, "%s/e2e-cm-%d", path, i);
        MUST(kube_delete(kc, item, &err), err);
    }
    CHECK(kube_get(kc, item, &cm, &err) == -TETRIS_E_NOTFOUND, "deleted object: %s", err.msg);
    CHECK(strstr(err.msg, "NotFound") != NULL && strstr(err.msg, "not found") != NULL,
          "message: %s", err.msg);
}

static void binding(kube_client *kc, const char *ns, const char *node)
{
    tetris_error err = {0};
    char path[512], item[600];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods", ns);
    /* No scheduler is called "nobody": only our binding places it. */
    json_t *pod = json_pack("{s:s,s:s,s:{s:s},s:{s:s,s:[{s:s,s:s,s:s}]}}", "apiVersion", "v1",
                            "kind", "Pod", "metadata", "name", "e2e-bind", "spec",
                            "schedulerName", "nobody", "containers", "name", "c", "image",
                            "tetris-test-tools:latest", "imagePullPolicy", "Never");
    MUST(kube_create(kc, path, pod, NULL, &err), err);
    json_decref(pod);
    MUST(kube_bind_pod(kc, ns, "e2e-bind", node, &err), err);
    snprintf(item, sizeof item, "%s/e2e-bind", path);
    json_t *got = NULL;
    MUST(kube_get(kc, item, &got, &err), err);
    const char *bound = json_string_value(json_object_get(json_object_get(got, "spec"), "nodeName"));
    CHECK(bound != NULL && strcmp(bound, node) == 0, "pod bound to %s, want %s",
          bound ? bound : "(none)", node);
    json_decref(got);
    CHECK(kube_bind_pod(kc, ns, "e2e-bind", node, &err) < 0, "second binding accepted");
}

static void scale(kube_client *kc, const char *ns)
{
    tetris_error err = {0};
    char path[512];
    snprintf(path, sizeof path, "/apis/apps/v1/namespaces/%s/deployments", ns);
    json_t *d = json_pack(
        "{s:s,s:s,s:{s:s},s:{s:i,s:{s:{s:s}},s:{s:{s:{s:s}},s:{s:s,s:[{s:s,s:s}]}}}}",
        "apiVersion", "apps/v1", "kind", "Deployment", "metadata", "name", "e2e-scale", "spec",
        "replicas", 1, "selector", "matchLabels", "app", "e2e-scale", "template", "metadata",
        "labels", "app", "e2e-scale", "spec", "schedulerName", "nobody", "containers", "name",
        "c", "image", "tetris-test-tools:latest");
    MUST(kube_create(kc, path, d, NULL, &err), err);
    json_decref(d);
    long replicas = -1;
    MUST(kube_get_scale(kc, ns, "e2e-scale", &replicas, &err), err);
    CHECK(replicas == 1, "replicas %ld, want 1", replicas);
    MUST(kube_scale_deployment(kc, ns, "e2e-scale", 3, &err), err);
    MUST(kube_get_scale(kc, ns, "e2e-scale", &replicas, &err), err);
    CHECK(replicas == 3, "replicas %ld, want 3", replicas);
    MUST(kube_scale_deployment(kc, ns, "e2e-scale", 0, &err), err);
    MUST(kube_get_scale(kc, ns, "e2e-scale", &replicas, &err), err);
    CHECK(replicas == 0, "replicas %ld, want 0", replicas);
    CHECK(kube_get_scale(kc, ns, "no-such-deployment", &replicas, &err) == -TETRIS_E_NOTFOUND,
          "%s", err.msg);
}

int main(int argc, char **argv)
{
    log_init(argv[0]);
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("kube-e2e %s\n", TETRIS_VERSION);
        return 0;
    }
    if (argc != 5 && argc != 7) {
        fprintf(stderr, "kube-e2e: expected 4 or 6 arguments\nTry 'kube-e2e --help'.\n");
        return 2;
    }
    const char *ns = argv[1], *node = argv[2];
    kube_client *kc = NULL;
    tetris_error err = {0};
    if (strcmp(argv[3], "--kubeconfig") == 0 && argc == 5) {
        MUST(kube_client_from_kubeconfig(argv[4], &kc, &err), err);
    } else if (strcmp(argv[3], "--sa-dir") == 0 && argc == 7 && strcmp(argv[5], "--server") == 0) {
        MUST(kube_client_in_cluster(argv[4], argv[6], &kc, &err), err);
    } else {
        fprintf(stderr, "kube-e2e: bad arguments\n");
        return 2;
    }
    json_t *version = NULL;
    MUST(kube_get(kc, "/version", &version, &err), err);
    CHECK(json_string_value(json_object_get(version, "gitVersion")) != NULL, "no gitVersion");
    json_decref(version);

    configmaps(kc, ns);
    binding(kc, ns, node);
    scale(kc, ns);
    kube_client_free(kc);
    if (failures == 0)
        printf("kube-e2e: all checks passed against %s\n", argv[4]);
    return failures == 0 ? 0 : 1;
}
