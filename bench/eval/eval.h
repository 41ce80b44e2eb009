/* eval.h - what tetris-eval's two modes share: the applications, policies
 * and trace generator (eval_common.c) that the testbed mode (tetris-eval.c)
 * and the scale mode (eval_scale.c) both use, and the scale mode's entry
 * point. */
#ifndef TETRIS_BENCH_EVAL_H
#define TETRIS_BENCH_EVAL_H

#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>

#include "scheduler-ext/autoscaler/autoscaler.h"
#include "scheduler-ext/autoscaler/dts.h"
#include "reclaimer/reclaim_policy.h"
#include "common/error.h"

#define MAX_FNS 3
#define N_APPS 4
#define N_TRACES 3
#define N_POLICIES 4
/* The node daemon's default --interval between reclaim passes. */
#define RECLAIM_INTERVAL_S 10

/* The paper's applications, built from the profiled models (stand-ins: the
 * paper's models are not available here; see docs/EVAL.md). A function runs
 * models[f] (its profile) or, where variants[f] is set, that fine-tuned
 * variant of it: the same computation, and tensors of which the profiles
 * directory's sharing.tsv says how many bytes are the base model's. */
typedef struct app_def {
    const char *name;
    const char *models[MAX_FNS];
    const char *variants[MAX_FNS];
    double slo_ms[MAX_FNS];
    double mean_rps;
    /* The paper's §5.3: Tetris's mean memory reduction vs INFless and
     * Photons under the stable trace, percent. */
    double paper_vs_infless, paper_vs_photons;
} app_def;

typedef struct policy_def {
    const char *name;
    bool sharing;
    enum plan_space space;
} policy_def;

extern const app_def apps[N_APPS];
extern const char *const traces[N_TRACES]; /* stable, periodic, bursty */
extern const policy_def policies[N_POLICIES];

/* splitmix64: the same sequence on every platform. */
uint64_t rng_next(uint64_t *s);
/* Uniform in [0, 1). */
double rng_unit(uint64_t *s);
/* Arrivals per second into arr[0..n) for a trace kind (traces[]) of the
 * given mean rate, seeded. */
void make_trace(const char *kind, double mean, unsigned n, uint64_t seed, double *arr);

/* The row of DIR/sharing.tsv (as scripts/models/paper-models.sh writes it:
 * VARIANT BASE SHARED_BYTES TENSOR_BYTES, tab-separated) for a variant of
 * base: the bytes it shares with base and all its tensor bytes. Errors: the
 * file cannot be read, a malformed line (named), no line for the variant. */
int eval_variant_sharing(const char *dir, const char *variant, const char *base, uint64_t *shared,
                         uint64_t *total, tetris_error *err);

/* A node daemon's reclaim pass over an unbounded store, by its own rule
 * (reclaim_policy.h): sorts cold, oldest use first, and returns how many
 * from its front are freed at now_s, unused for the keep-alive. */
size_t eval_reclaimable(struct cold_tensor *cold, size_t n, int64_t now_s, double keep_alive_s);

/* The order in which the ReplicaSet controller (Kubernetes 1.20) deletes
 * equally ready pods of one Deployment: of its n instances, node[j] where
 * the j-th oldest runs, writes their indices to order, the first to go
 * first: ranked once, before any goes, by the Deployment's instances on
 * the same node, the most first, then the newest. Errors: out of memory. */
int eval_scale_in_order(const unsigned *node, size_t n, size_t *order, tetris_error *err);

/* The autoscaler's policy (tetris-autoscaler's defaults) for a function of
 * the given SLO under an evaluated policy. */
as_policy eval_policy(const policy_def *pol, double slo_ms, enum plan_mode mode, double headroom);

/* ---- the scale mode (eval_scale.c) ---- */

typedef struct scale_options {
    const char *profiles;
    const char *out; /* NULL: tables on stdout only */
    unsigned duration_s, interval_s;
    uint64_t seed;
    double scale, headroom;
    double keep_alive_s; /* the node daemons' --keep-alive */
    enum plan_mode mode;
    const bool *app_on;   /* N_APPS: draw functions from these applications */
    const bool *trace_on; /* N_TRACES: and these trace kinds */
    unsigned nodes, functions;
    /* Fine-tuned variants' bases per model: a function drawn from an
     * application's variant is a variant of one of them; 0: every function
     * is its own model. */
    unsigned bases;
    unsigned gap_samples; /* DTS decisions per policy re-solved by GLPK */
} scale_options;

/* DIR/NAME opened for writing (NULL and err set on failure), and closed
 * with its write errors reported: the --out files of both modes. */
FILE *eval_open_out(const char *dir, const char *name, tetris_error *err);
int eval_close_out(FILE *f, tetris_error *err);

/* Simulates every policy on a cluster of o->nodes nodes running
 * o->functions functions and prints memory, SLO violations and the cost of
 * each decision, then DTS against the optimum on a sample of the
 * decisions. Errors: a profile that cannot be read or planned, output. */
int eval_scale_run(const scale_options *o, tetris_error *err);

#endif
