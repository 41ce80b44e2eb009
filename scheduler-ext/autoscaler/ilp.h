/* ilp.h - the exact config choice: the integer program of the Tetris paper
 * (section 3.2, objective (1) and constraints (2)-(5)) solved with GLPK.
 *
 *   minimise   sum_i m_i x_i                         (1)
 *   subject to l_i <= SLO    for x_i >= 1, b_i = 1   (2)
 *              l_i <= SLO/2  for x_i >= 1, b_i > 1   (3)
 *              sum_i x_i b_i p_i / l_i >= R          (4)
 *              x_i in N                              (5)
 *
 * (2) and (3) fix x_i = 0 for configs that miss the SLO (and for those
 * outside a restricted config space, dts.h). The memory term m_i
 * is the one of dts.h (with alpha*c_i, and with sharing the private memory
 * plus the tensors once), so DTS and the optimum are compared on the same
 * objective. The problem is a knapsack cover and NP-hard: use it to measure
 * DTS and for small config spaces, always under a time limit. */
#ifndef TETRIS_ILP_H
#define TETRIS_ILP_H

#include "scheduler-ext/autoscaler/dts.h"

/* Solves for rate rps within time_limit_ms. On success out->optimal says
 * whether GLPK proved optimality (false: the best plan found in time).
 * -TETRIS_E_NOTFOUND when no config meets the SLO, -TETRIS_E_TIMEOUT when
 * the time ran out before any plan was found. */
int ilp_plan(const profile *p, double rps, const plan_options *o, int time_limit_ms, plan *out,
             tetris_error *err);

#endif
