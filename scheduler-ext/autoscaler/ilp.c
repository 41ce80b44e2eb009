/* ilp.c - the paper's integer program for the config choice, with GLPK's
 * branch-and-cut (see ilp.h). */
#include "scheduler-ext/autoscaler/ilp.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glpk.h>

#include "common/cleanup.h"

/* Same tolerance as DTS: constraint (4) is met up to rounding. */
#define RESIDUAL_EPS_RPS 1e-9

/* PLAN_MODE_REFINED's equal shares: an integer column n = sum_j x_j (the
 * instances) and a binary y_i per eligible config with x_i <= U y_i and
 * cap_i n >= rps y_i: a used config takes rps / n. */
static int add_equal_share(glp_prob *lp, const profile *p, double rps, const plan_options *o,
                           tetris_error *err)
{
    size_t n = p->n_configs;
    double most = 0; /* instances: never more than the slowest config needs */
    for (size_t i = 0; i < n; i++)
        if (plan_eligible(&p->configs[i], o))
            most = fmax(most, ceil(rps / plan_config_capacity(&p->configs[i], o)));
    cleanup_free int *ind = calloc(n + 2, sizeof *ind);
    cleanup_free double *val = calloc(n + 2, sizeof *val);
    if (ind == NULL || val == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "ilp: %zu columns", n);
    int total = glp_add_cols(lp, 1);
    glp_set_col_kind(lp, total, GLP_IV);
    glp_set_col_bnds(lp, total, GLP_DB, 0.0, most);
    int row = glp_add_rows(lp, 1); /* sum_j x_j - n = 0 */
    glp_set_row_bnds(lp, row, GLP_FX, 0.0, 0.0);
    for (size_t j = 0; j < n; j++)
        ind[j + 1] = (int)j + 1, val[j + 1] = 1.0;
    ind[n + 1] = total, val[n + 1] = -1.0;
    glp_set_mat_row(lp, row, (int)n + 1, ind, val);
    for (size_t i = 0; i < n; i++) {
        if (!plan_eligible(&p->configs[i], o))
            continue;
        int x = (int)i + 1, y = glp_add_cols(lp, 1);
        glp_set_col_kind(lp, y, GLP_BV);
        row = glp_add_rows(lp, 2);
        /* x_i - U y_i <= 0 */
        glp_set_row_bnds(lp, row, GLP_UP, 0.0, 0.0);
        ind[1] = x, val[1] = 1.0, ind[2] = y, val[2] = -most;
        glp_set_mat_row(lp, row, 2, ind, val);
        /* cap_i n - rps y_i >= 0 */
        glp_set_row_bnds(lp, row + 1, GLP_LO, -RESIDUAL_EPS_RPS, 0.0);
        ind[1] = total, val[1] = plan_config_capacity(&p->configs[i], o);
        ind[2] = y, val[2] = -rps;
        glp_set_mat_row(lp, row + 1, 2, ind, val);
    }
    return 0;
}

/* Builds the problem: one row (4), one integer column per config (and in
 * PLAN_MODE_REFINED the equal-share rows). */
static int build(glp_prob *lp, const profile *p, double rps, const plan_options *o,
                 size_t *feasible, tetris_error *err)
{
    size_t n = p->n_configs;
    cleanup_free int *ind = calloc(n + 1, sizeof *ind);
    cleanup_free double *val = calloc(n + 1, sizeof *val);
    if (ind == NULL || val == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "ilp: %zu columns", n);

    glp_set_prob_name(lp, "tetris-config-choice");
    glp_set_obj_dir(lp, GLP_MIN);
    if (o->sharing && !o->resident)
        glp_set_obj_coef(lp, 0, plan_shared_mib(p)); /* the tensors, paid once */
    glp_add_rows(lp, 1);
    glp_set_row_name(lp, 1, "rate");
    glp_set_row_bnds(lp, 1, GLP_LO, rps - RESIDUAL_EPS_RPS, 0.0);
    glp_add_cols(lp, (int)n);
    *feasible = 0;
    for (size_t i = 0; i < n; i++) {
        const profile_config *cfg = &p->configs[i];
        int col = (int)i + 1;
        double capacity = plan_config_capacity(cfg, o);
        glp_set_col_kind(lp, col, GLP_IV);
        glp_set_obj_coef(lp, col, plan_instance_mib(cfg, o) + o->alpha * cfg->c);
        if (plan_eligible(cfg, o)) {
            /* More than ceil(R / capacity) of one config never helps. */
            glp_set_col_bnds(lp, col, GLP_DB, 0.0, ceil(rps / capacity));
            (*feasible)++;
        } else {
            glp_set_col_bnds(lp, col, GLP_FX, 0.0, 0.0);
        }
        ind[col] = col;
        val[col] = capacity;
    }
    glp_set_mat_row(lp, 1, (int)n, ind, val);
    return o->mode == PLAN_MODE_REFINED ? add_equal_share(lp, p, rps, o, err) : 0;
}

static int read_solution(glp_prob *lp, const profile *p, plan *out, tetris_error *err)
{
    size_t used = 0;
    for (size_t i = 0; i < p->n_configs; i++)
        if (lround(glp_mip_col_val(lp, (int)i + 1)) > 0)
            used++;
    out->entries = calloc(used ? used : 1, sizeof *out->entries);
    if (out->entries == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "plan entries");
    for (size_t i = 0; i < p->n_configs; i++) {
        long x = lround(glp_mip_col_val(lp, (int)i + 1));
        if (x > 0)
            out->entries[out->n_entries++] = (plan_entry){.config = i, .count = (unsigned)x};
    }
    return 0;
}

int ilp_plan(const profile *p, double rps, const plan_options *o, int time_limit_ms, plan *out,
             tetris_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = plan_check(p, o, err);
    if (rc < 0)
        return rc;
    if (!isfinite(rps))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "request rate must be finite");
    if (time_limit_ms <= 0)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "ilp: time limit must be positive");
    if (rps <= RESIDUAL_EPS_RPS) {
        out->optimal = true;
        return 0;
    }

    glp_term_out(GLP_OFF);
    glp_prob *lp = glp_create_prob();
    size_t feasible = 0;
    rc = build(lp, p, rps, o, &feasible, err);
    if (rc == 0 && feasible == 0)
        rc = plan_fail_infeasible(p, o, err);
    if (rc < 0) {
        glp_delete_prob(lp);
        return rc;
    }

    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_ON;
    parm.tm_lim = time_limit_ms;
    int ret = glp_intopt(lp, &parm);
    int status = glp_mip_status(lp);
    if (status == GLP_OPT || status == GLP_FEAS) {
        rc = read_solution(lp, p, out, err);
        out->optimal = status == GLP_OPT && ret == 0;
    } else if (ret == GLP_ETMLIM) {
        rc = tetris_fail(err, TETRIS_E_TIMEOUT, 0,
                         "ilp: no plan found within %d ms (%zu configs, %g rps)", time_limit_ms,
                         p->n_configs, rps);
    } else {
        rc = tetris_fail(err, TETRIS_E_RUNTIME, 0,
                         "ilp: GLPK failed (glp_intopt %d, status %d) for %g rps", ret, status,
                         rps);
    }
    glp_delete_prob(lp);
    if (rc < 0) {
        plan_clear(out);
        return rc;
    }
    plan_total(out, p, o);
    return 0;
}
