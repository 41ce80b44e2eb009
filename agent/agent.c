/* agent.c - load a model's tensors for a function instance (see agent.h).
 *
 * Store modes map what is resident and get the rest published, either by
 * the node daemon (STORE: the instance mounts the store read-only) or by
 * the agent itself (DIRECT). References are recorded before anything is
 * mapped, and mapping happens under the store's shared use lock, so the
 * reclaimer never removes a tensor between "referenced" and "mapped". Whatever the store cannot
 * serve is loaded privately, with one `event=fallback` log line: inference
 * must work without the store. A model of more tensors than the process
 * may still map (vm.max_map_count) gets its largest tensors mapped and the
 * rest loaded privately, with one `event=map-budget` line, rather than
 * mapping until mmap fails. In STORE mode the daemon connection is
 * watched for the model's lifetime, so a restarted daemon gets our
 * references again (ingest_client_keep_registered). */
#include "agent/agent.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "agent/ingest_client.h"
#include "common/cli.h"
#include "tensorstore/gpu/gpu.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/workers.h"
#include "model/manifest.h"
#include "model/model_publish.h"
#include "protocol/names.h"
#include "protocol/oci.h"

#define DEFAULT_DAEMON_TIMEOUT_MS 30000
#define DEFAULT_PULL_TIMEOUT_MS 600000 /* a model from a registry: minutes */
/* Mappings left to the runtime after the tensors are mapped: its threads'
 * stacks, allocator arenas and libraries each take some, and an mmap
 * failing inside it is far worse than a few tensors held privately. */
#define MAP_BUDGET_RUNTIME_MARGIN 1024

struct source_fd {
    const char *path;
    int fd;
};

struct agent_model_private {
    store *store;
    store_holder *holder;   /* DIRECT: our references */
    ingest_client *daemon;  /* STORE: the daemon holds our references */
    store_mapping *maps;    /* per tensor; map_base NULL if not mapped */
    bool *mappable;         /* per tensor: to be mapped (see plan_mappings) */
    void **copies;          /* per tensor private copy, or NULL */
    struct source_fd *sources;
    size_t n_sources;
    char *public_dir; /* the store's tensors/ and ingest socket */
    enum store_populate populate;
    atomic_bool populate_degraded_logged;
    const uint8_t *graph; /* a pulled model's non-weight layer (mapped) */
    size_t graph_len;
    bool pulled;                   /* loaded by reference: manifest_digest is set */
    tensor_digest manifest_digest; /* the manifest the daemon pulled */
    void *graph_map;       /* for munmap; NULL when graph_len is 0 */
    gpu_driver *gpu;       /* o->device: the driver */
    gpu_mapping *gpu_maps; /* one per distinct digest attached */
    size_t n_gpu_maps;
};

static const uint8_t empty_tensor[1];

/* The time since *mark, added to *step; the mark moves to now, so the
 * steps of struct agent_steps are timed back to back. */
static void step_done(double *step, double *mark)
{
    double now = clock_now_ms();
    *step += now - *mark;
    *mark = now;
}

/* What the store held of a model: `resident` of its `shareable` tensors
 * (those with bytes). */
static enum agent_store_result store_result(size_t resident, size_t shareable)
{
    if (resident == shareable)
        return AGENT_STORE_HIT;
    return resident == 0 ? AGENT_STORE_MISS : AGENT_STORE_PARTIAL;
}

const char *agent_store_result_name(enum agent_store_result r)
{
    static const char *const names[] = {[AGENT_STORE_NONE] = "none",
                                        [AGENT_STORE_HIT] = "hit",
                                        [AGENT_STORE_PARTIAL] = "partial",
                                        [AGENT_STORE_MISS] = "miss"};
    assert((size_t)r < sizeof(names) / sizeof(names[0]));
    return names[r];
}

void agent_options_init(struct agent_options *o)
{
    memset(o, 0, sizeof(*o));
    o->mode = AGENT_MODE_STORE;
    o->store_dir = STORE_DEFAULT_DIR;
    o->daemon_timeout_ms = DEFAULT_DAEMON_TIMEOUT_MS;
    o->shuffle = true;
    o->populate = AGENT_POPULATE_DEFAULT;
    o->pull_timeout_ms = DEFAULT_PULL_TIMEOUT_MS;
}

int agent_populate_option(const struct opt_spec *spec, const char *label, const char *value,
                          tetris_error *err)
{
    static const char *const names[] = {[STORE_POPULATE_NONE] = "none",
                                        [STORE_POPULATE_MAP] = "map",
                                        [STORE_POPULATE_MADVISE] = "madvise"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(value, names[i]) == 0) {
            *(enum store_populate *)spec->dest = (enum store_populate)i;
            return 0;
        }
    return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: want none, map or madvise, not '%s'", label,
                       value);
}

static int source_fd(agent_model *am, const char *path, int *fd, tetris_error *err)
{
    struct agent_model_private *p = am->priv;
    for (size_t i = 0; i < p->n_sources; i++) {
        if (strcmp(p->sources[i].path, path) == 0) {
            *fd = p->sources[i].fd;
            return 0;
        }
    }
    struct source_fd *s = realloc(p->sources, (p->n_sources + 1) * sizeof(*s));
    if (s == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    p->sources = s;
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", path);
    s[p->n_sources].path = path;
    s[p->n_sources].fd = f;
    p->n_sources++;
    *fd = f;
    return 0;
}

/* Reads tensor i from its source into private memory. */
static int load_private(agent_model *am, size_t i, tetris_error *err)
{
    const tensor_desc *t = &am->model->tensors[i];
    int fd, r;

    am->tensors[i].shared = false;
    if (t->meta.nbytes == 0) {
        am->tensors[i].data = empty_tensor;
        return 0;
    }
    if ((r = source_fd(am, t->source, &fd, err)) < 0)
        return r;
    cleanup_free void *buf = malloc(t->meta.nbytes);
    if (buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory for tensor %s (%llu bytes)",
                           t->name, (unsigned long long)t->meta.nbytes);
    if ((r = model_read_tensor(t, fd, buf, err)) < 0)
        return tetris_wrap(err, "tensor %s", t->name);
    am->priv->copies[i] = steal_pointer(&buf);
    am->tensors[i].data = am->priv->copies[i];
    am->stats.private_bytes += t->meta.nbytes;
    return 0;
}

static int load_private_missing(agent_model *am, const struct agent_options *o, tetris_error *err)
{
    if (o->map_only)
        return 0; /* the caller reads no bytes: references are all it wants */
    for (size_t i = 0; i < am->model->n_tensors; i++) {
        if (am->tensors[i].data != NULL)
            continue;
        int r = load_private(am, i, err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Records why the store could not serve (the first reason wins) and logs
 * it once; the caller then loads what is missing privately. */
static void fall_back(agent_model *am, const struct agent_options *o, const char *reason,
                      const tetris_error *cause)
{
    if (am->stats.fell_back)
        return;
    am->stats.fell_back = true;
    snprintf(am->stats.fallback_reason, sizeof(am->stats.fallback_reason), "%s", reason);
    log_warn("event=fallback reason=%s model=%s mode=%s detail=%s", reason, am->model->path,
             o->mode == AGENT_MODE_DIRECT ? "direct" : "store",
             LOG_Q(cause != NULL ? cause->msg : reason));
}

/* Maps tensor i; its mapped bytes are for the caller to count (workers
 * count them under their lock). */
static int map_tensor_only(agent_model *am, size_t i, tetris_error *err)
{
    /* Invariant: a tensor is mapped only once a holder references it, our
     * holder file (direct: record_references, publish_item) or the
     * daemon's for our connection (it answers after recording), so a
     * reclaim pass never frees what is being mapped (store.h). */
    assert(am->priv->holder != NULL || am->priv->daemon != NULL);
    store_mapping *mp = &am->priv->maps[i];
    int r = store_map_tensor_populated(am->priv->store, &am->model->tensors[i].meta.digest,
                                       am->priv->populate, mp, err);
    if (r < 0)
        return r;
    /* Still populated, at a fault per page: said once per model, since
     * that cost lands in the load (and is what a first request would pay
     * otherwise). */
    if (mp->populated_by_reads && !atomic_exchange(&am->priv->populate_degraded_logged, true))
        log_warn("event=populate-degraded model=%s populate=madvise action=read-pages "
                 "msg=\"the kernel has no MADV_POPULATE_READ (Linux 5.14+)\"",
                 LOG_Q(am->model->path));
    am->tensors[i].data = mp->data;
    am->tensors[i].shared = true;
    return 0;
}

static int map_tensor(agent_model *am, size_t i, tetris_error *err)
{
    int r = map_tensor_only(am, i, err);
    if (r == 0)
        am->stats.mapped_bytes += am->model->tensors[i].meta.nbytes;
    return r;
}

/* ---- DIRECT: the agent publishes into the store itself ---- */

static void shuffle(size_t *idx, size_t n)
{
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rand_r(&seed) % i;
        size_t tmp = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = tmp;
    }
}

static int missing_by_size(const void *a, const void *b, void *ctx)
{
    const model *m = ctx;
    uint64_t x = m->tensors[*(const size_t *)a].meta.nbytes;
    uint64_t y = m->tensors[*(const size_t *)b].meta.nbytes;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int record_references(agent_model *am, const char *label, tetris_error *err)
{
    const model *m = am->model;
    cleanup_free tensor_digest *digests = calloc(m->n_tensors + 1, sizeof(*digests));
    cleanup_free uint64_t *sizes = calloc(m->n_tensors + 1, sizeof(*sizes));
    int r;

    if (digests == NULL || sizes == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (!m->tensors[i].has_digest)
            continue; /* referenced once published (publish_item) */
        digests[n] = m->tensors[i].meta.digest;
        sizes[n++] = m->tensors[i].meta.nbytes;
    }
    if ((r = store_holder_open(am->priv->store, label, getpid(), &am->priv->holder, err)) < 0)
        return r;
    return store_holder_add_many(am->priv->holder, digests, sizes, n, err);
}

/* What a load's workers share: a lock (for the model's stats and anything
 * else one worker at a time must touch) and the first failure, after which
 * the items not yet started are skipped; the caller acts on it once the
 * workers are done. */
struct worker_job {
    pthread_mutex_t lock;
    bool failed;
    int rc;
    tetris_error cause;
};

static bool job_failed(struct worker_job *w)
{
    pthread_mutex_lock(&w->lock);
    bool failed = w->failed;
    pthread_mutex_unlock(&w->lock);
    return failed;
}

/* Under w->lock: keeps r and cause if they are the first failure. */
static void job_keep_failure(struct worker_job *w, int r, const tetris_error *cause)
{
    if (r < 0 && !w->failed) {
        w->failed = true;
        w->rc = r;
        w->cause = *cause;
    }
}

/* The missing tensors of a direct load, published and mapped on workers;
 * the first failure stops the rest (a store failure falls back, a source
 * that does not hash to its manifest fails the load). A tensor without its
 * digest (a cold load without a manifest) is hashed as it is written, so
 * its bytes are read and hashed once, and referenced once its digest is
 * known: the use lock, held throughout, keeps reclaim out until then. */
struct publish_job {
    struct worker_job w; /* the lock also guards the holder file */
    agent_model *am;
    const size_t *missing;
};

static unsigned agent_workers(const struct agent_options *o)
{
    if (o->workers > 0)
        return o->workers;
    struct cpu_allowance a;
    cpu_allowance_read(NULL, &a);
    return a.workers;
}

static void publish_item(void *ctx, size_t k)
{
    struct publish_job *j = ctx;
    agent_model *am = j->am;
    size_t i = j->missing[k];
    tensor_desc *t = &am->model->tensors[i];
    if (job_failed(&j->w))
        return;
    int fd = -1;
    for (size_t s = 0; s < am->priv->n_sources && fd < 0; s++)
        if (strcmp(am->priv->sources[s].path, t->source) == 0)
            fd = am->priv->sources[s].fd;
    tetris_error cause = {0};
    bool published = false;
    bool computed = !t->has_digest;
    int r = computed ? model_publish_tensor_computed(am->priv->store, t, fd, NULL, NULL, 0,
                                                     &published, &cause)
                     : model_publish_tensor(am->priv->store, t, fd, &published, &cause);
    if (r == 0 && computed) {
        pthread_mutex_lock(&j->w.lock); /* the holder file is one for all workers */
        r = store_holder_add(am->priv->holder, &t->meta.digest, t->meta.nbytes, &cause);
        pthread_mutex_unlock(&j->w.lock);
    }
    bool mapped = false;
    if (r == 0 && am->priv->mappable[i]) {
        r = map_tensor_only(am, i, &cause);
        mapped = r == 0;
    }
    pthread_mutex_lock(&j->w.lock);
    if (mapped)
        am->stats.mapped_bytes += t->meta.nbytes;
    if (r == 0 && published)
        am->stats.ingested_bytes += t->meta.nbytes;
    job_keep_failure(&j->w, r, &cause);
    pthread_mutex_unlock(&j->w.lock);
}

/* Under the use lock: references first, then map what is resident, then
 * publish and map the rest on the CPU allowance's workers (in random order
 * when asked, so concurrent loaders of one model spread over the tensor
 * locks). */
static int load_direct(agent_model *am, const struct agent_options *o, const char *label,
                       tetris_error *err)
{
    const model *m = am->model;
    cleanup_free size_t *missing = calloc(m->n_tensors + 1, sizeof(*missing));
    size_t n_missing = 0;
    tetris_error cause = {0};
    int r;

    if (missing == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    if ((r = record_references(am, label, &cause)) < 0) {
        fall_back(am, o, "holder-failed", &cause);
        return 0;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (m->tensors[i].meta.nbytes == 0)
            continue; /* nothing to share */
        if (!m->tensors[i].has_digest) {
            missing[n_missing++] = i;
            continue;
        }
        if (!am->priv->mappable[i]) {
            if (!store_has_tensor(am->priv->store, &m->tensors[i].meta.digest))
                missing[n_missing++] = i;
            continue;
        }
        r = map_tensor(am, i, &cause);
        if (r == -TETRIS_E_NOTFOUND)
            missing[n_missing++] = i;
        else if (r < 0)
            fall_back(am, o, "map-failed", &cause);
    }
    size_t shareable = 0;
    for (size_t i = 0; i < m->n_tensors; i++)
        shareable += m->tensors[i].meta.nbytes > 0;
    am->stats.store_result = store_result(shareable - n_missing, shareable);
    if (o->shuffle)
        shuffle(missing, n_missing);
    /* Largest first (as the node daemon does): a tensor is hashed by one
     * worker, so a big one handed out last would leave the others idle. */
    qsort_r(missing, n_missing, sizeof(*missing), missing_by_size, (void *)m);
    /* Sources are opened before the workers start: source_fd is not for
     * concurrent use. */
    for (size_t k = 0; k < n_missing; k++) {
        int fd;
        if ((r = source_fd(am, m->tensors[missing[k]].source, &fd, err)) < 0)
            return r; /* the model itself is unreadable: no fallback helps */
    }
    struct publish_job j = {.am = am, .missing = missing};
    pthread_mutex_init(&j.w.lock, NULL);
    workers_run(n_missing, agent_workers(o), NULL, publish_item, &j);
    pthread_mutex_destroy(&j.w.lock);
    if (!j.w.failed)
        return 0;
    if (j.w.rc == -TETRIS_E_CORRUPT || j.w.rc == -TETRIS_E_FORMAT) {
        /* the source does not hash to its manifest: never publish it */
        *err = j.w.cause;
        return j.w.rc;
    }
    fall_back(am, o, j.w.rc == -TETRIS_E_FULL ? "store-full" : "ingest-failed", &j.w.cause);
    return 0;
}

/* ---- the mapping budget ---- */

struct sized_tensor {
    size_t index;
    uint64_t nbytes;
};

static int by_size_descending(const void *a, const void *b)
{
    uint64_t x = ((const struct sized_tensor *)a)->nbytes;
    uint64_t y = ((const struct sized_tensor *)b)->nbytes;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Whether a tensor is worth a mapping: one of a page or more, or one the
 * model keeps as external data, whatever its size (its runtime opens that
 * file anyway, and a session whose external data is the store's resolves
 * every external tensor there: one left to the model's folder would cost
 * the whole model its sharing, ort_adapter.c). */
static bool worth_mapping(const model *m, const tensor_desc *t)
{
    assert(t->source != NULL); /* only a pulled model's have none; it maps all */
    return t->meta.nbytes >= AGENT_MIN_MAPPED_BYTES || strcmp(t->source, m->path) != 0;
}

/* Decides which tensors get mapped: all worth it (worth_mapping), unless
 * that is more mappings than the process has left; then the largest ones,
 * since they save the most memory per mapping. Tensors left out are still
 * published and referenced, and load privately. */
static int plan_mappings(agent_model *am, const struct agent_options *o, tetris_error *err)
{
    const model *m = am->model;
    bool *mappable = am->priv->mappable;
    size_t eligible = 0, allowed = o->max_mappings;
    uint64_t budget = 0;
    tetris_error cause = {0};

    for (size_t i = 0; i < m->n_tensors; i++) {
        mappable[i] = worth_mapping(m, &m->tensors[i]);
        eligible += mappable[i];
    }
    if (allowed == 0) {
        if (store_map_budget(&budget, &cause) < 0) {
            /* mapping still works; only its planning is blind */
            log_warn("event=map-budget-unknown model=%s detail=%s", LOG_Q(m->path),
                     LOG_Q(cause.msg));
            return 0;
        }
        allowed = budget > MAP_BUDGET_RUNTIME_MARGIN ? budget - MAP_BUDGET_RUNTIME_MARGIN : 0;
    }
    if (eligible <= allowed)
        return 0;

    cleanup_free struct sized_tensor *order = calloc(eligible + 1, sizeof(*order));
    if (order == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < m->n_tensors; i++)
        if (mappable[i])
            order[n++] = (struct sized_tensor){i, m->tensors[i].meta.nbytes};
    qsort(order, n, sizeof(*order), by_size_descending);
    uint64_t private_bytes = 0;
    for (size_t k = allowed; k < n; k++) {
        mappable[order[k].index] = false;
        private_bytes += order[k].nbytes;
    }
    if (o->max_mappings != 0)
        log_warn("event=map-budget model=%s tensors=%zu mapped=%zu private=%zu "
                 "private_bytes=%llu max_mappings=%zu",
                 m->path, eligible, allowed, eligible - allowed,
                 (unsigned long long)private_bytes, o->max_mappings);
    else
        log_warn("event=map-budget model=%s tensors=%zu mapped=%zu private=%zu "
                 "private_bytes=%llu mappings_left=%llu runtime_margin=%d",
                 m->path, eligible, allowed, eligible - allowed,
                 (unsigned long long)private_bytes, (unsigned long long)budget,
                 MAP_BUDGET_RUNTIME_MARGIN);
    return 0;
}

/* ---- STORE: the node daemon publishes and holds our references ---- */

static const char *daemon_failure_reason(int code)
{
    switch (code) {
    case -TETRIS_E_TIMEOUT: return "daemon-timeout";
    case -TETRIS_E_UNAVAILABLE: return "daemon-unavailable";
    case -TETRIS_E_FULL: return "store-full";
    default: return "daemon-error";
    }
}

/* The daemon's answer mapped on the agent's workers: filling the page
 * tables of a large model is most of a warm start, and it parallelises
 * (faults on distinct mappings). The first failure stops the rest and the
 * load falls back. */
struct map_job {
    struct worker_job w;
    agent_model *am;
    const struct ingest_tensor_result *res;
};

static void map_item(void *ctx, size_t i)
{
    struct map_job *j = ctx;
    agent_model *am = j->am;
    if (j->res[i].status == INGEST_REJECTED || !am->priv->mappable[i] || job_failed(&j->w))
        return;
    tetris_error cause = {0};
    int r = map_tensor_only(am, i, &cause);
    pthread_mutex_lock(&j->w.lock);
    if (r == 0)
        am->stats.mapped_bytes += am->model->tensors[i].meta.nbytes;
    job_keep_failure(&j->w, r, &cause);
    pthread_mutex_unlock(&j->w.lock);
}

static void map_resident(agent_model *am, const struct agent_options *o,
                         const struct ingest_tensor_result *res)
{
    struct map_job j = {.am = am, .res = res};
    pthread_mutex_init(&j.w.lock, NULL);
    workers_run(am->model->n_tensors, agent_workers(o), NULL, map_item, &j);
    pthread_mutex_destroy(&j.w.lock);
    if (j.w.failed)
        fall_back(am, o, "map-failed", &j.w.cause);
}

/* Imports and maps read-only the attached copies of one batch; every
 * tensor of an attached digest gets its device pointer. */
static int import_batch(agent_model *am, int ordinal, const tensor_digest *dg, size_t n,
                        const struct ingest_gpu_result *gr, int *fds, tetris_error *err)
{
    struct agent_model_private *p = am->priv;
    const model *m = am->model;
    int rc = 0;
    for (size_t k = 0; k < n; k++) {
        if (fds[k] < 0 || rc < 0) {
            if (fds[k] >= 0)
                close(fds[k]);
            continue;
        }
        gpu_mapping *map = &p->gpu_maps[p->n_gpu_maps];
        rc = gpu_import_map(p->gpu, ordinal, fds[k], gr[k].size, false, map, err);
        close(fds[k]);
        if (rc < 0)
            continue;
        p->n_gpu_maps++;
        am->stats.device_bytes += gr[k].nbytes;
        for (size_t i = 0; i < m->n_tensors; i++)
            if (memcmp(&m->tensors[i].meta.digest, &dg[k], sizeof(dg[k])) == 0 &&
                am->tensors[i].device_ptr == 0) {
                am->tensors[i].device_ptr = map->ptr;
                am->stats.device_tensors++;
            }
    }
    return rc;
}

/* Device copies (o->device) of the tensors the daemon holds for us, in
 * batches of INGEST_MAX_GPU_TENSORS distinct digests. Any failure leaves
 * the host path as it is: the tensors without a device pointer are the
 * runtime's to upload, and the stats say why. */
static void attach_device(agent_model *am, const struct agent_options *o,
                          const struct ingest_tensor_result *res)
{
    struct agent_model_private *p = am->priv;
    const model *m = am->model;
    tetris_error cause = {0};
    int ordinal;
    int rc = gpu_device_parse(o->device, &ordinal, &cause);
    if (rc == 0)
        rc = gpu_driver_open(o->libcuda, &p->gpu, &cause);
    size_t gran = 0;
    if (rc == 0)
        rc = gpu_granularity(p->gpu, ordinal, &gran, &cause);
    cleanup_free tensor_digest *todo = calloc(m->n_tensors + 1, sizeof(*todo));
    p->gpu_maps = calloc(m->n_tensors + 1, sizeof(*p->gpu_maps));
    if (rc == 0 && (todo == NULL || p->gpu_maps == NULL))
        rc = tetris_fail(&cause, TETRIS_E_NOMEM, ENOMEM, "device tensors");
    size_t n_todo = 0;
    for (size_t i = 0; rc == 0 && i < m->n_tensors; i++) {
        /* A tensor under a quarter of the granularity would cost more
         * padded on the device than a few private copies: the runtime
         * uploads it. */
        if (res[i].status == INGEST_REJECTED || !m->tensors[i].has_digest ||
            m->tensors[i].meta.nbytes < gran / GPU_SHARE_MIN_FRACTION)
            continue;
        bool seen = false;
        for (size_t k = 0; k < n_todo && !seen; k++)
            seen = memcmp(&todo[k], &m->tensors[i].meta.digest, sizeof(todo[k])) == 0;
        if (!seen)
            todo[n_todo++] = m->tensors[i].meta.digest;
    }
    size_t rejected = 0;
    char first_reject[INGEST_REASON_MAX] = "";
    for (size_t b = 0; rc == 0 && b < n_todo; b += INGEST_MAX_GPU_TENSORS) {
        size_t n = n_todo - b < INGEST_MAX_GPU_TENSORS ? n_todo - b : INGEST_MAX_GPU_TENSORS;
        struct ingest_gpu_result gr[INGEST_MAX_GPU_TENSORS];
        int fds[INGEST_MAX_GPU_TENSORS];
        rc = ingest_client_gpu_attach(p->daemon, o->device, &todo[b], n, gr, fds, &cause);
        if (rc == 0)
            rc = import_batch(am, ordinal, &todo[b], n, gr, fds, &cause);
        for (size_t k = 0; rc == 0 && k < n; k++)
            if (!gr[k].attached && rejected++ == 0)
                snprintf(first_reject, sizeof(first_reject), "%s", gr[k].reason);
    }
    if (rc < 0) {
        snprintf(am->stats.device_fallback, sizeof(am->stats.device_fallback), "%s", cause.msg);
        log_warn("event=device-attach-failed model=%s device=%s tensors_on_device=%zu msg=%s",
                 LOG_Q(m->path), LOG_Q(o->device), am->stats.device_tensors, LOG_Q(cause.msg));
    } else if (rejected > 0) {
        snprintf(am->stats.device_fallback, sizeof(am->stats.device_fallback),
                 "%zu tensors not on the device: %s", rejected, first_reject);
        log_warn("event=device-attach-partial model=%s device=%s rejected=%zu msg=%s",
                 LOG_Q(m->path), LOG_Q(o->device), rejected, LOG_Q(first_reject));
    }
}

static int by_digest(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(tensor_digest));
}

/* What the store held of the model before our request, from the daemon's
 * answer: a tensor it calls resident was held unless this request
 * published the same bytes under another name (a model's duplicate
 * tensors: the first is ingested, the rest are then resident). */
static int held_before(const agent_model *am, const struct ingest_tensor_result *res,
                       enum agent_store_result *out, tetris_error *err)
{
    const model *m = am->model;
    cleanup_free tensor_digest *published = calloc(m->n_tensors + 1, sizeof(*published));
    if (published == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    size_t n_published = 0, shareable = 0, held = 0;
    for (size_t i = 0; i < m->n_tensors; i++)
        if (res[i].status == INGEST_INGESTED)
            published[n_published++] = m->tensors[i].meta.digest;
    qsort(published, n_published, sizeof(*published), by_digest);
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (m->tensors[i].meta.nbytes == 0)
            continue;
        shareable++;
        held += res[i].status == INGEST_RESIDENT &&
                bsearch(&m->tensors[i].meta.digest, published, n_published, sizeof(*published),
                        by_digest) == NULL;
    }
    *out = store_result(held, shareable);
    return 0;
}

static int load_via_daemon(agent_model *am, const struct agent_options *o, const char *label,
                           tetris_error *err)
{
    const model *m = am->model;
    struct ingest_summary summary = {0};
    tetris_error cause = {0};
    char sock[4096];
    int r;

    if (o->daemon_socket != NULL)
        snprintf(sock, sizeof(sock), "%s", o->daemon_socket);
    else
        snprintf(sock, sizeof(sock), "%s/%s", am->priv->public_dir, INGEST_SOCKET_NAME);
    cleanup_free struct ingest_tensor_result *res = calloc(m->n_tensors + 1, sizeof(*res));
    if (res == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    struct agent_steps *steps = &am->stats.steps;
    double mark = clock_now_ms();
    r = ingest_client_connect(sock, o->daemon_timeout_ms, &am->priv->daemon, &cause);
    step_done(&steps->connect_ms, &mark);
    if (r == 0)
        r = ingest_client_ingest(am->priv->daemon, label, m, res, &summary, &cause);
    step_done(&steps->register_ms, &mark);
    if (r < 0) {
        fall_back(am, o, daemon_failure_reason(r), &cause);
        if (r != -TETRIS_E_UNAVAILABLE || am->priv->daemon != NULL)
            ingest_report_fallback(sock, label, am->stats.fallback_reason, o->daemon_timeout_ms,
                                   NULL);
        ingest_client_close(am->priv->daemon);
        am->priv->daemon = NULL;
        return 0;
    }
    am->stats.ingested_bytes = summary.ingested_bytes;
    /* What the daemon hashed for us: our tensors' identities from now on
     * (mappings, and the request sent again after a daemon restart). */
    for (size_t i = 0; i < m->n_tensors; i++) {
        tensor_desc *t = &am->model->tensors[i];
        if (!t->has_digest && res[i].has_digest) {
            t->meta.digest = res[i].digest;
            t->meta.crc32 = res[i].crc32;
            t->has_digest = true;
        }
    }
    if ((r = held_before(am, res, &am->stats.store_result, err)) < 0)
        return r;
    if (o->device != NULL)
        attach_device(am, o, res);
    mark = clock_now_ms();
    /* The references are to outlive a daemon restart: a watcher registers
     * them again with the next daemon. Without it they still hold until a
     * restart, so a failure here costs nothing now. */
    if ((r = ingest_client_keep_registered(am->priv->daemon, &cause)) < 0)
        log_warn("event=daemon-watch-failed model=%s detail=%s", LOG_Q(m->path), LOG_Q(cause.msg));
    step_done(&steps->watch_ms, &mark);
    /* The daemon recorded our references before it answered; the use lock
     * is not held across the request, so a daemon busy reclaiming never
     * waits for us while we wait for it. */
    if ((r = store_use_begin(am->priv->store, &cause)) < 0) {
        fall_back(am, o, "store-unavailable", &cause);
        return 0;
    }
    map_resident(am, o, res);
    store_use_end(am->priv->store);
    step_done(&steps->map_ms, &mark);
    if (summary.rejected > 0) {
        size_t i = 0;
        while (i < m->n_tensors && res[i].status != INGEST_REJECTED)
            i++;
        snprintf(cause.msg, sizeof(cause.msg), "%zu tensors rejected by the daemon, first %s: %s",
                 summary.rejected, m->tensors[i].name, res[i].reason);
        fall_back(am, o, summary.rejected_full > 0 ? "store-full" : "ingest-rejected", &cause);
        ingest_report_fallback(sock, label, am->stats.fallback_reason, o->daemon_timeout_ms,
                               NULL);
    }
    return 0;
}

/* Tensors of at least this size identify a model well enough for the
 * probe: small ones (zero biases, norms) recur across unrelated models. */
#define DIGEST_PROBE_MIN_BYTES (1u << 20)

/* The probe of AGENT_DIGESTS_AUTO: the smallest tensor of at least
 * DIGEST_PROBE_MIN_BYTES (the largest if none is that big). */
static size_t digest_probe(const model *m)
{
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < m->n_tensors; i++) {
        uint64_t n = m->tensors[i].meta.nbytes,
                 b = best != SIZE_MAX ? m->tensors[best].meta.nbytes : 0;
        bool big = n >= DIGEST_PROBE_MIN_BYTES, best_big = b >= DIGEST_PROBE_MIN_BYTES;
        if (best == SIZE_MAX || (big && (!best_big || n < b)) || (!big && !best_big && n > b))
            best = i;
    }
    return best;
}

/* Without a manifest in STORE mode, digests are computed where it is
 * cheapest (see enum agent_digests): a cold start sends the tensors
 * without them and the daemon hashes each byte once, as it ingests; a warm
 * start (nothing to ingest) hashes here, on the agent's workers, without
 * the daemon's write of every tensor into a temp file it then discards. */
static int resolve_digests(agent_model *am, const struct agent_options *o, tetris_error *err)
{
    model *m = am->model;
    size_t without = 0;
    for (size_t i = 0; i < m->n_tensors; i++)
        without += !m->tensors[i].has_digest;
    if (without == 0 || o->digests == AGENT_DIGESTS_DAEMON)
        return 0;
    bool warm = o->digests == AGENT_DIGESTS_AGENT;
    if (!warm) {
        tensor_desc *t = &m->tensors[digest_probe(m)];
        int fd, r;
        if ((r = source_fd(am, t->source, &fd, err)) < 0)
            return r;
        cleanup_free void *buf = malloc(t->meta.nbytes > 0 ? t->meta.nbytes : 1);
        if (buf == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory for tensor %s", t->name);
        if ((r = model_read_tensor(t, fd, buf, err)) < 0 ||
            (r = tensor_digest_compute(&t->meta, buf, err)) < 0)
            return tetris_wrap(err, "tensor %s", t->name);
        t->has_digest = true;
        warm = store_has_tensor(am->priv->store, &t->meta.digest);
    }
    log_info("event=digests model=%s hashed_by=%s tensors=%zu", LOG_Q(m->path),
             warm                           ? "agent"
             : o->mode == AGENT_MODE_DIRECT ? "publish"
                                            : "daemon",
             without);
    return warm ? model_compute_digests_workers(m, o->workers, err) : 0;
}

static int load_from_store(agent_model *am, const struct agent_options *o, tetris_error *err)
{
    struct store_options so = {.tenant = o->tenant,
                               .create = o->mode == AGENT_MODE_DIRECT,
                               .read_only = o->mode == AGENT_MODE_STORE};
    const char *dir = o->store_dir != NULL ? o->store_dir : STORE_DEFAULT_DIR;
    const char *label = o->label;
    tetris_error cause = {0};
    struct stat st;
    int r;

    /* DIRECT mode may lay a store out, but only in a directory someone
     * provided: a missing one means no store on this node. */
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        tetris_fail(&cause, TETRIS_E_NOTFOUND, errno, "store directory %s", dir);
        fall_back(am, o, "store-unavailable", &cause);
        return 0;
    }
    if (label == NULL) {
        label = strrchr(am->model->path, '/');
        label = label != NULL ? label + 1 : am->model->path;
    }
    double mark = clock_now_ms();
    r = store_open(dir, &so, &am->priv->store, &cause);
    if (r < 0) {
        fall_back(am, o, "store-unavailable", &cause);
        return 0;
    }
    am->priv->public_dir = strdup(store_public_dir(am->priv->store));
    if (am->priv->public_dir == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    if ((r = plan_mappings(am, o, err)) < 0)
        return r;
    step_done(&am->stats.steps.store_ms, &mark);
    r = resolve_digests(am, o, err);
    step_done(&am->stats.steps.digests_ms, &mark);
    if (r < 0)
        return r;
    if (o->mode == AGENT_MODE_STORE)
        return load_via_daemon(am, o, label, err);
    if ((r = store_use_begin(am->priv->store, &cause)) < 0) {
        fall_back(am, o, "store-unavailable", &cause);
        return 0;
    }
    /* Publishing and mapping interleave on the workers: one step. */
    r = load_direct(am, o, label, err);
    store_use_end(am->priv->store);
    step_done(&am->stats.steps.map_ms, &mark);
    return r;
}

/* ---- a model named by a registry reference: the node daemon pulls it ---- */

/* The pulled model's config, decoded: every tensor by identity, its bytes
 * in the store (a tensor's region is its store file's, whole). */
static int read_pulled_model(int fd, const char *ref, model **out, tetris_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "the pulled config");
    cleanup_free char *text = malloc((size_t)st.st_size + 1);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "the pulled config");
    size_t done = 0;
    while (done < (size_t)st.st_size) {
        ssize_t r = pread(fd, text + done, (size_t)st.st_size - done, (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return tetris_fail(err, TETRIS_E_IO, r < 0 ? errno : 0, "read the pulled config");
        done += (size_t)r;
    }
    int rc = manifest_parse(text, done, out, err);
    if (rc < 0)
        return tetris_wrap(err, "%s: the config", ref);
    model *m = *out;
    char *path = strdup(ref);
    if (path == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", ref);
    free(m->path);
    m->path = path;
    for (size_t i = 0; i < m->n_tensors; i++) {
        tensor_desc *t = &m->tensors[i];
        if (!t->has_digest)
            return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s: tensor %s has no identity", ref,
                               t->name);
        free(t->source);
        t->source = NULL;
        t->offset = 0;
        t->length = t->meta.nbytes;
        t->encoding = TENSOR_ENC_RAW;
    }
    return 0;
}

static int map_graph(agent_model *am, int fd, tetris_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "the pulled graph");
    if (st.st_size == 0)
        return 0;
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED)
        return tetris_fail(err, TETRIS_E_IO, errno, "map the pulled graph");
    am->priv->graph_map = p;
    am->priv->graph = p;
    am->priv->graph_len = (size_t)st.st_size;
    return 0;
}

/* Pulls ref through the node daemon (which holds our references for as
 * long as the connection is open) and maps every tensor of it. No private
 * fallback: there is no file to fall back to, so a failure is the load's. */
static int load_pulled(agent_model *am, const char *ref, const struct agent_options *o,
                       tetris_error *err)
{
    struct agent_model_private *p = am->priv;
    struct agent_steps *steps = &am->stats.steps;
    if (o->mode != AGENT_MODE_STORE)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "%s: a model named by reference is pulled by the node daemon "
                           "(store mode only)",
                           ref);
    struct store_options so = {.tenant = o->tenant, .read_only = true};
    double mark = clock_now_ms();
    int r = store_open(o->store_dir != NULL ? o->store_dir : STORE_DEFAULT_DIR, &so, &p->store,
                       err);
    if (r < 0)
        return tetris_wrap(err, "%s: no store to pull into", ref);
    if ((p->public_dir = strdup(store_public_dir(p->store))) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "out of memory");
    step_done(&steps->store_ms, &mark);
    char sock[4096];
    if (o->daemon_socket != NULL)
        snprintf(sock, sizeof(sock), "%s", o->daemon_socket);
    else
        snprintf(sock, sizeof(sock), "%s/%s", p->public_dir, INGEST_SOCKET_NAME);
    const char *label = o->label != NULL ? o->label : ref;
    if ((r = ingest_client_connect(sock, o->daemon_timeout_ms, &p->daemon, err)) < 0)
        return tetris_wrap(err, "%s", ref);
    step_done(&steps->connect_ms, &mark);
    struct ingest_pull_result pulled;
    int fds[2] = {-1, -1};
    r = ingest_client_pull(p->daemon, label, ref, o->pull_timeout_ms, &pulled, fds, err);
    step_done(&steps->register_ms, &mark);
    if (r == 0)
        r = read_pulled_model(fds[0], ref, &am->model, err);
    if (r == 0)
        r = map_graph(am, fds[1], err);
    for (size_t i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    step_done(&steps->read_ms, &mark);
    if (r < 0)
        return r;
    size_t n = am->model->n_tensors;
    am->tensors = calloc(n + 1, sizeof(*am->tensors));
    p->maps = calloc(n + 1, sizeof(*p->maps));
    p->copies = calloc(n + 1, sizeof(*p->copies));
    p->mappable = calloc(n + 1, sizeof(*p->mappable));
    cleanup_free struct ingest_tensor_result *res = calloc(n + 1, sizeof(*res));
    if (am->tensors == NULL || p->maps == NULL || p->copies == NULL || p->mappable == NULL ||
        res == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    /* Every tensor is the store's, the small ones too: there is no file. */
    for (size_t i = 0; i < n; i++) {
        am->tensors[i].desc = &am->model->tensors[i];
        p->mappable[i] = am->model->tensors[i].meta.nbytes > 0;
        if (!p->mappable[i])
            am->tensors[i].data = empty_tensor;
    }
    am->stats.tensors = n;
    am->stats.bytes = am->model->total_bytes;
    am->stats.ingested_bytes = pulled.pulled_bytes;
    am->stats.store_result = pulled.pulled_tensors == 0                ? AGENT_STORE_HIT
                             : pulled.pulled_tensors == pulled.tensors ? AGENT_STORE_MISS
                                                                       : AGENT_STORE_PARTIAL;
    if ((r = store_use_begin(p->store, err)) < 0)
        return r;
    map_resident(am, o, res);
    store_use_end(p->store);
    step_done(&steps->map_ms, &mark);
    if (am->stats.fell_back)
        return tetris_fail(err, TETRIS_E_IO, 0, "%s: %s", ref, am->stats.fallback_reason);
    p->pulled = true;
    p->manifest_digest = pulled.digest;
    char digest[7 + TENSOR_DIGEST_HEX_LEN + 1];
    oci_digest_format(&pulled.digest, digest);
    log_info("event=pulled model=%s digest=%s tensors=%llu pulled_tensors=%llu "
             "pulled_bytes=%llu skipped_bytes=%llu",
             LOG_Q(ref), digest, (unsigned long long)pulled.tensors,
             (unsigned long long)pulled.pulled_tensors, (unsigned long long)pulled.pulled_bytes,
             (unsigned long long)pulled.skipped_bytes);
    return 0;
}

const uint8_t *agent_model_graph(const agent_model *am, size_t *len)
{
    /* An agent_model put together by hand (tetris-registry's) has no priv. */
    *len = am->priv != NULL ? am->priv->graph_len : 0;
    return am->priv != NULL ? am->priv->graph : NULL;
}

bool agent_model_pulled_digest(const agent_model *am, tensor_digest *out)
{
    if (am->priv == NULL || !am->priv->pulled)
        return false;
    *out = am->priv->manifest_digest;
    return true;
}

static int read_model(const char *model_path, const struct agent_options *o, model **out,
                      tetris_error *err)
{
    int r;
    if (o->manifest_path != NULL)
        r = manifest_read_file(o->manifest_path, out, err);
    else
        r = model_parse_file(model_path, out, err);
    /* Who hashes is decided once the store is open (resolve_digests). */
    return r;
}

int agent_load(const char *model_path, const struct agent_options *o, agent_model **out,
               tetris_error *err)
{
    struct agent_options defaults;
    double start = clock_now_ms();
    int r;

    if (o == NULL) {
        agent_options_init(&defaults);
        o = &defaults;
    }
    agent_model *am = calloc(1, sizeof(*am));
    if (am == NULL || (am->priv = calloc(1, sizeof(*am->priv))) == NULL) {
        free(am);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    double mark = start;
    if (oci_ref_is(model_path)) {
        am->priv->populate = o->populate;
        if ((r = load_pulled(am, model_path, o, err)) < 0) {
            agent_model_free(am);
            return r;
        }
        am->stats.load_ms = clock_now_ms() - start;
        log_info("event=load model=%s tensors=%zu bytes=%llu mapped_bytes=%llu "
                 "ingested_bytes=%llu private_bytes=0 load_ms=%.3f store=%s",
                 LOG_Q(model_path), am->stats.tensors, (unsigned long long)am->stats.bytes,
                 (unsigned long long)am->stats.mapped_bytes,
                 (unsigned long long)am->stats.ingested_bytes, am->stats.load_ms,
                 agent_store_result_name(am->stats.store_result));
        *out = am;
        return 0;
    }
    if ((r = read_model(model_path, o, &am->model, err)) < 0) {
        agent_model_free(am);
        return r;
    }
    step_done(&am->stats.steps.read_ms, &mark);
    size_t n = am->model->n_tensors;
    am->tensors = calloc(n + 1, sizeof(*am->tensors));
    am->priv->maps = calloc(n + 1, sizeof(*am->priv->maps));
    am->priv->copies = calloc(n + 1, sizeof(*am->priv->copies));
    am->priv->mappable = calloc(n + 1, sizeof(*am->priv->mappable));
    if (am->tensors == NULL || am->priv->maps == NULL || am->priv->copies == NULL ||
        am->priv->mappable == NULL) {
        agent_model_free(am);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        am->tensors[i].desc = &am->model->tensors[i];
    am->priv->populate = o->populate;
    am->stats.tensors = n;
    am->stats.bytes = am->model->total_bytes;

    if (o->mode != AGENT_MODE_PRIVATE)
        r = load_from_store(am, o, err);
    mark = clock_now_ms();
    if (r == 0)
        r = load_private_missing(am, o, err);
    step_done(&am->stats.steps.private_ms, &mark);
    if (r < 0) {
        agent_model_free(am);
        return r;
    }
    /* A store that did not serve the load held nothing for it. */
    if (am->stats.mapped_bytes == 0 && am->stats.fell_back)
        am->stats.store_result = AGENT_STORE_NONE;
    am->stats.load_ms = mark - start;
    log_info("event=load model=%s tensors=%zu bytes=%llu mapped_bytes=%llu ingested_bytes=%llu "
             "private_bytes=%llu load_ms=%.3f store=%s",
             am->model->path, n, (unsigned long long)am->stats.bytes,
             (unsigned long long)am->stats.mapped_bytes,
             (unsigned long long)am->stats.ingested_bytes,
             (unsigned long long)am->stats.private_bytes, am->stats.load_ms,
             agent_store_result_name(am->stats.store_result));
    const struct agent_steps *st = &am->stats.steps;
    log_info("event=start-steps model=%s read_ms=%.3f store_ms=%.3f digests_ms=%.3f "
             "connect_ms=%.3f register_ms=%.3f watch_ms=%.3f map_ms=%.3f private_ms=%.3f",
             LOG_Q(am->model->path), st->read_ms, st->store_ms, st->digests_ms, st->connect_ms,
             st->register_ms, st->watch_ms, st->map_ms, st->private_ms);
    *out = am;
    return 0;
}

void agent_log_pull_fallback(const char *ref, const char *file, const tetris_error *why)
{
    log_warn("event=fallback reason=pull-failed model=%s fallback=%s code=%s msg=%s", LOG_Q(ref),
             LOG_Q(file), tetris_code_name(why->code), LOG_Q(why->msg));
}

int agent_load_ref(const char *ref, const char *file, const struct agent_options *o,
                   agent_model **out, const char **loaded, tetris_error *err)
{
    assert(ref != NULL && oci_ref_is(ref));
    *loaded = ref;
    int r = agent_load(ref, o, out, err);
    if (r == 0 || file == NULL)
        return r;
    /* A file that is not there is no fallback (an image without weights
     * that names one anyway): the pull's error is the one to tell. */
    if (access(file, R_OK) != 0) {
        log_info("event=no-fallback model=%s fallback=%s reason=unreadable errno=%d", LOG_Q(ref),
                 LOG_Q(file), errno);
        return r;
    }
    /* The pull left nothing behind (no reference, no holder): the file is
     * a load of its own, through the store as any other. */
    agent_log_pull_fallback(ref, file, err);
    tetris_error_clear(err);
    *loaded = file;
    return agent_load(file, o, out, err);
}

const agent_tensor *agent_find_tensor(const agent_model *am, const char *name)
{
    for (size_t i = 0; i < am->model->n_tensors; i++)
        if (strcmp(am->model->tensors[i].name, name) == 0)
            return &am->tensors[i];
    return NULL;
}

const char *agent_store_public_dir(const agent_model *am)
{
    return am->stats.mapped_bytes > 0 ? am->priv->public_dir : NULL;
}

void agent_model_unmap(agent_model *am)
{
    struct agent_model_private *p = am->priv;
    for (size_t i = 0; i < am->model->n_tensors && p->maps != NULL; i++) {
        if (p->maps[i].map_base == NULL)
            continue;
        store_unmap_tensor(&p->maps[i]);
        am->tensors[i].data = NULL;
    }
}

void agent_model_free(agent_model *am)
{
    if (am == NULL)
        return;
    struct agent_model_private *p = am->priv;
    if (p != NULL) {
        size_t n = am->model != NULL ? am->model->n_tensors : 0;
        for (size_t i = 0; i < n && p->maps != NULL; i++)
            if (p->maps[i].map_base != NULL)
                store_unmap_tensor(&p->maps[i]);
        for (size_t i = 0; i < n && p->copies != NULL; i++)
            free(p->copies[i]);
        for (size_t i = 0; i < p->n_gpu_maps; i++)
            gpu_unmap(p->gpu, &p->gpu_maps[i]);
        if (p->graph_map != NULL)
            munmap(p->graph_map, p->graph_len);
        free(p->gpu_maps);
        gpu_driver_close(p->gpu);
        /* mappings are gone: now the references may go */
        if (p->holder != NULL)
            store_holder_close(p->holder);
        ingest_client_close(p->daemon);
        if (p->store != NULL)
            store_close(p->store);
        for (size_t i = 0; i < p->n_sources; i++)
            close(p->sources[i].fd);
        free(p->sources);
        free(p->maps);
        free(p->copies);
        free(p->mappable);
        free(p->public_dir);
        free(p);
    }
    free(am->tensors);
    model_free(am->model);
    free(am);
}
