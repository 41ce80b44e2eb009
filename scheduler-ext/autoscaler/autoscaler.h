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

/* Asks Prometheus's HTTP API (GET base_url/api/v1/query) for the instant
 * value of query_template with every "{function}" replaced by function.
 * An empty result is 0 rps (no invocations yet). */
int rate_prometheus(const char *base_url, const char *query_template, const char *function,
                    double *rps, tetris_error *err);

#define RATE_DEFAULT_QUERY \
    "sum(rate(gateway_function_invocation_total{function_name=\"{function}\"}[1m]))"

/* ---- state and policy (autoscaler_policy.c) ---- */

typedef struct as_policy {
    plan_options plan;
    double headroom_out;    /* scale out when rate*(1+headroom_out) > capacity */
    double headroom_in;     /* release only while capacity stays >= peak*(1+headroom_in) */
    double cooldown_s;      /* no scale-in this soon after any change */
    double window_s;        /* peak = highest rate seen in this window */
    unsigned min_instances; /* never fewer instances than this */
} as_policy;

typedef struct as_function {
    char *name;
    profile *prof;
    rate_trace *trace;     /* local mode, else NULL */
    unsigned *replicas;    /* per profile config: the current instance count */
    bool *exists;          /* per profile config: its Deployment exists */
    double last_change_s;  /* time of the last scaling action, -inf if none */
    double *seen_t, *seen_rps; /* rates within the window, oldest first */
    size_t n_seen, cap_seen;
} as_function;

int as_function_new(const char *name, profile *prof, as_function **out, tetris_error *err);
void as_function_free(as_function *fn);

double as_capacity_rps(const as_function *fn, const plan_options *o);
double as_memory_mib(const as_function *fn, const plan_options *o);
unsigned as_instances(const as_function *fn);

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
    /* Creates the Deployment or sets its replicas (scale subresource). */
    int (*apply)(as_actuator *a, as_function *fn, const as_change *ch, tetris_error *err);
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

#endif
