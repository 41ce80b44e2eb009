/* autoscaler_deploy.c - what an instance config looks like to Kubernetes
 * (one Deployment per function and config) and the dry-run actuator, which
 * prints each action as a JSON line instead of doing it. */
#include "scheduler-ext/autoscaler/autoscaler.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "protocol/names.h"

void as_deployment_name(const as_function *fn, size_t config, char *buf, size_t len)
{
    char key[96];
    as_config_key(&fn->prof->configs[config], key, sizeof key);
    snprintf(buf, len, "%s-%s", fn->name, key);
}

static json_t *env_var(const char *name, const char *value)
{
    return json_pack("{s:s, s:s}", "name", name, "value", value);
}

json_t *as_deployment_manifest(const as_function *fn, size_t config, unsigned replicas,
                               const as_deploy_options *o)
{
    const profile_config *cfg = &fn->prof->configs[config];
    char name[256], key[96], cpu[32], memory[32], batch[16], concurrency[16], threads[16],
        model[1024], port[16], store_public[1024];
    as_deployment_name(fn, config, name, sizeof name);
    as_config_key(cfg, key, sizeof key);
    /* Only the store's public part, mounted where the store is: nothing a
     * pod can lock or write reaches the node daemon. */
    snprintf(store_public, sizeof store_public, "%s/" TETRIS_STORE_PUBLIC_SUBDIR, o->store_dir);
    snprintf(cpu, sizeof cpu, "%ldm", lround(cfg->c * 1000.0));
    /* With tensor sharing the store's pages are charged to the node daemon:
     * the pod asks for its private memory only. */
    snprintf(memory, sizeof memory, "%ldMi", lround(ceil(plan_instance_mib(cfg, &o->plan))));
    snprintf(batch, sizeof batch, "%d", cfg->b);
    snprintf(concurrency, sizeof concurrency, "%d", cfg->p);
    /* As profiled: c CPUs shared by p workers, c/p intra-op threads each. */
    snprintf(threads, sizeof threads, "%d", (int)fmax(1, floor(cfg->c / cfg->p)));
    snprintf(model, sizeof model, "%s/%s", o->model_dir,
             fn->prof->model_file ? fn->prof->model_file : fn->prof->model);
    snprintf(port, sizeof port, "%d", o->port);

    json_t *labels = json_pack("{s:s, s:s, s:s}", TETRIS_LABEL_FUNCTION, fn->name,
                               TETRIS_LABEL_CONFIG, key, TETRIS_LABEL_MANAGED_BY, AS_MANAGED_BY);
    json_t *selector = json_pack("{s:s, s:s}", TETRIS_LABEL_FUNCTION, fn->name, TETRIS_LABEL_CONFIG,
                                 key);
    /* The model label is how the extender places the pod by its tensors and
     * how tetris-node-pins keeps them pinned on its node. */
    json_t *pod_labels = json_pack("{s:s, s:s, s:s}", TETRIS_LABEL_FUNCTION, fn->name,
                                   TETRIS_LABEL_CONFIG, key, TETRIS_LABEL_MODEL, fn->prof->model);
    json_t *env = json_pack("[o, o, o, o, o, o]", env_var(TETRIS_ENV_BATCH, batch),
                            env_var(TETRIS_ENV_CONCURRENCY, concurrency),
                            env_var(TETRIS_ENV_THREADS, threads), env_var(TETRIS_ENV_MODEL, model),
                            env_var(TETRIS_ENV_STORE, o->store_dir),
                            env_var(TETRIS_ENV_PORT, port));
    json_t *resources = json_pack("{s:{s:s, s:s}, s:{s:s, s:s}}", "requests", "cpu", cpu,
                                  "memory", memory, "limits", "cpu", cpu, "memory", memory);
    json_t *container = json_pack(
        "{s:s, s:s, s:s, s:o, s:[{s:i, s:s}], s:o, s:[{s:s, s:s, s:b}], s:{s:{s:s, s:i}}}", "name",
        fn->name, "image", o->image, "imagePullPolicy", o->pull_policy, "env", env, "ports",
        "containerPort", o->port, "protocol", "TCP", "resources", resources, "volumeMounts", "name",
        "tetris-store", "mountPath", o->store_dir, "readOnly", 1, "readinessProbe", "httpGet",
        "path", TETRIS_FUNCTION_HEALTH_PATH, "port", o->port);
    return json_pack("{s:s, s:s, s:{s:s, s:s, s:o}, s:{s:i, s:{s:o}, s:{s:{s:o, s:{s:s, s:s}}, "
                     "s:{s:s, s:[o], s:[{s:s, s:{s:s, s:s}}]}}}}",
                     "apiVersion", "apps/v1", "kind", "Deployment", "metadata", "name", name,
                     "namespace", o->namespace_, "labels", labels, "spec", "replicas",
                     (int)replicas, "selector", "matchLabels", selector, "template", "metadata",
                     "labels", pod_labels, "annotations", TETRIS_ANNOTATION_SCRAPE, "true",
                     TETRIS_ANNOTATION_SCRAPE_PORT, port, "spec", "schedulerName",
                     o->scheduler_name, "containers", container, "volumes", "name", "tetris-store",
                     "hostPath", "path", store_public, "type", "Directory");
}

/* ---- dry run ---- */

static int dry_adopt(as_actuator *a, as_function *fn, tetris_error *err)
{
    (void)a;
    /* No cluster: every function starts with no instances; an OpenFaaS
     * function with faas-netes's one pod of tetris-function's defaults. */
    return fn->openfaas ? of_set_primary(fn, NULL, err) : 0;
}

/* An OpenFaaS function's sets: what each would become. */
static json_t *dry_sets(as_function *fn, const as_change *ch)
{
    json_t *sets = json_array();
    for (size_t s = 0; s < AS_MAX_SETS; s++) {
        int *have = &fn->sets[ch->config * AS_MAX_SETS + s];
        unsigned want = of_set_replicas(ch->to, s);
        if ((want == 0 && *have < 0) || (*have >= 0 && (unsigned)*have == want))
            continue;
        char name[256];
        of_sibling_name(fn, ch->config, s, name, sizeof name);
        const char *action = want == 0 ? "delete" : *have < 0 ? "create" : "scale";
        json_array_append_new(sets, json_pack("{s:s, s:s, s:i}", "deployment", name, "action",
                                              action, "replicas", (int)want));
        *have = want == 0 ? -1 : (int)want;
    }
    return sets;
}

static int dry_apply(as_actuator *a, as_function *fn, const as_change *ch, tetris_error *err)
{
    const profile_config *cfg = &fn->prof->configs[ch->config];
    char name[256];
    as_deployment_name(fn, ch->config, name, sizeof name);
    bool create = !fn->exists[ch->config] && !fn->openfaas;
    json_t *line = json_pack(
        "{s:f, s:s, s:s, s:s, s:s, s:{s:f, s:f, s:i, s:i, s:f}, s:{s:i, s:i}, s:f}", "time_s",
        ch->time_s, "function", fn->name, "action", create ? "create" : "scale", "reason",
        ch->reason, "deployment", name, "config", "c", cfg->c, "m",
        plan_instance_mib(cfg, &a->deploy.plan), "b", cfg->b, "p", cfg->p, "l",
        profile_config_latency(cfg, a->deploy.plan.latency), "replicas", "from", (int)ch->from, "to",
        (int)ch->to, "rate_rps", ch->rps);
    if (line == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "dry-run line");
    if (fn->openfaas) {
        /* The manifests need faas-netes's Deployment, which a dry run has not. */
        json_object_set_new(line, "action",
                            json_string(ch->to > ch->from ? "scale-up" : "scale-down"));
        json_object_set_new(line, "openfaas", json_true());
        json_object_set_new(line, "sets", dry_sets(fn, ch));
    } else if (create) {
        json_object_set_new(line, "manifest",
                            as_deployment_manifest(fn, ch->config, ch->to, &a->deploy));
    }
    int rc = json_dumpf(line, stdout, JSON_COMPACT | JSON_REAL_PRECISION(8));
    json_decref(line);
    if (rc != 0 || fputc('\n', stdout) == EOF || fflush(stdout) != 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "write dry-run action");
    fn->exists[ch->config] = true;
    return 0;
}

static void dry_destroy(as_actuator *a)
{
    free(a);
}

int as_actuator_dry_run(const as_deploy_options *o, as_actuator **out, tetris_error *err)
{
    as_actuator *a = calloc(1, sizeof *a);
    if (a == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "dry-run actuator");
    a->adopt = dry_adopt;
    a->apply = dry_apply;
    a->destroy = dry_destroy;
    a->deploy = *o;
    *out = a;
    return 0;
}
