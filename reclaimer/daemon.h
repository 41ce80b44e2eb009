/* daemon.h - the state tetris-reclaimer's parts share: the stores it
 * serves (the shared one and every tenant's), their tensor indexes and
 * counters, and the locks that order ingests against reclaim passes.
 * Each part lives in its own file:
 *   stores.c          the served stores: the shared one and tenants', and
 *                     the node pass's order of steps
 *   served.c          queries over the served stores, their index helpers
 *   adopt.c           holders of a previous daemon, adopted at start-up
 *   ingest_server.c   the Unix-socket ingest service (a thread per client)
 *   peers.c           what each peer may take: connection shares, unverified
 *                     bytes, backoff after failed claims, fallback reports
 *   reclaim.c         repair, the reclaim pass, pins, scrub
 *   reclaim_policy.c  the pass's rule: keep-alive, then LRU
 *   http_api.c        /metrics, /inventory, /healthz
 *   gpu_pool.c        GPU copies of stored tensors (gpu_attach)
 *   starts.c          registrations by what the store held (hit, partial,
 *                     miss), per model, for /metrics
 *   tetris-reclaimer.c  the steps of common/daemon_run.h's loop: start, the
 *                       tick that runs passes, reload on SIGHUP, stop */
#ifndef TETRIS_RECLAIMER_DAEMON_H
#define TETRIS_RECLAIMER_DAEMON_H

#include <pthread.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "reclaimer/config.h"
#include "common/error.h"
#include "common/textbuf.h"
#include "common/workers.h"
#include "protocol/ingest.h"
#include "tensorstore/store.h"
#include "reclaimer/pin_file.h"
#include "reclaimer/pull.h"
#include "reclaimer/tensor_index.h"

/* Per-model metrics are labelled with the holder's label (the model);
 * past this many distinct labels the rest are summed under "other". */
#define MODEL_LABELS_MAX 64

struct model_usage {
    char label[128];
    uint64_t holders;
    uint64_t logical_bytes;
};

/* Upper bounds of tetris_ingest_duration_seconds's buckets. */
#define INGEST_DURATION_BUCKETS 12

/* What a store held of a model when an instance registered it (its ingest
 * request): every tensor, some or none. The daemon's own answer, so a pod
 * cannot make its start look warmer than it was. */
enum start_result { START_HIT = 0, START_PARTIAL, START_MISS, START_RESULTS };

/* Registrations of one holder label (model). */
struct start_row {
    char label[128];
    uint64_t count[START_RESULTS];
};

/* A store's registrations since the daemon started (starts.c), for
 * /metrics. Labels are the clients': the first MODEL_LABELS_MAX distinct
 * ones get a row each for the daemon's life, the rest are summed in the
 * "other" row, so no pod can grow the label set (at worst it pushes later
 * models into "other"). */
struct store_starts {
    pthread_mutex_t lock;
    struct start_row rows[MODEL_LABELS_MAX + 1]; /* the last: "other" */
    size_t n_rows;
    uint64_t duration_bucket[START_RESULTS][INGEST_DURATION_BUCKETS + 1]; /* +Inf last */
    uint64_t duration_us[START_RESULTS];
};

/* Counters of one served store (exported with its tenant label). */
struct store_counters {
    atomic_uint_least64_t ingest_requests;      /* ingest ops answered */
    atomic_uint_least64_t ingest_errors;        /* refused requests (bad input, ...) */
    atomic_uint_least64_t ingest_tensors;       /* tensors published */
    atomic_uint_least64_t ingest_bytes;         /* bytes published */
    atomic_uint_least64_t ingest_rejected;      /* tensors refused (digest, full) */
    atomic_uint_least64_t ingest_duration_us;   /* sum, microseconds */
    atomic_uint_least64_t ingest_duration_bucket[INGEST_DURATION_BUCKETS + 1]; /* +Inf last */
    atomic_uint_least64_t fallbacks;            /* agents' report_fallback */
    atomic_uint_least64_t reclaims;             /* tensors freed after keep-alive */
    atomic_uint_least64_t evictions;            /* tensors freed by LRU above capacity */
    atomic_uint_least64_t reclaimed_bytes;      /* both of the above */
    atomic_uint_least64_t scrubbed_bytes;
    atomic_uint_least64_t scrub_errors;         /* tensors quarantined */
    atomic_uint_least64_t repaired_holders;     /* dead holders released */
    atomic_uint_least64_t repaired_temp_files;
    atomic_uint_least64_t repaired_bad_tensors;
    atomic_uint_least64_t adopted_holders;      /* re-held after a daemon restart */
    atomic_uint_least64_t connections;          /* open ingest connections (gauge) */
    atomic_uint_least64_t ingests_active;       /* requests being processed (gauge) */
    atomic_uint_least64_t connections_refused;  /* over a connection limit */
    atomic_uint_least64_t ingest_over_budget;   /* requests refused or cut by a budget */
    atomic_uint_least64_t claims_failed;        /* claims whose bytes failed verification */
    atomic_uint_least64_t claims_backed_off;    /* claims refused: their uid backs off */
    atomic_uint_least64_t derived_forms;        /* derived forms made (derive.c) */
    atomic_uint_least64_t derive_failures;      /* derivations that failed */
};

extern const double ingest_duration_bounds[INGEST_DURATION_BUCKETS];

/* Pulls from registries (pull.h), node-wide: a registry is the node's
 * network, whichever store asked. */
struct pull_counters {
    atomic_uint_least64_t tensors;       /* tensor layers fetched and published */
    atomic_uint_least64_t bytes;         /* their layer bytes */
    atomic_uint_least64_t skipped_bytes; /* layer bytes not fetched: the store had them */
    atomic_uint_least64_t withdrawn_tensors; /* published by pulls that failed, removed again */
    atomic_uint_least64_t failures[PULL_FAIL_REASONS];
    atomic_uint_least64_t duration_us;                                /* sum, microseconds */
    atomic_uint_least64_t duration_bucket[PULL_DURATION_BUCKETS + 1]; /* +Inf last */
};

/* When an expensive step last ran and what it cost (see reclaim.c). */
struct duty {
    int64_t last_start_us;
    int64_t last_cost_us;
};

typedef struct ingest_server ingest_server;

struct served_store;
/* Counts a registration of `label` that found `resident` of the model's
 * `shareable` tensors (those with bytes) in ss's store and was answered
 * after `us` microseconds (starts.c). */
void starts_record(struct served_store *ss, const char *label, size_t resident, size_t shareable,
                   int64_t us);
/* "hit", "partial" or "miss". */
const char *start_result_name(enum start_result r);

/* Connections of one peer process (SO_PEERCRED), under peers_lock. */
struct peer_conns {
    uid_t uid;
    pid_t pid;
    unsigned n;
};

/* What one peer uid holds of the daemon, and how it is held back (peers.c).
 * Entries are allocated one by one, so a connection may keep a pointer to
 * its uid's entry for its life: an entry with connections is never freed. */
struct peer {
    uid_t uid;
    /* Under peers_lock. */
    unsigned conns;           /* open ingest connections, every store */
    unsigned failures;        /* claims that failed verification, recently */
    int64_t backoff_until_ms; /* its claims are refused until then (mono) */
    int64_t last_failure_ms;  /* mono; failures are forgiven after a quiet while */
    double log_tokens;        /* fallback reports it may still have logged */
    int64_t log_refill_ms;    /* mono, when the tokens were last topped up */
    uint64_t logs_suppressed; /* fallback reports not logged since the last one */
    int64_t idle_since_ms;    /* mono, when its last connection closed */
    /* Under capacity_lock: bytes its claims have reserved and not yet
     * verified. */
    uint64_t unverified_bytes;
};

/* One store the daemon serves: the shared store, or a tenant's dedicated
 * store DIR/tenants/NAME. Each has its own ingest socket, index, holders
 * and counters, so nothing of one tenant is visible through another. */
struct served_store {
    struct daemon *d;
    char tenant[64];            /* "" for the shared store */
    dev_t root_dev;             /* the directory served, to notice when a */
    ino_t root_ino;             /* tenant's is removed (or replaced) */
    /* Its directory was removed: no longer served, passed or reported.
     * The entry stays (other threads may be reading it) until exit. */
    atomic_bool retired;
    char socket_path[PATH_MAX];
    char state_path[PATH_MAX];
    store *store;
    ingest_server *ingest;      /* NULL until serving (or with --once) */

    /* Ingest workers hold it shared from "is it resident?" to "reference
     * recorded"; a reclaim pass holds it exclusively (with the store's own
     * reclaim lock against other processes). */
    pthread_rwlock_t use_lock;

    /* The index and everything derived from it. */
    pthread_mutex_t index_lock;
    tensor_index *index;
    uint64_t generation;     /* bumps whenever the resident set changes,
                                or the evictable bytes do */
    uint64_t resident_bytes; /* file bytes of resident tensors */
    uint64_t evictable_bytes; /* of those, what no live holder or pin
                                 referenced at the last pass */
    uint64_t warmed_bytes;    /* of those, what has been asked for since */
    uint64_t reserved_bytes;  /* claims being read and verified, counted
                                 against capacity (and --max-unverified-bytes) */
    unsigned conns;           /* open ingest connections, under d->peers_lock */

    /* Last pass's view of the holders (for /metrics). */
    uint64_t holders;        /* live holders */
    uint64_t logical_bytes;  /* sum over holders of the bytes each maps */
    struct model_usage models[MODEL_LABELS_MAX + 1]; /* by holder label, +other */
    size_t n_models;
    uint64_t warm_bytes;     /* resident bytes of referenced tensors */
    size_t scrub_cursor;

    /* Holders re-created at start-up for clients that outlived a previous
     * daemon; each is released when its owner exits (pidfd) or registers
     * the same references again (ingest threads). Under adopted_lock. */
    pthread_mutex_t adopted_lock;
    struct adopted_holder *adopted;
    size_t n_adopted;

    /* Main thread only. */
    struct duty repair_duty, listing_duty;
    int64_t last_state_save_ms;

    struct store_counters counters;
    struct store_starts starts;
};

struct daemon {
    struct reclaimer_config cfg; /* settings that SIGHUP may change are
                                    read under cfg_lock */
    pthread_mutex_t cfg_lock;
    int64_t started_ms; /* wall clock; seeds the inventory generations */
    int instance_lock_fd; /* flock-ed for the process's life: one daemon per store */
    bool serving;       /* ingest sockets are up (not with --once) */

    /* stores[0] is the shared store, then tenants in discovery order.
     * Append-only until shutdown (a removed tenant's entry is retired,
     * not freed): other threads read stores[i] for i < n_stores without a
     * lock. */
    struct served_store *stores[1 + RECLAIMER_TENANTS_MAX];
    atomic_size_t n_stores;
    bool tenant_limit_logged;

    /* Capacity is node-wide: the sum over every served store. reserve()
     * in ingest_server.c holds this while it adds up the stores; claims
     * waiting for unverified bytes to be released wait on capacity_freed. */
    pthread_mutex_t capacity_lock;
    pthread_cond_t capacity_freed; /* CLOCK_MONOTONIC */

    /* Digests pinned through --pin-file (the cluster's pods on this node);
     * a pinned tensor is warm even without a live holder, in the one store
     * its pin names (a tenant's pods keep their own store warm, never
     * another's: tetris-node-pins). */
    pthread_mutex_t pin_lock;
    struct pin *pinned;
    size_t n_pinned;

    /* The last node pass (all stores), under pass_lock. */
    pthread_mutex_t pass_lock;
    int64_t last_pass_ms;    /* wall clock of the last completed pass, 0: none */
    int64_t last_pass_mono_ms; /* the same on the monotonic clock (/healthz) */
    int64_t last_pass_us;    /* how long it took */
    int64_t last_locked_us;  /* the longest any one store's ingests had to wait */
    bool last_pass_ok;

    /* Threads that hash and publish ingested tensors: a request runs on its
     * connection's thread plus helpers from ingest_slots (workers - 1 in
     * all), so concurrent requests share the CPU allowance. */
    unsigned workers;
    struct worker_slots ingest_slots;

    struct pull_counters pull;

    atomic_uint_least64_t reclaim_passes;
    atomic_uint connections; /* open ingest connections, all stores */
    /* The same by peer process and by peer uid (SO_PEERCRED), so that one
     * pod cannot take every slot: under peers_lock (peers.c). */
    pthread_mutex_t peers_lock;
    struct peer_conns *procs;
    size_t n_procs;
    struct peer **peers;
    size_t n_peers;
    atomic_bool stopping;
    /* A verified ingest left a store above its capacity or quota (it was
     * let in against cold bytes): the next pass runs now and evicts them. */
    atomic_bool pass_wanted;
    /* What the store's root is on (tetris-reclaimer.c, at start): /metrics and
     * /healthz say it when it is not the tmpfs that was asked for. */
    struct store_tmpfs_outcome tmpfs;
    bool tmpfs_asked;
};

/* The store was to be on a tmpfs of the daemon's own and is not. */
static inline bool store_tmpfs_fallback(const struct daemon *d)
{
    return d->tmpfs_asked && d->tmpfs.state == STORE_TMPFS_FALLBACK;
}

/* How logs name a store: its tenant, or "(shared)" (no tenant name has
 * parentheses). */
static inline const char *tenant_name(const struct served_store *ss)
{
    return ss->tenant[0] != '\0' ? ss->tenant : "(shared)";
}

/* ---- stores.c ---- */
/* Takes the store's instance lock (<store>/reclaimer.lock), before
 * anything else touches the store. TETRIS_E_CONFLICT when another process
 * holds it: a live daemon serves the store, and this one must change
 * nothing (no repair, reclaim or unlinking) before it exits. */
int daemon_claim_store(struct daemon *d, tetris_error *err);
/* Opens the shared store (stores[0]). */
int daemon_open_shared(struct daemon *d, tetris_error *err);
/* Retires tenant stores whose directory was removed or replaced (their
 * socket stops), then starts each configured tenant (--tenants) not
 * served yet: makes DIR/tenants/T and its layout if needed, its index,
 * adoption and, once the daemon is serving, its ingest socket. A
 * directory under DIR/tenants/ that is not configured is never served.
 * Failures are logged per tenant; the rest go on. */
void daemon_discover_tenants(struct daemon *d);
/* Starts every store's ingest socket; sets d->serving. */
int daemon_start_serving(struct daemon *d, tetris_error *err);
/* Stops the sockets, saves state, closes the stores. */
void daemon_close_stores(struct daemon *d);

/* One node pass: releases adopted holders whose owner exited, re-reads
 * the pin file, starts configured tenants (unless --no-tenants), then
 * passes every store (daemon_pass_stores). */
int daemon_reclaim_pass(struct daemon *d, tetris_error *err);

/* ---- reclaim.c ---- */
/* Repairs one store, rebuilds its index from it, re-adopts holders whose
 * owner outlived a previous daemon and makes its lock stripes and fanout
 * directories (store_prepare_publish). Call once before serving it. */
int store_startup(struct served_store *ss, tetris_error *err);
/* For each store: cheap repair (full repair on its duty cycle), reconcile
 * the index with the store, free cold tensors per keep-alive, evict LRU
 * above the node's capacity, persist last-use times, then scrub a bounded
 * number of bytes. Every store is passed even if one fails; the pass's
 * time counts from start_us. */
int daemon_pass_stores(struct daemon *d, int64_t start_us, tetris_error *err);
/* What store_withdraw did. */
struct withdrawal {
    size_t tensors; /* removed */
    uint64_t bytes; /* their file bytes */
    size_t kept;    /* wanted by something else: a live holder, a pin, a
                       request that has it fresh */
};
/* Removes the tensors a failed request published (published[0..n), each
 * listed once per time it published it, while its fresh counts are still
 * raised) that nothing else wants, under the pass's locks (reclaim.c says
 * why a concurrent request naming one never loses it). */
int store_withdraw(struct served_store *ss, const tensor_digest *published, size_t n,
                   struct withdrawal *out, tetris_error *err);
/* Writes a store's last-use state file now (at shutdown). */
void store_save_state(struct served_store *ss);
/* Re-reads --pin-file if it changed (the hook for the cluster side). */
void daemon_refresh_pins(struct daemon *d);

/* ---- adopt.c ---- */
/* Re-records the references of every dead holder of ss whose owner process
 * still runs (a previous daemon held it), kept until that process exits. */
int store_adopt_orphans(struct served_store *ss, tetris_error *err);
/* Releases holders adopted at start-up whose owner has exited. */
void daemon_poll_adopted(struct daemon *d);
void store_release_adopted(struct served_store *ss);
/* A connection of pid now holds sorted_refs (sorted by store_sort_refs)
 * under label: releases one holder adopted for that pid with that label
 * whose references are all among them, since the connection carries them
 * now (no tensor goes unreferenced). True if one was released. */
bool store_replace_adopted(struct served_store *ss, pid_t pid, const char *label,
                           const tensor_digest *sorted_refs, size_t n);
void store_sort_refs(tensor_digest *refs, size_t n);

/* ---- served.c ---- */
/* The served store of tenant ("" or NULL: the shared store), or NULL;
 * never a retired one. */
struct served_store *daemon_find_store(struct daemon *d, const char *tenant);
size_t daemon_store_count(struct daemon *d);
/* What the served stores but skip hold (resident), have reserved for
 * claims being verified, and of the resident bytes what no live holder or
 * pin referenced at the last pass (evictable). */
struct store_bytes {
    uint64_t resident, reserved, evictable;
};
void daemon_other_stores_bytes(struct daemon *d, const struct served_store *skip,
                               struct store_bytes *out);
/* What of ss's resident bytes a claim may count on as room (index_lock
 * held): cold at the last pass and not asked for since. */
static inline uint64_t store_evictable_bytes(const struct served_store *ss)
{
    uint64_t cold = ss->evictable_bytes < ss->resident_bytes ? ss->evictable_bytes
                                                             : ss->resident_bytes;
    return cold > ss->warmed_bytes ? cold - ss->warmed_bytes : 0;
}
/* The quota of ss, its own bound beside the node's capacity: the tenants'
 * (--tenant-capacity) or the shared store's (--shared-capacity); 0: none.
 * cfg_lock held. */
static inline uint64_t store_quota(const struct daemon *d, const struct served_store *ss)
{
    return ss->tenant[0] != '\0' ? d->cfg.tenant_capacity_bytes : d->cfg.shared_capacity_bytes;
}

/* Index marks: seen by the last listing, referenced by a live holder or
 * pin, and warm: referenced, asked for or published since the last pass,
 * or published by a request still in flight (index_entry.fresh), so not
 * among its evictable bytes (see store_index_warm). */
#define MARK_SEEN 1u
#define MARK_REF 2u
#define MARK_WARM 4u
/* Index helpers shared by ingest and reclaim (index_lock held). */
void store_index_touch(struct served_store *ss, const tensor_digest *dg, int64_t now_s);
/* A request asks for a resident tensor: whatever it was at the last pass,
 * it is no room for claims now (store_evictable_bytes). */
void store_index_warm(struct served_store *ss, const tensor_digest *dg);
int store_index_add(struct served_store *ss, const tensor_meta *meta, uint64_t file_bytes,
                    int64_t now_s, tetris_error *err);

/* ---- ingest_server.c ---- */
/* Listens on ss->socket_path. */
int ingest_server_start(struct served_store *ss, ingest_server **out, tetris_error *err);
/* Stops accepting, closes every connection (releasing its references),
 * joins the threads and removes the socket. */
void ingest_server_stop(ingest_server *s);

/* ---- peers.c ---- */
/* Admits a new ingest connection of (uid, pid) on store ss: the node's
 * --max-connections, ss's share of it (peers.c), the uid's and the
 * process's limits. NULL with *out set to the uid's entry (held until
 * peer_release), or why it is refused. */
const char *peer_admit(struct served_store *ss, uid_t uid, pid_t pid, struct peer **out);
void peer_release(struct served_store *ss, struct peer *p, pid_t pid);
/* Milliseconds p's claims are still refused for after failed ones (0: none). */
int64_t peer_backoff_left_ms(struct daemon *d, struct peer *p);
/* A claim of p failed verification: p backs off, twice as long as last
 * time (1 s first, at most a minute). Returns the delay in ms. */
int64_t peer_claim_failed(struct daemon *d, struct peer *p);
/* Whether a fallback report of p is logged (a token bucket per uid);
 * *suppressed then gets how many were not since its last logged one. */
bool peer_fallback_logged(struct daemon *d, struct peer *p, uint64_t *suppressed);
void peers_free(struct daemon *d);

/* ---- gpu_pool.c ---- */
typedef struct gpu_pool gpu_pool;
struct gpu_entry;
/* The GPU copies one connection references. */
struct gpu_conn_refs {
    struct gpu_entry **e;
    size_t n;
};
gpu_pool *daemon_gpu_pool(void);
/* Attaches digests[0..n) of store ss on device ("cuda:N") for a
 * connection: results per digest, one exported descriptor per attached
 * one in fds (n slots; the caller sends and closes them), references
 * added to refs. The digests must be ones the connection references (the
 * caller checks). A failure of the whole request (device name, no driver,
 * no such device) returns its code with nothing attached. */
int gpu_pool_attach(gpu_pool *p, struct served_store *ss, const char *device,
                    const tensor_digest *digests, size_t n, struct gpu_conn_refs *refs,
                    struct ingest_gpu_result *res, int *fds, size_t *n_fds, tetris_error *err);
/* Drops a closed connection's references (they start their keep-alive). */
void gpu_pool_release(gpu_pool *p, struct gpu_conn_refs *refs);
/* Releases copies unreferenced for the keep-alive, and any above
 * --gpu-capacity (LRU); called by every reclaim pass. */
void gpu_pool_reclaim(gpu_pool *p, struct daemon *d);
/* tetris_gpu_resident_bytes and tetris_gpu_saved_bytes, per GPU used. */
void gpu_pool_render_metrics(gpu_pool *p, textbuf *t);

/* ---- http_api.c ---- */
typedef struct http_api http_api;
int http_api_start(struct daemon *d, http_api **out, tetris_error *err);
void http_api_stop(http_api *a);
/* Renders the metrics text; tenants: with the tenant stores' series (for
 * the tenant listen address only). */
char *daemon_render_metrics(struct daemon *d, bool tenants, size_t *len);

#endif
