/* served.c - what every part of the daemon asks of the served stores:
 * how many there are, one by tenant, the bytes of all but one (for the
 * node's capacity), and the index helpers ingest and the pass share. Below
 * stores.c, ingest_server.c and reclaim.c, which all use it and none of
 * which it calls. */
#include "reclaimer/daemon.h"

#include <string.h>

size_t daemon_store_count(struct daemon *d)
{
    return atomic_load_explicit(&d->n_stores, memory_order_acquire);
}

struct served_store *daemon_find_store(struct daemon *d, const char *tenant)
{
    if (tenant == NULL)
        tenant = "";
    size_t n = daemon_store_count(d);
    for (size_t i = 0; i < n; i++)
        if (!atomic_load(&d->stores[i]->retired) && strcmp(d->stores[i]->tenant, tenant) == 0)
            return d->stores[i];
    return NULL;
}

void daemon_other_stores_bytes(struct daemon *d, const struct served_store *skip,
                               struct store_bytes *out)
{
    *out = (struct store_bytes){0};
    size_t n = daemon_store_count(d);
    for (size_t i = 0; i < n; i++) {
        struct served_store *ss = d->stores[i];
        if (ss == skip || atomic_load(&ss->retired))
            continue;
        pthread_mutex_lock(&ss->index_lock);
        out->resident += ss->resident_bytes;
        out->reserved += ss->reserved_bytes;
        out->evictable += store_evictable_bytes(ss);
        pthread_mutex_unlock(&ss->index_lock);
    }
}

/* ---- index helpers (index_lock held) ---- */

/* A tensor the last pass found cold is wanted again: its bytes leave the
 * room claims may count on until the next pass recounts (warmed_bytes). A
 * tensor counted twice (the pass's listing clears the marks) only makes
 * that room smaller. */
static void warm_entry(struct served_store *ss, struct index_entry *e)
{
    if (e->mark & (MARK_REF | MARK_WARM))
        return;
    e->mark |= MARK_WARM;
    ss->warmed_bytes += e->file_bytes;
}

void store_index_warm(struct served_store *ss, const tensor_digest *dg)
{
    struct index_entry *e = tensor_index_find(ss->index, dg);
    if (e != NULL)
        warm_entry(ss, e);
}

void store_index_touch(struct served_store *ss, const tensor_digest *dg, int64_t now_s)
{
    struct index_entry *e = tensor_index_find(ss->index, dg);
    if (e != NULL) {
        e->last_ref_s = now_s;
        warm_entry(ss, e);
    }
}

int store_index_add(struct served_store *ss, const tensor_meta *meta, uint64_t file_bytes,
                    int64_t now_s, tetris_error *err)
{
    struct index_entry *e;
    bool created;
    int rc = tensor_index_upsert(ss->index, &meta->digest, &e, &created, err);
    if (rc < 0)
        return rc;
    if (created || e->file_bytes == 0) { /* 0: known only from the state file */
        e->bytes = meta->nbytes;
        e->file_bytes = file_bytes;
        e->mtime_s = now_s;
        ss->resident_bytes += file_bytes;
        ss->generation++;
        e->mark |= MARK_WARM; /* new: never among the last pass's evictable bytes */
    }
    e->mark |= MARK_SEEN;
    return 0;
}
