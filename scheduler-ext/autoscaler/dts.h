/* dts.h - choosing instance configs for a request rate: the planning model
 * shared by DTS (Decreased Throughput Selection, Algorithm 1 of the Tetris
 * paper) and the exact integer program (ilp.h).
 *
 * An instance with config i serves up to b_i*p_i/l_i requests per second
 * (l_i in seconds). It meets the latency SLO when l_i <= SLO for b_i = 1 and
 * l_i <= SLO/2 for b_i > 1 (a batch waits up to one more latency to fill).
 * Its memory term is m_i (+ alpha*c_i to balance CPU).
 *
 * With tensor sharing the memory term is the marginal memory: the instance
 * maps the model's tensors from the node's store, so it needs only its
 * private memory, and the tensors themselves (the model's shared bytes) are
 * paid once, by the first instance, unless they are already resident. */
#ifndef TETRIS_DTS_H
#define TETRIS_DTS_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "protocol/profile.h"

/* Which configs may be chosen: all, or the baselines' restricted spaces. */
enum plan_space {
    PLAN_SPACE_ALL = 0,
    PLAN_SPACE_BATCHING,    /* p = 1: batching only (INFless-like) */
    PLAN_SPACE_CONCURRENCY, /* b = 1: concurrency only (Photons-like) */
};

/* How configs are chosen and what an instance can take. */
enum plan_mode {
    /* The paper: Algorithm 1, capacity b*p/l, any mix of configs. */
    PLAN_MODE_PAPER = 0,
    /* Capacity is the profile's measured saturation throughput where it has
     * one (b*p/l only where not), and routing gives every instance of a
     * function an equal share of its rate (OpenFaaS CE): a plan of n
     * instances is feasible only if each used config takes rps/n. Under
     * that rule mixing configs never pays (all instances can be the
     * cheapest of those used), so the best plan is n of one config, and
     * dts_plan finds it exactly: for each config's smallest sufficient n,
     * the cheapest config that takes rps/n. This also fills the last
     * residual with the cheapest config that covers it, which Algorithm 1
     * does not. */
    PLAN_MODE_REFINED,
};

typedef struct plan_options {
    double slo_ms;
    double alpha;                 /* MiB per CPU in the memory term; 0 = memory only */
    enum profile_stat latency;    /* which latency statistic is l */
    bool sharing;                 /* memory term = marginal memory (needs private_bytes) */
    bool resident;                /* with sharing: tensors already resident, none pays them */
    enum plan_space space;
    enum plan_mode mode;
} plan_options;

typedef struct plan_entry {
    size_t config; /* index into the profile's configs */
    unsigned count;
} plan_entry;

/* Entries in the order their configs were first chosen. */
typedef struct plan {
    plan_entry *entries;
    size_t n_entries;
    unsigned instances;
    double memory_mib;  /* total memory term: instances (+ shared tensors once) */
    double shared_mib;  /* the tensors' share of memory_mib (sharing only) */
    double cpus;
    double covered_rps; /* sum of the chosen instances' capacity */
    bool optimal;       /* exact solver proved optimality */
} plan;

/* ---- the planning model ---- */

/* b*p/l in requests per second. */
double plan_capacity_rps(const profile_config *cfg, enum profile_stat latency);
/* What one instance takes in the mode: b*p/l, or in PLAN_MODE_REFINED the
 * measured throughput_rps when the profile has it. */
double plan_config_capacity(const profile_config *cfg, const plan_options *o);
/* Whether every used config takes an equal share rps/instances. */
bool plan_equal_share_ok(const plan *pl, const profile *p, double rps, const plan_options *o);
/* Parses "paper" or "refined". */
int plan_mode_parse(const char *s, enum plan_mode *out, tetris_error *err);
const char *plan_mode_name(enum plan_mode mode);
/* The SLO rule of constraints (2) and (3). */
bool plan_meets_slo(const profile_config *cfg, const plan_options *o);
/* In the config space and meeting the SLO: may be chosen. */
bool plan_eligible(const profile_config *cfg, const plan_options *o);
/* Parses "all", "batching" or "concurrency". */
int plan_space_parse(const char *s, enum plan_space *out, tetris_error *err);
const char *plan_space_name(enum plan_space space);
/* The instance's own memory, MiB: m_mib, or private memory with sharing. */
double plan_instance_mib(const profile_config *cfg, const plan_options *o);
/* The model's tensors, MiB (largest shared_bytes over its configs). */
double plan_shared_mib(const profile *p);
/* Checks that options and profile fit together (sharing needs every config's
 * private_bytes); -TETRIS_E_INVAL with the reason when not. */
int plan_check(const profile *p, const plan_options *o, tetris_error *err);
/* -TETRIS_E_NOTFOUND naming the fastest configs, for when none is eligible. */
int plan_fail_infeasible(const profile *p, const plan_options *o, tetris_error *err);
/* Fills instances, memory, cpus and covered rate (plan_config_capacity)
 * from the entries. */
void plan_total(plan *pl, const profile *p, const plan_options *o);

void plan_clear(plan *pl);

/* ---- DTS ---- */

/* Algorithm 1: configs in descending order of b*p/(l*(m + alpha*c)); take the
 * first one that meets the SLO, subtract its capacity from the residual rate,
 * repeat while the residual is positive. With sharing the order is by
 * marginal memory, so it is recomputed once the tensors have been paid for.
 * rps <= 0 gives an empty plan. -TETRIS_E_NOTFOUND when no config meets the
 * SLO. In PLAN_MODE_REFINED, the exact equal-share plan instead (see
 * enum plan_mode): O(configs log configs). */
int dts_plan(const profile *p, double rps, const plan_options *o, plan *out,
             tetris_error *err);

#endif
