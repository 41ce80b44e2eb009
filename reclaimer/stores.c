/* stores.c - the stores one tetris-reclaimer serves: the node's shared
 * store and every tenant's dedicated store DIR/tenants/NAME.
 *
 * The tenants are the operator's list (--tenants), never what appears
 * under DIR/tenants/: any pod whose hostPath volume may create
 * directories could make one there, and a daemon that served whatever it
 * found would let pods conjure stores until the real tenants met
 * --max-tenants. At start and on every pass the daemon makes and lays
 * out each listed tenant's store that it does not serve yet, and serves
 * it exactly like the shared one (its own ingest socket
 * DIR/tenants/NAME/public/ingest.sock, which is where `tetris-agent --tenant NAME`
 * connects, its own index, holders, reclaim and counters). Nothing crosses
 * between stores: an ingest on a tenant's socket publishes only into that
 * tenant's store. Only the capacity is node-wide, since memory is.
 *
 * Stores are only added while the daemon runs: a tenant whose directory
 * is removed (or replaced) is retired, its socket closed and its entry
 * left in place, which lets the HTTP threads read the list without a
 * lock; the next pass makes it again, a new, empty store. */
#include "reclaimer/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

#define INSTANCE_LOCK_NAME "reclaimer.lock"

int daemon_claim_store(struct daemon *d, tetris_error *err)
{
    /* Laying the store out (directories only) changes nothing of a live
     * daemon's; it makes the directory the lock lives in. */
    store *s;
    struct store_options so = {.create = true};
    int rc = store_open(d->cfg.store_dir, &so, &s, err);
    if (rc < 0)
        return rc;
    char path[PATH_MAX];
    bool too_long = snprintf(path, sizeof(path), "%s/" STORE_PRIVATE_DIR "/" INSTANCE_LOCK_NAME,
                             store_root(s)) >= (int)sizeof(path);
    store_close(s);
    if (too_long)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "store path too long");
    /* 0600: a pod that cannot open it cannot hold it and keep the daemon
     * from starting. */
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", path);
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        char owner[32] = "";
        ssize_t n = pread(fd, owner, sizeof(owner) - 1, 0);
        owner[n > 0 ? n : 0] = '\0';
        owner[strcspn(owner, "\n")] = '\0';
        close(fd);
        if (e != EWOULDBLOCK)
            return tetris_fail(err, TETRIS_E_IO, e, "lock %s", path);
        return tetris_fail(err, TETRIS_E_CONFLICT, 0,
                           "store %s is served by another daemon (pid %s holds %s)",
                           d->cfg.store_dir, owner[0] ? owner : "unknown", path);
    }
    char pid[32];
    int len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        log_warn("event=lock-owner-unrecorded path=%s errno=%d", path, errno);
    d->instance_lock_fd = fd;
    return 0;
}

static void served_store_free(struct served_store *ss)
{
    if (ss == NULL)
        return;
    store_release_adopted(ss); /* none left but after a failed start-up */
    store_close(ss->store);
    tensor_index_free(ss->index);
    free(ss->adopted);
    pthread_rwlock_destroy(&ss->use_lock);
    pthread_mutex_destroy(&ss->index_lock);
    pthread_mutex_destroy(&ss->adopted_lock);
    pthread_mutex_destroy(&ss->starts.lock);
    free(ss);
}

/* Opens (creating the layout if needed) the shared store or a tenant's,
 * and runs its start-up: last-use state, adoption of orphaned holders. */
static int served_store_open(struct daemon *d, const char *tenant, struct served_store **out,
                             tetris_error *err)
{
    struct served_store *ss = calloc(1, sizeof(*ss));
    if (ss == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "served store");
    ss->d = d;
    pthread_rwlock_init(&ss->use_lock, NULL);
    pthread_mutex_init(&ss->index_lock, NULL);
    pthread_mutex_init(&ss->adopted_lock, NULL);
    pthread_mutex_init(&ss->starts.lock, NULL);
    /* Generations start at the start time in ms, so an ETag from before a
     * restart never matches one after it. */
    ss->generation = (uint64_t)d->started_ms;
    int rc = tensor_index_new(&ss->index, err);
    struct store_options so = {.create = true, .tenant = tenant[0] != '\0' ? tenant : NULL};
    if (rc == 0)
        rc = store_open(d->cfg.store_dir, &so, &ss->store, err);
    if (rc < 0) {
        served_store_free(ss);
        return rc;
    }
    snprintf(ss->tenant, sizeof(ss->tenant), "%s", tenant);
    const char *root = store_root(ss->store);
    struct stat st;
    if (stat(root, &st) < 0) {
        rc = tetris_fail(err, TETRIS_E_IO, errno, "stat %s", root);
        served_store_free(ss);
        return rc;
    }
    ss->root_dev = st.st_dev;
    ss->root_ino = st.st_ino;
    bool too_long;
    if (tenant[0] == '\0') {
        snprintf(ss->socket_path, sizeof(ss->socket_path), "%s", d->cfg.socket_path);
        snprintf(ss->state_path, sizeof(ss->state_path), "%s", d->cfg.state_path);
        too_long = false;
    } else {
        too_long = snprintf(ss->socket_path, sizeof(ss->socket_path), "%s/ingest.sock",
                            store_public_dir(ss->store)) >= (int)sizeof(ss->socket_path) ||
                   snprintf(ss->state_path, sizeof(ss->state_path),
                            "%s/" STORE_PRIVATE_DIR "/reclaimer.state",
                            root) >= (int)sizeof(ss->state_path);
    }
    if (too_long)
        rc = tetris_fail(err, TETRIS_E_INVAL, 0, "store path too long: %s", root);
    if (rc == 0)
        rc = store_startup(ss, err);
    if (rc < 0) {
        served_store_free(ss);
        return rc;
    }
    *out = ss;
    return 0;
}

/* Publishes ss to readers of the list (the caller checked there is a
 * free slot). */
static void add_store(struct daemon *d, struct served_store *ss)
{
    size_t n = atomic_load_explicit(&d->n_stores, memory_order_relaxed);
    d->stores[n] = ss;
    atomic_store_explicit(&d->n_stores, n + 1, memory_order_release);
}

int daemon_open_shared(struct daemon *d, tetris_error *err)
{
    struct served_store *ss;
    int rc = served_store_open(d, "", &ss, err);
    if (rc < 0)
        return rc;
    add_store(d, ss);
    return 0;
}

/* A tenant's directory is gone or is another one now: stop serving it. */
static void retire_removed_tenants(struct daemon *d)
{
    size_t n = daemon_store_count(d);
    for (size_t i = 1; i < n; i++) {
        struct served_store *ss = d->stores[i];
        struct stat st;
        if (atomic_load(&ss->retired) ||
            (stat(store_root(ss->store), &st) == 0 && st.st_dev == ss->root_dev &&
             st.st_ino == ss->root_ino))
            continue;
        atomic_store(&ss->retired, true);
        /* Its connections end, releasing their holders; their instances
         * keep the tensors they map. */
        ingest_server_stop(ss->ingest);
        ss->ingest = NULL;
        log_info("event=tenant-retired tenant=%s msg=\"directory removed\"", ss->tenant);
    }
}

static void start_tenant(struct daemon *d, const char *name)
{
    struct served_store *ss;
    tetris_error err;
    int rc = served_store_open(d, name, &ss, &err);
    if (rc == 0 && d->serving && (rc = ingest_server_start(ss, &ss->ingest, &err)) < 0)
        served_store_free(ss);
    if (rc < 0) {
        log_warn("event=tenant-unusable tenant=%s code=%s msg=%s action=retry-next-pass", name,
                 tetris_code_name(err.code), LOG_Q(err.msg));
        return;
    }
    add_store(d, ss);
    log_info("event=tenant-served tenant=%s store=%s socket=%s", name, store_root(ss->store),
             ss->socket_path);
}

void daemon_discover_tenants(struct daemon *d)
{
    retire_removed_tenants(d);
    for (size_t i = 0; i < d->cfg.n_tenants; i++) {
        const char *name = d->cfg.tenants[i];
        if (daemon_find_store(d, name) != NULL)
            continue;
        /* max_tenants bounds the list (config.c); only stores retired
         * and made again can fill the append-only array. */
        if (daemon_store_count(d) == sizeof(d->stores) / sizeof(d->stores[0])) {
            if (!d->tenant_limit_logged)
                log_warn("event=tenant-limit stores=%zu tenant=%s msg=\"not served; its "
                         "agents load privately\"",
                         daemon_store_count(d), name);
            d->tenant_limit_logged = true;
            continue;
        }
        start_tenant(d, name);
    }
}

int daemon_start_serving(struct daemon *d, tetris_error *err)
{
    size_t n = daemon_store_count(d);
    for (size_t i = 0; i < n; i++) {
        int rc = ingest_server_start(d->stores[i], &d->stores[i]->ingest, err);
        if (rc < 0)
            return rc;
    }
    d->serving = true;
    return 0;
}

void daemon_close_stores(struct daemon *d)
{
    size_t n = daemon_store_count(d);
    for (size_t i = 0; i < n; i++) {
        ingest_server_stop(d->stores[i]->ingest);
        d->stores[i]->ingest = NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!atomic_load(&d->stores[i]->retired))
            store_save_state(d->stores[i]);
        store_release_adopted(d->stores[i]);
        served_store_free(d->stores[i]);
    }
    atomic_store(&d->n_stores, 0);
}

int daemon_reclaim_pass(struct daemon *d, tetris_error *err)
{
    int64_t start_us = clock_mono_us();
    daemon_poll_adopted(d);
    daemon_refresh_pins(d);
    if (!d->cfg.no_tenants)
        daemon_discover_tenants(d);
    return daemon_pass_stores(d, start_us, err);
}
