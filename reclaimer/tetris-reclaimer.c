/* tetris-reclaimer.c - the daemon's steps for common/daemon_run.h: start
 * (the store, its claim, the first pass, then the servers), a tick that
 * runs reclaim passes every --interval, a reload of the settings on
 * SIGHUP, and stop. The ingest service and the HTTP server run on their
 * own threads (see daemon.h for the parts). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "reclaimer/config.h"
#include "reclaimer/daemon.h"
#include "common/clock.h"
#include "common/daemon_run.h"
#include "common/log.h"
#include "tensorstore/store.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
/* The store is not this daemon's to serve and nothing was changed: another
 * live daemon serves it, or it is refused as it is (a link, not this uid's,
 * writable by others, or in the old format-1 layout). */
#define EXIT_STORE_REFUSED 3

static void daemon_init(struct daemon *d, const struct reclaimer_config *cfg)
{
    memset(d, 0, sizeof(*d));
    d->cfg = *cfg;
    pthread_mutex_init(&d->cfg_lock, NULL);
    pthread_mutex_init(&d->pin_lock, NULL);
    pthread_mutex_init(&d->pass_lock, NULL);
    pthread_mutex_init(&d->capacity_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->capacity_freed, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&d->peers_lock, NULL);
    d->started_ms = clock_wall_ms();
    d->instance_lock_fd = -1;
    d->workers = cfg->workers;
    if (d->workers == 0) {
        struct cpu_allowance a;
        cpu_allowance_read(NULL, &a);
        d->workers = a.workers;
        log_info("event=ingest-workers workers=%u affinity_cpus=%u cpu_quota=%g source=allowance",
                 a.workers, a.affinity, a.quota_cpus);
    } else {
        log_info("event=ingest-workers workers=%u source=flag", d->workers);
    }
    if (d->workers == 1)
        log_warn("event=ingest-one-worker msg=%s",
                 LOG_Q("one CPU allowed: ingests hash and publish on one thread"));
    /* Each request's own thread is one worker; the rest are shared. */
    worker_slots_init(&d->ingest_slots, d->workers - 1);
}

static void daemon_fini(struct daemon *d)
{
    daemon_close_stores(d);
    free(d->pinned);
    pthread_cond_destroy(&d->capacity_freed);
    pthread_mutex_destroy(&d->capacity_lock);
    peers_free(d);
    pthread_mutex_destroy(&d->peers_lock);
    pthread_mutex_destroy(&d->pass_lock);
    pthread_mutex_destroy(&d->pin_lock);
    pthread_mutex_destroy(&d->cfg_lock);
    worker_slots_destroy(&d->ingest_slots);
    if (d->instance_lock_fd >= 0)
        close(d->instance_lock_fd);
}

/* Each ingest connection may carry up to INGEST_MAX_SOURCES descriptors:
 * use the hard limit, not the (often 1024) soft one. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            log_warn("event=fd-limit-unchanged errno=%d", errno);
    }
}

/* SIGHUP: re-read the file and re-apply the flags. Only the policy knobs
 * change at run time; where the daemon lives (store, socket, HTTP address)
 * needs a restart. */
static void reload(struct daemon *d, int argc, char **argv)
{
    struct reclaimer_config fresh;
    tetris_error err;
    int rc = reclaimer_config_load(argc, argv, &fresh, &err);
    if (rc != 0) {
        log_error("event=reload-failed msg=%s action=keep-old-config", LOG_Q(err.msg));
        return;
    }
    if (strcmp(fresh.store_dir, d->cfg.store_dir) != 0 ||
        strcmp(fresh.listen, d->cfg.listen) != 0 ||
        strcmp(fresh.socket_path, d->cfg.socket_path) != 0 ||
        strcmp(fresh.tenant_listen, d->cfg.tenant_listen) != 0 ||
        fresh.no_tenants != d->cfg.no_tenants || fresh.max_tenants != d->cfg.max_tenants ||
        fresh.n_tenants != d->cfg.n_tenants ||
        memcmp(fresh.tenants, d->cfg.tenants, sizeof(fresh.tenants)) != 0)
        log_warn("event=reload-ignored what=\"store, socket, listen address or tenants\" "
                 "msg=\"needs a restart\"");
    pthread_mutex_lock(&d->cfg_lock);
    d->cfg.interval_s = fresh.interval_s;
    d->cfg.keep_alive_s = fresh.keep_alive_s;
    d->cfg.capacity_bytes = fresh.capacity_bytes;
    d->cfg.tenant_capacity_bytes = fresh.tenant_capacity_bytes;
    d->cfg.shared_capacity_bytes = fresh.shared_capacity_bytes;
    d->cfg.max_unverified_bytes = fresh.max_unverified_bytes;
    d->cfg.max_unverified_uid_bytes = fresh.max_unverified_uid_bytes;
    d->cfg.max_request_bytes = fresh.max_request_bytes;
    d->cfg.ingest_timeout_s = fresh.ingest_timeout_s;
    d->cfg.max_conns_per_uid = fresh.max_conns_per_uid;
    d->cfg.max_conns_per_pid = fresh.max_conns_per_pid;
    d->cfg.scrub_rate = fresh.scrub_rate;
    d->cfg.max_connections = fresh.max_connections;
    d->cfg.request_timeout_s = fresh.request_timeout_s;
    d->cfg.health_deadline_s = fresh.health_deadline_s;
    memcpy(d->cfg.tenant_uids, fresh.tenant_uids, sizeof(d->cfg.tenant_uids));
    d->cfg.n_tenant_uids = fresh.n_tenant_uids;
    memcpy(d->cfg.node_name, fresh.node_name, sizeof(d->cfg.node_name));
    memcpy(d->cfg.pin_path, fresh.pin_path, sizeof(d->cfg.pin_path));
    pthread_mutex_unlock(&d->cfg_lock);
    log_info("event=reloaded interval_s=%g keep_alive_s=%g capacity_bytes=%llu scrub_rate=%llu",
             fresh.interval_s, fresh.keep_alive_s, (unsigned long long)fresh.capacity_bytes,
             (unsigned long long)fresh.scrub_rate);
}

/* Puts the store on a tmpfs of its own where asked (store_tmpfs.h) and says
 * in one line what it is on (o keeps it, for /metrics and /healthz); a
 * percentage capacity is then a share of that filesystem. */
static int prepare_store_tmpfs(struct reclaimer_config *cfg, struct store_tmpfs_outcome *o,
                               tetris_error *err)
{
    int rc;
    memset(o, 0, sizeof(*o));
    /* Not entering the namespace where pods look makes a mount pointless:
     * the daemon's own line, later, says what the store is on. */
    if (cfg->mount_namespace[0] != '\0' &&
        store_tmpfs_enter_namespace(cfg->mount_namespace, err) < 0) {
        log_warn("event=store-tmpfs state=fallback store=%s msg=%s", cfg->store_dir,
                 LOG_Q(err->msg));
        o->state = STORE_TMPFS_FALLBACK;
        snprintf(o->reason, sizeof(o->reason), "%.*s", (int)sizeof(o->reason) - 1, err->msg);
        return 0;
    }
    rc = store_tmpfs_prepare(cfg->store_dir, cfg->store_tmpfs, o, err);
    if (rc < 0)
        return rc;
    char why[LOG_QUOTE_MAX + 8] = "";
    if (o->reason[0] != '\0')
        snprintf(why, sizeof(why), " msg=%s", LOG_Q(o->reason));
    bool degraded = o->state == STORE_TMPFS_FALLBACK || !o->on_tmpfs || o->reason[0] != '\0';
    log_write(degraded ? LOG_LEVEL_WARN : LOG_LEVEL_INFO,
              "event=store-tmpfs state=%s store=%s tmpfs=%d huge=%s%s",
              store_tmpfs_state_name(o->state), cfg->store_dir, o->on_tmpfs,
              o->huge[0] != '\0' ? o->huge : "-", why);
    return reclaimer_config_resolve_capacity(cfg, err);
}

/* The daemon's run: its settings, its state once started, and how start
 * failed; daemon_run's steps below take it. */
struct reclaimer_run {
    int argc;
    char **argv;
    struct reclaimer_config cfg;
    struct daemon d;
    bool initialized; /* d was initialized: stop finishes it */
    http_api *http;
    enum { START_FAILED, START_STORE_SERVED, START_STORE_REFUSED } failure;
};

/* The store on its tmpfs, the claim, the first pass (which repairs every
 * store and finds the tenants), then the ingest service and HTTP server.
 * --mount-only and --once end here. */
static int run_start(void *ctx, tetris_error *err)
{
    struct reclaimer_run *run = ctx;
    struct reclaimer_config *cfg = &run->cfg;
    struct daemon *d = &run->d;
    struct store_tmpfs_outcome tmpfs;
    int rc;

    raise_fd_limit();
    if ((rc = tensor_hasher_prepare(err)) < 0 || (rc = prepare_store_tmpfs(cfg, &tmpfs, err)) < 0)
        return rc;
    if (cfg->mount_only)
        return DAEMON_RUN_DONE;
    daemon_init(d, cfg);
    run->initialized = true;
    d->tmpfs = tmpfs;
    d->tmpfs_asked = cfg->store_tmpfs != STORE_TMPFS_NONE;
    /* Before anything touches the store: a second daemon (or --once) on a
     * store a live daemon serves must change nothing there. */
    rc = daemon_claim_store(d, err);
    if (rc == -TETRIS_E_CONFLICT) {
        run->failure = START_STORE_SERVED;
        return rc;
    }
    if (rc == 0)
        rc = daemon_open_shared(d, err);
    if (rc < 0) {
        if (err->code == TETRIS_E_DENIED || err->code == TETRIS_E_FORMAT)
            run->failure = START_STORE_REFUSED;
        return rc;
    }
    if ((rc = daemon_reclaim_pass(d, err)) < 0)
        return rc;
    struct served_store *shared = d->stores[0];
    pthread_mutex_lock(&shared->index_lock);
    log_info("event=started store=%s tensors=%zu resident_bytes=%llu tenants=%zu once=%d",
             cfg->store_dir, tensor_index_count(shared->index),
             (unsigned long long)shared->resident_bytes, daemon_store_count(d) - 1, cfg->once);
    pthread_mutex_unlock(&shared->index_lock);
    if (cfg->once)
        return DAEMON_RUN_DONE;
    if ((rc = daemon_start_serving(d, err)) < 0 ||
        ((cfg->listen[0] != '\0' || cfg->tenant_listen[0] != '\0') &&
         (rc = http_api_start(d, &run->http, err)) < 0))
        return rc;
    log_info("event=serving socket=%s", cfg->socket_path);
    return 0;
}

static int run_start_failed(void *ctx, int r, const tetris_error *err)
{
    const struct reclaimer_run *run = ctx;
    (void)r;
    switch (run->failure) {
    case START_STORE_SERVED:
        log_error("event=store-served msg=%s action=exit", LOG_Q(err->msg));
        return EXIT_STORE_REFUSED;
    case START_STORE_REFUSED:
        log_error("event=store-refused code=%s msg=%s", tetris_code_name(err->code),
                  LOG_Q(err->msg));
        return EXIT_STORE_REFUSED;
    case START_FAILED: break;
    }
    log_error("event=startup-failed code=%s msg=%s", tetris_code_name(err->code), LOG_Q(err->msg));
    return EXIT_RUNTIME;
}

static void run_stop(void *ctx)
{
    struct reclaimer_run *run = ctx;
    if (!run->initialized)
        return;
    atomic_store(&run->d.stopping, true);
    http_api_stop(run->http);
    daemon_fini(&run->d);
}

/* Adopted holders are checked more often than a pass runs. */
static double run_tick_wait_s(void *ctx)
{
    struct daemon *d = &((struct reclaimer_run *)ctx)->d;
    pthread_mutex_lock(&d->cfg_lock);
    double interval = d->cfg.interval_s;
    pthread_mutex_unlock(&d->cfg_lock);
    return interval < 1 ? interval : 1;
}

/* The adopted holders; a reclaim pass once an interval has passed since
 * the last, or when one is wanted sooner. */
static int run_tick(void *ctx)
{
    struct daemon *d = &((struct reclaimer_run *)ctx)->d;
    tetris_error err;

    daemon_poll_adopted(d);
    pthread_mutex_lock(&d->cfg_lock);
    double interval = d->cfg.interval_s;
    pthread_mutex_unlock(&d->cfg_lock);
    pthread_mutex_lock(&d->pass_lock);
    int64_t last = d->last_pass_ms;
    pthread_mutex_unlock(&d->pass_lock);
    if ((double)(clock_wall_ms() - last) < interval * 1000 &&
        !atomic_exchange(&d->pass_wanted, false))
        return DAEMON_RUN_CONTINUE;
    if (daemon_reclaim_pass(d, &err) < 0) {
        log_error("event=reclaim-pass-failed code=%s msg=%s", tetris_code_name(err.code),
                  LOG_Q(err.msg));
        pthread_mutex_lock(&d->pass_lock);
        d->last_pass_ms = clock_wall_ms(); /* retry after one interval, not at once */
        pthread_mutex_unlock(&d->pass_lock);
    }
    return DAEMON_RUN_CONTINUE;
}

static void run_reload(void *ctx)
{
    struct reclaimer_run *run = ctx;
    reload(&run->d, run->argc, run->argv);
}

int main(int argc, char **argv)
{
    static struct reclaimer_run run;
    tetris_error err;

    log_init(argv[0]);
    run.argc = argc;
    run.argv = argv;
    if (reclaimer_config_load(argc, argv, &run.cfg, &err) < 0) {
        log_error("event=usage msg=%s", LOG_Q(err.msg));
        fprintf(stderr, "Try '%s --help'.\n", argv[0]);
        return EXIT_USAGE;
    }
    return daemon_run(&(struct daemon_run){.ctx = &run,
                                           .start = run_start,
                                           .stop = run_stop,
                                           .start_failed = run_start_failed,
                                           .tick = run_tick,
                                           .tick_wait_s = run_tick_wait_s,
                                           .reload = run_reload});
}
