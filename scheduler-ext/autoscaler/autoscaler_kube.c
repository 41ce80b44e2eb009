/* autoscaler_kube.c - the actuator that acts through the Kubernetes API:
 * one Deployment per function and config, created on first use and then
 * resized through its scale subresource. Deployments scaled to zero stay
 * (like OpenFaaS's), so a config used again needs only a scale call. An
 * OpenFaaS function's sibling sets (autoscaler_openfaas.c) are created,
 * scaled within 1..5 and deleted instead of scaled to zero. */
#include "scheduler-ext/autoscaler/autoscaler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/kube.h"
#include "common/log.h"
#include "protocol/names.h"

typedef struct kube_actuator {
    as_actuator base; /* first: the actuator interface */
    kube_client *client;
} kube_actuator;

/* ---- OpenFaaS functions: sibling sets of faas-netes's Deployment ---- */

static void forget_siblings(as_function *fn)
{
    for (size_t i = 0; i < fn->prof->n_configs * AS_MAX_SETS; i++)
        fn->sets[i] = -1;
    memset(fn->replicas, 0, fn->prof->n_configs * sizeof *fn->replicas);
}

static int list_siblings(kube_actuator *k, as_function *fn, tetris_error *err)
{
    char path[512], selector[512];
    snprintf(path, sizeof path, "/apis/apps/v1/namespaces/%s/deployments",
             k->base.deploy.namespace_);
    snprintf(selector, sizeof selector,
             TETRIS_LABEL_SIBLING_OF "=%s," TETRIS_LABEL_MANAGED_BY "=" AS_MANAGED_BY, fn->name);
    kube_list_opts opts = {.label_selector = selector};
    json_t *items = NULL;
    cleanup_free char *rv = NULL;
    if (kube_list(k->client, path, &opts, &items, &rv, err) < 0)
        return tetris_wrap(err, "list sibling deployments of %s", fn->name);
    forget_siblings(fn);
    size_t idx;
    json_t *item;
    json_array_foreach (items, idx, item) {
        const char *name = json_string_value(
            json_object_get(json_object_get(item, "metadata"), "name"));
        if (of_adopt_sibling(fn, item))
            log_info("event=adopt function=%s deployment=%s", fn->name, name ? name : "?");
        else
            log_warn("event=adopt-skip function=%s deployment=%s reason=\"config not in "
                     "profile\"",
                     fn->name, name ? name : "?");
    }
    json_decref(items);
    return 0;
}

static const char *uid_of(const json_t *object)
{
    return json_string_value(json_object_get(json_object_get(object, "metadata"), "uid"));
}

/* Re-reads the primary; a new one (first read, or the function was deployed
 * again) means re-reading the siblings too. */
static int kube_refresh(as_actuator *a, as_function *fn, tetris_error *err)
{
    kube_actuator *k = (kube_actuator *)a;
    char path[512];
    snprintf(path, sizeof path, "/apis/apps/v1/namespaces/%s/deployments/%s", a->deploy.namespace_,
             fn->name);
    json_t *d = NULL;
    int rc = kube_get(k->client, path, &d, err);
    if (rc == -TETRIS_E_NOTFOUND && fn->primary != NULL) {
        /* Deleted through OpenFaaS: the garbage collector takes the
         * siblings (their owner reference). */
        log_info("event=function-gone function=%s", fn->name);
        json_decref(fn->primary);
        fn->primary = NULL;
        forget_siblings(fn);
    }
    if (rc < 0)
        return tetris_wrap(err, "openfaas function %s", fn->name);
    const char *was = uid_of(fn->primary), *now = uid_of(d);
    bool renewed = was == NULL || now == NULL || strcmp(was, now) != 0;
    rc = of_set_primary(fn, d, err);
    json_decref(d);
    if (rc == 0 && renewed)
        rc = list_siblings(k, fn, err);
    return rc;
}

static int delete_deployment(kube_actuator *k, const char *name, tetris_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "/apis/apps/v1/namespaces/%s/deployments/%s",
             k->base.deploy.namespace_, name);
    int rc = kube_delete(k->client, path, err);
    return rc == -TETRIS_E_NOTFOUND ? 0 : rc;
}

static int apply_set(kube_actuator *k, as_function *fn, const as_change *ch, size_t set,
                     tetris_error *err)
{
    int *have = &fn->sets[ch->config * AS_MAX_SETS + set];
    unsigned want = of_set_replicas(ch->to, set);
    char name[256];
    of_sibling_name(fn, ch->config, set, name, sizeof name);
    int rc = 0;
    if (want == 0 && *have < 0)
        return 0;
    if (want == 0) {
        /* OpenFaaS would put a Deployment at 0 back to 1: delete it. */
        if ((rc = delete_deployment(k, name, err)) < 0)
            return rc;
        log_info("event=delete function=%s deployment=%s from=%d reason=%s", fn->name, name, *have,
                 ch->reason);
        *have = -1;
        return 0;
    }
    if (*have < 0) {
        char path[512];
        snprintf(path, sizeof path, "/apis/apps/v1/namespaces/%s/deployments",
                 k->base.deploy.namespace_);
        json_t *manifest = of_sibling_manifest(fn, ch->config, set, want, &k->base.deploy);
        if (manifest == NULL)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "deployment %s: function %s has no usable template", name, fn->name);
        rc = kube_create(k->client, path, manifest, NULL, err);
        json_decref(manifest);
        if (rc == 0) {
            log_info("event=create function=%s deployment=%s replicas=%u reason=%s", fn->name, name,
                     want, ch->reason);
            *have = (int)want;
            return 0;
        }
        if (rc != -TETRIS_E_CONFLICT)
            return rc;
        /* Made since we looked: scale it. */
    } else if ((unsigned)*have == want) {
        return 0;
    }
    rc = kube_scale_deployment(k->client, k->base.deploy.namespace_, name, want, err);
    if (rc == -TETRIS_E_NOTFOUND)
        *have = -1; /* deleted behind our back: created next time */
    if (rc < 0)
        return rc;
    log_info("event=scale function=%s deployment=%s from=%d to=%u reason=%s", fn->name, name, *have,
             want, ch->reason);
    *have = (int)want;
    return 0;
}

static int kube_apply_openfaas(kube_actuator *k, as_function *fn, const as_change *ch,
                               tetris_error *err)
{
    if (fn->primary == NULL)
        return tetris_fail(err, TETRIS_E_NOTFOUND, 0, "openfaas function %s has no Deployment",
                           fn->name);
    int rc = 0;
    for (size_t s = 0; s < AS_MAX_SETS && rc == 0; s++)
        rc = apply_set(k, fn, ch, s, err);
    unsigned sum = 0;
    for (size_t s = 0; s < AS_MAX_SETS; s++)
        if (fn->sets[ch->config * AS_MAX_SETS + s] > 0)
            sum += (unsigned)fn->sets[ch->config * AS_MAX_SETS + s];
    fn->replicas[ch->config] = sum; /* what exists, also after a partial failure */
    return rc;
}

/* Deployments this autoscaler made for fn: read their replicas so a restart
 * continues from the cluster's state instead of starting from zero. */
static int kube_adopt(as_actuator *a, as_function *fn, tetris_error *err)
{
    kube_actuator *k = (kube_actuator *)a;
    if (fn->openfaas) {
        int rc = kube_refresh(a, fn, err);
        if (rc == -TETRIS_E_NOTFOUND) {
            /* Not deployed yet: the autoscaler waits for it. */
            log_warn("event=function-absent function=%s namespace=%s", fn->name,
                     a->deploy.namespace_);
            return 0;
        }
        /* A Deployment the profile does not fit can be fixed by deploying
         * the function again: each tick says why until then. */
        return rc == -TETRIS_E_FORMAT ? 0 : rc;
    }
    char path[512], selector[512];
    snprintf(path, sizeof path, "/apis/apps/v1/namespaces/%s/deployments",
             a->deploy.namespace_);
    snprintf(selector, sizeof selector,
             TETRIS_LABEL_FUNCTION "=%s," TETRIS_LABEL_MANAGED_BY "=" AS_MANAGED_BY, fn->name);
    kube_list_opts opts = {.label_selector = selector};
    json_t *items = NULL;
    cleanup_free char *rv = NULL;
    int rc = kube_list(k->client, path, &opts, &items, &rv, err);
    if (rc < 0)
        return tetris_wrap(err, "list deployments of %s", fn->name);
    size_t idx;
    json_t *item;
    json_array_foreach(items, idx, item) {
        const char *name =
            json_string_value(json_object_get(json_object_get(item, "metadata"), "name"));
        json_int_t replicas =
            json_integer_value(json_object_get(json_object_get(item, "spec"), "replicas"));
        bool known = false;
        for (size_t i = 0; name != NULL && i < fn->prof->n_configs; i++) {
            char want[256];
            as_deployment_name(fn, i, want, sizeof want);
            if (strcmp(want, name) == 0) {
                fn->exists[i] = true;
                fn->replicas[i] = replicas > 0 ? (unsigned)replicas : 0;
                known = true;
                log_info("event=adopt function=%s deployment=%s replicas=%lld", fn->name, name,
                         (long long)replicas);
            }
        }
        if (!known)
            log_warn("event=adopt-skip function=%s deployment=%s reason=\"config not in "
                     "profile\"",
                     fn->name, name ? name : "?");
    }
    json_decref(items);
    return 0;
}

static int kube_apply(as_actuator *a, as_function *fn, const as_change *ch, tetris_error *err)
{
    kube_actuator *k = (kube_actuator *)a;
    if (fn->openfaas)
        return kube_apply_openfaas(k, fn, ch, err);
    char name[256];
    as_deployment_name(fn, ch->config, name, sizeof name);
    int rc;
    if (!fn->exists[ch->config]) {
        char path[512];
        snprintf(path, sizeof path, "/apis/apps/v1/namespaces/%s/deployments",
                 a->deploy.namespace_);
        json_t *manifest = as_deployment_manifest(fn, ch->config, ch->to, &a->deploy);
        if (manifest == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, 0, "deployment %s", name);
        rc = kube_create(k->client, path, manifest, NULL, err);
        json_decref(manifest);
        if (rc == 0) {
            fn->exists[ch->config] = true;
            log_info("event=create function=%s deployment=%s replicas=%u reason=%s", fn->name,
                     name, ch->to, ch->reason);
            return 0;
        }
        if (rc != -TETRIS_E_CONFLICT)
            return rc;
        /* Someone made it since we looked: fall through and scale it. */
        fn->exists[ch->config] = true;
    }
    rc = kube_scale_deployment(k->client, a->deploy.namespace_, name, ch->to, err);
    if (rc == -TETRIS_E_NOTFOUND)
        fn->exists[ch->config] = false; /* deleted behind our back: recreate next time */
    if (rc < 0)
        return rc;
    log_info("event=scale function=%s deployment=%s from=%u to=%u reason=%s", fn->name, name,
             ch->from, ch->to, ch->reason);
    return 0;
}

int as_profile_load(const char *source, const char *kubeconfig, profile **out,
                    tetris_error *err)
{
    static const char scheme[] = "configmap:";
    /* The key `tetris-profiler job` stores profiles under. */
    static const char key[] = TETRIS_PROFILE_CONFIGMAP_KEY;
    if (strncmp(source, scheme, sizeof scheme - 1) != 0)
        return profile_load(source, out, err);
    const char *ref = source + sizeof scheme - 1;
    const char *slash = strchr(ref, '/');
    if (slash == NULL || slash == ref || slash[1] == '\0' || strchr(slash + 1, '/') != NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: expected configmap:NAMESPACE/NAME",
                           source);
    char path[512];
    int n = snprintf(path, sizeof path, "/api/v1/namespaces/%.*s/configmaps/%s",
                     (int)(slash - ref), ref, slash + 1);
    if (n < 0 || (size_t)n >= sizeof path)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: name too long", source);
    kube_client *client = NULL;
    int rc = kube_client_new(kubeconfig, &client, err);
    if (rc < 0)
        return tetris_wrap(err, "%s", source);
    json_t *cm = NULL;
    rc = kube_get(client, path, &cm, err);
    kube_client_free(client);
    if (rc < 0)
        return tetris_wrap(err, "%s", source);
    const char *yaml = json_string_value(json_object_get(json_object_get(cm, "data"), key));
    if (yaml == NULL)
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: the ConfigMap has no data key %s",
                         source, key);
    else
        rc = profile_parse(yaml, strlen(yaml), source, out, err);
    json_decref(cm);
    return rc;
}

static void kube_destroy(as_actuator *a)
{
    kube_actuator *k = (kube_actuator *)a;
    kube_client_free(k->client);
    free(k);
}

int as_actuator_kube(const as_deploy_options *o, const char *kubeconfig, as_actuator **out,
                     tetris_error *err)
{
    kube_actuator *k = calloc(1, sizeof *k);
    if (k == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "kube actuator");
    int rc = kube_client_new(kubeconfig, &k->client, err);
    if (rc < 0) {
        free(k);
        return rc;
    }
    k->base.adopt = kube_adopt;
    k->base.apply = kube_apply;
    k->base.refresh = kube_refresh;
    k->base.destroy = kube_destroy;
    k->base.deploy = *o;
    *out = &k->base;
    return 0;
}
