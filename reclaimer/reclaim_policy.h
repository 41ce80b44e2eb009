/* reclaim_policy.h - which cold tensors a reclaim pass frees: the node
 * daemon's rule (keep-alive, then least recently used above the store's
 * target), apart from the store so that the cluster evaluation
 * (bench/eval) applies the very rule the daemon does.
 *
 * Usage, once per pass over the tensors no live holder references:
 *
 *     reclaim_sort_cold(cold, n);
 *     for (size_t i = 0; i < n; i++) {
 *         enum reclaim_verdict v = reclaim_judge(now_s, cold[i].last_use_s,
 *                                                keep_alive_s, bounded,
 *                                                resident, target);
 *         if (v == RECLAIM_KEEP)
 *             break;            // the rest are younger, the store under target
 *         free cold[i].slot;    // and lower resident by its bytes
 *     }
 *
 * Tested by tests/reclaimer/test_reclaimer_units.c (the rule) and
 * tests/reclaimer/test-reclaim.sh (the daemon applying it). */
#ifndef TETRIS_RECLAIM_POLICY_H
#define TETRIS_RECLAIM_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A tensor no live holder references: when it was last used (referenced,
 * or published if never), and the caller's handle on it. */
struct cold_tensor {
    int64_t last_use_s;
    size_t slot;
};

enum reclaim_verdict {
    RECLAIM_KEEP,    /* young enough, and the store within its target */
    RECLAIM_EXPIRED, /* unused for the keep-alive: reclaimed */
    RECLAIM_EVICT,   /* younger, but the store is over its target: evicted */
};

/* Sorts cold tensors by last use, the oldest first (the order a pass frees
 * them in). */
void reclaim_sort_cold(struct cold_tensor *cold, size_t n);

/* The verdict on the oldest cold tensor not yet judged, last used at
 * last_use_s, at now_s, with resident bytes in the store. A store is
 * bounded when it has a capacity; target is the bytes it may keep. */
enum reclaim_verdict reclaim_judge(int64_t now_s, int64_t last_use_s, double keep_alive_s,
                                   bool bounded, uint64_t resident, uint64_t target);

#endif
