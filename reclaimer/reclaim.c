/* reclaim.c - keeping the stores tidy: crash repair, the reclaim pass
 * (T_cold = T_all \ T_warm; keep-alive, then LRU above capacity), the
 * pin file and the rate-limited CRC scrub. A node pass runs all of it for
 * each served store in turn (shared, then tenants); only the capacity is
 * shared between them. Adoption of a previous daemon's holders is in
 * adopt.c, the index helpers ingest shares in served.c. */
#include "reclaimer/daemon.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "reclaimer/reclaim_policy.h"

/* Persist last-use times at most this often (and at shutdown). */
#define STATE_SAVE_INTERVAL_MS 30000

/* ---- the pass ---- */

struct pass {
    struct served_store *ss;
    int64_t now_s;
    uint64_t holders;
    uint64_t logical_bytes;
    struct model_usage models[MODEL_LABELS_MAX + 1];
    size_t n_models;
    int err;
    tetris_error *errp;
};

/* What one walk of tensors/ found, collected without holding any lock. */
struct listing {
    struct listed {
        tensor_digest digest;
        uint64_t bytes;
        uint64_t file_bytes;
        int64_t mtime_s;
    } *items;
    size_t n;
    size_t cap;
    bool failed;
};

static int on_tensor(void *ctx, const struct store_entry *se)
{
    struct listing *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        struct listed *items = realloc(l->items, cap * sizeof(*items));
        if (items == NULL) {
            l->failed = true;
            return 1;
        }
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = (struct listed){se->meta.digest, se->meta.nbytes, se->file_bytes,
                                       se->mtime.tv_sec};
    return 0;
}

/* Folds a listing into the index (index_lock held). */
static int merge_listing(struct served_store *ss, const struct listing *l, tetris_error *err)
{
    for (size_t i = 0; i < l->n; i++) {
        struct index_entry *e;
        bool created;
        int rc = tensor_index_upsert(ss->index, &l->items[i].digest, &e, &created, err);
        if (rc < 0)
            return rc;
        if (created || e->file_bytes == 0) { /* 0: known only from the state file */
            e->bytes = l->items[i].bytes;
            e->mtime_s = l->items[i].mtime_s;
            ss->generation++;
        }
        e->file_bytes = store_charged_bytes(l->items[i].file_bytes);
        e->mark |= MARK_SEEN;
    }
    return 0;
}

/* The usage row of a holder label (model), or the "other" row once
 * MODEL_LABELS_MAX labels are in use. */
static struct model_usage *model_row(struct pass *p, const char *label)
{
    char name[sizeof(p->models[0].label)];
    /* The holder's label is the client's: as a metric label it must be
     * UTF-8 even when cut to fit. */
    prom_copy_label(name, sizeof(name), label != NULL && label[0] != '\0' ? label : "unlabelled");
    for (size_t i = 0; i < p->n_models; i++)
        if (strcmp(p->models[i].label, name) == 0)
            return &p->models[i];
    if (p->n_models == MODEL_LABELS_MAX) {
        struct model_usage *other = &p->models[MODEL_LABELS_MAX];
        strcpy(other->label, "other");
        return other;
    }
    struct model_usage *m = &p->models[p->n_models++];
    memcpy(m->label, name, sizeof(name));
    return m;
}

static int on_holder(void *ctx, const struct store_holder_info *h)
{
    struct pass *p = ctx;
    if (!h->alive)
        return 0;
    p->holders++;
    struct model_usage *m = model_row(p, h->label);
    m->holders++;
    for (size_t i = 0; i < h->n_refs; i++) {
        p->logical_bytes += h->ref_bytes[i];
        m->logical_bytes += h->ref_bytes[i];
        struct index_entry *e = tensor_index_find(p->ss->index, &h->refs[i]);
        if (e != NULL) {
            e->mark |= MARK_REF;
            e->last_ref_s = p->now_s;
        }
    }
    return 0;
}

static void apply_pins(struct served_store *ss, int64_t now_s)
{
    pthread_mutex_lock(&ss->d->pin_lock);
    for (size_t i = 0; i < ss->d->n_pinned; i++) {
        if (strcmp(ss->d->pinned[i].tenant, ss->tenant) != 0)
            continue;
        struct index_entry *e = tensor_index_find(ss->index, &ss->d->pinned[i].digest);
        if (e != NULL) {
            e->mark |= MARK_REF;
            e->last_ref_s = now_s;
        }
    }
    pthread_mutex_unlock(&ss->d->pin_lock);
}

/* Drops index entries the store no longer has; recomputes totals. */
static int reconcile(struct served_store *ss, tetris_error *err)
{
    size_t n_gone = 0;
    size_t c = 0;
    struct index_entry *e;
    while ((e = tensor_index_next(ss->index, &c)) != NULL)
        n_gone += !(e->mark & MARK_SEEN);
    if (n_gone > 0) {
        cleanup_free tensor_digest *gone = malloc(n_gone * sizeof(*gone));
        if (gone == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "reconcile");
        size_t k = 0;
        for (c = 0; (e = tensor_index_next(ss->index, &c)) != NULL;)
            if (!(e->mark & MARK_SEEN))
                gone[k++] = e->digest;
        for (size_t i = 0; i < k; i++)
            tensor_index_remove(ss->index, &gone[i]);
        ss->generation++;
    }
    uint64_t resident = 0;
    uint64_t warm = 0;
    for (c = 0; (e = tensor_index_next(ss->index, &c)) != NULL;) {
        /* Invariant: after a pass's reconcile the index holds exactly what
         * the listing of tensors/ found (tests/reclaimer/test-reclaim.sh,
         * the inventory against the store). */
        assert(e->mark & MARK_SEEN);
        resident += e->file_bytes;
        if (e->mark & MARK_REF)
            warm += e->bytes;
    }
    ss->resident_bytes = resident;
    ss->warm_bytes = warm;
    return 0;
}

/* Why a tensor leaves the store: each is counted apart. */
enum removal { REMOVAL_RECLAIM, REMOVAL_EVICT, REMOVAL_WITHDRAW };

static int remove_tensor(struct served_store *ss, struct index_entry *e, enum removal why)
{
    tetris_error err;
    tensor_digest dg = e->digest;
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(&dg, hex);
    int rc = store_remove_tensor(ss->store, &dg, &err);
    if (rc < 0 && rc != -TETRIS_E_NOTFOUND) {
        log_warn("event=remove-failed digest=%s code=%s msg=%s", hex, tetris_code_name(-rc),
                 LOG_Q(err.msg));
        return rc;
    }
    uint64_t bytes = e->file_bytes;
    ss->resident_bytes -= bytes < ss->resident_bytes ? bytes : ss->resident_bytes;
    tensor_index_remove(ss->index, &dg);
    ss->generation++;
    static const char *const names[] = {"reclaimed", "evicted", "withdrawn"};
    if (why == REMOVAL_WITHDRAW) {
        atomic_fetch_add(&ss->d->pull.withdrawn_tensors, 1);
    } else {
        atomic_fetch_add(why == REMOVAL_EVICT ? &ss->counters.evictions : &ss->counters.reclaims,
                         1);
        atomic_fetch_add(&ss->counters.reclaimed_bytes, bytes);
    }
    log_debug("event=%s digest=%s bytes=%llu", names[why], hex, (unsigned long long)bytes);
    return 0;
}

static int64_t last_use(const struct index_entry *e)
{
    return e->last_ref_s > 0 ? e->last_ref_s : e->mtime_s;
}

/* Keep-alive expiry, then, when bounded, LRU down to target bytes (this
 * store's share of the node's capacity, less what refused ingests need);
 * cold tensors only, by the rule of reclaim_policy.h. */
static int free_cold(struct served_store *ss, int64_t now_s, double keep_alive_s, bool bounded,
                     uint64_t target, size_t *n_freed, tetris_error *err)
{
    size_t n = tensor_index_count(ss->index);
    cleanup_free struct cold_tensor *cold = malloc((n ? n : 1) * sizeof(*cold));
    /* Digests, not entries: an entry pointer dies with the next removal. */
    cleanup_free tensor_digest *digests = malloc((n ? n : 1) * sizeof(*digests));
    if (cold == NULL || digests == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "cold list of %zu", n);
    size_t n_cold = 0;
    size_t c = 0;
    struct index_entry *e;
    while ((e = tensor_index_next(ss->index, &c)) != NULL)
        if (!(e->mark & MARK_REF) && e->fresh == 0) {
            digests[n_cold] = e->digest;
            cold[n_cold] = (struct cold_tensor){.last_use_s = last_use(e), .slot = n_cold};
            n_cold++;
        }
    reclaim_sort_cold(cold, n_cold);
    size_t freed = 0;
    for (size_t i = 0; i < n_cold; i++) {
        e = tensor_index_find(ss->index, &digests[cold[i].slot]);
        if (e == NULL)
            continue;
        enum reclaim_verdict v = reclaim_judge(now_s, cold[i].last_use_s, keep_alive_s, bounded,
                                               ss->resident_bytes, target);
        if (v == RECLAIM_KEEP)
            break; /* the rest are younger and the store is under target */
        if (remove_tensor(ss, e, v == RECLAIM_EVICT ? REMOVAL_EVICT : REMOVAL_RECLAIM) == 0)
            freed++;
    }
    *n_freed = freed;
    return 0;
}

static void save_state(struct served_store *ss, bool force)
{
    int64_t now = clock_mono_ms();
    if (!force && ss->last_state_save_ms != 0 &&
        now - ss->last_state_save_ms < STATE_SAVE_INTERVAL_MS)
        return;
    tetris_error err;
    pthread_mutex_lock(&ss->index_lock);
    int rc = tensor_index_save(ss->index, ss->state_path, &err);
    pthread_mutex_unlock(&ss->index_lock);
    if (rc < 0)
        log_warn("event=state-save-failed tenant=%s msg=%s", tenant_name(ss), LOG_Q(err.msg));
    else
        ss->last_state_save_ms = now;
}

/* full: the whole store_repair (walks tensors/); else the light one
 * (dead holders and temp files only). */
static void repair(struct served_store *ss, bool full)
{
    struct store_repair_report rep = {0};
    tetris_error err;
    int rc = full ? store_repair(ss->store, &rep, &err)
                  : store_repair_light(ss->store, &rep, &err);
    if (rc < 0) {
        log_warn("event=repair-failed tenant=%s msg=%s", tenant_name(ss), LOG_Q(err.msg));
        return;
    }
    atomic_fetch_add(&ss->counters.repaired_holders, rep.dead_holders_released);
    atomic_fetch_add(&ss->counters.repaired_temp_files, rep.temp_files_removed);
    atomic_fetch_add(&ss->counters.repaired_bad_tensors, rep.bad_tensors_removed);
    if (rep.dead_holders_released || rep.temp_files_removed || rep.bad_tensors_removed)
        log_info("event=repair tenant=%s dead_holders=%zu temp_files=%zu bad_tensors=%zu",
                 tenant_name(ss), rep.dead_holders_released, rep.temp_files_removed, rep.bad_tensors_removed);
}

/* Re-checks CRC32s of up to scrub_rate * interval bytes, resuming where
 * the previous pass stopped; quarantines mismatches. Runs without the use
 * lock: a tensor removed meanwhile is simply skipped. */
static void scrub(struct served_store *ss, uint64_t budget)
{
    if (budget == 0)
        return;
    size_t cap = 4096;
    cleanup_free tensor_digest *batch = malloc(cap * sizeof(*batch));
    if (batch == NULL)
        return;
    size_t n = 0;
    uint64_t planned = 0;
    pthread_mutex_lock(&ss->index_lock);
    size_t count = tensor_index_count(ss->index);
    size_t c = ss->scrub_cursor;
    for (size_t visited = 0; visited < count && planned < budget && n < cap;) {
        struct index_entry *e = tensor_index_next(ss->index, &c);
        if (e == NULL) {
            c = 0;
            continue;
        }
        batch[n++] = e->digest;
        planned += e->bytes;
        visited++;
    }
    ss->scrub_cursor = c;
    pthread_mutex_unlock(&ss->index_lock);

    for (size_t i = 0; i < n && !atomic_load(&ss->d->stopping); i++) {
        tetris_error err;
        int rc = store_check_crc(ss->store, &batch[i], &err);
        if (rc == 0 || rc == -TETRIS_E_NOTFOUND)
            continue;
        char hex[TENSOR_DIGEST_HEX_LEN + 1];
        tensor_digest_to_hex(&batch[i], hex);
        if (rc != -TETRIS_E_CORRUPT) {
            log_warn("event=scrub-failed digest=%s msg=%s", hex, LOG_Q(err.msg));
            continue;
        }
        atomic_fetch_add(&ss->counters.scrub_errors, 1);
        log_error("event=scrub-corrupt tenant=%s digest=%s action=quarantine msg=%s",
                  tenant_name(ss), hex, LOG_Q(err.msg));
        if (store_quarantine_tensor(ss->store, &batch[i], &err) < 0)
            log_error("event=quarantine-failed digest=%s msg=%s", hex, LOG_Q(err.msg));
        pthread_mutex_lock(&ss->index_lock);
        struct index_entry *e = tensor_index_find(ss->index, &batch[i]);
        if (e != NULL) {
            ss->resident_bytes -= e->file_bytes < ss->resident_bytes ? e->file_bytes
                                                                    : ss->resident_bytes;
            tensor_index_remove(ss->index, &batch[i]);
            ss->generation++;
        }
        pthread_mutex_unlock(&ss->index_lock);
    }
    atomic_fetch_add(&ss->counters.scrubbed_bytes, planned);
}

/* The full repair and the walk of tensors/ read every tensor's trailer:
 * with 100k tensors that is seconds of CPU. Both run outside the locks,
 * and each at most as often as keeps it under DUTY_PERCENT of the daemon's
 * time (but at every pass while a pass costs little). In between, every
 * pass runs the light repair (dead holders, dead writers' temp files),
 * whose cost does not grow with the store. Between walks the index is
 * kept current by the daemon's own ingests and removals; only tensors
 * other writers (direct-mode agents) publish wait for the next walk. */
#define DUTY_PERCENT 10

static bool duty_due(const struct duty *t, int64_t now_us)
{
    return t->last_start_us == 0 ||
           now_us - t->last_start_us >= t->last_cost_us * 100 / DUTY_PERCENT;
}

static void duty_done(struct duty *t, int64_t start_us, int64_t end_us)
{
    t->last_start_us = start_us;
    t->last_cost_us = end_us - start_us;
}

/* What one store's pass is told: policy read once per node pass. */
struct pass_policy {
    double keep_alive_s;
    bool bounded;    /* a capacity is set */
    uint64_t target; /* bytes this store may keep (capacity less the other
                        stores' resident bytes, at most its quota) */
    uint64_t scrub_budget;
};

/* What the scheduler may count as free room beside the free bytes: cold
 * tensors, which the next pass evicts once a verified ingest has taken
 * their room. The inventory carries it, so a change is a new generation. */
static void update_evictable(struct served_store *ss)
{
    uint64_t cold = 0;
    size_t c = 0;
    struct index_entry *e;
    while ((e = tensor_index_next(ss->index, &c)) != NULL)
        if (!(e->mark & (MARK_REF | MARK_WARM)))
            cold += e->file_bytes;
    ss->warmed_bytes = 0; /* every mark was recounted */
    if (cold != ss->evictable_bytes) {
        ss->evictable_bytes = cold;
        ss->generation++;
    }
}

/* The part of a pass that needs the locks: mark what live holders (and
 * pins) reference, then free cold tensors. t[] gets phase end times. */
static int pass_locked(struct served_store *ss, struct pass *p, const struct listing *l,
                       const struct pass_policy *pol, size_t *freed, int64_t t[2],
                       tetris_error *err)
{
    int rc = 0;
    if (l != NULL) {
        rc = merge_listing(ss, l, err);
        if (rc == 0)
            rc = reconcile(ss, err); /* drops what the walk did not find */
    }
    size_t c = 0;
    struct index_entry *e;
    while ((e = tensor_index_next(ss->index, &c)) != NULL)
        e->mark = MARK_SEEN | (e->fresh > 0 ? MARK_WARM : 0);
    if (rc == 0)
        rc = store_foreach_holder(ss->store, on_holder, p, err);
    if (rc == 0) {
        apply_pins(ss, p->now_s);
        rc = reconcile(ss, err); /* warm bytes now that references are marked */
    }
    t[0] = clock_mono_us();
    if (rc == 0) {
        ss->holders = p->holders;
        ss->logical_bytes = p->logical_bytes;
        memcpy(ss->models, p->models, sizeof(ss->models));
        ss->n_models = p->n_models;
        rc = free_cold(ss, p->now_s, pol->keep_alive_s, pol->bounded, pol->target, freed, err);
    }
    if (rc == 0)
        update_evictable(ss);
    t[1] = clock_mono_us();
    return rc;
}

/* Walks tensors/ without locks. Entries the daemon adds meanwhile are
 * marked SEEN by store_index_add, so the merge never drops them. */
static int list_tensors(struct served_store *ss, struct listing *l, tetris_error *err)
{
    pthread_mutex_lock(&ss->index_lock);
    size_t c = 0;
    struct index_entry *e;
    while ((e = tensor_index_next(ss->index, &c)) != NULL)
        e->mark = 0;
    pthread_mutex_unlock(&ss->index_lock);
    int rc = store_foreach_tensor(ss->store, on_tensor, l, err);
    if (rc >= 0 && l->failed)
        rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "listing of %zu tensors", l->n);
    return rc < 0 ? rc : 0;
}

/* One store's pass; *locked_us gets how long its ingests had to wait. */
static int store_pass(struct served_store *ss, const struct pass_policy *pol, int64_t *locked_us,
                      tetris_error *err)
{
    int64_t start = clock_mono_us();
    bool did_repair = duty_due(&ss->repair_duty, start);
    repair(ss, did_repair);
    if (did_repair)
        duty_done(&ss->repair_duty, start, clock_mono_us());
    int64_t t_repair = clock_mono_us();
    struct listing l = {0};
    bool did_list = duty_due(&ss->listing_duty, t_repair);
    int rc = 0;
    if (did_list) {
        rc = list_tensors(ss, &l, err);
        duty_done(&ss->listing_duty, t_repair, clock_mono_us());
    }
    int64_t t_list = clock_mono_us();
    struct pass p = {.ss = ss, .now_s = clock_wall_ms() / 1000, .errp = err};
    size_t freed = 0;
    int64_t t[2] = {t_list, t_list};
    if (rc == 0) {
        pthread_rwlock_wrlock(&ss->use_lock);
        rc = store_reclaim_begin(ss->store, err);
        if (rc == 0) {
            pthread_mutex_lock(&ss->index_lock);
            rc = pass_locked(ss, &p, did_list ? &l : NULL, pol, &freed, t, err);
            pthread_mutex_unlock(&ss->index_lock);
            store_reclaim_end(ss->store);
        }
        pthread_rwlock_unlock(&ss->use_lock);
    }
    free(l.items);
    *locked_us = t[1] - t_list;
    if (rc < 0)
        return tetris_wrap(err, "store %s", store_root(ss->store));
    pthread_mutex_lock(&ss->index_lock);
    uint64_t resident = ss->resident_bytes;
    size_t tensors = tensor_index_count(ss->index);
    pthread_mutex_unlock(&ss->index_lock);

    save_state(ss, false);
    scrub(ss, pol->scrub_budget);
    log_debug("event=reclaim-pass tenant=%s tensors=%zu resident_bytes=%llu holders=%llu "
              "freed=%zu repair_ms=%.1f light_repair_ms=%.1f list_ms=%.1f mark_ms=%.1f "
              "free_ms=%.1f total_ms=%.1f",
              tenant_name(ss), tensors, (unsigned long long)resident,
              (unsigned long long)p.holders, freed,
              did_repair ? (double)(t_repair - start) / 1e3 : -1.0,
              did_repair ? -1.0 : (double)(t_repair - start) / 1e3,
              did_list ? (double)(t_list - t_repair) / 1e3 : -1.0,
              (double)(t[0] - t_list) / 1e3, (double)(t[1] - t[0]) / 1e3,
              (double)(clock_mono_us() - start) / 1e3);
    if (freed > 0)
        log_info("event=reclaim-pass tenant=%s freed=%zu tensors=%zu resident_bytes=%llu",
                 tenant_name(ss), freed, tensors, (unsigned long long)resident);
    return 0;
}

/* ---- withdrawal: what a failed pull published ----
 * A pull holds every tensor of its model or none (pull.h): when it fails,
 * the tensors it published itself go again, so the store is as it was
 * before it, unless something else wants them by then. The rest of the
 * pass's rule applies: a tensor is kept while a live holder references
 * it, a pin of this store names it, or another request in flight has it
 * fresh (published and not yet referenced: its own count in
 * index_entry.fresh).
 *
 * Invariant: a request that names a withdrawn digest never loses it. It
 * checks presence and records its references under one read-hold of
 * use_lock (publish_and_refer; a direct-mode agent, another process,
 * under the store's use lock, which store_reclaim_begin excludes). The
 * withdrawal holds both exclusively, so that request either recorded its
 * reference before (it is in a live holder's file, read here, and the
 * tensor stays) or checks after, finds the tensor missing and publishes
 * it again. A request that published it too (the store already had it:
 * its publish is not one) has it fresh, which is counted here as well.
 * Tested by tests/reclaimer/test-pull-faults.sh. */

struct withdraw_candidate {
    tensor_digest digest;
    unsigned own_fresh; /* how often the withdrawing request published it */
    bool wanted;
};

static int candidate_cmp(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(tensor_digest));
}

static struct withdraw_candidate *find_candidate(struct withdraw_candidate *c, size_t n,
                                                 const tensor_digest *dg)
{
    return n > 0 ? bsearch(dg, c, n, sizeof(*c), candidate_cmp) : NULL;
}

struct withdraw_marks {
    struct withdraw_candidate *c;
    size_t n;
};

static int on_withdraw_holder(void *ctx, const struct store_holder_info *h)
{
    struct withdraw_marks *m = ctx;
    if (!h->alive)
        return 0;
    for (size_t i = 0; i < h->n_refs; i++) {
        struct withdraw_candidate *c = find_candidate(m->c, m->n, &h->refs[i]);
        if (c != NULL)
            c->wanted = true;
    }
    return 0;
}

/* Marks the candidates something else wants, and removes the others
 * (use_lock, the store's reclaim lock and index_lock held). */
static int withdraw_locked(struct served_store *ss, struct withdraw_candidate *c, size_t n,
                           struct withdrawal *out, tetris_error *err)
{
    struct withdraw_marks m = {c, n};
    int rc = store_foreach_holder(ss->store, on_withdraw_holder, &m, err);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&ss->d->pin_lock);
    for (size_t i = 0; i < ss->d->n_pinned; i++) {
        if (strcmp(ss->d->pinned[i].tenant, ss->tenant) != 0)
            continue;
        struct withdraw_candidate *p = find_candidate(c, n, &ss->d->pinned[i].digest);
        if (p != NULL)
            p->wanted = true;
    }
    pthread_mutex_unlock(&ss->d->pin_lock);
    for (size_t i = 0; i < n; i++) {
        struct index_entry *e = tensor_index_find(ss->index, &c[i].digest);
        if (e == NULL) /* gone already (scrubbed into quarantine) */
            continue;
        if (c[i].wanted || e->fresh > c[i].own_fresh) {
            out->kept++;
            continue;
        }
        uint64_t bytes = e->file_bytes;
        if (remove_tensor(ss, e, REMOVAL_WITHDRAW) == 0) {
            out->tensors++;
            out->bytes += bytes;
        }
    }
    return 0;
}

int store_withdraw(struct served_store *ss, const tensor_digest *published, size_t n,
                   struct withdrawal *out, tetris_error *err)
{
    *out = (struct withdrawal){0};
    if (n == 0)
        return 0;
    cleanup_free struct withdraw_candidate *c = malloc(n * sizeof(*c));
    if (c == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "withdrawal of %zu tensors", n);
    for (size_t i = 0; i < n; i++)
        c[i] = (struct withdraw_candidate){.digest = published[i], .own_fresh = 1};
    qsort(c, n, sizeof(*c), candidate_cmp);
    /* A digest published twice by the request (evicted in between) is one
     * candidate that counts both. */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && candidate_cmp(&c[k - 1], &c[i]) == 0)
            c[k - 1].own_fresh++;
        else
            c[k++] = c[i];
    }
    pthread_rwlock_wrlock(&ss->use_lock);
    int rc = store_reclaim_begin(ss->store, err);
    if (rc == 0) {
        pthread_mutex_lock(&ss->index_lock);
        rc = withdraw_locked(ss, c, k, out, err);
        pthread_mutex_unlock(&ss->index_lock);
        store_reclaim_end(ss->store);
    }
    pthread_rwlock_unlock(&ss->use_lock);
    return rc < 0 ? tetris_wrap(err, "store %s", store_root(ss->store)) : 0;
}

int daemon_pass_stores(struct daemon *d, int64_t start_us, tetris_error *err)
{
    pthread_mutex_lock(&d->cfg_lock);
    struct pass_policy pol = {
        .keep_alive_s = d->cfg.keep_alive_s,
        .scrub_budget = (uint64_t)((double)d->cfg.scrub_rate * d->cfg.interval_s),
    };
    uint64_t capacity = d->cfg.capacity_bytes;
    pthread_mutex_unlock(&d->cfg_lock);

    int rc = 0;
    int64_t locked_max = 0;
    /* Stores are passed in turn, the shared one first; each sees the
     * others' current resident bytes, so once one has evicted enough for
     * the node to fit, the rest keep theirs. Claims being verified count
     * for nothing here: only bytes that are verified and stored make a
     * pass evict (a verified ingest may have been let in against cold
     * bytes, leaving the node above its capacity until now). */
    for (size_t i = 0; i < daemon_store_count(d); i++) {
        struct served_store *ss = d->stores[i];
        if (atomic_load(&ss->retired))
            continue;
        pol.bounded = capacity > 0;
        if (pol.bounded) {
            struct store_bytes others;
            daemon_other_stores_bytes(d, ss, &others);
            pol.target = others.resident < capacity ? capacity - others.resident : 0;
        }
        /* A store's quota bounds it on its own. */
        pthread_mutex_lock(&d->cfg_lock);
        uint64_t quota = store_quota(d, ss);
        pthread_mutex_unlock(&d->cfg_lock);
        if (quota > 0) {
            pol.target = pol.bounded && pol.target < quota ? pol.target : quota;
            pol.bounded = true;
        }
        tetris_error serr;
        int64_t locked_us = 0;
        int r = store_pass(ss, &pol, &locked_us, &serr);
        if (locked_us > locked_max)
            locked_max = locked_us;
        if (r < 0 && rc == 0) {
            rc = r;
            *err = serr;
        } else if (r < 0) {
            log_error("event=reclaim-pass-failed tenant=%s code=%s msg=%s", tenant_name(ss),
                      tetris_code_name(serr.code), LOG_Q(serr.msg));
        }
    }
    gpu_pool_reclaim(daemon_gpu_pool(), d);
    pthread_mutex_lock(&d->pass_lock);
    d->last_pass_ok = rc == 0;
    if (rc == 0) {
        d->last_pass_ms = clock_wall_ms();
        d->last_pass_mono_ms = clock_mono_ms();
        d->last_pass_us = clock_mono_us() - start_us;
        d->last_locked_us = locked_max;
    }
    pthread_mutex_unlock(&d->pass_lock);
    if (rc == 0)
        atomic_fetch_add(&d->reclaim_passes, 1);
    return rc;
}

/* Temp files of the state file (tensor_index_save writes PATH.tmp.PID and
 * renames it) left by a daemon killed while saving. The instance lock is
 * held: whatever temp is there belongs to no live writer. */
static size_t remove_state_temps(const char *state_path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", state_path);
    char *slash = strrchr(dir, '/');
    const char *base = slash != NULL ? slash + 1 : dir;
    char prefix[PATH_MAX];
    if (snprintf(prefix, sizeof(prefix), "%s.tmp.", base) >= (int)sizeof(prefix))
        return 0;
    if (slash == dir)
        dir[1] = '\0';
    else if (slash != NULL)
        *slash = '\0';
    else
        strcpy(dir, ".");
    cleanup_closedir DIR *dp = opendir(dir);
    if (dp == NULL)
        return 0;
    size_t removed = 0;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL)
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0 &&
            unlinkat(dirfd(dp), de->d_name, 0) == 0)
            removed++;
    return removed;
}

/* What a previous daemon left that nothing uses: temp files of its state
 * file, and quarantined tensors (their mappings keep working; no new one
 * is made). */
static void remove_leftovers(struct served_store *ss)
{
    size_t temps = remove_state_temps(ss->state_path), quarantined = 0;
    tetris_error err;
    if (store_clear_quarantine(ss->store, &quarantined, &err) < 0)
        log_warn("event=quarantine-not-cleared tenant=%s msg=%s", tenant_name(ss), LOG_Q(err.msg));
    if (temps > 0 || quarantined > 0)
        log_info("event=leftovers-removed tenant=%s state_temp_files=%zu quarantined=%zu",
                 tenant_name(ss), temps, quarantined);
}

int store_startup(struct served_store *ss, tetris_error *err)
{
    remove_leftovers(ss);
    tetris_error lerr;
    if (store_prepare_publish(ss->store, &lerr) < 0)
        log_warn("event=store-prepare-failed tenant=%s code=%s msg=%s action=make-on-first-publish",
                 tenant_name(ss), tetris_code_name(lerr.code), LOG_Q(lerr.msg));
    pthread_mutex_lock(&ss->index_lock);
    int rc = tensor_index_load(ss->index, ss->state_path, &lerr);
    pthread_mutex_unlock(&ss->index_lock);
    if (rc < 0)
        log_warn("event=state-load-failed tenant=%s msg=%s action=ignore", tenant_name(ss),
                 LOG_Q(lerr.msg));
    return store_adopt_orphans(ss, err);
}

void store_save_state(struct served_store *ss)
{
    save_state(ss, true);
}

void daemon_refresh_pins(struct daemon *d)
{
    /* The file as last read, failed reads included: a file is read again
     * only once it changed (or appeared, or went), so a bad one is logged
     * once, not at every pass. */
    static struct stat last;
    static bool read_once;
    char path[PATH_MAX];
    pthread_mutex_lock(&d->cfg_lock);
    memcpy(path, d->cfg.pin_path, sizeof(path));
    pthread_mutex_unlock(&d->cfg_lock);
    if (path[0] == '\0')
        return;
    struct stat st = {0};
    if (stat(path, &st) < 0)
        memset(&st, 0, sizeof(st));
    if (read_once && st.st_mtim.tv_sec == last.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == last.st_mtim.tv_nsec && st.st_size == last.st_size &&
        st.st_ino == last.st_ino && st.st_dev == last.st_dev)
        return;
    last = st;
    read_once = true;
    struct pin *list = NULL;
    size_t n = 0;
    tetris_error err;
    if (pin_file_read(path, &list, &n, &err) < 0) {
        log_warn("event=pin-file-unreadable msg=%s action=keep-previous-pins", LOG_Q(err.msg));
        return;
    }
    pthread_mutex_lock(&d->pin_lock);
    free(d->pinned);
    d->pinned = list;
    d->n_pinned = n;
    pthread_mutex_unlock(&d->pin_lock);
    log_info("event=pins-loaded file=%s digests=%zu", path, n);
}
