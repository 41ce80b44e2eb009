/* gpu_pool.c - the daemon's GPU copies of stored tensors (gpu_attach in
 * protocol/ingest.h): one CUDA VMM allocation per tensor digest, per
 * device and per served store (tenants never share one), filled from the
 * verified store copy and exported to every connection that asks, as a
 * file descriptor. A connection's references last until it closes; an
 * allocation nobody references is kept for the keep-alive, then released
 * by the reclaim pass, or sooner, least recently used first, when a new
 * one would not fit under --gpu-capacity or in the device. Releasing is
 * the daemon's handle only: the driver frees the memory once the last
 * importer has unmapped it too, so nothing is ever freed under a mapping.
 *
 * Fair shares: each store may hold at most its quota of a device
 * (--gpu-store-quota, default an equal share of the capacity per store
 * served), charged the padded size, so one tenant's copies never crowd
 * out another's; when a new copy would exceed it, the store's own
 * unreferenced copies go first, and nobody else's. A tensor under
 * 1/GPU_SHARE_MIN_FRACTION of the granularity is refused (its padding
 * would be the cost). The shared store serves device copies only with
 * --gpu-shared-store: read-only device memory is no boundary between pods
 * that do not trust each other (docs/GPU.md).
 *
 * The driver is loaded on the first gpu_attach: a node that never gets
 * one never loads it. Only the DaemonSet's arguments choose it, and only
 * from files root alone could have written (driver_path). Allocations are created and filled under
 * the pool's lock, one at a time: the copies are bound by the bus anyway. */
#include "reclaimer/daemon.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "reclaimer/trusted_path.h"
#include "tensorstore/gpu/gpu.h"

struct gpu_entry {
    const struct served_store *ss;
    int ordinal;
    tensor_digest digest;
    gpu_alloc alloc;
    uint64_t nbytes;
    unsigned refs;       /* connections holding it */
    int64_t last_use_ms; /* monotonic: when the last reference went */
};

struct gpu_pool {
    pthread_mutex_t lock;
    bool tried;      /* the driver was loaded, or failed to */
    gpu_driver *drv; /* NULL: unavailable (why) */
    char why[sizeof(((tetris_error *)0)->msg)];
    struct gpu_entry **e;
    size_t n;
    uint64_t resident[GPU_MAX_DEVICES]; /* padded bytes per device */
    bool used[GPU_MAX_DEVICES];         /* a device attached once: in /metrics */
};

static gpu_pool pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

gpu_pool *daemon_gpu_pool(void)
{
    return &pool;
}

/* The driver path to dlopen, checked: the --libcuda flag, else
 * $TETRIS_LIBCUDA (both the DaemonSet's; the settings file may not name
 * it, see config.c), else the loader's search for libcuda.so.1 (root's
 * ld.so configuration). A path is resolved, and the file, its directory and
 * the directory it was named in must be root's alone (trusted_path.h). */
static int driver_path(const char *configured, char *out, size_t len, tetris_error *err)
{
    const char *path = configured[0] != '\0' ? configured : getenv(GPU_LIBCUDA_ENV);
    if (path == NULL || path[0] == '\0' || strchr(path, '/') == NULL) {
        snprintf(out, len, "%s", path != NULL && path[0] != '\0' ? path : GPU_LIBCUDA_DEFAULT);
        return 0;
    }
    int rc = trusted_path_resolve("libcuda", path, out, len, err);
    if (rc == -TETRIS_E_NOTFOUND)
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "%s not found: GPU sharing unavailable",
                           path);
    return rc;
}

/* Loads the driver once (lock held). */
static int pool_driver(gpu_pool *p, struct daemon *d, tetris_error *err)
{
    if (!p->tried) {
        p->tried = true;
        pthread_mutex_lock(&d->cfg_lock);
        char configured[PATH_MAX], path[PATH_MAX];
        snprintf(configured, sizeof(configured), "%s", d->cfg.libcuda_path);
        pthread_mutex_unlock(&d->cfg_lock);
        tetris_error e;
        if (driver_path(configured, path, sizeof(path), &e) < 0 ||
            gpu_driver_open(path, &p->drv, &e) < 0) {
            snprintf(p->why, sizeof(p->why), "%s", e.msg);
            log_warn("event=gpu-unavailable msg=%s", LOG_Q(e.msg));
        } else {
            log_info("event=gpu-driver-loaded version=%d", gpu_driver_version(p->drv));
        }
    }
    if (p->drv == NULL)
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "%s", p->why);
    return 0;
}

static struct gpu_entry *find(gpu_pool *p, const struct served_store *ss, int ordinal,
                              const tensor_digest *dg)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->e[i]->ss == ss && p->e[i]->ordinal == ordinal &&
            memcmp(&p->e[i]->digest, dg, sizeof(*dg)) == 0)
            return p->e[i];
    return NULL;
}

static void drop(gpu_pool *p, size_t i)
{
    struct gpu_entry *e = p->e[i];
    p->resident[e->ordinal] -= e->alloc.size;
    gpu_alloc_release(p->drv, &e->alloc);
    free(e);
    p->e[i] = p->e[--p->n];
}

/* Padded bytes the device holds for store ss, or for every store (ss
 * NULL). */
static uint64_t resident_of(const gpu_pool *p, int ordinal, const struct served_store *ss)
{
    if (ss == NULL)
        return p->resident[ordinal];
    uint64_t sum = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->e[i]->ordinal == ordinal && p->e[i]->ss == ss)
            sum += p->e[i]->alloc.size;
    return sum;
}

/* Releases unreferenced allocations of the device (of store ss only, if
 * not NULL), least recently used first, until need more bytes fit under
 * bound (0: no bound but the device's, and then only `need` bytes are
 * freed). How many were freed. */
static size_t evict_for(gpu_pool *p, int ordinal, const struct served_store *ss, uint64_t need,
                        uint64_t bound)
{
    size_t freed = 0;
    uint64_t released = 0;
    for (;;) {
        uint64_t used = resident_of(p, ordinal, ss);
        bool fits = bound > 0 ? used <= bound && need <= bound - used : released >= need;
        if (fits)
            return freed;
        size_t victim = p->n;
        for (size_t i = 0; i < p->n; i++) {
            const struct gpu_entry *e = p->e[i];
            if (e->ordinal == ordinal && e->refs == 0 && (ss == NULL || e->ss == ss) &&
                (victim == p->n || e->last_use_ms < p->e[victim]->last_use_ms))
                victim = i;
        }
        if (victim == p->n)
            return freed;
        released += p->e[victim]->alloc.size;
        drop(p, victim);
        freed++;
    }
}

/* What a device copy may cost: the device-wide capacity and each store's
 * quota, in padded bytes. */
struct gpu_bounds {
    uint64_t capacity; /* 0: what the device has */
    uint64_t quota;    /* of the store asking */
};

/* A new allocation for dg, filled from the store (lock held). */
static int create_entry(gpu_pool *p, struct served_store *ss, int ordinal, const tensor_digest *dg,
                        const struct gpu_bounds *b, struct gpu_entry **out, tetris_error *err)
{
    uint64_t capacity = b->capacity;
    store_mapping m;
    int rc = store_map_tensor(ss->store, dg, &m, err);
    if (rc < 0)
        return rc;
    /* The device copy is made from bytes that match their CRC now, not
     * just when they were published. */
    rc = store_check_crc(ss->store, dg, err);
    uint64_t size = 0;
    if (rc == 0)
        rc = gpu_padded_size(p->drv, ordinal, m.nbytes, &size, err);
    if (rc == 0 && m.nbytes < size / GPU_SHARE_MIN_FRACTION)
        rc = tetris_fail(err, TETRIS_E_INVAL, 0,
                         "%llu bytes: under a quarter of cuda:%d's allocation granularity, "
                         "cheaper copied by the runtime than shared",
                         (unsigned long long)m.nbytes, ordinal);
    if (rc == 0) {
        evict_for(p, ordinal, ss, size, b->quota);
        uint64_t mine = resident_of(p, ordinal, ss);
        if (mine > b->quota || size > b->quota - mine)
            rc = tetris_fail(err, TETRIS_E_FULL, 0,
                             "store %s: its GPU quota on cuda:%d is full (%llu bytes, %llu in "
                             "use, %llu more asked)",
                             ss->tenant[0] ? ss->tenant : "(shared)", ordinal,
                             (unsigned long long)b->quota, (unsigned long long)mine,
                             (unsigned long long)size);
    }
    if (rc == 0 && capacity > 0) {
        evict_for(p, ordinal, NULL, size, capacity);
        if (p->resident[ordinal] > capacity || size > capacity - p->resident[ordinal])
            rc = tetris_fail(err, TETRIS_E_FULL, 0,
                             "GPU cuda:%d full (--gpu-capacity %llu bytes, %llu in use)", ordinal,
                             (unsigned long long)capacity,
                             (unsigned long long)p->resident[ordinal]);
    }
    struct gpu_entry *e = NULL;
    if (rc == 0 && (e = calloc(1, sizeof(*e))) == NULL)
        rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "gpu entry");
    struct gpu_entry **grown = rc == 0 ? realloc(p->e, (p->n + 1) * sizeof(*grown)) : NULL;
    if (rc == 0 && grown == NULL)
        rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "gpu entries");
    if (grown != NULL)
        p->e = grown;
    if (rc == 0) {
        rc = gpu_alloc_create(p->drv, ordinal, m.nbytes, &e->alloc, err);
        /* The device itself is full: what nobody references goes first. */
        if (rc == -TETRIS_E_FULL && evict_for(p, ordinal, NULL, size, 0) > 0)
            rc = gpu_alloc_create(p->drv, ordinal, m.nbytes, &e->alloc, err);
    }
    if (rc == 0) {
        rc = gpu_alloc_fill(p->drv, &e->alloc, m.data, m.nbytes, err);
        if (rc < 0)
            gpu_alloc_release(p->drv, &e->alloc);
    }
    uint64_t nbytes = m.nbytes;
    store_unmap_tensor(&m);
    if (rc < 0) {
        free(e);
        return rc;
    }
    e->ss = ss;
    e->ordinal = ordinal;
    e->digest = *dg;
    e->nbytes = nbytes;
    p->e[p->n++] = e;
    p->resident[ordinal] += e->alloc.size;
    *out = e;
    return 0;
}

/* A store's quota on a device when --gpu-store-quota gives no bytes: that
 * percentage of the capacity, or an equal share per store served (the
 * capacity is --gpu-capacity, else the device's memory). Lock held. */
static int default_quota(gpu_pool *p, struct daemon *d, int ordinal, uint64_t capacity,
                         double percent, uint64_t *quota, tetris_error *err)
{
    if (capacity == 0) {
        uint64_t free_bytes;
        int rc = gpu_mem_info(p->drv, ordinal, &free_bytes, &capacity, err);
        if (rc < 0)
            return rc;
    }
    size_t served = 0, n = atomic_load(&d->n_stores);
    for (size_t i = 0; i < n; i++)
        served += !atomic_load(&d->stores[i]->retired);
    *quota = percent > 0 ? (uint64_t)((double)capacity * percent / 100)
                         : capacity / (served > 0 ? served : 1);
    return 0;
}

static void reject(struct ingest_gpu_result *r, int code, const char *reason)
{
    r->attached = false;
    r->code = code;
    snprintf(r->reason, sizeof(r->reason), "%.*s", (int)sizeof(r->reason) - 1, reason);
}

int gpu_pool_attach(gpu_pool *p, struct served_store *ss, const char *device,
                    const tensor_digest *digests, size_t n, struct gpu_conn_refs *refs,
                    struct ingest_gpu_result *res, int *fds, size_t *n_fds, tetris_error *err)
{
    *n_fds = 0;
    int ordinal;
    int rc = gpu_device_parse(device, &ordinal, err);
    if (rc < 0)
        return rc;
    struct daemon *d = ss->d;
    pthread_mutex_lock(&d->cfg_lock);
    struct gpu_bounds b = {.capacity = d->cfg.gpu_capacity_bytes,
                           .quota = d->cfg.gpu_store_quota_bytes};
    double quota_percent = d->cfg.gpu_store_quota_percent;
    bool shared_ok = d->cfg.gpu_shared_store;
    pthread_mutex_unlock(&d->cfg_lock);
    if (ss->tenant[0] == '\0' && !shared_ok)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "the shared store serves no device copies: read-only device memory "
                           "is no boundary between pods that do not trust each other (the "
                           "operator enables it with --gpu-shared-store)");
    pthread_mutex_lock(&p->lock);
    rc = pool_driver(p, d, err);
    if (rc == 0)
        rc = gpu_device_check(p->drv, ordinal, err);
    if (rc == 0 && b.quota == 0)
        rc = default_quota(p, d, ordinal, b.capacity, quota_percent, &b.quota, err);
    struct gpu_entry **held = NULL;
    if (rc == 0) {
        held = realloc(refs->e, (refs->n + n) * sizeof(*held));
        if (held == NULL)
            rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "gpu references");
        else
            refs->e = held;
    }
    if (rc < 0) {
        pthread_mutex_unlock(&p->lock);
        return rc;
    }
    p->used[ordinal] = true;
    for (size_t i = 0; i < n; i++) {
        tetris_error e;
        struct gpu_entry *ent = find(p, ss, ordinal, &digests[i]);
        if (ent == NULL && create_entry(p, ss, ordinal, &digests[i], &b, &ent, &e) < 0) {
            reject(&res[i], e.code, e.msg);
            continue;
        }
        int fd;
        if (gpu_alloc_export(p->drv, &ent->alloc, &fd, &e) < 0) {
            reject(&res[i], e.code, e.msg);
            continue;
        }
        /* One reference per connection and tensor, however often asked. */
        bool mine = false;
        for (size_t k = 0; k < refs->n && !mine; k++)
            mine = refs->e[k] == ent;
        if (!mine) {
            refs->e[refs->n++] = ent;
            ent->refs++;
        }
        fds[(*n_fds)++] = fd;
        res[i] = (struct ingest_gpu_result){.attached = true,
                                            .size = ent->alloc.size,
                                            .nbytes = ent->nbytes};
    }
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void gpu_pool_release(gpu_pool *p, struct gpu_conn_refs *refs)
{
    if (refs->n > 0) {
        int64_t now = clock_mono_ms();
        pthread_mutex_lock(&p->lock);
        for (size_t i = 0; i < refs->n; i++) {
            refs->e[i]->refs--;
            refs->e[i]->last_use_ms = now;
        }
        pthread_mutex_unlock(&p->lock);
    }
    free(refs->e);
    *refs = (struct gpu_conn_refs){0};
}

void gpu_pool_reclaim(gpu_pool *p, struct daemon *d)
{
    pthread_mutex_lock(&d->cfg_lock);
    double keep_alive_s = d->cfg.keep_alive_s;
    uint64_t capacity = d->cfg.gpu_capacity_bytes;
    pthread_mutex_unlock(&d->cfg_lock);
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&p->lock);
    size_t freed = 0;
    for (size_t i = 0; i < p->n;) {
        const struct gpu_entry *e = p->e[i];
        if (e->refs == 0 && (double)(now - e->last_use_ms) >= keep_alive_s * 1000) {
            drop(p, i);
            freed++;
        } else {
            i++;
        }
    }
    /* A capacity lowered by SIGHUP. */
    for (int g = 0; g < GPU_MAX_DEVICES && capacity > 0; g++)
        freed += evict_for(p, g, NULL, 0, capacity);
    pthread_mutex_unlock(&p->lock);
    if (freed > 0)
        log_info("event=gpu-reclaim released=%zu", freed);
}

void gpu_pool_render_metrics(gpu_pool *p, textbuf *t)
{
    uint64_t resident[GPU_MAX_DEVICES] = {0}, saved[GPU_MAX_DEVICES] = {0};
    bool used[GPU_MAX_DEVICES];
    pthread_mutex_lock(&p->lock);
    memcpy(used, p->used, sizeof(used));
    for (size_t i = 0; i < p->n; i++) {
        const struct gpu_entry *e = p->e[i];
        resident[e->ordinal] += e->alloc.size;
        if (e->refs > 1)
            saved[e->ordinal] += (uint64_t)(e->refs - 1) * e->alloc.size;
    }
    pthread_mutex_unlock(&p->lock);
    static const char *const names[] = {"tetris_gpu_resident_bytes", "tetris_gpu_saved_bytes"};
    static const char *const helps[] =
        {"Device memory of the shared tensor copies the daemon holds on a GPU (padded "
         "allocations).",
         "Device memory the sharing saves on a GPU: for each copy, its size times the "
         "connections beyond the first that map it."};
    for (int f = 0; f < 2; f++) {
        prom_header(t, names[f], "gauge", helps[f]);
        for (int g = 0; g < GPU_MAX_DEVICES; g++) {
            if (!used[g])
                continue;
            char name[32];
            snprintf(name, sizeof(name), "cuda:%d", g);
            prom_sample(t, names[f], (prom_label[]){{"gpu", name}}, 1,
                        f == 0 ? resident[g] : saved[g]);
        }
    }
}
