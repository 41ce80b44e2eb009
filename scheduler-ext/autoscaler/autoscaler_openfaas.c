/* autoscaler_openfaas.c - scaling a function that OpenFaaS (faas-netes CE)
 * deployed, without changing OpenFaaS.
 *
 * faas-netes's Deployment for the function (the primary) stays as it is and
 * is the template of the autoscaler's sibling Deployments, one set per DTS
 * config: same image, environment, secrets, annotations and pod labels, plus
 * the config's TETRIS_BATCH, TETRIS_CONCURRENCY, TETRIS_THREADS and
 * resources. Their pods carry faas_function, so the function's Service
 * selects them and the gateway routes to them; the Deployments themselves do
 * not (OpenFaaS would list each as a function), and each selects its own pods
 * by config and set.
 *
 * Equal shares: the gateway picks a ready pod uniformly at random, so a pod
 * gets rate/pods whatever its b and p. The plan therefore keeps one sibling
 * config per function at a time, and a function's capacity is its pods
 * times the smallest per-pod capacity among them, the primary's pods
 * included (they take their share and run the config their environment
 * names). Scale-out sizes the pod count so that every pod's share fits;
 * scale-in releases pods while the rest still cover the window's peak with
 * the scale-in headroom. A new config is chosen only when no sibling is left.
 *
 * OpenFaaS CE sets any Deployment whose pods carry faas_function to 1..5
 * replicas (0 becomes 1), so a config's instances are split over sets of at
 * most 5, and a set no longer needed is deleted, not scaled to 0. */
#include "scheduler-ext/autoscaler/autoscaler.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/names.h"

int as_function_set_openfaas(as_function *fn, tetris_error *err)
{
    size_t n = fn->prof->n_configs * AS_MAX_SETS;
    fn->sets = malloc(n * sizeof *fn->sets);
    if (fn->sets == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "function %s", fn->name);
    for (size_t i = 0; i < n; i++)
        fn->sets[i] = -1;
    fn->openfaas = true;
    fn->primary_pods = 1;
    return 0;
}

/* ---- the primary ---- */

static json_t *function_container(const as_function *fn, json_t *pod_spec)
{
    json_t *containers = json_object_get(pod_spec, "containers");
    size_t i;
    json_t *c;
    json_array_foreach (containers, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        if (name != NULL && strcmp(name, fn->name) == 0)
            return c;
    }
    /* faas-netes names its one container after the function. */
    return json_array_get(containers, 0);
}

static const char *env_value(const json_t *container, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach (json_object_get(container, "env"), i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n != NULL && strcmp(n, name) == 0)
            return json_string_value(json_object_get(e, "value"));
    }
    return NULL;
}

static int env_int(const as_function *fn, const json_t *container, const char *name, int *out,
                   tetris_error *err)
{
    const char *v = env_value(container, name);
    *out = 1; /* tetris-function's default */
    if (v == NULL)
        return 0;
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < 1 || n > 1024)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "function %s: %s='%s' is not a count", fn->name,
                           name, v);
    *out = (int)n;
    return 0;
}

/* A Kubernetes CPU quantity ("2", "1.5", "500m") in CPUs; NAN when absent
 * or in another form. */
static double cpu_quantity(const char *s)
{
    if (s == NULL)
        return NAN;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0))
        return NAN;
    if (strcmp(end, "m") == 0)
        return v / 1000.0;
    return *end == '\0' ? v : NAN;
}

int of_set_primary(as_function *fn, json_t *deployment, tetris_error *err)
{
    json_t *spec = json_object_get(deployment, "spec");
    json_t *container = function_container(fn, json_object_get(json_object_get(spec, "template"),
                                                               "spec"));
    int b, p, rc;
    if ((rc = env_int(fn, container, TETRIS_ENV_BATCH, &b, err)) < 0 ||
        (rc = env_int(fn, container, TETRIS_ENV_CONCURRENCY, &p, err)) < 0)
        return rc;
    double limit = cpu_quantity(json_string_value(
        json_object_get(json_object_get(json_object_get(container, "resources"), "limits"),
                        "cpu")));
    const profile *prof = fn->prof;
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < prof->n_configs; i++) {
        const profile_config *cfg = &prof->configs[i];
        if (cfg->b != b || cfg->p != p)
            continue;
        bool fits = isfinite(limit) && cfg->c <= limit + 1e-9;
        if (best == SIZE_MAX) {
            best = i;
            continue;
        }
        const profile_config *have = &prof->configs[best];
        bool have_fits = isfinite(limit) && have->c <= limit + 1e-9;
        if (fits && (!have_fits || cfg->c > have->c))
            best = i;
        else if (!fits && !have_fits && cfg->c < have->c)
            best = i;
    }
    if (best == SIZE_MAX)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "function %s: its pods run b=%d p=%d (" TETRIS_ENV_BATCH
                           " and " TETRIS_ENV_CONCURRENCY " in its environment, 1 when unset) "
                           "but profile %s has no such config: the pods' equal shares are "
                           "sized by the primary's capacity",
                           fn->name, b, p, prof->model);
    json_int_t replicas = 1;
    json_t *r = json_object_get(spec, "replicas");
    if (json_is_integer(r))
        replicas = json_integer_value(r);
    json_incref(deployment);
    json_decref(fn->primary);
    fn->primary = deployment;
    fn->primary_pods = replicas > 0 ? (unsigned)replicas : 0;
    fn->primary_config = best;
    return 0;
}

/* ---- capacity and decisions ---- */

/* What a pod of config k can be given when every pod gets the same share:
 * its own capacity, or less when the primary's pods saturate first. */
static double pod_capacity(const as_function *fn, size_t k, const plan_options *o)
{
    double cap = plan_config_capacity(&fn->prof->configs[k], o);
    if (fn->primary_pods > 0)
        cap = fmin(cap, plan_config_capacity(&fn->prof->configs[fn->primary_config], o));
    return cap;
}

double of_capacity_rps(const as_function *fn, const plan_options *o)
{
    return as_pods_capacity(fn->prof, fn->replicas, fn->primary_config, fn->primary_pods, true, o);
}

/* The eligible config that gives the most equal-share capacity per MiB. */
static int pick_config(const as_function *fn, const plan_options *o, size_t *out, tetris_error *err)
{
    double best_key = -1;
    *out = SIZE_MAX;
    for (size_t i = 0; i < fn->prof->n_configs; i++) {
        const profile_config *cfg = &fn->prof->configs[i];
        if (!plan_eligible(cfg, o))
            continue;
        double key = pod_capacity(fn, i, o) / (plan_instance_mib(cfg, o) + o->alpha * cfg->c);
        if (key > best_key) {
            best_key = key;
            *out = i;
        }
    }
    if (*out == SIZE_MAX)
        return plan_fail_infeasible(fn->prof, o, err);
    return 0;
}

static void only(unsigned *want, size_t n, size_t k, unsigned count)
{
    memset(want, 0, n * sizeof *want);
    want[k] = count;
}

int of_decide(as_function *fn, const as_policy *pol, double now_s, double rps, double peak,
              unsigned *want, const char **reason, tetris_error *err)
{
    const plan_options *o = &pol->plan;
    size_t n = fn->prof->n_configs, k = SIZE_MAX;
    unsigned siblings = 0, most = 0;
    for (size_t i = 0; i < n; i++) {
        siblings += fn->replicas[i];
        if (fn->replicas[i] > most) {
            most = fn->replicas[i];
            k = i;
        }
    }
    if (k == SIZE_MAX) {
        int rc = pick_config(fn, o, &k, err);
        if (rc < 0)
            return tetris_wrap(err, "function %s", fn->name);
    }
    unsigned primary = fn->primary_pods;
    unsigned max_siblings = AS_MAX_SETS * AS_SET_REPLICAS;
    if (pol->max_instances > 0)
        max_siblings = pol->max_instances <= primary                 ? 0
                       : pol->max_instances - primary < max_siblings ? pol->max_instances - primary
                                                                     : max_siblings;
    double per_pod = pod_capacity(fn, k, o);
    double target = rps * (1.0 + pol->headroom_out);
    if (target > of_capacity_rps(fn, o) + 1e-9) {
        double pods = ceil(target / per_pod - 1e-9);
        only(want, n, k, pods > primary ? (unsigned)fmin(pods - primary, max_siblings) : 0);
        *reason = "scale-out";
    } else if (primary + siblings < pol->min_instances) {
        only(want, n, k, pol->min_instances - primary);
        *reason = "minimum";
    } else if (now_s - fn->last_change_s >= pol->cooldown_s) {
        double pods = ceil(peak * (1.0 + pol->headroom_in) / per_pod - 1e-9);
        pods = fmax(pods, pol->min_instances);
        unsigned keep = pods > primary ? (unsigned)fmin(pods - primary, max_siblings) : 0;
        if (keep < siblings) {
            only(want, n, k, keep);
            *reason = "scale-in";
        }
    }
    if (memcmp(want, fn->replicas, n * sizeof *want) == 0)
        *reason = NULL;
    return 0;
}

/* ---- sibling Deployments ---- */

unsigned of_set_replicas(unsigned total, size_t set)
{
    size_t before = set * AS_SET_REPLICAS;
    if (total <= before)
        return 0;
    return total - before < AS_SET_REPLICAS ? (unsigned)(total - before) : AS_SET_REPLICAS;
}

void of_sibling_name(const as_function *fn, size_t config, size_t set, char *buf, size_t len)
{
    char key[96];
    as_config_key(&fn->prof->configs[config], key, sizeof key);
    snprintf(buf, len, "%s-%s-%zu", fn->name, key, set);
}

/* Sets name=value in a container's env, replacing an entry of that name. */
static int set_env(json_t *container, const char *name, const char *value)
{
    json_t *env = json_object_get(container, "env");
    if (!json_is_array(env)) {
        env = json_array();
        if (json_object_set_new(container, "env", env) < 0)
            return -1;
    }
    size_t i;
    json_t *e;
    json_array_foreach (env, i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n != NULL && strcmp(n, name) == 0) {
            json_object_del(e, "valueFrom");
            return json_object_set_new(e, "value", json_string(value));
        }
    }
    return json_array_append_new(env, json_pack("{s:s, s:s}", "name", name, "value", value));
}

static int set_label(json_t *meta, const char *name, const char *value)
{
    json_t *labels = json_object_get(meta, "labels");
    if (!json_is_object(labels)) {
        labels = json_object();
        if (json_object_set_new(meta, "labels", labels) < 0)
            return -1;
    }
    return json_object_set_new(labels, name, json_string(value));
}

/* The primary's pod template for config i, set s (new reference). */
static json_t *sibling_template(const as_function *fn, size_t config, const char *key,
                                const char *set, const as_deploy_options *o)
{
    const profile_config *cfg = &fn->prof->configs[config];
    json_t *t = json_deep_copy(json_object_get(json_object_get(fn->primary, "spec"), "template"));
    json_t *meta = json_object_get(t, "metadata");
    if (t != NULL && !json_is_object(meta)) {
        meta = json_object();
        json_object_set_new(t, "metadata", meta);
    }
    json_t *container = function_container(fn, json_object_get(t, "spec"));
    if (meta == NULL || !json_is_object(container)) {
        json_decref(t);
        return NULL;
    }
    json_object_del(meta, "creationTimestamp");
    json_t *labels = json_object_get(meta, "labels");
    bool has_model = json_object_get(labels, TETRIS_LABEL_MODEL) != NULL;
    char batch[16], concurrency[16], threads[16], cpu[32], memory[32];
    snprintf(batch, sizeof batch, "%d", cfg->b);
    snprintf(concurrency, sizeof concurrency, "%d", cfg->p);
    snprintf(threads, sizeof threads, "%d", (int)fmax(1, floor(cfg->c / cfg->p)));
    snprintf(cpu, sizeof cpu, "%ldm", lround(cfg->c * 1000.0));
    snprintf(memory, sizeof memory, "%ldMi", lround(ceil(plan_instance_mib(cfg, &o->plan))));
    int rc = set_label(meta, TETRIS_LABEL_FUNCTION, fn->name);
    rc |= set_label(meta, TETRIS_LABEL_CONFIG, key);
    rc |= set_label(meta, TETRIS_LABEL_SET, set);
    /* The webhook sets it from the annotation too; the profile's model is
     * what the extender needs when the webhook is not there. */
    if (!has_model)
        rc |= set_label(meta, TETRIS_LABEL_MODEL, fn->prof->model);
    rc |= set_env(container, TETRIS_ENV_BATCH, batch);
    rc |= set_env(container, TETRIS_ENV_CONCURRENCY, concurrency);
    rc |= set_env(container, TETRIS_ENV_THREADS, threads);
    /* As profiled: the config's CPUs, and its memory (private memory with
     * sharing; the store's pages are the node daemon's). */
    rc |= json_object_set_new(container, "resources",
                              json_pack("{s:{s:s, s:s}, s:{s:s, s:s}}", "requests", "cpu", cpu,
                                        "memory", memory, "limits", "cpu", cpu, "memory", memory));
    if (rc != 0) {
        json_decref(t);
        return NULL;
    }
    return t;
}

json_t *of_sibling_manifest(const as_function *fn, size_t config, size_t set, unsigned replicas,
                            const as_deploy_options *o)
{
    json_t *pmeta = json_object_get(fn->primary, "metadata");
    const char *uid = json_string_value(json_object_get(pmeta, "uid"));
    const char *ns = json_string_value(json_object_get(pmeta, "namespace"));
    if (fn->primary == NULL || uid == NULL)
        return NULL;
    char name[256], key[96], set_s[16];
    of_sibling_name(fn, config, set, name, sizeof name);
    as_config_key(&fn->prof->configs[config], key, sizeof key);
    snprintf(set_s, sizeof set_s, "%zu", set);
    json_t *template = sibling_template(fn, config, key, set_s, o);
    if (template == NULL)
        return NULL;
    /* No faas_function on the Deployment: OpenFaaS lists every Deployment
     * labelled so as a function. The owner reference makes deleting the
     * function (faas-netes deletes only its own Deployment) remove these. */
    json_t *d = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s, s:s, s:s}, s:[{s:s, s:s, s:s, s:s, "
                          "s:b, s:b}]}, "
                          "s:{s:i, s:{s:{s:s, s:s, s:s}}, s:o}}",
                          "apiVersion", "apps/v1", "kind", "Deployment", "metadata", "name", name,
                          "namespace", ns ? ns : o->namespace_, "labels", TETRIS_LABEL_SIBLING_OF,
                          fn->name, TETRIS_LABEL_CONFIG, key, TETRIS_LABEL_SET, set_s,
                          TETRIS_LABEL_MANAGED_BY, AS_MANAGED_BY, "ownerReferences", "apiVersion",
                          "apps/v1", "kind", "Deployment", "name", fn->name, "uid", uid,
                          "controller", 0, "blockOwnerDeletion", 0, "spec", "replicas",
                          (int)replicas, "selector", "matchLabels", TETRIS_LABEL_FUNCTION, fn->name,
                          TETRIS_LABEL_CONFIG, key, TETRIS_LABEL_SET, set_s, "template", template);
    json_t *strategy = json_object_get(json_object_get(fn->primary, "spec"), "strategy");
    if (d != NULL && json_is_object(strategy))
        json_object_set(json_object_get(d, "spec"), "strategy", strategy);
    return d;
}

bool of_adopt_sibling(as_function *fn, const json_t *item)
{
    json_t *labels = json_object_get(json_object_get(item, "metadata"), "labels");
    const char *key = json_string_value(json_object_get(labels, TETRIS_LABEL_CONFIG));
    const char *set_s = json_string_value(json_object_get(labels, TETRIS_LABEL_SET));
    if (key == NULL || set_s == NULL)
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long set = strtoul(set_s, &end, 10);
    if (errno != 0 || end == set_s || *end != '\0' || set >= AS_MAX_SETS)
        return false;
    for (size_t i = 0; i < fn->prof->n_configs; i++) {
        char want[96];
        as_config_key(&fn->prof->configs[i], want, sizeof want);
        if (strcmp(want, key) != 0)
            continue;
        json_int_t r = json_integer_value(
            json_object_get(json_object_get(item, "spec"), "replicas"));
        fn->sets[i * AS_MAX_SETS + set] = r > 0 ? (int)fmin((double)r, 1e6) : 0;
        unsigned sum = 0;
        for (size_t s = 0; s < AS_MAX_SETS; s++)
            if (fn->sets[i * AS_MAX_SETS + s] > 0)
                sum += (unsigned)fn->sets[i * AS_MAX_SETS + s];
        fn->replicas[i] = sum;
        return true;
    }
    return false;
}
