/* peers.c - what one peer may take of the node daemon, so that no pod, uid
 * or tenant takes it from the others.
 *
 * A peer is what SO_PEERCRED says at accept: a process (pid) of a uid. The
 * daemon keeps, under d->peers_lock:
 *   - connections per process, per uid and per served store. The node's
 *     limit (--max-connections) is shared out among the stores it serves:
 *     each store (every tenant's and the shared one) is guaranteed
 *     max / stores connections, and may have more only from slots no
 *     other store's guarantee needs. A store under its share is admitted
 *     whenever a slot is free, so a tenant whose uids hold every slot they
 *     could get (connections with references stay open for as long as
 *     their instance lives) never keeps another tenant out. When a tenant
 *     is added the shares shrink; a store above its new share keeps its
 *     connections but gets no new one until it is back under it.
 *   - per uid, the backoff of a uid whose claims failed verification: its
 *     claims (tensors the daemon would have to read) are refused for 1 s
 *     after the first failure, twice as long after each next one, at most
 *     PEER_BACKOFF_MAX_MS; a uid that has not failed for
 *     PEER_FORGIVE_MS starts again from 1 s. Resident tensors are still
 *     referenced: a backing-off instance loads its missing tensors
 *     privately.
 *   - per uid, a token bucket for the log lines of its fallback reports.
 * The bytes a uid's claims have reserved (peer.unverified_bytes) live in
 * the same entry but under d->capacity_lock (ingest_server.c's reserve).
 *
 * The uid entries outlive their connections (else reconnecting would reset
 * a backoff or a bucket) while they hold state: at most
 * PEER_IDLE_RETAINED of them without connections, the longest idle
 * dropped first. */
#include "reclaimer/daemon.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

#define PEER_BACKOFF_FIRST_MS 1000
#define PEER_BACKOFF_MAX_MS 60000
#define PEER_FORGIVE_MS (2 * PEER_BACKOFF_MAX_MS)
/* Fallback reports logged per uid: a burst, then one per refill period. */
#define PEER_LOG_BURST 10
#define PEER_LOG_REFILL_MS 6000
#define PEER_IDLE_RETAINED 1024

static struct peer *find_peer(struct daemon *d, uid_t uid)
{
    for (size_t i = 0; i < d->n_peers; i++)
        if (d->peers[i]->uid == uid)
            return d->peers[i];
    return NULL;
}

/* An entry without connections whose state has run out tells nothing a
 * fresh one would not. */
static bool peer_idle(const struct peer *p, int64_t now)
{
    return p->conns == 0 && p->unverified_bytes == 0 &&
           (p->failures == 0 || now - p->last_failure_ms >= PEER_FORGIVE_MS) &&
           p->log_tokens + (double)(now - p->log_refill_ms) / PEER_LOG_REFILL_MS >= PEER_LOG_BURST;
}

static void drop_peer(struct daemon *d, size_t i)
{
    free(d->peers[i]);
    d->peers[i] = d->peers[--d->n_peers];
}

/* Drops entries that hold nothing, then the longest idle ones past
 * PEER_IDLE_RETAINED. unverified_bytes is read without capacity_lock: it is
 * 0 for good once the entry has no connections. */
static void prune_peers(struct daemon *d, int64_t now)
{
    size_t idle = 0;
    for (size_t i = 0; i < d->n_peers;) {
        if (peer_idle(d->peers[i], now)) {
            drop_peer(d, i);
            continue;
        }
        idle += d->peers[i]->conns == 0;
        i++;
    }
    while (idle > PEER_IDLE_RETAINED) {
        size_t oldest = d->n_peers;
        for (size_t i = 0; i < d->n_peers; i++)
            if (d->peers[i]->conns == 0 &&
                (oldest == d->n_peers ||
                 d->peers[i]->idle_since_ms < d->peers[oldest]->idle_since_ms))
                oldest = i;
        drop_peer(d, oldest);
        idle--;
    }
}

static struct peer *get_peer(struct daemon *d, uid_t uid, int64_t now)
{
    struct peer *p = find_peer(d, uid);
    if (p != NULL)
        return p;
    struct peer **grown = realloc(d->peers, (d->n_peers + 1) * sizeof(*grown));
    if (grown == NULL)
        return NULL;
    d->peers = grown;
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    *p = (struct peer){.uid = uid, .log_tokens = PEER_LOG_BURST, .log_refill_ms = now};
    d->peers[d->n_peers++] = p;
    return p;
}

static struct peer_conns *find_proc(struct daemon *d, uid_t uid, pid_t pid)
{
    for (size_t i = 0; i < d->n_procs; i++)
        if (d->procs[i].uid == uid && d->procs[i].pid == pid)
            return &d->procs[i];
    return NULL;
}

/* Whether store ss may take one more connection: it is under its share,
 * or every other store's guaranteed share stays free for it. */
static bool within_share(struct daemon *d, const struct served_store *ss, unsigned max)
{
    size_t n = daemon_store_count(d), live = 0;
    for (size_t i = 0; i < n; i++)
        live += !atomic_load(&d->stores[i]->retired);
    unsigned share = live > 0 ? max / (unsigned)live : max;
    if (share == 0)
        share = 1;
    if (ss->conns < share)
        return true;
    uint64_t claimed = ss->conns + 1; /* this store, with the newcomer */
    for (size_t i = 0; i < n; i++) {
        const struct served_store *o = d->stores[i];
        if (o != ss && !atomic_load(&o->retired))
            claimed += o->conns > share ? o->conns : share;
    }
    return claimed <= max;
}

const char *peer_admit(struct served_store *ss, uid_t uid, pid_t pid, struct peer **out)
{
    struct daemon *d = ss->d;
    pthread_mutex_lock(&d->cfg_lock);
    unsigned max = d->cfg.max_connections;
    unsigned max_uid = d->cfg.max_conns_per_uid;
    unsigned max_pid = d->cfg.max_conns_per_pid;
    pthread_mutex_unlock(&d->cfg_lock);
    int64_t now = clock_mono_ms();
    const char *refused = NULL;
    pthread_mutex_lock(&d->peers_lock);
    prune_peers(d, now);
    struct peer *p = find_peer(d, uid);
    struct peer_conns *proc = find_proc(d, uid, pid);
    if (atomic_load(&d->connections) >= max)
        refused = "too many connections";
    else if (!within_share(d, ss, max))
        refused = "too many connections for this store (its share of --max-connections)";
    else if (p != NULL && p->conns >= max_uid)
        refused = "too many connections from this uid";
    else if (proc != NULL && proc->n >= max_pid && pid != 0)
        refused = "too many connections from this process"; /* pid 0: another pid namespace */
    if (refused == NULL && (p = get_peer(d, uid, now)) == NULL)
        refused = "out of memory";
    if (refused == NULL && proc == NULL) {
        struct peer_conns *grown = realloc(d->procs, (d->n_procs + 1) * sizeof(*grown));
        if (grown == NULL) {
            refused = "out of memory";
        } else {
            d->procs = grown;
            proc = &d->procs[d->n_procs++];
            *proc = (struct peer_conns){.uid = uid, .pid = pid};
        }
    }
    if (refused == NULL) {
        proc->n++;
        p->conns++;
        ss->conns++;
        atomic_fetch_add(&d->connections, 1);
        *out = p;
    }
    pthread_mutex_unlock(&d->peers_lock);
    return refused;
}

void peer_release(struct served_store *ss, struct peer *p, pid_t pid)
{
    struct daemon *d = ss->d;
    pthread_mutex_lock(&d->peers_lock);
    struct peer_conns *proc = find_proc(d, p->uid, pid);
    if (proc != NULL && --proc->n == 0)
        *proc = d->procs[--d->n_procs];
    if (--p->conns == 0)
        p->idle_since_ms = clock_mono_ms();
    ss->conns--;
    atomic_fetch_sub(&d->connections, 1);
    pthread_mutex_unlock(&d->peers_lock);
}

int64_t peer_backoff_left_ms(struct daemon *d, struct peer *p)
{
    pthread_mutex_lock(&d->peers_lock);
    int64_t left = p->backoff_until_ms - clock_mono_ms();
    pthread_mutex_unlock(&d->peers_lock);
    return left > 0 ? left : 0;
}

int64_t peer_claim_failed(struct daemon *d, struct peer *p)
{
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&d->peers_lock);
    if (p->failures > 0 && now - p->last_failure_ms >= PEER_FORGIVE_MS)
        p->failures = 0;
    if (p->failures < 32)
        p->failures++;
    int64_t delay = PEER_BACKOFF_MAX_MS;
    if (p->failures <= 16 && (int64_t)PEER_BACKOFF_FIRST_MS << (p->failures - 1) < delay)
        delay = (int64_t)PEER_BACKOFF_FIRST_MS << (p->failures - 1);
    p->last_failure_ms = now;
    p->backoff_until_ms = now + delay;
    pthread_mutex_unlock(&d->peers_lock);
    return delay;
}

bool peer_fallback_logged(struct daemon *d, struct peer *p, uint64_t *suppressed)
{
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&d->peers_lock);
    p->log_tokens += (double)(now - p->log_refill_ms) / PEER_LOG_REFILL_MS;
    if (p->log_tokens > PEER_LOG_BURST)
        p->log_tokens = PEER_LOG_BURST;
    p->log_refill_ms = now;
    bool logged = p->log_tokens >= 1;
    if (logged) {
        p->log_tokens -= 1;
        *suppressed = p->logs_suppressed;
        p->logs_suppressed = 0;
    } else {
        p->logs_suppressed++;
    }
    pthread_mutex_unlock(&d->peers_lock);
    return logged;
}

void peers_free(struct daemon *d)
{
    for (size_t i = 0; i < d->n_peers; i++)
        free(d->peers[i]);
    free(d->peers);
    free(d->procs);
    d->peers = NULL;
    d->procs = NULL;
    d->n_peers = d->n_procs = 0;
}
