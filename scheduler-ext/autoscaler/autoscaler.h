/* autoscaler.h - the parts of tetris-autoscaler: per-function state, the
 * scaling policy, where request rates come from and how decisions are acted
 * on. Internal to the program (autoscaler*.c). */
#ifndef TETRIS_AUTOSCALER_H
#define TETRIS_AUTOSCALER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "scheduler-ext/autoscaler/dts.h"
#include "common/error.h"
#include "protocol/profile.h"

/* ---- request rates (autoscaler_rate.c) ---- */

/* A local-mode trace: lines of `time_s rps`, '#' comments, times ascending. */
typedef struct rate_trace {
    double *time_s, *rps;
    size_t n;
} rate_trace;

int rate_trace_load(const char *path, rate_trace **out, tetris_error *err);
/* The rate of the last line at or before time_s (0 before the first). */
double rate_trace_at(const rate_trace *t, double time_s);
double rate_trace_end(const rate_trace *t);
void rate_trace_free(rate_trace *t);

/* Where a function's rate comes from in a cluster: Prometheus at url,
 * query with "{function}", "{namespace}", "{job}" and "{instance}"
 * replaced. Only the OpenFaaS gateway's series count: any pod can be a
 * scrape target and export a counter of the same name, so the query
 * selects the gateway's scrape job and instances (regular expressions, as
 * Prometheus sets job and instance from its own configuration, whatever a
 * target exports). */
typedef struct rate_source {
    const char *url;
    const char *query;
    const char *job;      /* RATE_DEFAULT_GATEWAY_JOB */
    const char *instance; /* RATE_DEFAULT_GATEWAY_INSTANCE */
} rate_source;

/* Asks Prometheus's HTTP API (GET url/api/v1/query) for the instant value
 * of the expanded query. An empty result is 0 rps (no invocations yet). */
int rate_prometheus(const rate_source *src, const char *function, const char *namespace_,
                    double *rps, tetris_error *err);
/* The query with its tokens replaced; NULL when out of memory. */
char *rate_query_expand(const rate_source *src, const char *function, const char *namespace_);
/* 0 if value can stand inside a PromQL string (no '"', no line break),
 * else TETRIS_E_INVAL naming option. */
int rate_check_matcher(const char *option, const char *value, tetris_error *err);
/* The answer of GET /api/v1/query: an instant vector's first sample (an
 * empty vector or NaN is 0). */
int rate_parse_vector(const char *body, const char *query, double *rps, tetris_error *err);

/* The gateway counts invocations of NAME as "NAME.NS" when it knows the
 * function namespace (the chart sets it), else as "NAME": match both. Its
 * series are those of the scrape job of the OpenFaaS chart's Prometheus
 * (openfaas-pods: the pods of the openfaas namespace, not functions') or a
 * job named openfaas-gateway (a static target, as the local cluster's). */
#define RATE_DEFAULT_QUERY                                                                         \
    "sum(rate(gateway_function_invocation_total{job=~\"{job}\",instance=~\"{instance}\","          \
    "function_name=~\"{function}(\\\\.{namespace})?\"}[1m]))"
#define RATE_DEFAULT_GATEWAY_JOB "openfaas-pods|openfaas-gateway"
#define RATE_DEFAULT_GATEWAY_INSTANCE ".+"

/* ---- state and policy (autoscaler_policy.c) ---- */

typedef struct as_policy {
    plan_options plan;
    double headroom_out;    /* scale out when rate*(1+headroom_out) > capacity */
    double headroom_in;     /* release only while capacity stays >= peak*(1+headroom_in) */
    double cooldown_s;      /* no scale-in this soon after any change */
    double window_s;        /* peak = highest rate seen in this window */
    unsigned min_instances; /* never fewer instances than this */
    unsigned max_instances; /* never more instances than this (0: no cap) */
} as_policy;

/* How far a measured rate may run ahead of the instances: see
 * as_rate_ceiling. */
#define AS_RATE_JUMP 2.0
#define AS_DEFAULT_MAX_INSTANCES 50

typedef struct as_function {
    char *name;
    profile *prof;
    rate_trace *trace;     /* local mode, else NULL */
    unsigned *replicas;    /* per profile config: the current instance count */
    bool *exists;          /* per profile config: its Deployment exists */
    double last_change_s;  /* time of the last scaling action, -inf if none */
    double *seen_t, *seen_rps; /* rates within the window, oldest first */
    size_t n_seen, cap_seen;
    /* An OpenFaaS function (autoscaler_openfaas.c): faas-netes's Deployment
     * is the template, and replicas[i] counts the pods of config i's
     * sibling Deployments, of which set i*AS_MAX_SETS+s has sets[] pods
     * (-1: absent). */
    bool openfaas;
    json_t *primary;       /* faas-netes's Deployment; NULL in a dry run */
    unsigned primary_pods; /* its replicas: they take an equal share too */
    size_t primary_config; /* the profile config its pods run as */
    int *sets;
} as_function;

/* OpenFaaS CE sets any Deployment whose pods carry faas_function to 1..5
 * replicas: a config's instances are split over Deployments of at most
 * AS_SET_REPLICAS, filled in order; at most AS_MAX_SETS of them. */
#define AS_SET_REPLICAS 5
#define AS_MAX_SETS 32

int as_function_new(const char *name, profile *prof, as_function **out, tetris_error *err);
/* Makes fn an OpenFaaS function (its sibling sets start absent). */
int as_function_set_openfaas(as_function *fn, tetris_error *err);
void as_function_free(as_function *fn);

double as_capacity_rps(const as_function *fn, const plan_options *o);
double as_memory_mib(const as_function *fn, const plan_options *o);
unsigned as_instances(const as_function *fn);

/* The highest rate a function's instances can have been asked for:
 * AS_RATE_JUMP times what they serve (as_capacity_rps), and at least
 * AS_RATE_JUMP times one instance of its largest eligible config (so that
 * a function with no or few instances can start). The gateway counts the
 * requests its instances were sent; a rise beyond their capacity shows up
 * as queueing and errors, not as an unbounded count, so a rate above the
 * ceiling is a series that lies (or a surge, which the autoscaler then
 * follows by at most AS_RATE_JUMP per interval). */
double as_rate_ceiling(const as_function *fn, const plan_options *o);

/* Decides the instance counts for rate rps at time now_s into want[] (one
 * per config) and names the reason ("scale-out", "scale-in", "minimum" or
 * NULL when nothing changes). Errors come from DTS (-TETRIS_E_NOTFOUND:
 * no config meets the SLO). */
int as_decide(as_function *fn, const as_policy *pol, double now_s, double rps, unsigned *want,
              const char **reason, tetris_error *err);

/* ---- acting (autoscaler_deploy.c, autoscaler_kube.c) ---- */

/* The managed-by label of the autoscaler's Deployments: a restart adopts
 * only those. */
#define AS_MANAGED_BY "tetris-autoscaler"

typedef struct as_deploy_options {
    const char *namespace_;
    const char *image;
    const char *pull_policy;
    const char *store_dir;      /* host path of the tensor store, mounted read-only */
    const char *scheduler_name;
    const char *model_dir;      /* where TETRIS_MODEL points inside the container */
    int port;
    plan_options plan;          /* memory term (private with sharing) and latency */
} as_deploy_options;

/* "c1000-m110-b1-p1": CPUs in millicores, m_mib, b, p. */
void as_config_key(const profile_config *cfg, char *buf, size_t len);
/* "<function>-<config key>" */
void as_deployment_name(const as_function *fn, size_t config, char *buf, size_t len);
/* The apps/v1 Deployment for one function and config (new reference). Its
 * pods carry the function's model (the profile's model) as
 * TETRIS_LABEL_MODEL, so the extender and tetris-node-pins find its
 * manifest (protocol/names.h). */
json_t *as_deployment_manifest(const as_function *fn, size_t config, unsigned replicas,
                               const as_deploy_options *o);

/* One change of one Deployment's replicas, as decided at time_s. */
typedef struct as_change {
    double time_s;
    double rps;
    const char *reason;
    size_t config;
    unsigned from, to;
} as_change;

typedef struct as_actuator as_actuator;
struct as_actuator {
    /* Reads the replicas of the function's existing Deployments. */
    int (*adopt)(as_actuator *a, as_function *fn, tetris_error *err);
    /* Creates the Deployment or sets its replicas (scale subresource); for
     * an OpenFaaS function, creates, scales and deletes its sibling sets. */
    int (*apply)(as_actuator *a, as_function *fn, const as_change *ch, tetris_error *err);
    /* OpenFaaS functions, before each decision: re-reads the primary
     * Deployment (-TETRIS_E_NOTFOUND: the function is gone). */
    int (*refresh)(as_actuator *a, as_function *fn, tetris_error *err);
    void (*destroy)(as_actuator *a);
    as_deploy_options deploy;
};

/* A profile from a file, or from a ConfigMap's TETRIS_PROFILE_CONFIGMAP_KEY
 * when source is "configmap:NS/NAME" (through kubeconfig, or in-cluster if
 * NULL). */
int as_profile_load(const char *source, const char *kubeconfig, profile **out,
                    tetris_error *err);

/* Prints each action as a JSON line on stdout instead of doing it. */
int as_actuator_dry_run(const as_deploy_options *o, as_actuator **out, tetris_error *err);
/* Acts through the Kubernetes API (kubeconfig path, or in-cluster if NULL). */
int as_actuator_kube(const as_deploy_options *o, const char *kubeconfig, as_actuator **out,
                     tetris_error *err);

/* ---- OpenFaaS functions (autoscaler_openfaas.c) ----
 *
 * The gateway sends each request to a uniformly random ready pod of the
 * function's Service, so every pod, faas-netes's and the siblings', gets an
 * equal share. The plan keeps one sibling config per function at a time and
 * counts the function's capacity as pods * the smallest per-pod capacity. */

/* Takes deployment (faas-netes's, a new reference is kept; NULL in a dry
 * run: one pod, TETRIS_BATCH and TETRIS_CONCURRENCY unset) as fn's primary
 * and finds the profile config its pods run as: their TETRIS_BATCH and
 * TETRIS_CONCURRENCY (tetris-function's default 1), and among configs with
 * those, the most CPUs within the container's CPU limit (the fewest without
 * one). -TETRIS_E_FORMAT when the profile has no such config. */
int of_set_primary(as_function *fn, json_t *deployment, tetris_error *err);
/* The equal-share decision for an OpenFaaS function (as_decide's, given
 * the peak rate of the window). */
int of_decide(as_function *fn, const as_policy *pol, double now_s, double rps, double peak,
              unsigned *want, const char **reason, tetris_error *err);
double of_capacity_rps(const as_function *fn, const plan_options *o);
/* The capacity of count[i] instances of each config of p and extra_pods
 * more of config extra_config: with equal shares (every instance given the
 * same rate, as CE's routing does) the instances times the smallest
 * capacity among them, else the sum of their capacities. */
double as_pods_capacity(const profile *p, const unsigned *count, size_t extra_config,
                        unsigned extra_pods, bool equal_shares, const plan_options *o);
/* Replicas of set s of a config with total instances (filled in order). */
unsigned of_set_replicas(unsigned total, size_t set);
/* "<function>-<config key>-<set>" */
void of_sibling_name(const as_function *fn, size_t config, size_t set, char *buf, size_t len);
/* The sibling Deployment for set s of config i (new reference; NULL when
 * fn has no primary or out of memory): the primary's pod template with
 * faas_function, the config and set labels on the pods, the config's
 * TETRIS_BATCH, TETRIS_CONCURRENCY and TETRIS_THREADS and resources, and an
 * ownerReference to the primary. */
json_t *of_sibling_manifest(const as_function *fn, size_t config, size_t set, unsigned replicas,
                            const as_deploy_options *o);
/* Records the sibling Deployment item (from a list) in fn->sets; false when
 * it is not one of fn's configs. */
bool of_adopt_sibling(as_function *fn, const json_t *item);

#endif
