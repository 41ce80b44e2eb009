/* node_pods.c - pods on a node -> their models -> their tensor digests (a
 * manifest is read by model/manifest.h's identities-only decoder). */
#include "reclaimer/node-pins/node_pods.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "model/manifest.h"
#include "protocol/names.h"

static bool pod_is_live(json_t *pod)
{
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    return phase == NULL || (strcmp(phase, "Succeeded") != 0 && strcmp(phase, "Failed") != 0);
}

static bool has_model(const node_models *m, const char *model)
{
    for (size_t i = 0; i < m->n_models; i++)
        if (strcmp(m->models[i], model) == 0)
            return true;
    return false;
}

static int add_model(node_models *m, const char *model, tetris_error *err)
{
    char **models = realloc(m->models, (m->n_models + 1) * sizeof *models);
    if (models == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "node models");
    m->models = models;
    if ((m->models[m->n_models] = strdup(model)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "node models");
    m->n_models++;
    return 0;
}

/* Appends the digests of one manifest; FORMAT errors leave m unchanged. */
static int add_manifest_digests(node_models *m, const char *model, const char *text,
                                tetris_error *err)
{
    char what[300];
    snprintf(what, sizeof what, "manifest of %s", model);
    manifest_digests md;
    int r = manifest_read_digests(text, strlen(text), what, false, &md, err);
    if (r < 0)
        return r;
    tensor_digest *d = realloc(m->digests, (m->n_digests + md.n + 1) * sizeof *d);
    if (d == NULL) {
        manifest_digests_release(&md);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "node models");
    }
    m->digests = d;
    memcpy(d + m->n_digests, md.digests, md.n * sizeof *d);
    m->n_digests += md.n;
    manifest_digests_release(&md);
    return 0;
}

/* The model's manifest text from its ConfigMap(s); the first valid wins. */
static int load_model(kube_client *kc, node_models *m, const char *model, const char *ns,
                      tetris_error *err)
{
    char path[512], selector[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps", ns);
    snprintf(selector, sizeof selector, "%s=%s", TETRIS_LABEL_MODEL, model);
    kube_list_opts opts = {.label_selector = selector};
    json_t *items = NULL;
    int r = kube_list(kc, path, &opts, &items, NULL, err);
    if (r < 0)
        return r;
    size_t i;
    json_t *cm;
    bool found = false;
    json_array_foreach(items, i, cm) {
        const char *text = json_string_value(
            json_object_get(json_object_get(cm, "data"), TETRIS_MANIFEST_CONFIGMAP_KEY));
        tetris_error e = {0};
        if (text != NULL && add_manifest_digests(m, model, text, &e) == 0) {
            found = true;
            break;
        }
        if (e.code == TETRIS_E_NOMEM) {
            json_decref(items);
            *err = e;
            return -TETRIS_E_NOMEM;
        }
        if (text != NULL) {
            char q[600];
            log_warn("event=manifest-invalid model=%s msg=%s", model,
                     log_quote(e.msg, q, sizeof q));
        }
    }
    json_decref(items);
    if (!found) {
        m->n_missing++;
        log_warn("event=manifest-missing model=%s namespace=%s", model, ns);
    }
    return 0;
}

static int cmp_digest(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(tensor_digest));
}

static void sort_unique(node_models *m)
{
    if (m->n_digests == 0)
        return;
    qsort(m->digests, m->n_digests, sizeof *m->digests, cmp_digest);
    size_t out = 1;
    for (size_t i = 1; i < m->n_digests; i++)
        if (memcmp(&m->digests[i], &m->digests[out - 1], sizeof *m->digests) != 0)
            m->digests[out++] = m->digests[i];
    m->n_digests = out;
}

int node_pods_models(kube_client *kc, const char *node, const char *manifest_ns,
                     node_models **out, tetris_error *err)
{
    char field[512];
    int n = snprintf(field, sizeof field, "spec.nodeName=%s", node);
    if (n < 0 || (size_t)n >= sizeof field)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "node name too long");
    kube_list_opts opts = {.label_selector = TETRIS_LABEL_MODEL, .field_selector = field};
    json_t *pods = NULL;
    int r = kube_list(kc, "/api/v1/pods", &opts, &pods, NULL, err);
    if (r < 0)
        return tetris_wrap(err, "pods on node %s", node);
    node_models *m = calloc(1, sizeof *m);
    if (m == NULL) {
        json_decref(pods);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "node models");
    }
    size_t i;
    json_t *pod;
    json_array_foreach(pods, i, pod) {
        const char *model = json_string_value(
            json_object_get(json_object_get(json_object_get(pod, "metadata"), "labels"),
                            TETRIS_LABEL_MODEL));
        if (model == NULL || model[0] == '\0' || !pod_is_live(pod) || has_model(m, model))
            continue;
        r = add_model(m, model, err);
        if (r == 0)
            r = load_model(kc, m, model, manifest_ns, err);
        if (r < 0)
            break;
    }
    json_decref(pods);
    if (r < 0) {
        node_models_free(m);
        return r;
    }
    sort_unique(m);
    *out = m;
    return 0;
}

void node_models_free(node_models *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_models; i++)
        free(m->models[i]);
    free(m->models);
    free(m->digests);
    free(m);
}
