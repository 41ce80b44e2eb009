/* similarity.c - θ, the fit check and the 0..10 score (see similarity.h). */
#include "scheduler-ext/extender/similarity.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static uint64_t present_bytes(const model_need *m, const node_inventory *inv)
{
    uint64_t present = 0;
    if (inv->ids == NULL)
        return 0;
    for (size_t i = 0; i < m->n; i++)
        if (id_set_contains(inv->ids, m->ids[i]))
            present += m->bytes[i];
    return present;
}

/* Held inside 1..9 while some bytes are present and some missing:
 * rounding must never score a node that has to pull (be it 2% of the
 * model) like one that pulls nothing, nor one that holds a little like
 * one that holds nothing. */
int similarity_score(uint64_t present, uint64_t missing)
{
    if (present == 0)
        return 0;
    if (missing == 0)
        return SIMILARITY_MAX_SCORE;
    long s = lround((double)present / (double)(present + missing) * SIMILARITY_MAX_SCORE);
    return s < 1 ? 1 : s > SIMILARITY_MAX_SCORE - 1 ? SIMILARITY_MAX_SCORE - 1 : (int)s;
}

void similarity_eval(const model_need *m, const node_inventory *inv, node_fit *out)
{
    node_inventory *memo = (node_inventory *)inv; /* only the memo changes */
    pthread_mutex_lock(&memo->memo_lock);
    bool hit = m->version != 0 && m->slot < memo->n_memo &&
               memo->memo[m->slot].version == m->version;
    uint64_t present = hit ? memo->memo[m->slot].present : 0;
    pthread_mutex_unlock(&memo->memo_lock);
    if (!hit) {
        present = present_bytes(m, inv);
        pthread_mutex_lock(&memo->memo_lock);
        if (m->slot >= memo->n_memo) {
            /* Out of memory only costs the memo: the next decision
             * computes again. */
            similarity_memo *grown = realloc(memo->memo, (m->slot + 1) * sizeof *grown);
            if (grown != NULL) {
                memset(grown + memo->n_memo, 0, (m->slot + 1 - memo->n_memo) * sizeof *grown);
                memo->memo = grown;
                memo->n_memo = m->slot + 1;
            }
        }
        if (m->slot < memo->n_memo)
            memo->memo[m->slot] = (similarity_memo){m->version, present};
        pthread_mutex_unlock(&memo->memo_lock);
    }
    out->present_bytes = present;
    out->missing_bytes = m->total_bytes - present;
    out->theta = m->total_bytes > 0 ? (double)present / (double)m->total_bytes : 0.0;
    out->score = similarity_score(present, out->missing_bytes);
    uint64_t evictable = inv->evictable_bytes > present ? inv->evictable_bytes - present : 0;
    uint64_t room = inv->capacity_bytes + evictable; /* both below 2^63 (JSON integers) */
    uint64_t free_bytes = room > inv->resident_bytes ? room - inv->resident_bytes : 0;
    out->fits = inv->capacity_bytes == 0 || free_bytes >= out->missing_bytes;
}

uint64_t model_need_version(void)
{
    static atomic_uint_least64_t next = 1;
    return atomic_fetch_add(&next, 1);
}

node_inventory *node_inventory_new(void)
{
    node_inventory *inv = calloc(1, sizeof *inv);
    if (inv != NULL)
        pthread_mutex_init(&inv->memo_lock, NULL);
    return inv;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

size_t similarity_sort_ids(tensor_ids *owner, uint32_t *ids, size_t n)
{
    if (n == 0)
        return 0;
    qsort(ids, n, sizeof *ids, cmp_u32);
    size_t out = 1;
    for (size_t i = 1; i < n; i++) {
        if (ids[i] != ids[out - 1])
            ids[out++] = ids[i];
        else
            tensor_ids_release(owner, &ids[i], 1);
    }
    return out;
}

int node_inventory_set_ids(node_inventory *inv, tensor_ids *owner, uint32_t *ids, size_t n,
                           tetris_error *err)
{
    n = similarity_sort_ids(owner, ids, n);
    id_set *set = id_set_new(ids, n);
    if (set == NULL) {
        tensor_ids_release(owner, ids, n);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "inventory of %zu tensors", n);
    }
    inv->owner = owner;
    inv->ids = set;
    return 0;
}

size_t node_inventory_bytes(const node_inventory *inv)
{
    return sizeof *inv + (inv->ids != NULL ? id_set_bytes(inv->ids) : 0) +
           inv->n_memo * sizeof *inv->memo;
}

void model_need_free(model_need *m)
{
    if (m == NULL)
        return;
    tensor_ids_release(m->owner, m->ids, m->n);
    free(m->model);
    free(m->ids);
    free(m->bytes);
    free(m);
}

void node_inventory_free(node_inventory *inv)
{
    if (inv == NULL)
        return;
    if (inv->ids != NULL && inv->owner != NULL) {
        /* In batches: freeing must not need memory. */
        uint32_t batch[256];
        id_set_cursor cur = {0};
        size_t k;
        while ((k = id_set_next(inv->ids, &cur, batch, sizeof batch / sizeof *batch)) > 0)
            tensor_ids_release(inv->owner, batch, k);
    }
    pthread_mutex_destroy(&inv->memo_lock);
    free(inv->memo);
    id_set_free(inv->ids);
    free(inv);
}
