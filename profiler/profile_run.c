/* profile_run.c - run the grid and turn measurements into a profile (see
 * profile_run.h). */
#include "profiler/profile_run.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "profiler/cgroup_cpu.h"
#include "common/cleanup.h"
#include "common/clock.h"
#include "profiler/fn_process.h"
#include "profiler/loadgen.h"
#include "common/log.h"
#include "profiler/procmem.h"

#define SAMPLE_INTERVAL_MS 100
#define MIB (1024.0 * 1024.0)

void grid_default(struct grid *g)
{
    memset(g, 0, sizeof(*g));
    g->c[0] = 1;
    g->c[1] = 2;
    g->n_c = 2;
    g->b[0] = 1;
    g->b[1] = 2;
    g->b[2] = 4;
    g->n_b = 3;
    for (int i = 0; i < 4; i++)
        g->p[i] = i + 1;
    g->n_p = 4;
}

size_t grid_size(const struct grid *g)
{
    return g->n_c * g->n_b * g->n_p;
}

/* One "x=v1,v2" dimension. */
static int parse_dimension(struct grid *g, const char *word, tetris_error *err)
{
    char key = word[0];
    if ((key != 'c' && key != 'b' && key != 'p') || word[1] != '=' || word[2] == '\0')
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "grid '%s': expected c=LIST, b=LIST or p=LIST (e.g. b=1,2,4)", word);
    size_t n = 0;
    for (const char *s = word + 2; *s != '\0';) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        bool integral = key == 'c' || v == floor(v);
        if (end == s || (*end != ',' && *end != '\0') || errno != 0 || !integral ||
            !(v > 0 && v <= (key == 'c' ? 256 : 1024)))
            return tetris_fail(err, TETRIS_E_INVAL, 0, "grid '%s': bad value at '%s'", word, s);
        if (n == GRID_MAX)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "grid '%s': more than %d values", word,
                               GRID_MAX);
        if (key == 'c')
            g->c[n] = v;
        else if (key == 'b')
            g->b[n] = (int)v;
        else
            g->p[n] = (int)v;
        n++;
        s = *end == ',' ? end + 1 : end;
        if (*end == ',' && *s == '\0')
            return tetris_fail(err, TETRIS_E_INVAL, 0, "grid '%s': trailing comma", word);
    }
    if (key == 'c')
        g->n_c = n;
    else if (key == 'b')
        g->n_b = n;
    else
        g->n_p = n;
    return 0;
}

int grid_parse(struct grid *g, const char *spec, tetris_error *err)
{
    cleanup_free char *copy = strdup(spec);
    char *save = NULL;
    int r = 0, words = 0;
    if (copy == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    for (char *w = strtok_r(copy, " \t", &save); w != NULL && r == 0;
         w = strtok_r(NULL, " \t", &save), words++)
        r = parse_dimension(g, w, err);
    if (r == 0 && words == 0)
        r = tetris_fail(err, TETRIS_E_INVAL, 0, "empty grid");
    return r;
}

/* ---- memory sampling while the load runs ---- */

struct sampler {
    pid_t pid;
    const char *store_dir;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
    struct proc_mem peak;
    int failed;
    tetris_error err;
};

static void sample_once(struct sampler *s)
{
    struct proc_mem m;
    if (proc_mem_read(s->pid, s->store_dir, &m, &s->err) < 0) {
        s->failed = 1;
        return;
    }
    if (m.private_bytes > s->peak.private_bytes)
        s->peak.private_bytes = m.private_bytes;
    if (m.store_rss > s->peak.store_rss)
        s->peak.store_rss = m.store_rss;
    if (m.rss > s->peak.rss)
        s->peak.rss = m.rss;
}

static void *sampler_main(void *arg)
{
    struct sampler *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stop && !s->failed) {
        sample_once(s);
        struct timespec ts = clock_timespec((double)(clock_wall_ms() + SAMPLE_INTERVAL_MS));
        pthread_cond_timedwait(&s->wake, &s->lock, &ts);
    }
    if (!s->failed)
        sample_once(s); /* the arenas only grow: the last look is the largest */
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static int sampler_start(struct sampler *s, pid_t pid, const char *store_dir, tetris_error *err)
{
    memset(s, 0, sizeof(*s));
    s->pid = pid;
    s->store_dir = store_dir;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    if ((errno = pthread_create(&s->thread, NULL, sampler_main, s)) != 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "cannot start the memory sampler");
    return 0;
}

static int sampler_stop(struct sampler *s, tetris_error *err)
{
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    if (s->failed) {
        *err = s->err;
        return -s->err.code;
    }
    return 0;
}

/* ---- one config ---- */

struct batch_time {
    uint64_t id;
    double ms;
};

static int cmp_batch_id(const void *a, const void *b)
{
    uint64_t x = ((const struct batch_time *)a)->id, y = ((const struct batch_time *)b)->id;
    return x < y ? -1 : x > y;
}

/* Latency of distinct batches: the requests of one batch share one run, and
 * a big batch must not count b times. */
static int batch_latency(const struct load_result *lr, profile_latency *out, tetris_error *err)
{
    cleanup_free struct batch_time *bt = malloc((lr->n_samples + 1) * sizeof(*bt));
    cleanup_free double *v = malloc((lr->n_samples + 1) * sizeof(*v));
    size_t n = 0, distinct = 0;
    double sum = 0;
    if (bt == NULL || v == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    for (size_t i = 0; i < lr->n_samples; i++) {
        if (lr->samples[i].status == 200) {
            bt[n].id = lr->samples[i].batch_id;
            bt[n++].ms = lr->samples[i].inference_ms;
        }
    }
    if (n == 0)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "no request succeeded");
    qsort(bt, n, sizeof(*bt), cmp_batch_id);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && bt[i].id == bt[i - 1].id)
            continue;
        v[distinct++] = bt[i].ms;
        sum += bt[i].ms;
    }
    out->mean = sum / (double)distinct;
    out->p95 = load_percentile(v, distinct, 95);
    out->p99 = load_percentile(v, distinct, 99);
    return 0;
}

static double round3(double v)
{
    return round(v * 1000.0) / 1000.0;
}

/* On a terminal the progress bar owns the current line: clear it before a
 * log line, the next draw_progress() puts it back. */
static void clear_progress(const struct profile_run_options *o)
{
    if (o->progress)
        fputs("\r\033[K", stderr);
}

struct config_run {
    double c;
    int b, p;
    size_t index, total;
};

static void draw_progress(size_t done, size_t total, const struct config_run *cr)
{
    const int width = 30;
    int filled = total > 0 ? (int)(done * (size_t)width / total) : width;
    fprintf(stderr, "\r[%.*s%*s] %zu/%zu", filled, "##############################",
            width - filled, "", done, total);
    if (cr != NULL)
        fprintf(stderr, "  c=%g b=%d p=%d   ", cr->c, cr->b, cr->p);
    else
        fprintf(stderr, "%20s\n", "");
    fflush(stderr);
}

static int measure_config(const struct profile_run_options *o, const struct config_run *cr,
                          bool *cpu_limit_ok, profile_config *out, tetris_error *err)
{
    cpu_cgroup *cg = NULL;
    char name[96], log_path[PATH_MAX];
    struct fn_process_options fo = {0};
    fn_process fp;
    struct sampler smp;
    struct load_result lr = {0};
    int r;

    if (*cpu_limit_ok) {
        tetris_error cerr = {0};
        snprintf(name, sizeof(name), "tetris-profiler-%d-%zu", (int)getpid(), cr->index);
        if (cpu_cgroup_create(name, cr->c, &cg, &cerr) < 0) {
            clear_progress(o);
            log_warn("event=no-cpu-limit reason=%s effect=\"configs run without a CPU "
                     "quota; c is only the intra-op thread count\"",
                     LOG_Q(cerr.msg));
            *cpu_limit_ok = false;
        } else {
            clear_progress(o);
            log_info("event=cpu-limit cgroup=%s cpus=%g", cpu_cgroup_path(cg), cr->c);
        }
    }
    if (o->log_dir != NULL)
        snprintf(log_path, sizeof(log_path), "%s/function-%zu.log", o->log_dir, cr->index);
    fo.function_bin = o->function_bin;
    fo.model = o->model;
    fo.store_dir = o->store_dir;
    fo.direct = o->direct;
    fo.batch = cr->b;
    fo.concurrency = cr->p;
    /* c CPUs shared by p workers: each run gets c/p intra-op threads. */
    fo.threads = (int)fmax(1, floor(cr->c / cr->p));
    fo.max_wait_ms = o->max_wait_ms;
    fo.cgroup_procs = cg != NULL ? cpu_cgroup_procs_file(cg) : NULL;
    /* The functions' logs would run through the progress bar: on a
     * terminal they need --log-dir. */
    fo.log_path = o->log_dir != NULL ? log_path : o->progress ? "/dev/null" : NULL;
    if ((r = fn_process_start(&fo, &fp, err)) < 0) {
        cpu_cgroup_remove(cg);
        if (o->progress && o->log_dir == NULL)
            tetris_wrap(err, "rerun with --log-dir DIR for the function's log");
        return r;
    }
    clear_progress(o);
    if (o->store_dir != NULL && fp.fell_back)
        log_warn("event=private-fallback model=%s effect=\"weights are private: shared_bytes "
                 "0, private_bytes include them\"",
                 o->model);
    if (o->progress)
        draw_progress(cr->index, cr->total, cr);
    r = sampler_start(&smp, fp.pid, fp.shared_bytes > 0 ? o->store_dir : NULL, err);
    if (r == 0) {
        struct load_target t = {.url = fp.url, .weight = 1};
        struct load_options lo = {.targets = &t,
                                  .n_targets = 1,
                                  .clients = (int)fmax(2, o->clients_per_slot * cr->b * cr->p),
                                  .duration_s = o->duration_s,
                                  .warmup_s = o->warmup_s};
        r = load_run(&lo, &lr, err);
        tetris_error serr = {0};
        if (sampler_stop(&smp, &serr) < 0 && r == 0) {
            *err = serr;
            r = -serr.code;
        }
    }
    tetris_error stop_err = {0};
    if (fn_process_stop(&fp, &stop_err) < 0 && r == 0) {
        *err = stop_err;
        r = -stop_err.code;
    }
    clear_progress(o);
    if (cg != NULL)
        log_info("event=cpu-limit-removed cgroup=%s", cpu_cgroup_path(cg));
    cpu_cgroup_remove(cg);
    if (r == 0)
        r = batch_latency(&lr, &out->latency_ms, err);
    if (r == 0) {
        out->c = cr->c;
        out->b = cr->b;
        out->p = cr->p;
        out->latency_ms.mean = round3(out->latency_ms.mean);
        out->latency_ms.p95 = round3(out->latency_ms.p95);
        out->latency_ms.p99 = round3(out->latency_ms.p99);
        out->throughput_rps = round3((double)lr.n_ok / lr.elapsed_s);
        out->private_bytes = smp.peak.private_bytes;
        out->shared_bytes = fp.shared_bytes;
        out->m_mib = ceil((double)(out->private_bytes + out->shared_bytes) / MIB);
        log_info("event=config c=%g b=%d p=%d requests=%zu failed=%zu mean_ms=%.3f p95_ms=%.3f "
                 "p99_ms=%.3f throughput_rps=%.1f private_bytes=%llu shared_bytes=%llu",
                 cr->c, cr->b, cr->p, lr.n_samples, lr.n_samples - lr.n_ok,
                 out->latency_ms.mean, out->latency_ms.p95, out->latency_ms.p99,
                 out->throughput_rps, (unsigned long long)out->private_bytes,
                 (unsigned long long)out->shared_bytes);
    }
    load_result_free(&lr);
    return r < 0 ? tetris_wrap(err, "config c=%g b=%d p=%d", cr->c, cr->b, cr->p) : 0;
}

static char *source_text(const struct profile_run_options *o, bool cpu_limit_ok)
{
    char *text = NULL;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (asprintf(&text,
                 "tetris-profiler %s, %ld CPUs online, %s, %g s per config after %g s warm-up, "
                 "closed loop %d clients per b*p, max wait %g ms, weights %s",
                 TETRIS_VERSION, cpus,
                 cpu_limit_ok ? "CPU limited by cgroup quota" : "NO CPU limit (cgroup not writable)",
                 o->duration_s, o->warmup_s, o->clients_per_slot, o->max_wait_ms,
                 o->store_dir != NULL ? "mapped from the tensor store" : "private") < 0)
        return NULL;
    return text;
}

int profile_run(const struct profile_run_options *o, profile **out, tetris_error *err)
{
    size_t total = grid_size(&o->grid), done = 0;
    bool cpu_limit_ok = true;
    const char *base = strrchr(o->model, '/');
    int r = 0;

    profile *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    p->measured = true;
    p->model = strdup(o->name);
    p->model_file = strdup(base != NULL ? base + 1 : o->model);
    p->configs = calloc(total + 1, sizeof(*p->configs));
    if (p->model == NULL || p->model_file == NULL || p->configs == NULL) {
        profile_free(p);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    for (size_t ic = 0; r == 0 && ic < o->grid.n_c; ic++) {
        for (size_t ib = 0; r == 0 && ib < o->grid.n_b; ib++) {
            for (size_t ip = 0; r == 0 && ip < o->grid.n_p; ip++) {
                struct config_run cr = {.c = o->grid.c[ic], .b = o->grid.b[ib],
                                        .p = o->grid.p[ip], .index = done, .total = total};
                r = measure_config(o, &cr, &cpu_limit_ok, &p->configs[p->n_configs], err);
                if (r == 0)
                    p->n_configs++;
                done++;
            }
        }
    }
    if (o->progress)
        draw_progress(done, total, NULL);
    if (r == 0 && (p->source = source_text(o, cpu_limit_ok)) == NULL)
        r = tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    if (r < 0) {
        profile_free(p);
        return r;
    }
    *out = p;
    return 0;
}
