/* tetris-reclaimer.c - configuration, signals and the main loop.
 * The main thread runs reclaim passes every --interval and handles
 * signals; the ingest service and the HTTP server run on their own
 * threads (see daemon.h for the parts). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "reclaimer/config.h"
#include "reclaimer/daemon.h"
#include "common/clock.h"
#include "common/log.h"

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

/* Waits up to seconds for a signal; returns it, or 0 on timeout. */
static int wait_signal(const sigset_t *set, double seconds)
{
    struct timespec ts = clock_timespec(seconds * 1e3);
    for (;;) {
        int sig = sigtimedwait(set, NULL, &ts);
        if (sig >= 0)
            return sig;
        if (errno == EAGAIN)
            return 0;
        if (errno != EINTR)
            return SIGTERM;
    }
}

static void run_loop(struct daemon *d, const sigset_t *set, int argc, char **argv)
{
    for (;;) {
        pthread_mutex_lock(&d->cfg_lock);
        double interval = d->cfg.interval_s;
        pthread_mutex_unlock(&d->cfg_lock);
        /* Adopted holders are checked more often than a pass runs. */
        int sig = wait_signal(set, interval < 1 ? interval : 1);
        if (sig == SIGTERM || sig == SIGINT) {
            log_info("event=stopping signal=%s", sig == SIGTERM ? "TERM" : "INT");
            return;
        }
        if (sig == SIGHUP) {
            reload(d, argc, argv);
            continue;
        }
        daemon_poll_adopted(d);
        pthread_mutex_lock(&d->pass_lock);
        int64_t last = d->last_pass_ms;
        pthread_mutex_unlock(&d->pass_lock);
        if ((double)(clock_wall_ms() - last) < interval * 1000 &&
            !atomic_exchange(&d->pass_wanted, false))
            continue;
        tetris_error err;
        if (daemon_reclaim_pass(d, &err) < 0) {
            log_error("event=reclaim-pass-failed code=%s msg=%s", tetris_code_name(err.code),
                      LOG_Q(err.msg));
            pthread_mutex_lock(&d->pass_lock);
            d->last_pass_ms = clock_wall_ms(); /* retry after one interval, not at once */
            pthread_mutex_unlock(&d->pass_lock);
        }
    }
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

int main(int argc, char **argv)
{
    log_init(argv[0]);
    struct reclaimer_config cfg;
    tetris_error err;
    int rc = reclaimer_config_load(argc, argv, &cfg, &err);
    if (rc < 0) {
        log_error("event=usage msg=%s", LOG_Q(err.msg));
        fprintf(stderr, "Try '%s --help'.\n", argv[0]);
        return EXIT_USAGE;
    }
    /* Signals are taken synchronously by the main thread only. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    struct store_tmpfs_outcome tmpfs;
    if (prepare_store_tmpfs(&cfg, &tmpfs, &err) < 0) {
        log_error("event=startup-failed code=%s msg=%s", tetris_code_name(err.code),
                  LOG_Q(err.msg));
        return EXIT_RUNTIME;
    }
    if (cfg.mount_only)
        return 0;

    static struct daemon d;
    daemon_init(&d, &cfg);
    d.tmpfs = tmpfs;
    d.tmpfs_asked = cfg.store_tmpfs != STORE_TMPFS_NONE;
    /* Before anything touches the store: a second daemon (or --once) on a
     * store a live daemon serves must change nothing there. */
    rc = daemon_claim_store(&d, &err);
    if (rc == -TETRIS_E_CONFLICT) {
        log_error("event=store-served msg=%s action=exit", LOG_Q(err.msg));
        daemon_fini(&d);
        return EXIT_STORE_REFUSED;
    }
    /* The first pass repairs every store and finds the tenants. */
    if (rc == 0)
        rc = daemon_open_shared(&d, &err);
    if (rc < 0) {
        bool refused = err.code == TETRIS_E_DENIED || err.code == TETRIS_E_FORMAT;
        log_error("event=%s code=%s msg=%s", refused ? "store-refused" : "startup-failed",
                  tetris_code_name(err.code), LOG_Q(err.msg));
        daemon_fini(&d);
        return refused ? EXIT_STORE_REFUSED : EXIT_RUNTIME;
    }
    if (daemon_reclaim_pass(&d, &err) < 0) {
        log_error("event=startup-failed code=%s msg=%s", tetris_code_name(err.code),
                  LOG_Q(err.msg));
        daemon_fini(&d);
        return EXIT_RUNTIME;
    }
    struct served_store *shared = d.stores[0];
    pthread_mutex_lock(&shared->index_lock);
    log_info("event=started store=%s tensors=%zu resident_bytes=%llu tenants=%zu once=%d",
             cfg.store_dir, tensor_index_count(shared->index),
             (unsigned long long)shared->resident_bytes, daemon_store_count(&d) - 1, cfg.once);
    pthread_mutex_unlock(&shared->index_lock);
    if (cfg.once) {
        daemon_fini(&d);
        return 0;
    }

    http_api *http = NULL;
    if (daemon_start_serving(&d, &err) < 0 ||
        ((cfg.listen[0] != '\0' || cfg.tenant_listen[0] != '\0') &&
         http_api_start(&d, &http, &err) < 0)) {
        log_error("event=startup-failed code=%s msg=%s", tetris_code_name(err.code),
                  LOG_Q(err.msg));
        atomic_store(&d.stopping, true);
        daemon_fini(&d);
        return EXIT_RUNTIME;
    }
    log_info("event=serving socket=%s", cfg.socket_path);
    run_loop(&d, &set, argc, argv);

    atomic_store(&d.stopping, true);
    http_api_stop(http);
    daemon_fini(&d);
    log_info("event=stopped");
    return 0;
}
