/* autoscaler_capacity.c - the capacity rules every part of the autoscaler
 * shares: a config's key (its name in Deployments and OpenFaaS siblings)
 * and what a set of instances can take. Below the policy, the OpenFaaS
 * sets and the actuators, which all use them and none of which this file
 * calls. */
#include "scheduler-ext/autoscaler/autoscaler.h"

#include <math.h>
#include <stdio.h>

void as_config_key(const profile_config *cfg, char *buf, size_t len)
{
    snprintf(buf, len, "c%ld-m%ld-b%d-p%d", lround(cfg->c * 1000.0), lround(ceil(cfg->m_mib)),
             cfg->b, cfg->p);
}

/* What COUNT[i] instances of each config take. In the paper's mode the
 * sum of their capacities; in the refined mode every instance gets an
 * equal share of the rate (a Service's kube-proxy, OpenFaaS CE's
 * gateway), so n instances take n times the smallest capacity among them. */
double as_pods_capacity(const profile *p, const unsigned *count, size_t extra_config,
                        unsigned extra_pods, bool equal_shares, const plan_options *o)
{
    unsigned n = extra_pods;
    double sum = 0, least = INFINITY;
    if (extra_pods > 0) {
        least = plan_config_capacity(&p->configs[extra_config], o);
        sum = extra_pods * least;
    }
    for (size_t i = 0; i < p->n_configs; i++)
        if (count[i] > 0) {
            double cap = plan_config_capacity(&p->configs[i], o);
            n += count[i];
            sum += count[i] * cap;
            least = fmin(least, cap);
        }
    if (n == 0)
        return 0;
    return equal_shares ? n * least : sum;
}
