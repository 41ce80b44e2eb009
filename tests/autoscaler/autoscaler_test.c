/* autoscaler_test.c - tetris-autoscaler's OpenFaaS functions against the
 * fault-injecting API server: sibling Deployments made from faas-netes's
 * Deployment (labels, owner reference, environment, resources), instances
 * split into sets of at most 5, a set no longer needed deleted rather than
 * scaled to 0, a restart that adopts the sets and changes nothing, a
 * function deleted through OpenFaaS; the equal-share plan; the refined
 * mode's equal shares for plain functions (scale-out and scale-in); and the
 * Prometheus query as built, sent and answered. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "tests/lib/faultserver.h"
#include "tests/lib/unit.h"
#include "common/cleanup.h"
#include "protocol/names.h"
#include "scheduler-ext/autoscaler/autoscaler.h"

/* A: 100 rps per pod for 100 MiB; B: 200 rps for 300 MiB (b=2, p=2). */
static const char profile_text[] =
    "tetris_profile: 1\n"
    "model: \"two-configs\"\n"
    "measured: false\n"
    "configs:\n"
    "- {c: 1, m_mib: 100, b: 1, p: 1, latency_ms: {mean: 10, p95: 10, p99: 10}}\n"
    "- {c: 1, m_mib: 300, b: 2, p: 2, latency_ms: {mean: 20, p95: 20, p99: 20}}\n";

#define SIBLING0 "fn-c1000-m100-b1-p1-0"
#define SIBLING1 "fn-c1000-m100-b1-p1-1"
#define DEPLOYMENTS "/apis/apps/v1/namespaces/openfaas-fn/deployments"

/* What faas-netes makes for `faas-cli deploy` of fn with a secret, a label,
 * the model annotation and TETRIS_BATCH=2 TETRIS_CONCURRENCY=2: its pods
 * run config B. */
static const char primary_json[] =
    "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\","
    "\"metadata\":{\"name\":\"fn\",\"namespace\":\"openfaas-fn\",\"uid\":\"uid-1\","
    "\"labels\":{\"faas_function\":\"fn\"},"
    "\"annotations\":{\"prometheus.io.scrape\":\"false\",\"tetris.io/model\":\"two-configs\"}},"
    "\"spec\":{\"replicas\":1,\"selector\":{\"matchLabels\":{\"faas_function\":\"fn\"}},"
    "\"strategy\":{\"type\":\"RollingUpdate\",\"rollingUpdate\":{\"maxUnavailable\":0,"
    "\"maxSurge\":1}},"
    "\"template\":{\"metadata\":{\"creationTimestamp\":null,\"labels\":{\"faas_function\":\"fn\","
    "\"team\":\"a\"},\"annotations\":{\"tetris.io/model\":\"two-configs\"}},"
    "\"spec\":{\"containers\":[{\"name\":\"fn\",\"image\":\"tetris-function:latest\","
    "\"ports\":[{\"name\":\"http\",\"containerPort\":8080,\"protocol\":\"TCP\"}],"
    "\"env\":[{\"name\":\"TETRIS_BATCH\",\"value\":\"2\"},{\"name\":\"TETRIS_CONCURRENCY\","
    "\"value\":\"2\"},{\"name\":\"fprocess\",\"value\":\"\"}],"
    "\"resources\":{\"limits\":{\"cpu\":\"1\",\"memory\":\"512Mi\"}},"
    "\"volumeMounts\":[{\"name\":\"fn-projected-secrets\",\"readOnly\":true,"
    "\"mountPath\":\"/var/openfaas/secrets\"}],"
    "\"readinessProbe\":{\"httpGet\":{\"path\":\"/_/health\",\"port\":8080}}}],"
    "\"volumes\":[{\"name\":\"fn-projected-secrets\",\"projected\":{\"sources\":[{\"secret\":"
    "{\"name\":\"api-key\"}}]}}]}}}}";

static fault_server *fs;
static as_actuator *act;
static as_function *fn;
static as_policy pol;
static const char *tmpdir;

static void push(int status, const char *body)
{
    fault_server_push(fs, &(fault_reply){.status = status, .body = body});
}

static void push_list(const char *items)
{
    static char body[8192];
    snprintf(body, sizeof body,
             "{\"kind\":\"DeploymentList\",\"metadata\":{\"resourceVersion\":\"7\"},"
             "\"items\":[%s]}",
             items);
    push(200, body);
}

/* fn with the two-config profile, of the plain --function kind. */
static as_function *plain_function(void)
{
    tetris_error err = {0};
    profile *p = NULL;
    ck_assert_msg(profile_parse(profile_text, strlen(profile_text), "test", &p, &err) == 0, "%s",
                  err.msg);
    as_function *f = NULL;
    ck_assert_int_eq(as_function_new("fn", p, &f, &err), 0);
    return f;
}

static as_function *new_function(void)
{
    tetris_error err = {0};
    as_function *f = plain_function();
    ck_assert_int_eq(as_function_set_openfaas(f, &err), 0);
    return f;
}

static void setup(void)
{
    fs = fault_server_start();
    ck_assert_ptr_nonnull(fs);
    tmpdir = unit_scratch_dir("autoscaler-test");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/kubeconfig", tmpdir);
    fault_server_write_kubeconfig(fs, path, NULL);
    as_deploy_options o = {.namespace_ = "openfaas-fn",
                           .image = "unused",
                           .pull_policy = "IfNotPresent",
                           .store_dir = "/dev/shm/tetris",
                           .scheduler_name = "tetris-scheduler",
                           .model_dir = "/models",
                           .port = 8080,
                           .plan = {.slo_ms = 50, .latency = PROFILE_STAT_P95}};
    tetris_error err = {0};
    ck_assert_msg(as_actuator_kube(&o, path, &act, &err) == 0, "%s", err.msg);
    pol = (as_policy){.plan = o.plan,
                      .headroom_out = 0.1,
                      .headroom_in = 0.3,
                      .cooldown_s = 60,
                      .window_s = 60,
                      .min_instances = 1};
    fn = new_function();
}

static void teardown(void)
{
    as_function_free(fn);
    act->destroy(act);
    fault_server_stop(fs);
    unit_remove_tree(tmpdir);
}

/* One decision and its actions, as tetris-autoscaler run's tick does. */
static const char *tick(double now_s, double rps)
{
    tetris_error err = {0};
    unsigned want[2];
    const char *reason = NULL;
    ck_assert_msg(as_decide(fn, &pol, now_s, rps, want, &reason, &err) == 0, "%s", err.msg);
    if (reason == NULL)
        return NULL;
    for (size_t i = 0; i < 2; i++) {
        if (want[i] == fn->replicas[i])
            continue;
        as_change ch = {.time_s = now_s,
                        .rps = rps,
                        .reason = reason,
                        .config = i,
                        .from = fn->replicas[i],
                        .to = want[i]};
        ck_assert_msg(act->apply(act, fn, &ch, &err) == 0, "%s", err.msg);
        fn->replicas[i] = want[i];
    }
    fn->last_change_s = now_s;
    return reason;
}

static void adopt(void)
{
    tetris_error err = {0};
    ck_assert_msg(act->adopt(act, fn, &err) == 0, "%s", err.msg);
}

static json_t *request_json(size_t i)
{
    const fault_request *rq = fault_server_request(fs, i);
    ck_assert_ptr_nonnull(rq);
    json_error_t jerr;
    json_t *j = json_loads(rq->body, 0, &jerr);
    ck_assert_msg(j != NULL, "request %zu: %s", i, jerr.text);
    return j;
}

/* spec.replicas of a scale PATCH's body. */
static int replicas_in(const char *body)
{
    json_t *j = json_loads(body, 0, NULL);
    ck_assert_ptr_nonnull(j);
    int r = (int)json_integer_value(json_object_get(json_object_get(j, "spec"), "replicas"));
    json_decref(j);
    return r;
}

static const char *env_of(json_t *container, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach (json_object_get(container, "env"), i, e)
        if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0)
            return json_string_value(json_object_get(e, "value"));
    return NULL;
}

static void check_sibling(json_t *d, const char *name, const char *set, int replicas)
{
    json_t *meta = json_object_get(d, "metadata");
    ck_assert_str_eq(json_string_value(json_object_get(meta, "name")), name);
    ck_assert_str_eq(json_string_value(json_object_get(meta, "namespace")), "openfaas-fn");
    json_t *labels = json_object_get(meta, "labels");
    /* Not a function of its own in GET /system/functions. */
    ck_assert_ptr_null(json_object_get(labels, TETRIS_LABEL_FUNCTION));
    ck_assert_str_eq(json_string_value(json_object_get(labels, TETRIS_LABEL_SIBLING_OF)), "fn");
    ck_assert_str_eq(json_string_value(json_object_get(labels, TETRIS_LABEL_CONFIG)),
                     "c1000-m100-b1-p1");
    ck_assert_str_eq(json_string_value(json_object_get(labels, TETRIS_LABEL_SET)), set);
    ck_assert_str_eq(json_string_value(json_object_get(labels, TETRIS_LABEL_MANAGED_BY)),
                     AS_MANAGED_BY);
    json_t *owner = json_array_get(json_object_get(meta, "ownerReferences"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(owner, "kind")), "Deployment");
    ck_assert_str_eq(json_string_value(json_object_get(owner, "apiVersion")), "apps/v1");
    ck_assert_str_eq(json_string_value(json_object_get(owner, "name")), "fn");
    ck_assert_str_eq(json_string_value(json_object_get(owner, "uid")), "uid-1");
    json_t *spec = json_object_get(d, "spec");
    ck_assert_int_eq(json_integer_value(json_object_get(spec, "replicas")), replicas);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(spec, "strategy"), "type")),
                     "RollingUpdate");
    json_t *match = json_object_get(json_object_get(spec, "selector"), "matchLabels");
    ck_assert_int_eq(json_object_size(match), 3);
    ck_assert_str_eq(json_string_value(json_object_get(match, TETRIS_LABEL_FUNCTION)), "fn");
    ck_assert_str_eq(json_string_value(json_object_get(match, TETRIS_LABEL_SET)), set);
    json_t *tmeta = json_object_get(json_object_get(spec, "template"), "metadata");
    json_t *plabels = json_object_get(tmeta, "labels");
    /* Every selector label is on the pods; faas_function routes traffic. */
    const char *k;
    json_t *v;
    json_object_foreach (match, k, v)
        ck_assert_str_eq(json_string_value(json_object_get(plabels, k)), json_string_value(v));
    ck_assert_str_eq(json_string_value(json_object_get(plabels, "team")), "a");
    ck_assert_str_eq(json_string_value(json_object_get(plabels, TETRIS_LABEL_MODEL)),
                     "two-configs");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(tmeta, "annotations"),
                                                       TETRIS_LABEL_MODEL)),
                     "two-configs");
    json_t *pspec = json_object_get(json_object_get(spec, "template"), "spec");
    json_t *c = json_array_get(json_object_get(pspec, "containers"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c, "image")), "tetris-function:latest");
    /* The config's b and p replace the template's; the rest is kept. */
    ck_assert_str_eq(env_of(c, TETRIS_ENV_BATCH), "1");
    ck_assert_str_eq(env_of(c, TETRIS_ENV_CONCURRENCY), "1");
    ck_assert_str_eq(env_of(c, TETRIS_ENV_THREADS), "1");
    ck_assert_str_eq(env_of(c, "fprocess"), "");
    ck_assert_int_eq(json_array_size(json_object_get(c, "env")), 4);
    json_t *limits = json_object_get(json_object_get(c, "resources"), "limits");
    ck_assert_str_eq(json_string_value(json_object_get(limits, "cpu")), "1000m");
    ck_assert_str_eq(json_string_value(json_object_get(limits, "memory")), "100Mi");
    ck_assert_str_eq(json_string_value(
                         json_object_get(json_array_get(json_object_get(pspec, "volumes"), 0),
                                         "name")),
                     "fn-projected-secrets");
    ck_assert_str_eq(json_string_value(
                         json_object_get(json_object_get(json_object_get(c, "readinessProbe"),
                                                         "httpGet"),
                                         "path")),
                     "/_/health");
}

START_TEST(siblings_from_template_in_sets_of_five)
{
    push(200, primary_json);
    push_list("");
    adopt();
    ck_assert_uint_eq(fault_server_count(fs), 2);
    ck_assert_str_eq(fault_server_request(fs, 0)->method, "GET");
    ck_assert_str_eq(fault_server_request(fs, 0)->target, DEPLOYMENTS "/fn");
    ck_assert_ptr_nonnull(strstr(fault_server_request(fs, 1)->target,
                                 "labelSelector=tetris.io%2Fopenfaas-function%3Dfn"));
    ck_assert_uint_eq(fn->primary_pods, 1);
    ck_assert_uint_eq(fn->primary_config, 1); /* b=2 p=2 in its environment */
    ck_assert_double_eq_tol(as_capacity_rps(fn, &pol.plan), 200, 1e-9);

    /* 650 rps * 1.1 = 715: 8 pods of equal share, each at most 100 (A's
     * capacity, the config that gives most per MiB): the primary and 7. */
    push(201, "{}");
    push(201, "{}");
    ck_assert_str_eq(tick(0, 650), "scale-out");
    ck_assert_uint_eq(fn->replicas[0], 7);
    ck_assert_uint_eq(fn->replicas[1], 0);
    ck_assert_uint_eq(fault_server_count(fs), 4);
    for (size_t i = 2; i < 4; i++) {
        const fault_request *rq = fault_server_request(fs, i);
        ck_assert_str_eq(rq->method, "POST");
        ck_assert_str_eq(rq->target, DEPLOYMENTS);
    }
    json_t *d0 = request_json(2), *d1 = request_json(3);
    check_sibling(d0, SIBLING0, "0", 5);
    check_sibling(d1, SIBLING1, "1", 2);
    json_decref(d0);
    json_decref(d1);
    ck_assert_double_eq_tol(as_capacity_rps(fn, &pol.plan), 800, 1e-9);

    /* Within the band: nothing. */
    ck_assert_ptr_null(tick(10, 600));
    ck_assert_uint_eq(fault_server_count(fs), 4);
}
END_TEST

START_TEST(scale_in_deletes_instead_of_zero)
{
    push(200, primary_json);
    push_list("");
    adopt();
    push(201, "{}");
    push(201, "{}");
    ck_assert_str_eq(tick(0, 650), "scale-out");
    /* Cool-down and window over: 150 rps * 1.3 = 195 needs 2 pods, the
     * primary and one sibling: set 0 goes to 1, set 1 is deleted. */
    push(200, "{}");
    push(200, "{}");
    ck_assert_str_eq(tick(1000, 150), "scale-in");
    ck_assert_uint_eq(fn->replicas[0], 1);
    ck_assert_uint_eq(fault_server_count(fs), 6);
    const fault_request *scale = fault_server_request(fs, 4);
    ck_assert_str_eq(scale->method, "PATCH");
    ck_assert_str_eq(scale->target, DEPLOYMENTS "/" SIBLING0 "/scale");
    ck_assert_int_eq(replicas_in(scale->body), 1);
    const fault_request *del = fault_server_request(fs, 5);
    ck_assert_str_eq(del->method, "DELETE");
    ck_assert_str_eq(del->target, DEPLOYMENTS "/" SIBLING1);

    /* Idle: the primary alone covers it; the last set is deleted too,
     * never scaled to 0 (OpenFaaS would put it back at 1). */
    push(200, "{}");
    ck_assert_str_eq(tick(2000, 0), "scale-in");
    ck_assert_uint_eq(fn->replicas[0], 0);
    ck_assert_uint_eq(fault_server_count(fs), 7);
    ck_assert_str_eq(fault_server_request(fs, 6)->method, "DELETE");
    ck_assert_str_eq(fault_server_request(fs, 6)->target, DEPLOYMENTS "/" SIBLING0);
    for (size_t i = 0; i < fault_server_count(fs); i++)
        if (strcmp(fault_server_request(fs, i)->method, "PATCH") == 0)
            ck_assert_int_gt(replicas_in(fault_server_request(fs, i)->body), 0);
}
END_TEST

START_TEST(restart_adopts_and_changes_nothing)
{
    push(200, primary_json);
    push_list("{\"metadata\":{\"name\":\"" SIBLING0 "\",\"labels\":{"
              "\"tetris.io/openfaas-function\":\"fn\",\"tetris.io/config\":\"c1000-m100-b1-p1\","
              "\"tetris.io/set\":\"0\"}},\"spec\":{\"replicas\":5}},"
              "{\"metadata\":{\"name\":\"" SIBLING1 "\",\"labels\":{"
              "\"tetris.io/openfaas-function\":\"fn\",\"tetris.io/config\":\"c1000-m100-b1-p1\","
              "\"tetris.io/set\":\"1\"}},\"spec\":{\"replicas\":2}},"
              "{\"metadata\":{\"name\":\"fn-other\",\"labels\":{"
              "\"tetris.io/openfaas-function\":\"fn\",\"tetris.io/config\":\"c9-m9-b9-p9\","
              "\"tetris.io/set\":\"0\"}},\"spec\":{\"replicas\":1}}");
    adopt();
    ck_assert_uint_eq(fn->replicas[0], 7);
    ck_assert_uint_eq(fn->replicas[1], 0);
    ck_assert_ptr_null(tick(0, 650));
    /* Applying what is there does nothing either. */
    tetris_error err = {0};
    as_change same = {.reason = "test", .config = 0, .from = 7, .to = 7};
    ck_assert_int_eq(act->apply(act, fn, &same, &err), 0);
    ck_assert_uint_eq(fault_server_count(fs), 2);

    /* The same primary again: no re-listing. */
    push(200, primary_json);
    ck_assert_int_eq(act->refresh(act, fn, &err), 0);
    ck_assert_uint_eq(fault_server_count(fs), 3);
    /* More load: 1100 rps needs 11 pods, 10 siblings: only set 1 grows. */
    push(200, "{}");
    ck_assert_str_eq(tick(5, 1000), "scale-out");
    ck_assert_uint_eq(fault_server_count(fs), 4);
    ck_assert_str_eq(fault_server_request(fs, 3)->target, DEPLOYMENTS "/" SIBLING1 "/scale");
    ck_assert_int_eq(replicas_in(fault_server_request(fs, 3)->body), 5);
    ck_assert_uint_eq(fn->replicas[0], 10);
}
END_TEST

START_TEST(function_deleted_through_openfaas)
{
    tetris_error err = {0};
    push(200, primary_json);
    push_list("");
    adopt();
    push(201, "{}");
    ck_assert_str_eq(tick(0, 250), "scale-out"); /* 275: 3 pods, 2 siblings */
    push(404, "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"NotFound\",\"code\":404}");
    ck_assert_int_eq(act->refresh(act, fn, &err), -TETRIS_E_NOTFOUND);
    ck_assert_ptr_null(fn->primary);
    ck_assert_uint_eq(fn->replicas[0], 0);
    size_t before = fault_server_count(fs);
    as_change ch = {.reason = "test", .config = 0, .from = 0, .to = 3};
    ck_assert_int_eq(act->apply(act, fn, &ch, &err), -TETRIS_E_NOTFOUND);
    ck_assert_uint_eq(fault_server_count(fs), before);
}
END_TEST

START_TEST(function_not_deployed_yet)
{
    push(404, "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"NotFound\",\"code\":404}");
    adopt(); /* waits for it */
    ck_assert_ptr_null(fn->primary);
    ck_assert_uint_eq(fault_server_count(fs), 1);
}
END_TEST

START_TEST(primary_config_not_in_profile)
{
    tetris_error err = {0};
    json_t *d = json_loads(primary_json, 0, NULL);
    json_t *c =
        json_array_get(json_object_get(json_object_get(json_object_get(json_object_get(d, "spec"),
                                                                       "template"),
                                                       "spec"),
                                       "containers"),
                       0);
    json_object_set_new(json_array_get(json_object_get(c, "env"), 0), "value", json_string("3"));
    ck_assert_int_eq(of_set_primary(fn, d, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "b=3 p=2"));
    json_object_set_new(json_array_get(json_object_get(c, "env"), 0), "value", json_string("two"));
    ck_assert_int_eq(of_set_primary(fn, d, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "TETRIS_BATCH='two'"));
    json_decref(d);
    /* tetris-function's defaults (no env, as a dry run assumes): A. */
    ck_assert_int_eq(of_set_primary(fn, NULL, &err), 0);
    ck_assert_uint_eq(fn->primary_config, 0);
    ck_assert_uint_eq(fn->primary_pods, 1);
}
END_TEST

START_TEST(equal_share_capacity)
{
    tetris_error err = {0};
    ck_assert_int_eq(of_set_primary(fn, NULL, &err), 0);
    /* Primary A (100): siblings of B (200) get no more than A's pod. */
    fn->replicas[1] = 3;
    ck_assert_double_eq_tol(of_capacity_rps(fn, &pol.plan), 400, 1e-9);
    fn->replicas[1] = 0;
    fn->primary_pods = 0;
    ck_assert_double_eq_tol(of_capacity_rps(fn, &pol.plan), 0, 1e-9);
    fn->replicas[1] = 2;
    ck_assert_double_eq_tol(of_capacity_rps(fn, &pol.plan), 400, 1e-9);
    ck_assert_uint_eq(of_set_replicas(7, 0), 5);
    ck_assert_uint_eq(of_set_replicas(7, 1), 2);
    ck_assert_uint_eq(of_set_replicas(7, 2), 0);
    ck_assert_uint_eq(of_set_replicas(10, 1), 5);
    ck_assert_uint_eq(of_set_replicas(0, 0), 0);
}
END_TEST

/* A function of the plain --function kind (its own Deployments per config)
 * under the refined plan mode, decided without an API server. */
static as_function *refined_function(as_policy *rp)
{
    as_function *f = plain_function();
    *rp =
        (as_policy){.plan = {.slo_ms = 50, .latency = PROFILE_STAT_P95, .mode = PLAN_MODE_REFINED},
                    .headroom_out = 0.1,
                    .headroom_in = 0.3,
                    .cooldown_s = 60,
                    .window_s = 60,
                    .min_instances = 1};
    return f;
}

START_TEST(refined_scale_out_keeps_equal_shares)
{
    as_policy rp;
    as_function *f = refined_function(&rp);
    tetris_error err = {0};
    unsigned want[2];
    const char *reason = NULL;
    /* One A (100 rps) runs; 250 rps with headroom is 275. Equal shares:
     * adding A gives 100 per instance (3 A, cost 200 more), adding B gives
     * min(100, 200) = 100 per instance too (cost 600): two more A. The
     * paper's residual plan would add capacity the A could not share. */
    f->replicas[0] = 1;
    ck_assert_int_eq(as_decide(f, &rp, 0, 250, want, &reason, &err), 0);
    ck_assert_str_eq(reason, "scale-out");
    ck_assert_uint_eq(want[0], 3);
    ck_assert_uint_eq(want[1], 0);
    /* One B (200) runs; 330 rps: 3 more A (cost 300, 4 x 100) or one more
     * B (cost 300, 2 x 200): the same cost, fewer instances. */
    f->replicas[0] = 0;
    f->replicas[1] = 1;
    f->last_change_s = 0;
    ck_assert_int_eq(as_decide(f, &rp, 1, 300, want, &reason, &err), 0);
    ck_assert_uint_eq(want[0], 0);
    ck_assert_uint_eq(want[1], 2);
    /* One B runs; 220 rps with headroom is 242: two more A are the
     * cheapest step (200, 3 x 100 = 300 for a set of 500: 1.67 per rps),
     * one more B costs 300 but gives 2 x 200 = 400 for 600 (1.5 per rps)
     * and keeps the shares at 200: one more B. */
    f->replicas[0] = 0;
    f->replicas[1] = 1;
    f->last_change_s = 0;
    ck_assert_int_eq(as_decide(f, &rp, 1, 220, want, &reason, &err), 0);
    ck_assert_str_eq(reason, "scale-out");
    ck_assert_uint_eq(want[0], 0);
    ck_assert_uint_eq(want[1], 2);
    /* What runs is n times its smallest capacity: 2 A + 1 B take 300. */
    f->replicas[0] = 2;
    ck_assert_double_eq_tol(as_capacity_rps(f, &rp.plan), 300, 1e-9);
    rp.plan.mode = PLAN_MODE_PAPER;
    ck_assert_double_eq_tol(as_capacity_rps(f, &rp.plan), 400, 1e-9);
    as_function_free(f);
}
END_TEST

START_TEST(refined_scale_in_counts_equal_shares)
{
    as_policy rp;
    as_function *f = refined_function(&rp);
    tetris_error err = {0};
    unsigned want[2];
    const char *reason = NULL;
    /* 2 A + 1 B take 3 x 100; the peak 100 needs 130 with the scale-in
     * headroom. B (least efficient) goes first: 2 x 100 = 200 still
     * covers it; one more A would leave 100. */
    f->replicas[0] = 2;
    f->replicas[1] = 1;
    ck_assert_int_eq(as_decide(f, &rp, 1000, 100, want, &reason, &err), 0);
    ck_assert_str_eq(reason, "scale-in");
    ck_assert_uint_eq(want[0], 2);
    ck_assert_uint_eq(want[1], 0);
    as_function_free(f);
}
END_TEST

START_TEST(prometheus_query_built_sent_parsed)
{
    tetris_error err = {0};
    rate_source src = {.query = RATE_DEFAULT_QUERY,
                       .job = RATE_DEFAULT_GATEWAY_JOB,
                       .instance = RATE_DEFAULT_GATEWAY_INSTANCE};
    cleanup_free char *q = rate_query_expand(&src, "fn", "openfaas-fn");
    ck_assert_str_eq(q, "sum(rate(gateway_function_invocation_total{job=~\"openfaas-pods|"
                        "openfaas-gateway\",instance=~\".+\",function_name=~"
                        "\"fn(\\\\.openfaas-fn)?\"}[1m]))");
    push(200, "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":"
              "[{\"metric\":{},\"value\":[1700000000.1,\"12.5\"]}]}}");
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", fault_server_port(fs));
    double rps = -1;
    src.url = url;
    ck_assert_msg(rate_prometheus(&src, "fn", "openfaas-fn", &rps, &err) == 0, "%s", err.msg);
    ck_assert_double_eq_tol(rps, 12.5, 1e-9);
    const fault_request *rq = fault_server_request(fs, 0);
    ck_assert_str_eq(rq->method, "GET");
    static const char prefix[] = "/api/v1/query?query=";
    ck_assert_int_eq(strncmp(rq->target, prefix, sizeof prefix - 1), 0);
    CURL *curl = curl_easy_init();
    char *sent = curl_easy_unescape(curl, rq->target + sizeof prefix - 1, 0, NULL);
    ck_assert_str_eq(sent, q);
    curl_free(sent);
    curl_easy_cleanup(curl);

    /* No invocations yet, NaN (no samples in the window): 0. */
    ck_assert_int_eq(rate_parse_vector("{\"status\":\"success\",\"data\":{\"resultType\":"
                                       "\"vector\",\"result\":[]}}",
                                       q, &rps, &err),
                     0);
    ck_assert_double_eq(rps, 0);
    rps = -1;
    ck_assert_int_eq(rate_parse_vector("{\"status\":\"success\",\"data\":{\"resultType\":"
                                       "\"vector\",\"result\":[{\"value\":[1,\"NaN\"]}]}}",
                                       q, &rps, &err),
                     0);
    ck_assert_double_eq(rps, 0);
    /* Prometheus's errors and other shapes fail with the reason. */
    ck_assert_int_eq(rate_parse_vector("{\"status\":\"error\",\"error\":\"parse error\"}", q, &rps,
                                       &err),
                     -TETRIS_E_PROTOCOL);
    ck_assert_ptr_nonnull(strstr(err.msg, "parse error"));
    ck_assert_int_eq(rate_parse_vector("{\"status\":\"success\",\"data\":{\"resultType\":"
                                       "\"matrix\",\"result\":[]}}",
                                       q, &rps, &err),
                     -TETRIS_E_PROTOCOL);
    ck_assert_int_eq(rate_parse_vector("not json", q, &rps, &err), -TETRIS_E_PROTOCOL);
    ck_assert_int_eq(rate_parse_vector("{\"status\":\"success\",\"data\":{\"resultType\":"
                                       "\"vector\",\"result\":[{\"value\":[1,\"x\"]}]}}",
                                       q, &rps, &err),
                     -TETRIS_E_PROTOCOL);
}
END_TEST

static const char usage_text[] =
    "usage: autoscaler-test\n"
    "\n"
    "Runs the autoscaler's OpenFaaS-function tests against a fault-injecting\n"
    "API server on loopback. Exit status: 0 all passed, 1 a test failed, 2 usage.\n";

int main(int argc, char **argv)
{
    int status = fault_test_args(argc, argv, "autoscaler-test", usage_text);
    if (status >= 0)
        return status;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Suite *s = suite_create("autoscaler-openfaas");
    TCase *tc = tcase_create("openfaas");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, siblings_from_template_in_sets_of_five);
    tcase_add_test(tc, scale_in_deletes_instead_of_zero);
    tcase_add_test(tc, restart_adopts_and_changes_nothing);
    tcase_add_test(tc, function_deleted_through_openfaas);
    tcase_add_test(tc, function_not_deployed_yet);
    tcase_add_test(tc, primary_config_not_in_profile);
    tcase_add_test(tc, equal_share_capacity);
    tcase_add_test(tc, prometheus_query_built_sent_parsed);
    suite_add_tcase(s, tc);
    TCase *policy = tcase_create("refined-policy");
    tcase_add_test(policy, refined_scale_out_keeps_equal_shares);
    tcase_add_test(policy, refined_scale_in_counts_equal_shares);
    suite_add_tcase(s, policy);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    curl_global_cleanup();
    return failed == 0 ? 0 : 1;
}
