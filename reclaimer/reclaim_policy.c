/* reclaim_policy.c - the reclaim pass's rule: keep-alive, then LRU above
 * the store's target (see reclaim_policy.h). */
#include "reclaimer/reclaim_policy.h"

#include <stdlib.h>

static int by_last_use(const void *a, const void *b)
{
    const struct cold_tensor *x = a, *y = b;
    if (x->last_use_s != y->last_use_s)
        return x->last_use_s < y->last_use_s ? -1 : 1;
    /* Equal times keep the callers' order: qsort is not stable. */
    return (x->slot > y->slot) - (x->slot < y->slot);
}

void reclaim_sort_cold(struct cold_tensor *cold, size_t n)
{
    qsort(cold, n, sizeof(*cold), by_last_use);
}

enum reclaim_verdict reclaim_judge(int64_t now_s, int64_t last_use_s, double keep_alive_s,
                                   bool bounded, uint64_t resident, uint64_t target)
{
    if ((double)(now_s - last_use_s) >= keep_alive_s)
        return RECLAIM_EXPIRED;
    if (bounded && resident > target)
        return RECLAIM_EVICT;
    return RECLAIM_KEEP;
}
