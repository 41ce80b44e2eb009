/* ingest_server.c - the daemon's side of the ingest protocol (messages,
 * framing and limits in protocol/ingest.h).
 *
 * One thread per client connection; a request's tensors are hashed and
 * published on that thread and on helpers from the daemon's worker pool
 * (its CPU allowance, shared by every request). The client's descriptors are the only
 * source of bytes: the daemon decodes each tensor from them itself and
 * store_publish_tensor re-hashes what it wrote, so a client that lies about
 * a digest gets "rejected" instead of poisoning the store; an entry sent
 * without a digest is published under the one the store computes. The connection
 * is the client's liveness: its references live in a holder the daemon
 * keeps open until the connection closes. Every request is validated
 * before anything is touched; a malformed one gets an error reply and the
 * connection is closed. */
#include "reclaimer/daemon.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/log.h"
#include "model/model.h"
#include "model/model_publish.h"
#include "protocol/ingest.h"
#include "reclaimer/derive.h"

const double ingest_duration_bounds[INGEST_DURATION_BUCKETS] = {
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};

struct ingest_server {
    struct served_store *ss;
    int listen_fd;
    int stop_pipe[2]; /* readable once stopping */
    pthread_t accept_thread;
    pthread_mutex_t lock;
    pthread_cond_t idle; /* signalled when a connection ends */
    unsigned active;
    /* Threads whose connection ended, to be joined: a thread's exit (its
     * thread-local state) must finish before the process does. */
    pthread_t *ended;
    size_t n_ended;
    char path[PATH_MAX];
};

/* Holders of connections still open when the daemon stops. Their files
 * must outlive this process (the clients still map the tensors) so that
 * the next daemon adopts them; store_holder_close would delete them. They
 * stay reachable here, locked, until the process exits. */
static pthread_mutex_t retained_lock = PTHREAD_MUTEX_INITIALIZER;
static store_holder **retained;
static size_t n_retained;

static void retain_holder(store_holder *h)
{
    pthread_mutex_lock(&retained_lock);
    store_holder **r = realloc(retained, (n_retained + 1) * sizeof(*r));
    if (r != NULL) {
        retained = r;
        retained[n_retained++] = h;
    }
    pthread_mutex_unlock(&retained_lock);
}

struct conn {
    ingest_server *srv;
    int sock;
    pid_t pid;
    uid_t uid;
    struct peer *peer;      /* its uid's entry (peers.c) */
    bool fallback_reported; /* a connection reports one fallback */
    store_holder *holder; /* created with the first reference */
    tensor_digest *held;  /* what holder references, sorted, each once */
    size_t n_held;
    bool replaced_adopted; /* took over a holder adopted for its pid */
    struct gpu_conn_refs gpu; /* GPU copies it references (gpu_attach) */
};

/* ---- validation ---- */

/* What the decoder cannot see: the descriptors are readable regular files
 * that hold every region their tensors name. */
static int check_sources(const ingest_request *rq, const int *fds, tetris_error *err)
{
    uint64_t sizes[INGEST_MAX_SOURCES];
    for (size_t i = 0; i < rq->n_sources; i++) {
        struct stat st;
        if (fstat(fds[i], &st) < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "fstat of descriptor %zu", i);
        if (!S_ISREG(st.st_mode))
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "descriptor %zu is not a regular file", i);
        /* An O_PATH descriptor passes fstat but fails every read. */
        int fl = fcntl(fds[i], F_GETFL);
        if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || (fl & O_PATH))
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "descriptor %zu is not readable (write-only or O_PATH)", i);
        sizes[i] = (uint64_t)st.st_size;
    }
    for (size_t i = 0; i < rq->n_tensors; i++) {
        const tensor_desc *d = &rq->tensors[i].desc;
        size_t s = rq->tensors[i].source_index;
        if (d->offset > sizes[s] || d->length > sizes[s] - d->offset)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "tensors[%zu] (%s): region %llu+%llu past the end of source %zu "
                               "(%llu bytes)",
                               i, d->name, (unsigned long long)d->offset,
                               (unsigned long long)d->length, s, (unsigned long long)sizes[s]);
    }
    return 0;
}

/* ---- budgets ---- */

/* The limits one request is held to, read once per request. Its workers
 * share it: what they change is under lock. */
struct budget {
    struct conn *c;
    pthread_mutex_t lock; /* spent, cut, ingested; while publishing */
    int64_t deadline_ms; /* --ingest-timeout from the request's arrival */
    double timeout_s;
    uint64_t capacity;  /* the node's, 0: unlimited */
    uint64_t quota;     /* this store's own, 0: none */
    uint64_t max_bytes; /* to read for this request, 0: unlimited */
    uint64_t max_unverified;     /* reserved by this store's claims, 0: no bound */
    uint64_t max_unverified_uid; /* ... by the claims of this uid */
    uint64_t spent;     /* bytes of the tensors it read or is reading */
    uint64_t ingested;  /* bytes it published */
    const char *cut;    /* the budget that refused a tensor, or NULL */
    _Atomic int64_t peer_checked_ms; /* when budget_check last polled the client */
    atomic_bool client_left;         /* a poll found the client gone */
    /* A pull's: the tensors' bytes come from a registry (pull.h), fetched
     * on this many threads of its own (they wait on the network, not the
     * CPU), and the request holds every tensor or none. NULL: an ingest. */
    struct pull_plan *pull;
    unsigned pull_threads;
    /* A pull fails with its first rejected tensor (pull_failure, its
     * index, set once under lock): its other tensors are fetched no
     * further (budget_check), since the request will hold none of them. */
    atomic_bool pull_failed;
    size_t pull_failure;
    /* How its tensors are written (store.h's STORE_PUBLISH_*): a derived
     * form's on 4 KiB pages (publish_derived). */
    unsigned publish_flags;
    /* What it published, each entry's `fresh` raised until the request
     * ends (budget_end): a pass while it runs must not count the tensors
     * it has published but not yet referenced as cold, or its later claims
     * would count on them as room (and the store end above its quota). */
    tensor_digest *fresh;
    size_t n_fresh, cap_fresh;
};

static void budget_init(struct conn *c, struct budget *b)
{
    struct served_store *ss = c->srv->ss;
    struct daemon *d = ss->d;
    pthread_mutex_lock(&d->cfg_lock);
    *b = (struct budget){.c = c,
                         .timeout_s = d->cfg.ingest_timeout_s,
                         .capacity = d->cfg.capacity_bytes,
                         .quota = store_quota(d, ss),
                         .max_bytes = d->cfg.max_request_bytes,
                         .max_unverified = d->cfg.max_unverified_bytes,
                         .max_unverified_uid = d->cfg.max_unverified_uid_bytes};
    pthread_mutex_unlock(&d->cfg_lock);
    b->deadline_ms = clock_mono_ms() + (int64_t)(b->timeout_s * 1000);
    if (b->max_bytes == 0)
        b->max_bytes = b->quota > 0 ? b->quota : b->capacity;
}

/* Counts a tensor's bytes (what the daemon reads: a varint region may be
 * longer than its tensor) against the request's byte budget. */
static int budget_spend(struct budget *b, const tensor_desc *t, tetris_error *err)
{
    uint64_t need = t->length > t->meta.nbytes ? t->length : t->meta.nbytes;
    pthread_mutex_lock(&b->lock);
    bool over = b->max_bytes > 0 && (b->spent > b->max_bytes || need > b->max_bytes - b->spent);
    if (over)
        b->cut = "bytes";
    else
        b->spent += need;
    pthread_mutex_unlock(&b->lock);
    if (over)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "request over its budget of %llu bytes (--max-request-bytes)",
                           (unsigned long long)b->max_bytes);
    return 0;
}

/* Whether the client closed its socket: its ingest is nobody's any more.
 * POLLHUP, not POLLRDHUP: a client that only shut down its sending side
 * still waits for the reply. */
static bool peer_gone(int sock)
{
    struct pollfd p = {.fd = sock};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR)) != 0;
}

/* How often a request's workers look whether its client left: a poll
 * before each tensor and each chunk was two system calls a tensor, a
 * tenth of a small tensor's publish (BENCHMARKS.md, "Cold start of a
 * model of small tensors"); a client that left costs this much more work
 * at most. */
#define PEER_CHECK_INTERVAL_MS 10

/* Asked before each tensor and between its chunks: a request never holds
 * a tensor's lock past its deadline, nor works for long for a client that
 * left. */
static int budget_check(void *ctx, tetris_error *err)
{
    struct budget *b = ctx;
    if (atomic_load(&b->c->srv->ss->d->stopping))
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "daemon stopping");
    if (b->pull != NULL && atomic_load(&b->pull_failed))
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "the pull failed on another tensor");
    int64_t now_ms = clock_mono_ms();
    if (now_ms >= b->deadline_ms) {
        pthread_mutex_lock(&b->lock);
        b->cut = "time";
        pthread_mutex_unlock(&b->lock);
        return tetris_fail(err, TETRIS_E_TIMEOUT, 0,
                           "request over its time budget of %gs (--ingest-timeout)", b->timeout_s);
    }
    /* One worker polls per interval (the one that moves the mark), and
     * what it finds holds for every later check. */
    int64_t checked_ms = atomic_load(&b->peer_checked_ms);
    if (now_ms - checked_ms >= PEER_CHECK_INTERVAL_MS &&
        atomic_compare_exchange_strong(&b->peer_checked_ms, &checked_ms, now_ms) &&
        peer_gone(b->c->sock))
        atomic_store(&b->client_left, true);
    if (atomic_load(&b->client_left))
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "client hung up");
    return 0;
}

static int digest_cmp(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(tensor_digest));
}

static bool conn_holds(const struct conn *c, const tensor_digest *dg)
{
    return c->n_held > 0 && bsearch(dg, c->held, c->n_held, sizeof(*dg), digest_cmp) != NULL;
}

static int by_digest_cmp(const void *a, const void *b, void *ctx)
{
    const ingest_request *rq = ctx;
    const tensor_digest *x = &rq->tensors[*(const size_t *)a].desc.meta.digest;
    const tensor_digest *y = &rq->tensors[*(const size_t *)b].desc.meta.digest;
    return digest_cmp(x, y);
}

/* The references the connection would hold after this request: at most
 * INGEST_MAX_HOLDER_REFS, checked before anything is read. */
static int check_request_refs(struct conn *c, const ingest_request *rq, tetris_error *err)
{
    cleanup_free size_t *ix = malloc((rq->n_tensors + 1) * sizeof(*ix));
    if (ix == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request of %zu tensors", rq->n_tensors);
    for (size_t i = 0; i < rq->n_tensors; i++)
        ix[i] = i;
    qsort_r(ix, rq->n_tensors, sizeof(*ix), by_digest_cmp, (void *)rq);
    /* An entry without a digest may be any tensor: it counts as a new one. */
    size_t new_refs = 0;
    for (size_t k = 0; k < rq->n_tensors; k++) {
        const tensor_desc *d = &rq->tensors[ix[k]].desc;
        if (!d->has_digest)
            new_refs++;
        else if (k == 0 || !rq->tensors[ix[k - 1]].desc.has_digest ||
                 by_digest_cmp(&ix[k - 1], &ix[k], (void *)rq) != 0)
            new_refs += !conn_holds(c, &d->meta.digest);
    }
    if (c->n_held + new_refs > INGEST_MAX_HOLDER_REFS)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "connection would hold %zu references, over the limit of %d",
                           c->n_held + new_refs, INGEST_MAX_HOLDER_REFS);
    return 0;
}

/* ---- claims ----
 * A claim is a tensor the daemon must read and hash before it knows the
 * bytes are what the client says. While it is read it holds its charge in
 * the store's reserved_bytes, so two claims never count on the same room.
 * Claims that will fail cost others nothing for long:
 *   - what one store's claims, and one uid's, may hold reserved at once is
 *     bounded (--max-unverified-bytes, -per-uid); a claim past its bound
 *     waits for the claims ahead of it (within its request's budget), one
 *     larger than the bound itself is refused;
 *   - a uid whose claim failed verification backs off (peers.c);
 *   - a refusal changes nothing: no claim, refused or failed, makes a pass
 *     evict. A claim may count on the bytes that were cold at the last pass
 *     (the node's and, for its quota, its own store's) as room; once it is
 *     verified and stored, the store is above its capacity and the next
 *     pass, asked for at once, evicts that many cold bytes. */

enum { RESERVED = 0, OVER_LIMIT, OVER_BOUND, WAIT_FOR_CLAIMS };

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* One try at reserving charge for a claim of c (capacity_lock held): 0, or
 * OVER_LIMIT (the quota or the capacity: why says which), OVER_BOUND (the
 * claim alone is larger than an unverified bound) or WAIT_FOR_CLAIMS (the
 * bound is taken by claims in flight). */
static int try_reserve(struct served_store *ss, struct conn *c, const struct budget *b,
                       uint64_t charge, char *why, size_t why_len)
{
    struct store_bytes others = {0};
    if (b->capacity > 0)
        daemon_other_stores_bytes(ss->d, ss, &others);
    pthread_mutex_lock(&ss->index_lock);
    uint64_t own = ss->resident_bytes + ss->reserved_bytes;
    uint64_t own_cold = store_evictable_bytes(ss);
    uint64_t node = sat_add(sat_add(others.resident, others.reserved), own);
    int rc = RESERVED;
    if (b->quota > 0 && sat_add(own, charge) > sat_add(b->quota, own_cold)) {
        snprintf(why, why_len, "%s quota full (%llu of %llu bytes used)",
                 ss->tenant[0] != '\0' ? "tenant" : "shared store", (unsigned long long)own,
                 (unsigned long long)b->quota);
        rc = OVER_LIMIT;
    } else if (b->capacity > 0 &&
               sat_add(node, charge) > sat_add(b->capacity, sat_add(others.evictable, own_cold))) {
        snprintf(why, why_len, "store full (capacity %llu bytes)", (unsigned long long)b->capacity);
        rc = OVER_LIMIT;
    } else if ((b->max_unverified > 0 && charge > b->max_unverified) ||
               (b->max_unverified_uid > 0 && charge > b->max_unverified_uid)) {
        snprintf(why, why_len,
                 "a claim of %llu bytes is larger than the bytes a store or uid may have "
                 "unverified (--max-unverified-bytes %llu, -per-uid %llu)",
                 (unsigned long long)charge, (unsigned long long)b->max_unverified,
                 (unsigned long long)b->max_unverified_uid);
        rc = OVER_BOUND;
    } else if ((b->max_unverified > 0 && ss->reserved_bytes + charge > b->max_unverified) ||
               (b->max_unverified_uid > 0 &&
                c->peer->unverified_bytes + charge > b->max_unverified_uid)) {
        rc = WAIT_FOR_CLAIMS;
    }
    if (rc == RESERVED) {
        ss->reserved_bytes += charge;
        c->peer->unverified_bytes += charge;
    }
    pthread_mutex_unlock(&ss->index_lock);
    return rc;
}

/* Reserves room for a claim, waiting while the unverified bounds are taken
 * by claims in flight. 0, or the error the claim is rejected with. */
static int reserve(struct served_store *ss, struct budget *b, uint64_t charge, tetris_error *err)
{
    struct daemon *d = ss->d;
    char why[INGEST_REASON_MAX];
    pthread_mutex_lock(&d->capacity_lock);
    int rc;
    while ((rc = try_reserve(ss, b->c, b, charge, why, sizeof(why))) == WAIT_FOR_CLAIMS) {
        /* Woken when a claim ends; the slice bounds how late a deadline,
         * a hang-up or a stop is seen. */
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 200 * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&d->capacity_freed, &d->capacity_lock, &until);
        pthread_mutex_unlock(&d->capacity_lock);
        int brc = budget_check(b, err);
        if (brc < 0)
            return brc;
        pthread_mutex_lock(&d->capacity_lock);
    }
    pthread_mutex_unlock(&d->capacity_lock);
    if (rc == OVER_LIMIT)
        return tetris_fail(err, TETRIS_E_FULL, 0, "%s", why);
    if (rc == OVER_BOUND)
        return tetris_fail(err, TETRIS_E_DENIED, 0, "%s", why);
    return 0;
}

/* Raises the entry's fresh count for b (index_lock held). Without room to
 * remember it the entry is left as it is: the request then only loses the
 * protection, never leaves a count behind. */
static void mark_fresh(struct served_store *ss, struct budget *b, const tensor_digest *dg)
{
    struct index_entry *e = tensor_index_find(ss->index, dg);
    if (e == NULL)
        return;
    pthread_mutex_lock(&b->lock);
    if (b->n_fresh == b->cap_fresh) {
        size_t cap = b->cap_fresh ? b->cap_fresh * 2 : 16;
        tensor_digest *l = realloc(b->fresh, cap * sizeof(*l));
        if (l == NULL) {
            pthread_mutex_unlock(&b->lock);
            return;
        }
        b->fresh = l;
        b->cap_fresh = cap;
    }
    b->fresh[b->n_fresh++] = *dg;
    e->fresh++;
    pthread_mutex_unlock(&b->lock);
}

/* The request is over (its references recorded, or not at all): what it
 * published is judged by references alone again. */
static void budget_end(struct served_store *ss, struct budget *b)
{
    pthread_mutex_lock(&ss->index_lock);
    for (size_t i = 0; i < b->n_fresh; i++) {
        struct index_entry *e = tensor_index_find(ss->index, &b->fresh[i]);
        if (e != NULL && e->fresh > 0)
            e->fresh--;
    }
    pthread_mutex_unlock(&ss->index_lock);
    free(b->fresh);
    b->fresh = NULL;
    b->n_fresh = b->cap_fresh = 0;
}

/* Ends a claim: its charge leaves the store's reserved bytes (a stored one
 * has become resident under the same index_lock, so no one sees the room
 * meanwhile) and its uid's; claims waiting for the bound are woken. */
static void end_claim(struct served_store *ss, struct conn *c, struct budget *b, uint64_t charge,
                      const tensor_meta *stored)
{
    struct daemon *d = ss->d;
    pthread_mutex_lock(&d->capacity_lock);
    pthread_mutex_lock(&ss->index_lock);
    if (stored != NULL) {
        tetris_error ierr;
        if (store_index_add(ss, stored, charge, clock_wall_ms() / 1000, &ierr) < 0)
            log_warn("event=index-add-failed msg=%s", LOG_Q(ierr.msg));
        else
            mark_fresh(ss, b, &stored->digest);
    }
    ss->reserved_bytes -= charge;
    pthread_mutex_unlock(&ss->index_lock);
    c->peer->unverified_bytes -= charge;
    pthread_cond_broadcast(&d->capacity_freed);
    pthread_mutex_unlock(&d->capacity_lock);
}

/* After a verified claim: a store above its quota, or a node above its
 * capacity (the claim counted on cold bytes), asks for the pass that
 * evicts them now. */
static void want_pass_if_over(struct served_store *ss, const struct budget *b)
{
    struct store_bytes others = {0};
    if (b->capacity > 0)
        daemon_other_stores_bytes(ss->d, ss, &others);
    pthread_mutex_lock(&ss->index_lock);
    uint64_t own = ss->resident_bytes;
    pthread_mutex_unlock(&ss->index_lock);
    if ((b->quota > 0 && own > b->quota) ||
        (b->capacity > 0 && sat_add(others.resident, own) > b->capacity))
        atomic_store(&ss->d->pass_wanted, true);
}

static void reject(struct served_store *ss, struct ingest_tensor_result *r, int code,
                   const char *reason)
{
    r->status = INGEST_REJECTED;
    r->code = code;
    snprintf(r->reason, sizeof(r->reason), "%.*s", (int)sizeof(r->reason) - 1, reason);
    atomic_fetch_add(&ss->counters.ingest_rejected, 1);
}

/* A claim of c's uid failed verification: the uid backs off (peers.c). */
static void claim_failed(struct served_store *ss, struct conn *c, const tensor_desc *t,
                         const tetris_error *why)
{
    int64_t delay_ms = peer_claim_failed(ss->d, c->peer);
    atomic_fetch_add(&ss->counters.claims_failed, 1);
    log_warn("event=claim-failed tenant=%s pid=%d uid=%u tensor=%s code=%s msg=%s "
             "action=backoff delay_ms=%lld",
             tenant_name(ss), (int)c->pid, (unsigned)c->uid, LOG_Q(t->name),
             tetris_code_name(why->code), LOG_Q(why->msg), (long long)delay_ms);
}

/* Publishes one tensor if it is missing. Takes no store-wide lock: the
 * client's bytes are read under the tensor's own lock, within the budget.
 * An entry without a digest is read, hashed and written in one pass and
 * its digest filled in (t->desc, r): it is a claim like a missing tensor,
 * since only its bytes can tell it is not. */
static void publish_one(struct served_store *ss, const int *fds, ingest_request_tensor *t,
                        struct budget *b, struct ingest_tensor_result *r)
{
    struct conn *c = b->c;
    const tensor_meta *meta = &t->desc.meta;
    bool computed = !t->desc.has_digest;
    if (!computed && store_has_tensor(ss->store, &meta->digest)) {
        r->status = INGEST_RESIDENT;
        return;
    }
    tetris_error err;
    int rc = budget_check(b, &err);
    if (rc != 0) {
        reject(ss, r, -rc, err.msg);
        return;
    }
    int64_t backoff_ms = peer_backoff_left_ms(ss->d, c->peer);
    if (backoff_ms > 0) {
        atomic_fetch_add(&ss->counters.claims_backed_off, 1);
        snprintf(err.msg, sizeof(err.msg),
                 "claims of this uid are refused for %lld ms more: earlier ones failed "
                 "verification",
                 (long long)backoff_ms);
        reject(ss, r, TETRIS_E_DENIED, err.msg);
        return;
    }
    uint64_t charge = store_tensor_charge(meta->nbytes);
    rc = reserve(ss, b, charge, &err);
    if (rc < 0) {
        reject(ss, r, -rc, err.msg);
        return;
    }
    rc = budget_spend(b, &t->desc, &err);
    if (rc < 0) {
        end_claim(ss, c, b, charge, NULL);
        reject(ss, r, -rc, err.msg);
        return;
    }
    bool published = false;
    if (b->pull != NULL) {
        rc = pull_publish_tensor(b->pull, &t->desc, budget_check, b, &published, &err);
    } else if (computed) {
        rc = model_publish_tensor_computed(ss->store, &t->desc, fds[t->source_index], budget_check,
                                           b, b->publish_flags, &published, &err);
        r->has_digest = rc == 0;
        r->digest = meta->digest;
        r->crc32 = meta->crc32;
    } else {
        rc = model_publish_tensor_checked(ss->store, &t->desc, fds[t->source_index], budget_check,
                                          b, &published, &err);
    }
    if (rc < 0 || !published) {
        end_claim(ss, c, b, charge, NULL);
        /* A registry's wrong bytes are not the uid's claim: no backoff. */
        if ((rc == -TETRIS_E_CORRUPT || rc == -TETRIS_E_FORMAT) && b->pull == NULL)
            claim_failed(ss, c, &t->desc, &err);
        if (rc < 0)
            reject(ss, r, -rc, err.msg);
        else
            r->status = INGEST_RESIDENT; /* resident already, or published meanwhile */
        return;
    }
    r->status = INGEST_INGESTED;
    pthread_mutex_lock(&b->lock);
    b->ingested += meta->nbytes;
    pthread_mutex_unlock(&b->lock);
    atomic_fetch_add(&ss->counters.ingest_tensors, 1);
    atomic_fetch_add(&ss->counters.ingest_bytes, meta->nbytes);
    end_claim(ss, c, b, charge, meta);
    want_pass_if_over(ss, b);
}

/* Random processing order, so concurrent clients loading one model do not
 * all queue on the same tensor lock. */
static int by_size_descending(const void *a, const void *b, void *ctx)
{
    const ingest_request *rq = ctx;
    uint64_t x = rq->tensors[*(const size_t *)a].desc.meta.nbytes;
    uint64_t y = rq->tensors[*(const size_t *)b].desc.meta.nbytes;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The order a request's tensors are handed to its workers: largest first,
 * so no worker is left hashing a big embedding alone at the end (a
 * tensor is hashed by one thread), and in random order among tensors of one
 * size, which a model has many of, so concurrent loaders of one model meet
 * on few tensor locks. */
static void publish_order(const ingest_request *rq, size_t *order, unsigned *seed)
{
    size_t n = rq->n_tensors;
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rand_r(seed) % i;
        size_t tmp = order[i - 1];
        order[i - 1] = order[j];
        order[j] = tmp;
    }
    qsort_r(order, n, sizeof(*order), by_size_descending, (void *)rq);
}

/* Records the connection's references to the tensors of this request that
 * are resident (use_lock held: none can be removed meanwhile), each digest
 * once per connection: a client that repeats a request, or lists a tensor
 * twice, does not grow its holder (the bytes of a digest's first request
 * stand for what the client maps of it). The holder is created with the first
 * reference, so a connection that holds nothing has none. */
static int record_refs(struct conn *c, const ingest_request *rq,
                       const struct ingest_tensor_result *res, tetris_error *err)
{
    struct served_store *ss = c->srv->ss;
    cleanup_free size_t *ix = malloc((rq->n_tensors + 1) * sizeof(*ix));
    cleanup_free tensor_digest *digests = malloc((rq->n_tensors + 1) * sizeof(*digests));
    cleanup_free uint64_t *bytes = malloc((rq->n_tensors + 1) * sizeof(*bytes));
    tensor_digest *held = realloc(c->held, (c->n_held + rq->n_tensors + 1) * sizeof(*held));
    if (held != NULL)
        c->held = held;
    if (ix == NULL || digests == NULL || bytes == NULL || held == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "references");
    size_t m = 0;
    for (size_t i = 0; i < rq->n_tensors; i++)
        if (res[i].status != INGEST_REJECTED && !conn_holds(c, &rq->tensors[i].desc.meta.digest))
            ix[m++] = i;
    qsort_r(ix, m, sizeof(*ix), by_digest_cmp, (void *)rq);
    /* A tensor listed twice is mapped twice (logical bytes), but is one
     * reference: one line, with the bytes of both. */
    size_t n = 0;
    for (size_t k = 0; k < m; k++) {
        uint64_t b = rq->tensors[ix[k]].desc.meta.nbytes;
        if (k > 0 && by_digest_cmp(&ix[k - 1], &ix[k], (void *)rq) == 0) {
            bytes[n - 1] = b > UINT64_MAX - bytes[n - 1] ? UINT64_MAX : bytes[n - 1] + b;
            continue;
        }
        digests[n] = rq->tensors[ix[k]].desc.meta.digest;
        bytes[n++] = b;
    }
    if (n == 0)
        return 0;
    if (c->holder == NULL) {
        int rc = store_holder_open(ss->store, rq->label, c->pid, &c->holder, err);
        if (rc < 0)
            return rc;
    }
    int rc = store_holder_add_many(c->holder, digests, bytes, n, err);
    if (rc < 0)
        return rc;
    memcpy(c->held + c->n_held, digests, n * sizeof(*digests));
    c->n_held += n;
    store_sort_refs(c->held, c->n_held);
    int64_t now_s = clock_wall_ms() / 1000;
    pthread_mutex_lock(&ss->index_lock);
    for (size_t i = 0; i < n; i++)
        store_index_touch(ss, &digests[i], now_s);
    pthread_mutex_unlock(&ss->index_lock);
    /* A client that outlived a daemon restart registers again; the holder
     * adopted for it at start-up would count it twice. Its references are
     * recorded above, so releasing that holder now leaves nothing
     * unreferenced. One per connection: one connection, one holder. */
    if (!c->replaced_adopted)
        c->replaced_adopted = store_replace_adopted(ss, c->pid, rq->label, c->held, c->n_held);
    return 0;
}

static void observe_duration(struct served_store *ss, int64_t us)
{
    double s = (double)us / 1e6;
    size_t b = 0;
    while (b < INGEST_DURATION_BUCKETS && s > ingest_duration_bounds[b])
        b++;
    atomic_fetch_add(&ss->counters.ingest_duration_bucket[b], 1);
    atomic_fetch_add(&ss->counters.ingest_duration_us, (uint64_t)us);
}

/* Tensors a reclaim pass may evict between their publishing and their
 * reference are published again, this many times at most. */
#define PUBLISH_ATTEMPTS 3

/* One request's tensors to publish, handed out to its workers in order. */
struct publish_job {
    struct served_store *ss;
    ingest_request *rq;
    const int *fds;
    const size_t *order;
    const bool *todo;
    struct budget *b;
    struct ingest_tensor_result *res;
};

static void publish_item(void *ctx, size_t k)
{
    const struct publish_job *j = ctx;
    size_t i = j->order[k];
    if (!j->todo[i])
        return;
    publish_one(j->ss, j->fds, &j->rq->tensors[i], j->b, &j->res[i]);
    /* The first rejection of a pull is its failure; the later ones are
     * its other tensors abandoned (budget_check). */
    if (j->b->pull != NULL && j->res[i].status == INGEST_REJECTED) {
        pthread_mutex_lock(&j->b->lock);
        if (!atomic_load(&j->b->pull_failed)) {
            j->b->pull_failure = i;
            atomic_store(&j->b->pull_failed, true);
        }
        pthread_mutex_unlock(&j->b->lock);
    }
}

/* Checks under the use lock (shared) which tensors are resident; while
 * some are not, publishes them without any store-wide lock, on the
 * request's share of the daemon's workers, and checks again; then records
 * the references (an entry sent without a digest has the one computed by
 * then). Only the checks exclude a reclaim pass, and they do no client
 * I/O. Checking first makes a warm start (every tensor resident) one pass
 * over the tensor files, with no workers: at a few hundred tensors that
 * pass and the threads were most of the daemon's part of a small model's
 * start (BENCHMARKS.md, "Small models"). *held counts the tensors (with
 * bytes) the first check found resident: what the store held of the model
 * before this request published anything (an entry sent without a digest
 * counts as not held). */
static int publish_and_refer(struct conn *c, ingest_request *rq, const int *fds, struct budget *b,
                             struct ingest_tensor_result *res, size_t *held, tetris_error *err)
{
    struct served_store *ss = c->srv->ss;
    cleanup_free size_t *order = malloc((rq->n_tensors + 1) * sizeof(*order));
    cleanup_free bool *todo = malloc((rq->n_tensors + 1) * sizeof(*todo));
    if (order == NULL || todo == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request of %zu tensors", rq->n_tensors);
    unsigned seed = (unsigned)clock_mono_us() ^ (unsigned)c->pid;
    publish_order(rq, order, &seed);
    struct publish_job job = {
        .ss = ss, .rq = rq, .fds = fds, .order = order, .todo = todo, .b = b, .res = res};
    for (int runs = 0;; runs++) {
        pthread_rwlock_rdlock(&ss->use_lock);
        size_t missing = 0;
        for (size_t i = 0; i < rq->n_tensors; i++) {
            const tensor_desc *t = &rq->tensors[i].desc;
            todo[i] = res[i].status != INGEST_REJECTED &&
                      (!t->has_digest || !store_tensor_present(ss->store, &t->meta.digest));
            missing += todo[i];
            if (runs == 0)
                *held += !todo[i] && t->meta.nbytes > 0;
        }
        if (missing > 0 && runs < PUBLISH_ATTEMPTS) {
            pthread_rwlock_unlock(&ss->use_lock);
            if (b->pull != NULL)
                workers_run(rq->n_tensors, b->pull_threads, NULL, publish_item, &job);
            else
                workers_run(rq->n_tensors, ss->d->workers, &ss->d->ingest_slots, publish_item,
                            &job);
            continue;
        }
        size_t rejected = 0;
        for (size_t i = 0; i < rq->n_tensors; i++) {
            if (todo[i])
                reject(ss, &res[i], TETRIS_E_UNAVAILABLE, "evicted before it was referenced");
            rejected += res[i].status == INGEST_REJECTED;
        }
        int rc = atomic_load(&ss->d->stopping)
                     ? tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "daemon stopping")
                 : b->pull != NULL && rejected > 0 ? 0 /* the caller fails it: no references */
                                                   : record_refs(c, rq, res, err);
        pthread_rwlock_unlock(&ss->use_lock);
        return rc;
    }
}

/* The resident tensors a request names are no room for its claims (nor
 * anyone's): it is about to reference them. */
static void warm_requested(struct served_store *ss, const ingest_request *rq)
{
    pthread_mutex_lock(&ss->index_lock);
    for (size_t i = 0; i < rq->n_tensors; i++)
        if (rq->tensors[i].desc.has_digest)
            store_index_warm(ss, &rq->tensors[i].desc.meta.digest);
    pthread_mutex_unlock(&ss->index_lock);
}

static int handle_ingest(struct conn *c, ingest_request *rq, const int *fds, char **reply,
                         tetris_error *err)
{
    struct served_store *ss = c->srv->ss;
    int64_t t0 = clock_mono_us();
    struct budget b;
    budget_init(c, &b);
    int rc = check_sources(rq, fds, err);
    if (rc < 0)
        return rc;
    rc = check_request_refs(c, rq, err);
    if (rc < 0) {
        atomic_fetch_add(&ss->counters.ingest_over_budget, 1);
        return rc;
    }
    cleanup_free struct ingest_tensor_result *res = calloc(rq->n_tensors + 1, sizeof(*res));
    if (res == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request of %zu tensors", rq->n_tensors);
    atomic_fetch_add(&ss->counters.ingests_active, 1);
    warm_requested(ss, rq);
    pthread_mutex_init(&b.lock, NULL);
    size_t held = 0;
    rc = publish_and_refer(c, rq, fds, &b, res, &held, err);
    budget_end(ss, &b);
    pthread_mutex_destroy(&b.lock);
    uint64_t ingested_bytes = b.ingested;
    atomic_fetch_sub(&ss->counters.ingests_active, 1);
    if (rc == 0) {
        *reply = ingest_reply_encode(c->holder ? store_holder_id(c->holder) : "", ingested_bytes,
                                     res, rq->n_tensors);
        if (*reply == NULL)
            rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "reply");
    }
    size_t ingested = 0, rejected = 0, shareable = 0;
    for (size_t i = 0; i < rq->n_tensors; i++) {
        ingested += res[i].status == INGEST_INGESTED;
        rejected += res[i].status == INGEST_REJECTED;
        shareable += rq->tensors[i].desc.meta.nbytes > 0;
    }
    atomic_fetch_add(&ss->counters.ingest_requests, 1);
    if (b.cut != NULL) {
        atomic_fetch_add(&ss->counters.ingest_over_budget, 1);
        log_warn("event=ingest-over-budget tenant=%s pid=%d uid=%u budget=%s budget_s=%g "
                 "budget_bytes=%llu",
                 tenant_name(ss), (int)c->pid, (unsigned)c->uid, b.cut, b.timeout_s,
                 (unsigned long long)b.max_bytes);
    }
    int64_t us = clock_mono_us() - t0;
    observe_duration(ss, us);
    if (rc == 0)
        starts_record(ss, rq->label, held, shareable, us);
    if (rejected == 0) {
        log_info("event=ingest tenant=%s pid=%d uid=%u label=%s tensors=%zu ingested=%zu "
                 "rejected=0 bytes=%llu",
                 tenant_name(ss), (int)c->pid, (unsigned)c->uid, LOG_Q(rq->label), rq->n_tensors,
                 ingested, (unsigned long long)ingested_bytes);
        return rc;
    }
    /* The client loads the rejected tensors privately; the node's log says
     * why (a full filesystem, the capacity, a budget) once per request. */
    size_t first = 0;
    while (res[first].status != INGEST_REJECTED)
        first++;
    log_warn("event=ingest tenant=%s pid=%d uid=%u label=%s tensors=%zu ingested=%zu "
             "rejected=%zu bytes=%llu code=%s msg=%s",
             tenant_name(ss), (int)c->pid, (unsigned)c->uid, LOG_Q(rq->label), rq->n_tensors,
             ingested, rejected, (unsigned long long)ingested_bytes,
             tetris_code_name(res[first].code), LOG_Q(res[first].reason));
    return rc;
}

/* An agent that fell back says so once per connection (the metric counts
 * instances, not messages); its uid's log lines are rate-limited (peers.c),
 * so no pod floods the node's log. */
static int handle_fallback(struct conn *c, const ingest_request *rq, char **reply,
                           tetris_error *err)
{
    struct served_store *ss = c->srv->ss;
    if (c->fallback_reported)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "one fallback report per connection (this one has reported)");
    c->fallback_reported = true;
    atomic_fetch_add(&ss->counters.fallbacks, 1);
    uint64_t suppressed = 0;
    if (peer_fallback_logged(ss->d, c->peer, &suppressed)) {
        log_warn("event=agent-fallback tenant=%s pid=%d uid=%u label=%s reason=%s "
                 "suppressed=%llu",
                 tenant_name(ss), (int)c->pid, (unsigned)c->uid, LOG_Q(rq->label),
                 LOG_Q(rq->reason), (unsigned long long)suppressed);
    }
    *reply = ingest_ack_encode();
    if (*reply == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "reply");
    return 0;
}

/* Device copies of tensors the connection references. A refusal of the
 * whole request that concerns only the GPU is answered with an error but
 * keeps the connection, and with it the host references. */
static int handle_gpu_attach(struct conn *c, const ingest_request *rq, char **reply, int *out_fds,
                             size_t *n_out, tetris_error *err)
{
    struct served_store *ss = c->srv->ss;
    tetris_error gerr;
    int rc = 0;
    for (size_t i = 0; i < rq->n_digests && rc == 0; i++)
        if (!conn_holds(c, &rq->digests[i])) {
            char hex[TENSOR_DIGEST_HEX_LEN + 1];
            tensor_digest_to_hex(&rq->digests[i], hex);
            rc = tetris_fail(&gerr, TETRIS_E_INVAL, 0,
                             "digests[%zu] (sha256:%.12s...) is not referenced by this connection "
                             "(ingest it first)",
                             i, hex);
        }
    struct ingest_gpu_result res[INGEST_MAX_GPU_TENSORS];
    if (rc == 0)
        rc = gpu_pool_attach(daemon_gpu_pool(), ss, rq->device, rq->digests, rq->n_digests, &c->gpu,
                             res, out_fds, n_out, &gerr);
    if (rc < 0) {
        atomic_fetch_add(&ss->counters.ingest_errors, 1);
        log_warn("event=gpu-attach-refused tenant=%s pid=%d device=%s code=%s msg=%s",
                 tenant_name(ss), (int)c->pid, LOG_Q(rq->device), tetris_code_name(gerr.code),
                 LOG_Q(gerr.msg));
        *reply = ingest_error_encode(gerr.code, gerr.msg);
    } else {
        size_t rejected = rq->n_digests - *n_out;
        log_info("event=gpu-attach tenant=%s pid=%d device=%s tensors=%zu rejected=%zu",
                 tenant_name(ss), (int)c->pid, LOG_Q(rq->device), rq->n_digests, rejected);
        *reply = ingest_gpu_reply_encode(rq->device, res, rq->n_digests);
    }
    if (*reply == NULL) {
        for (size_t i = 0; i < *n_out; i++)
            close(out_fds[i]);
        *n_out = 0;
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "reply");
    }
    return 0;
}

/* Publishes a made form's outputs (the graph, the data, the ORT-format
 * part if made) as claims of this connection (charged, verified and
 * budgeted like any) and fills e's parts. */
static int publish_derived(struct conn *c, const struct derive_output *out, derived_entry *e,
                           tetris_error *err)
{
    struct served_store *ss = c->srv->ss;
    ingest_request_tensor parts[DERIVED_PARTS] = {0};
    struct ingest_tensor_result res[DERIVED_PARTS] = {0};
    int part_fds[DERIVED_PARTS] = {out->graph_fd, out->data_fd, out->ort_fd};
    struct derived_part *p[DERIVED_PARTS] = {&e->graph, &e->data, &e->ort};
    e->has_ort = out->ort_fd >= 0;
    for (size_t i = 0; i < derived_entry_parts(e); i++) {
        struct stat st;
        if (fstat(part_fds[i], &st) != 0 || st.st_size <= 0)
            return tetris_fail(err, TETRIS_E_RUNTIME, errno, "derive: empty output");
        tensor_desc *t = &parts[i].desc;
        t->name = derived_part_label(i);
        snprintf(t->meta.dtype, sizeof(t->meta.dtype), "uint8");
        t->meta.ndim = 1;
        t->meta.shape[0] = st.st_size;
        t->meta.nbytes = t->length = (uint64_t)st.st_size;
        t->encoding = TENSOR_ENC_RAW;
        parts[i].source_index = i;
        struct budget b;
        budget_init(c, &b);
        b.publish_flags = STORE_PUBLISH_SMALL_PAGES;
        /* The daemon hashes the form's bytes as it writes them: no claim
         * that could fail verification, so the bounds on unverified bytes
         * (which keep a pod's failing claims from filling the store) do
         * not apply; the capacity and the quota do. A form's data is one
         * tensor, over a uid's bound for some models (VGG19's: 1.07 GB
         * against 0.79 GB on a 12 GB tmpfs). */
        b.max_unverified = b.max_unverified_uid = 0;
        publish_one(ss, part_fds, &parts[i], &b, &res[i]);
        budget_end(ss, &b);
        /* The ORT-format part is a faster start, not the form: a store
         * without room for it keeps the form without it. */
        if (res[i].status == INGEST_REJECTED && i == DERIVED_PART_ORT) {
            log_warn("event=derive-ort-dropped tenant=%s pid=%d code=%s msg=%s", tenant_name(ss),
                     (int)c->pid, tetris_code_name(res[i].code), LOG_Q(res[i].reason));
            e->has_ort = false;
            break;
        }
        if (res[i].status == INGEST_REJECTED)
            return tetris_fail(err, res[i].code, 0, "derive: %s: %s", t->name, res[i].reason);
        *p[i] = (struct derived_part){.digest = t->meta.digest,
                                      .nbytes = t->meta.nbytes,
                                      .crc32 = t->meta.crc32};
    }
    return 0;
}

/* Makes the form of the sealed image (named source) and writes its index
 * entry e. */
static int make_derived(struct conn *c, const char *transform, int image_fd,
                        const tensor_digest *source, const struct derive_runtime *rt,
                        derived_entry *e, struct derive_output *out, tetris_error *err)
{
    struct served_store *ss = c->srv->ss;
    const char *public_dir = store_public_dir(ss->store);
    int rc = derive_make(store_root(ss->store), public_dir, image_fd, source, rt,
                         c->srv->stop_pipe[0], out, err);
    if (rc == 0)
        rc = publish_derived(c, out, e, err);
    if (rc == 0) {
        snprintf(e->transform, sizeof(e->transform), "%s", transform);
        snprintf(e->runtime, sizeof(e->runtime), "%s", out->runtime);
        snprintf(e->cpu, sizeof(e->cpu), "%s", out->cpu);
        snprintf(e->data_location, sizeof(e->data_location), "%s", DERIVED_DATA_LOCATION);
        e->source = *source;
        derived_identity(e->transform, e->runtime, e->cpu, &e->source, &e->identity);
        rc = derive_write_entry(public_dir, e, err);
    }
    derive_output_close(out);
    return rc;
}

/* A derived form of the share image behind fds[0] (protocol/derived.h),
 * made by the runtime the request names among the daemon's (derive.h).
 * The source is claimed first (derive.c): a concurrent ask for it waits
 * for the derivation under way and then finds its entry. A form already
 * there for this transform, that runtime and this CPU is the answer;
 * otherwise tetris-derive makes one (make_derived). Failures are the
 * error reply with the connection kept open: they concern only this
 * derivation. */
static int handle_derive(struct conn *c, const ingest_request *rq, const int *fds, char **reply,
                         tetris_error *err)
{
    struct served_store *ss = c->srv->ss;
    struct derive_runtime rt = {0};
    char cpu[DERIVED_NAME_MAX], source[TENSOR_DIGEST_HEX_LEN + 1];
    struct derive_output out = {.graph_fd = -1, .data_fd = -1, .ort_fd = -1};
    struct derive_claim claim;
    tensor_digest digest = {0};
    cleanup_close int image_fd = -1;
    derived_entry e = {0};
    tetris_error derr = {0};
    bool existing = false;
    int64_t t0 = clock_mono_ms();
    int rc = derive_copy_image(fds[0], &image_fd, &digest, &derr);
    if (rc == 0) {
        derive_claim(&claim, &digest);
        /* Fixed at start (a flag only): read without the config lock. */
        rc = derive_runtime(&ss->d->cfg.derive_runtimes, rq->runtime, c->srv->stop_pipe[0], &rt,
                            &derr);
        if (rc == 0)
            rc = derived_cpu_features(cpu, sizeof(cpu), &derr);
        if (rc == 0)
            existing = derive_find(ss->store, &digest, rq->transform, rt.name, cpu, &e);
        if (rc == 0 && !existing)
            rc = make_derived(c, rq->transform, image_fd, &digest, &rt, &e, &out, &derr);
        derive_release(&claim);
    }
    tensor_digest_to_hex(&digest, source);
    if (rc < 0) {
        atomic_fetch_add(&ss->counters.derive_failures, 1);
        log_warn("event=derive-failed tenant=%s pid=%d label=%s code=%s msg=%s", tenant_name(ss),
                 (int)c->pid, LOG_Q(rq->label), tetris_code_name(-rc), LOG_Q(derr.msg));
        *reply = ingest_error_encode(-rc, derr.msg);
    } else if (existing) {
        log_info("event=derive-existing tenant=%s pid=%d label=%s source=%s runtime=%s "
                 "waited_ms=%lld",
                 tenant_name(ss), (int)c->pid, LOG_Q(rq->label), source, LOG_Q(rt.name),
                 (long long)(clock_mono_ms() - t0));
        *reply = ingest_ack_encode();
    } else {
        atomic_fetch_add(&ss->counters.derived_forms, 1);
        log_info("event=derived tenant=%s pid=%d label=%s source=%s runtime=%s graph_bytes=%llu "
                 "data_bytes=%llu prepacked_bytes=%llu ort_bytes=%llu took_ms=%lld "
                 "child_uid=%lld child_gid=%lld child_capabilities=%s",
                 tenant_name(ss), (int)c->pid, LOG_Q(rq->label), source, LOG_Q(out.runtime),
                 (unsigned long long)e.graph.nbytes, (unsigned long long)e.data.nbytes,
                 (unsigned long long)out.prepacked_bytes,
                 (unsigned long long)(e.has_ort ? e.ort.nbytes : 0), (long long)out.took_ms,
                 out.uid, out.gid, out.capabilities ? "some" : "none");
        *reply = ingest_ack_encode();
    }
    if (*reply == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "reply");
    return 0;
}

/* ---- pull: a model from a registry (pull.h) ---- */

static int by_tensor_digest(const void *a, const void *b)
{
    const tensor_desc *x = *(const tensor_desc *const *)a, *y = *(const tensor_desc *const *)b;
    return digest_cmp(&x->meta.digest, &y->meta.digest);
}

/* The request a pull publishes and refers: one entry per tensor layer
 * (distinct identities), each its first tensor of the model (names and
 * metas borrowed from plan->model: free only rq->tensors). */
static int pull_request(const struct pull_plan *plan, const char *label, ingest_request *rq,
                        tetris_error *err)
{
    const model *m = plan->model;
    const oci_artifact *a = plan->artifact;
    cleanup_free const tensor_desc **by_digest = malloc((m->n_tensors + 1) * sizeof(*by_digest));
    rq->tensors = calloc(a->n_tensors + 1, sizeof(*rq->tensors));
    if (by_digest == NULL || rq->tensors == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "pull of %zu tensors", a->n_tensors);
    for (size_t i = 0; i < m->n_tensors; i++)
        by_digest[i] = &m->tensors[i];
    qsort(by_digest, m->n_tensors, sizeof(*by_digest), by_tensor_digest);
    for (size_t k = 0; k < a->n_tensors; k++) {
        tensor_desc key = {.meta.digest = a->tensors[k].digest};
        const tensor_desc *pk = &key;
        const tensor_desc **t = bsearch(&pk, by_digest, m->n_tensors, sizeof(*by_digest),
                                        by_tensor_digest);
        /* oci_artifact_check_model: the config names exactly the layers. */
        assert(t != NULL);
        rq->tensors[k].desc = **t;
        rq->tensors[k].desc.length = (*t)->meta.nbytes;
    }
    rq->n_tensors = a->n_tensors;
    rq->op = INGEST_OP_PULL;
    rq->label = (char *)label;
    return 0;
}

static void observe_pull(struct daemon *d, int64_t us, int rc)
{
    struct pull_counters *p = &d->pull;
    if (rc < 0) {
        atomic_fetch_add(&p->failures[pull_failure_of(rc)], 1);
        return;
    }
    double s = (double)us / 1e6;
    size_t b = 0;
    while (b < PULL_DURATION_BUCKETS && s > pull_duration_bounds[b])
        b++;
    atomic_fetch_add(&p->duration_bucket[b], 1);
    atomic_fetch_add(&p->duration_us, (uint64_t)us);
}

/* A pull that failed holds no reference (publish_and_refer records none
 * once a tensor was rejected), and what it published goes again unless
 * something else wants it by now (store_withdraw): the store is as it was
 * before the pull. Once its references are recorded the tensors are the
 * connection's, whatever becomes of the reply. */
static void withdraw_published(struct conn *c, struct budget *b, const char *label)
{
    struct served_store *ss = c->srv->ss;
    if (b->n_fresh == 0)
        return;
    struct withdrawal w;
    tetris_error err;
    if (store_withdraw(ss, b->fresh, b->n_fresh, &w, &err) < 0) {
        /* They stay, unreferenced: the passes free them as cold tensors. */
        log_warn("event=pull-withdraw-failed tenant=%s pid=%d label=%s tensors=%zu code=%s "
                 "msg=%s",
                 tenant_name(ss), (int)c->pid, LOG_Q(label), b->n_fresh, tetris_code_name(err.code),
                 LOG_Q(err.msg));
        return;
    }
    log_info("event=pull-withdrawn tenant=%s pid=%d label=%s tensors=%zu bytes=%llu kept=%zu",
             tenant_name(ss), (int)c->pid, LOG_Q(label), w.tensors, (unsigned long long)w.bytes,
             w.kept);
}

/* Fetches and publishes the tensors the store lacks, refers to all. */
static int pull_tensors(struct conn *c, struct pull_plan *plan, const char *label, unsigned threads,
                        int64_t t0, struct ingest_pull_result *out, tetris_error *err)
{
    struct served_store *ss = c->srv->ss;
    ingest_request prq = {0};
    int rc = pull_request(plan, label, &prq, err);
    cleanup_free ingest_request_tensor *tensors = prq.tensors;
    if (rc == 0)
        rc = check_request_refs(c, &prq, err);
    cleanup_free struct ingest_tensor_result *res = rc == 0
                                                        ? calloc(prq.n_tensors + 1, sizeof(*res))
                                                        : NULL;
    if (rc == 0 && res == NULL)
        rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "pull of %zu tensors", prq.n_tensors);
    if (rc < 0)
        return rc;
    struct budget b;
    budget_init(c, &b);
    b.pull = plan;
    b.pull_threads = threads;
    atomic_fetch_add(&ss->counters.ingests_active, 1);
    warm_requested(ss, &prq);
    pthread_mutex_init(&b.lock, NULL);
    size_t held = 0;
    rc = publish_and_refer(c, &prq, NULL, &b, res, &held, err);
    /* Its failure: the first tensor rejected, else (evicted before it was
     * referenced) the first in order. */
    size_t failed = atomic_load(&b.pull_failed) ? b.pull_failure : prq.n_tensors;
    for (size_t k = 0; failed == prq.n_tensors && k < prq.n_tensors; k++)
        if (res[k].status == INGEST_REJECTED)
            failed = k;
    if (rc == 0 && failed < prq.n_tensors)
        rc = tetris_fail(err, res[failed].code, 0, "%s", res[failed].reason);
    /* Before budget_end: the withdrawal tells this pull's fresh counts
     * from other requests' by them. */
    if (rc < 0)
        withdraw_published(c, &b, label);
    budget_end(ss, &b);
    pthread_mutex_destroy(&b.lock);
    atomic_fetch_sub(&ss->counters.ingests_active, 1);
    if (rc < 0)
        return rc;
    out->tensors = prq.n_tensors;
    for (size_t k = 0; k < prq.n_tensors; k++) {
        uint64_t size = plan->artifact->tensors[k].size;
        if (res[k].status == INGEST_INGESTED) {
            out->pulled_tensors++;
            out->pulled_bytes += size;
        } else {
            out->skipped_bytes += size;
        }
    }
    snprintf(out->holder, sizeof(out->holder), "%s", c->holder ? store_holder_id(c->holder) : "");
    starts_record(ss, label, held, prq.n_tensors, clock_mono_us() - t0);
    return 0;
}

static int handle_pull(struct conn *c, const ingest_request *rq, char **reply, int *out_fds,
                       size_t *n_out, tetris_error *err)
{
    struct served_store *ss = c->srv->ss;
    struct daemon *d = ss->d;
    int64_t t0 = clock_mono_us();
    /* The settings are large for a connection thread's stack: on the heap. */
    struct pull_settings *settings = malloc(sizeof(*settings));
    if (settings == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "pull");
    pthread_mutex_lock(&d->cfg_lock);
    settings->allowed = d->cfg.registries;
    settings->timeout_s = d->cfg.registry_timeout_s;
    settings->cache_max = d->cfg.registry_cache_bytes;
    memcpy(settings->auth_path, d->cfg.registry_auth, sizeof(settings->auth_path));
    memcpy(settings->ca_file, d->cfg.registry_ca, sizeof(settings->ca_file));
    unsigned threads = d->cfg.pull_parallel;
    pthread_mutex_unlock(&d->cfg_lock);
    struct pull_plan *plan = calloc(1, sizeof(*plan));
    int rc = plan != NULL ? pull_prepare(ss->store, rq->ref, settings, plan, err)
                          : tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "pull");
    free(settings);
    struct ingest_pull_result r = {0};
    if (rc == 0)
        rc = pull_tensors(c, plan, rq->label, threads, t0, &r, err);
    if (rc == 0) {
        r.digest = plan->manifest_digest;
        *reply = ingest_pull_reply_encode(&r);
        out_fds[0] = dup(plan->config_fd);
        out_fds[1] = dup(plan->graph_fd);
        *n_out = 2;
        if (*reply == NULL || out_fds[0] < 0 || out_fds[1] < 0)
            rc = tetris_fail(err, TETRIS_E_NOMEM, errno, "pull reply");
    }
    int64_t us = clock_mono_us() - t0;
    observe_pull(d, us, rc);
    char digest[7 + TENSOR_DIGEST_HEX_LEN + 1] = "";
    if (plan != NULL && plan->artifact != NULL)
        oci_digest_format(&plan->manifest_digest, digest);
    if (rc < 0) {
        log_warn("event=pull-failed tenant=%s pid=%d label=%s ref=%s reason=%s code=%s msg=%s",
                 tenant_name(ss), (int)c->pid, LOG_Q(rq->label), LOG_Q(rq->ref),
                 pull_failure_name(pull_failure_of(rc)), tetris_code_name(-rc), LOG_Q(err->msg));
    } else {
        atomic_fetch_add(&d->pull.tensors, r.pulled_tensors);
        atomic_fetch_add(&d->pull.bytes, r.pulled_bytes);
        atomic_fetch_add(&d->pull.skipped_bytes, r.skipped_bytes);
        log_info("event=pull tenant=%s pid=%d label=%s ref=%s digest=%s tensors=%llu "
                 "pulled_tensors=%llu pulled_bytes=%llu skipped_bytes=%llu took_ms=%lld",
                 tenant_name(ss), (int)c->pid, LOG_Q(rq->label), LOG_Q(rq->ref), digest,
                 (unsigned long long)r.tensors, (unsigned long long)r.pulled_tensors,
                 (unsigned long long)r.pulled_bytes, (unsigned long long)r.skipped_bytes,
                 (long long)(us / 1000));
    }
    if (plan != NULL)
        pull_plan_release(plan);
    free(plan);
    return rc;
}

static int handle_message(struct conn *c, const char *text, size_t len, const int *fds,
                          size_t n_fds, char **reply, int *out_fds, size_t *n_out,
                          tetris_error *err)
{
    ingest_request *rq = NULL;
    int rc = ingest_request_decode(text, len, n_fds, &rq, err);
    if (rc < 0)
        return rc;
    if (rq->op == INGEST_OP_INGEST)
        rc = handle_ingest(c, rq, fds, reply, err);
    else if (rq->op == INGEST_OP_GPU_ATTACH)
        rc = handle_gpu_attach(c, rq, reply, out_fds, n_out, err);
    else if (rq->op == INGEST_OP_DERIVE)
        rc = handle_derive(c, rq, fds, reply, err);
    else if (rq->op == INGEST_OP_PULL)
        rc = handle_pull(c, rq, reply, out_fds, n_out, err);
    else
        rc = handle_fallback(c, rq, reply, err);
    ingest_request_free(rq);
    return rc;
}

/* ---- connections ---- */

static int64_t request_deadline(struct served_store *ss)
{
    pthread_mutex_lock(&ss->d->cfg_lock);
    double t = ss->d->cfg.request_timeout_s;
    pthread_mutex_unlock(&ss->d->cfg_lock);
    return clock_mono_ms() + (int64_t)(t * 1000);
}

/* Sends reply (NULL: out of memory, nothing to send) with fds attached,
 * and frees and closes them. */
static void send_reply_fds(struct conn *c, char *text, int *fds, size_t n_fds)
{
    tetris_error err;
    if (text != NULL && ingest_send_message(c->sock, text, strlen(text), fds, n_fds,
                                            request_deadline(c->srv->ss), &err) < 0)
        log_info("event=ingest-reply-failed pid=%d msg=%s", (int)c->pid, LOG_Q(err.msg));
    for (size_t i = 0; i < n_fds; i++)
        close(fds[i]);
    free(text);
}

static void send_reply(struct conn *c, char *text)
{
    send_reply_fds(c, text, NULL, 0);
}

static void send_error(struct conn *c, int code, const char *msg)
{
    send_reply(c, ingest_error_encode(code, msg));
}

/* Waits for the next request or a stop; false when the connection ends.
 * A connection that holds references may stay idle for ever (it is the
 * client's liveness); one that holds none must send a request within the
 * request timeout, so idle connections cannot use up the slots. */
static bool wait_for_request(struct conn *c)
{
    struct pollfd p[2] = {
        {.fd = c->sock, .events = POLLIN},
        {.fd = c->srv->stop_pipe[0], .events = POLLIN},
    };
    int64_t deadline = c->holder == NULL ? request_deadline(c->srv->ss) : 0;
    for (;;) {
        int timeout = -1;
        if (deadline > 0) {
            int64_t left = deadline - clock_mono_ms();
            if (left <= 0) {
                log_info("event=ingest-idle-timeout pid=%d", (int)c->pid);
                send_error(c, TETRIS_E_TIMEOUT, "no request within the request timeout");
                return false;
            }
            timeout = (int)left;
        }
        int n = poll(p, 2, timeout);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            continue;
        if (n < 0 || p[1].revents != 0)
            return false;
        return true; /* readable or hung up: the receive tells which */
    }
}

static void serve(struct conn *c)
{
    struct served_store *ss = c->srv->ss;
    while (wait_for_request(c)) {
        int fds[INGEST_MAX_SOURCES];
        size_t n_fds = 0;
        char *text = NULL;
        size_t len = 0;
        tetris_error err;
        int rc = ingest_recv_message(c->sock, INGEST_MAX_MESSAGE_BYTES, &text, &len, fds,
                                     INGEST_MAX_SOURCES, &n_fds, request_deadline(ss), &err);
        if (rc == -TETRIS_E_UNAVAILABLE)
            return; /* the client closed: normal end */
        char *reply = NULL;
        int out_fds[INGEST_MAX_GPU_TENSORS];
        size_t n_out = 0;
        if (rc == 0) {
            rc = handle_message(c, text, len, fds, n_fds, &reply, out_fds, &n_out, &err);
            for (size_t i = 0; i < n_fds; i++)
                close(fds[i]);
            free(text);
        }
        if (rc < 0) {
            atomic_fetch_add(&ss->counters.ingest_errors, 1);
            log_warn("event=ingest-refused pid=%d code=%s msg=%s", (int)c->pid,
                     tetris_code_name(-rc), LOG_Q(err.msg));
            send_error(c, -rc, err.msg);
            free(reply);
            return;
        }
        send_reply_fds(c, reply, out_fds, n_out);
    }
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    ingest_server *srv = c->srv;
    atomic_fetch_add(&srv->ss->counters.connections, 1);
    serve(c);
    if (c->holder != NULL && atomic_load(&srv->ss->d->stopping))
        retain_holder(c->holder);
    else if (c->holder != NULL)
        store_holder_close(c->holder);
    gpu_pool_release(daemon_gpu_pool(), &c->gpu);
    close(c->sock);
    atomic_fetch_sub(&srv->ss->counters.connections, 1);
    peer_release(srv->ss, c->peer, c->pid);
    free(c->held);
    free(c);
    pthread_mutex_lock(&srv->lock);
    pthread_t *ended = realloc(srv->ended, (srv->n_ended + 1) * sizeof(*ended));
    if (ended != NULL) {
        srv->ended = ended;
        srv->ended[srv->n_ended++] = pthread_self();
    } else {
        pthread_detach(pthread_self());
    }
    srv->active--;
    pthread_cond_broadcast(&srv->idle);
    pthread_mutex_unlock(&srv->lock);
    return NULL;
}

/* Joins the threads whose connection has ended. */
static void reap_ended(ingest_server *srv)
{
    pthread_mutex_lock(&srv->lock);
    pthread_t *ended = srv->ended;
    size_t n = srv->n_ended;
    srv->ended = NULL;
    srv->n_ended = 0;
    pthread_mutex_unlock(&srv->lock);
    for (size_t i = 0; i < n; i++)
        pthread_join(ended[i], NULL);
    free(ended);
}

static void start_connection(ingest_server *srv, int sock)
{
    struct ucred cred = {0};
    socklen_t cl = sizeof(cred);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
        log_warn("event=ingest-peer-unknown errno=%d action=refuse", errno);
        close(sock);
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(sock);
        return;
    }
    *c = (struct conn){.srv = srv, .sock = sock, .pid = cred.pid, .uid = cred.uid};
    struct daemon *d = srv->ss->d;
    /* The socket decides the store; the peer's uid decides whether it may
     * use it (--tenant-uids). (A peer in another pid namespace has pid 0
     * here: its uid still counts.) */
    pthread_mutex_lock(&d->cfg_lock);
    bool allowed = reclaimer_peer_allowed(&d->cfg, srv->ss->tenant, cred.uid);
    pthread_mutex_unlock(&d->cfg_lock);
    if (!allowed) {
        atomic_fetch_add(&srv->ss->counters.ingest_errors, 1);
        log_warn("event=ingest-denied tenant=%s pid=%d uid=%u gid=%u", tenant_name(srv->ss),
                 (int)cred.pid, (unsigned)cred.uid, (unsigned)cred.gid);
        send_error(c, TETRIS_E_DENIED, "this store does not serve your uid");
        close(sock);
        free(c);
        return;
    }
    /* The limits are node-wide: every store's connections count. */
    const char *refused = peer_admit(srv->ss, cred.uid, cred.pid, &c->peer);
    if (refused != NULL) {
        atomic_fetch_add(&srv->ss->counters.connections_refused, 1);
        log_warn("event=ingest-connection-refused tenant=%s pid=%d uid=%u reason=%s",
                 tenant_name(srv->ss), (int)cred.pid, (unsigned)cred.uid, LOG_Q(refused));
        send_error(c, TETRIS_E_UNAVAILABLE, refused);
        close(sock);
        free(c);
        return;
    }
    reap_ended(srv);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_mutex_lock(&srv->lock);
    srv->active++;
    pthread_mutex_unlock(&srv->lock);
    pthread_t t;
    int rc = pthread_create(&t, &attr, conn_main, c);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        log_warn("event=ingest-thread-failed errno=%d", rc);
        send_error(c, TETRIS_E_UNAVAILABLE, "cannot start a thread");
        close(sock);
        peer_release(srv->ss, c->peer, cred.pid);
        free(c);
        pthread_mutex_lock(&srv->lock);
        srv->active--;
        pthread_mutex_unlock(&srv->lock);
    }
}

static void *accept_main(void *arg)
{
    ingest_server *srv = arg;
    struct pollfd p[2] = {
        {.fd = srv->listen_fd, .events = POLLIN},
        {.fd = srv->stop_pipe[0], .events = POLLIN},
    };
    for (;;) {
        int n = poll(p, 2, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || p[1].revents != 0)
            return NULL;
        int sock = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (sock < 0) {
            if (errno == EMFILE || errno == ENFILE)
                usleep(100 * 1000); /* out of descriptors: let connections end */
            continue;
        }
        start_connection(srv, sock);
    }
}

/* A socket file left by a dead daemon is removed; a live daemon's is not. */
static int claim_socket_path(const char *path, tetris_error *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, path);
    cleanup_close int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "socket");
    if (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        return tetris_fail(err, TETRIS_E_CONFLICT, 0,
                           "another daemon is serving %s", path);
    if (unlink(path) < 0 && errno != ENOENT)
        return tetris_fail(err, TETRIS_E_IO, errno, "unlink stale %s", path);
    return 0;
}

int ingest_server_start(struct served_store *ss, ingest_server **out, tetris_error *err)
{
    const char *path = ss->socket_path;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "socket path too long: %s", path);
    strcpy(sa.sun_path, path);
    int rc = claim_socket_path(path, err);
    if (rc < 0)
        return rc;
    cleanup_close int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "socket");
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "bind %s", path);
    /* Function instances run as any user; the socket is their only door.
     * Widened by path, not with umask(0), which would be process-wide
     * while other threads create files; nobody but the daemon can write
     * the directory, so the path is still the socket just bound. It
     * accepts nobody before listen. */
    if (chmod(path, 0666) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "chmod %s", path);
    if (listen(fd, 128) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "listen %s", path);
    ingest_server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "ingest server");
    srv->ss = ss;
    snprintf(srv->path, sizeof(srv->path), "%s", path);
    if (pipe2(srv->stop_pipe, O_CLOEXEC) < 0) {
        free(srv);
        return tetris_fail(err, TETRIS_E_IO, errno, "pipe");
    }
    pthread_mutex_init(&srv->lock, NULL);
    pthread_cond_init(&srv->idle, NULL);
    srv->listen_fd = fd;
    rc = pthread_create(&srv->accept_thread, NULL, accept_main, srv);
    if (rc != 0) {
        close(srv->stop_pipe[0]);
        close(srv->stop_pipe[1]);
        free(srv);
        return tetris_fail(err, TETRIS_E_IO, rc, "accept thread");
    }
    fd = -1;
    *out = srv;
    return 0;
}

void ingest_server_stop(ingest_server *srv)
{
    if (srv == NULL)
        return;
    unlink(srv->path);
    if (write(srv->stop_pipe[1], "x", 1) < 0)
        log_warn("event=stop-signal-failed errno=%d", errno);
    pthread_join(srv->accept_thread, NULL);
    close(srv->listen_fd);
    pthread_mutex_lock(&srv->lock);
    while (srv->active > 0)
        pthread_cond_wait(&srv->idle, &srv->lock);
    pthread_mutex_unlock(&srv->lock);
    reap_ended(srv);
    close(srv->stop_pipe[0]);
    close(srv->stop_pipe[1]);
    pthread_mutex_destroy(&srv->lock);
    pthread_cond_destroy(&srv->idle);
    free(srv);
}
