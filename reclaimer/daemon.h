/* daemon.h - the state tetris-reclaimer's parts share: the store, the
 * tensor index, counters, and the locks that order ingests against reclaim
 * passes. Each part lives in its own file:
 *   ingest_server.c  the Unix-socket ingest service (one thread per client)
 *   reclaim.c        repair, reclaim pass (keep-alive, LRU), scrub
 *   http_api.c       /metrics, /inventory, /healthz
 *   main.c           configuration, signals, the main loop */
#ifndef TETRIS_RECLAIMER_DAEMON_H
#define TETRIS_RECLAIMER_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "error.h"
#include "store.h"
#include "tensor_index.h"

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

struct daemon_counters {
    atomic_uint_least64_t ingest_requests;      /* ingest ops answered */
    atomic_uint_least64_t ingest_errors;        /* refused requests (bad input, ...) */
    atomic_uint_least64_t ingest_tensors;       /* tensors published */
    atomic_uint_least64_t ingest_bytes;         /* bytes published */
    atomic_uint_least64_t ingest_rejected;      /* tensors refused (digest, full) */
    atomic_uint_least64_t ingest_duration_us;   /* sum, microseconds */
    atomic_uint_least64_t ingest_duration_bucket[INGEST_DURATION_BUCKETS + 1]; /* +Inf last */
    atomic_uint_least64_t fallbacks;            /* agents' report_fallback */
    atomic_uint_least64_t reclaim_passes;
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
};

extern const double ingest_duration_bounds[INGEST_DURATION_BUCKETS];

struct daemon {
    struct reclaimer_config cfg; /* settings that SIGHUP may change are
                                    read under cfg_lock */
    pthread_mutex_t cfg_lock;
    store *store;
    int64_t started_ms; /* wall clock; seeds the inventory generation */

    /* Ingest workers hold it shared from "is it resident?" to "reference
     * recorded"; a reclaim pass holds it exclusively (with the store's own
     * reclaim lock against other processes). */
    pthread_rwlock_t use_lock;

    /* The index and everything derived from it. */
    pthread_mutex_t index_lock;
    tensor_index *index;
    uint64_t generation;     /* bumps whenever the resident set changes */
    uint64_t resident_bytes; /* file bytes of resident tensors */
    uint64_t reserved_bytes; /* ingests in flight, counted against capacity */
    int64_t last_pass_ms;    /* wall clock of the last completed pass, 0: none */
    int64_t last_pass_us;    /* how long it took */
    int64_t last_locked_us;  /* of which ingests had to wait */
    bool last_pass_ok;

    /* Digests pinned through --pin-file (the cluster's pods on this node);
     * a pinned tensor is warm even without a live holder. */
    pthread_mutex_t pin_lock;
    tensor_digest *pinned;
    size_t n_pinned;

    /* Holders re-created at start-up for clients that outlived a previous
     * daemon; each is released when its owner exits (pidfd). Main thread. */
    struct adopted_holder *adopted;
    size_t n_adopted;

    /* Last pass's view of the holders (for /metrics). */
    uint64_t holders;        /* live holders */
    uint64_t logical_bytes;  /* sum over holders of the bytes each maps */
    struct model_usage models[MODEL_LABELS_MAX + 1]; /* by holder label, +other */
    size_t n_models;
    uint64_t warm_bytes;     /* resident bytes of referenced tensors */
    size_t scrub_cursor;

    struct daemon_counters counters;
    atomic_bool stopping;
    /* Bytes ingests were refused for lack of room since the last pass: the
     * next pass evicts that much below capacity (LRU, cold tensors only),
     * and runs as soon as possible rather than after the interval. */
    atomic_uint_least64_t shortfall_bytes;
};

int64_t wall_ms(void);
int64_t mono_ms(void);

/* ---- reclaim.c ---- */
/* Repairs the store, rebuilds the index from it and re-adopts holders
 * whose owner outlived a previous daemon. Call once before serving. */
int daemon_startup(struct daemon *d, tetris_error *err);
/* One pass: repair, reconcile the index with the store, free cold
 * tensors per keep-alive, evict LRU above capacity, persist last-use
 * times, then scrub a bounded number of bytes. */
int daemon_reclaim_pass(struct daemon *d, tetris_error *err);
/* Writes the last-use state file now (at shutdown). */
void daemon_save_state(struct daemon *d);
/* Re-reads --pin-file if it changed (the hook for the cluster side). */
void daemon_refresh_pins(struct daemon *d);
/* Releases holders adopted at start-up whose owner has exited. */
void daemon_poll_adopted(struct daemon *d);
void daemon_release_adopted(struct daemon *d);

/* ---- index helpers shared by ingest and reclaim (index_lock held) ---- */
void daemon_index_touch(struct daemon *d, const tensor_digest *dg, int64_t now_s);
int daemon_index_add(struct daemon *d, const tensor_meta *meta, uint64_t file_bytes,
                     int64_t now_s, tetris_error *err);

/* ---- ingest_server.c ---- */
typedef struct ingest_server ingest_server;
int ingest_server_start(struct daemon *d, ingest_server **out, tetris_error *err);
/* Stops accepting, closes every connection (releasing its references),
 * joins the threads and removes the socket. */
void ingest_server_stop(ingest_server *s);

/* ---- http_api.c ---- */
typedef struct http_api http_api;
int http_api_start(struct daemon *d, http_api **out, tetris_error *err);
uint16_t http_api_port(const http_api *a);
void http_api_stop(http_api *a);
/* Renders the metrics text (exposed for tests and benchmarks). */
char *daemon_render_metrics(struct daemon *d, size_t *len);

#endif
