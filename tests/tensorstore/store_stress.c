/* store_stress.c - tetris-store-stress: drives the tensor store from many
 * processes at once, and kills them mid-ingest, to check the store's
 * multi-process invariants (tests/tensorstore/test-*.sh run it).
 *
 *   concurrent  N processes publish + map the same tensors at once: exactly
 *               one publish per digest, one file each, identical bytes seen
 *               by every process.
 *   fill        N processes publish distinct tensors into a store with a
 *               capacity until it is full: usage never passes the capacity,
 *               every process sees "store full", every file verifies.
 *   crash       trials of a publisher SIGKILLed at a random instant of its
 *               ingest: nothing partial is ever mappable, and after
 *               store_repair the store verifies clean with no temp files
 *               and no dead holders. Without --capacity the store's temp
 *               files are unnamed (a killed writer's vanish with it); with
 *               one they are named, and repair removes a dead writer's.
 *
 * Tensor contents come from a seeded generator written straight into the
 * store's fill mapping, so every process agrees on the bytes without
 * sharing a buffer. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "tensorstore/store.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2

struct gen_tensor {
    tensor_meta meta;
    uint64_t seed;
};

struct options {
    const char *store_dir;
    int procs;
    int tensors;
    int trials;
    uint64_t seed;
    uint64_t max_bytes;
    uint64_t capacity;
};

static uint64_t splitmix(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void generate(uint64_t seed, void *dst, uint64_t len)
{
    uint64_t state = seed;
    uint8_t *p = dst;
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = splitmix(&state);
        memcpy(p + i, &v, 8);
    }
    if (i < len) {
        uint64_t v = splitmix(&state);
        memcpy(p + i, &v, len - i);
    }
}

static int fill_generated(void *ctx, void *dst, uint64_t len, tetris_error *err)
{
    (void)err;
    generate(*(const uint64_t *)ctx, dst, len);
    return 0;
}

/* n tensors of 1..max_bytes (uint8 or float32 shapes), digests computed. */
static struct gen_tensor *make_set(int n, uint64_t seed, uint64_t max_bytes)
{
    struct gen_tensor *set = calloc((size_t)n, sizeof *set);
    if (set == NULL)
        return NULL;
    uint64_t state = seed;
    for (int i = 0; i < n; i++) {
        struct gen_tensor *t = &set[i];
        t->seed = splitmix(&state);
        uint64_t elems = 1 + splitmix(&state) % (max_bytes / 4);
        snprintf(t->meta.dtype, sizeof t->meta.dtype, "%s", i % 2 ? "uint8" : "float32");
        t->meta.ndim = 2;
        t->meta.shape[0] = (int64_t)elems;
        t->meta.shape[1] = i % 2 ? 4 : 1;
        t->meta.nbytes = elems * 4;
        cleanup_free void *buf = malloc(t->meta.nbytes);
        tetris_error err;
        if (buf == NULL) {
            free(set);
            return NULL;
        }
        generate(t->seed, buf, t->meta.nbytes);
        if (tensor_digest_compute(&t->meta, buf, &err) < 0) {
            log_error("event=gen-failed msg=%s", LOG_Q(err.msg));
            free(set);
            return NULL;
        }
    }
    return set;
}

static void shuffle(int *order, int n, uint64_t seed)
{
    uint64_t state = seed;
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(splitmix(&state) % (uint64_t)(i + 1));
        int tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

/* What a loader does: record references, publish what is missing, map,
 * check the bytes. Returns how many tensors this process published, or -1.
 * sum (may be NULL) gets a digest over every mapped byte, in set order. */
static int load_set(store *s, const struct gen_tensor *set, int n, uint64_t order_seed,
                    tensor_digest *sum, tetris_error *err)
{
    cleanup_free int *order = malloc((size_t)n * sizeof *order);
    cleanup_free store_mapping *maps = calloc((size_t)n, sizeof *maps);
    cleanup_free tensor_digest *digests = malloc((size_t)n * sizeof *digests);
    cleanup_free uint64_t *sizes = malloc((size_t)n * sizeof *sizes);
    if (order == NULL || maps == NULL || digests == NULL || sizes == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "allocating the load plan");
    shuffle(order, n, order_seed);
    for (int i = 0; i < n; i++) {
        digests[i] = set[i].meta.digest;
        sizes[i] = set[i].meta.nbytes;
    }
    store_holder *h = NULL;
    int rc = store_use_begin(s, err);
    if (rc == 0)
        rc = store_holder_open(s, "stress", getpid(), &h, err);
    if (rc == 0)
        rc = store_holder_add_many(h, digests, sizes, (size_t)n, err);
    int published_count = 0;
    for (int k = 0; rc == 0 && k < n; k++) {
        const struct gen_tensor *t = &set[order[k]];
        bool published = false;
        rc = store_publish_tensor(s, &t->meta, fill_generated, (void *)&t->seed, &published, err);
        if (rc == 0)
            rc = store_map_tensor(s, &t->meta.digest, &maps[order[k]], err);
        published_count += published;
    }
    store_use_end(s);

    /* The bytes every process sees must be the generated ones. */
    tensor_meta all = {.dtype = "uint8", .ndim = 1};
    for (int i = 0; rc == 0 && i < n; i++) {
        all.nbytes += maps[i].nbytes;
        tensor_meta check = set[i].meta;
        tetris_error cerr;
        if (tensor_digest_compute(&check, maps[i].data, &cerr) < 0 ||
            !tensor_digest_equal(&check.digest, &set[i].meta.digest))
            rc = tetris_fail(err, TETRIS_E_CORRUPT, 0, "mapped tensor %d has the wrong bytes", i);
    }
    if (rc == 0 && sum != NULL) {
        all.shape[0] = (int64_t)all.nbytes;
        tensor_hasher *hs = NULL;
        rc = tensor_hasher_new(&all, &hs, err);
        for (int i = 0; rc == 0 && i < n; i++)
            tensor_hasher_update(hs, maps[i].data, maps[i].nbytes);
        uint32_t crc;
        if (rc == 0)
            tensor_hasher_finish(hs, sum, &crc);
    }
    for (int i = 0; i < n; i++)
        store_unmap_tensor(&maps[i]);
    /* The holder is left open on purpose: exiting without closing it is
     * what a crashed loader does, and repair must release it. */
    (void)h;
    return rc < 0 ? rc : published_count;
}

static int open_store(const char *dir, bool create, store **s, tetris_error *err)
{
    struct store_options o = {.create = create};
    return store_open(dir, &o, s, err);
}

static int count_dir(const char *root, const char *sub)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, sub);
    cleanup_closedir DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    return n;
}

/* Every file under tensors/ must be a complete tensor whose bytes hash to
 * its name: checked on the raw directory, not through the listing API. */
static int check_tensor_files(store *s, int *files, tetris_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tensors", store_public_dir(s));
    cleanup_closedir DIR *top = opendir(path);
    if (top == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", path);
    *files = 0;
    struct dirent *de;
    while ((de = readdir(top)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char sub[4096 + 264];
        snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
        cleanup_closedir DIR *d = opendir(sub);
        if (d == NULL)
            return tetris_fail(err, TETRIS_E_CORRUPT, errno, "tensors/%s is not a directory",
                               de->d_name);
        struct dirent *fe;
        while ((fe = readdir(d)) != NULL) {
            if (strcmp(fe->d_name, ".") == 0 || strcmp(fe->d_name, "..") == 0)
                continue;
            (*files)++;
            tensor_digest dg;
            if (tensor_digest_from_hex(fe->d_name, &dg, err) < 0)
                return tetris_wrap(err, "tensors/%s", de->d_name);
            if (store_verify_tensor(s, &dg, err) < 0)
                return tetris_wrap(err, "partial or corrupt tensor visible");
        }
    }
    return 0;
}

struct holder_count {
    int alive, dead;
};

static int count_holder(void *ctx, const struct store_holder_info *h)
{
    struct holder_count *c = ctx;
    if (h->alive)
        c->alive++;
    else
        c->dead++;
    return 0;
}

/* ---- concurrent ---- */

static int run_concurrent(const struct options *o)
{
    tetris_error err;
    store *s = NULL;
    if (open_store(o->store_dir, true, &s, &err) < 0) {
        log_error("event=open-failed msg=%s", LOG_Q(err.msg));
        return EXIT_FAIL;
    }
    cleanup_free struct gen_tensor *set = make_set(o->tensors, o->seed, o->max_bytes);
    if (set == NULL)
        return EXIT_FAIL;

    int start[2], results[2];
    if (pipe(start) < 0 || pipe(results) < 0) {
        log_error("event=pipe-failed errno=%d", errno);
        return EXIT_FAIL;
    }
    cleanup_free pid_t *pids = calloc((size_t)o->procs, sizeof *pids);
    for (int p = 0; p < o->procs; p++) {
        pids[p] = fork();
        if (pids[p] < 0) {
            log_error("event=fork-failed errno=%d", errno);
            return EXIT_FAIL;
        }
        if (pids[p] == 0) {
            close(start[1]);
            close(results[0]);
            char go;
            if (read(start[0], &go, 1) != 0) /* EOF: everyone starts at once */
                _exit(EXIT_FAIL);
            store *cs = NULL;
            tensor_digest sum;
            int published = -1;
            if (open_store(o->store_dir, false, &cs, &err) == 0)
                published = load_set(cs, set, o->tensors, o->seed + 1000 + (uint64_t)p, &sum, &err);
            if (published < 0) {
                log_error("event=load-failed proc=%d msg=%s", p, LOG_Q(err.msg));
                _exit(EXIT_FAIL);
            }
            char line[128], hex[TENSOR_DIGEST_HEX_LEN + 1];
            tensor_digest_to_hex(&sum, hex);
            int len = snprintf(line, sizeof line, "%d %s\n", published, hex);
            if (write(results[1], line, (size_t)len) != len)
                _exit(EXIT_FAIL);
            _exit(0);
        }
    }
    close(start[0]);
    close(results[1]);
    close(start[1]); /* release every child */

    int failures = 0;
    for (int p = 0; p < o->procs; p++) {
        int status;
        if (waitpid(pids[p], &status, 0) != pids[p] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            log_error("event=child-failed proc=%d status=%#x", p, status);
            failures++;
        }
    }
    cleanup_fclose FILE *r = fdopen(results[0], "r");
    int published_total = 0, lines = 0, distinct = 0;
    char first[TENSOR_DIGEST_HEX_LEN + 1] = "";
    int published;
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    while (r != NULL && fscanf(r, "%d %64s", &published, hex) == 2) {
        lines++;
        published_total += published;
        if (first[0] == '\0')
            snprintf(first, sizeof first, "%s", hex);
        else if (strcmp(first, hex) != 0)
            distinct++;
    }

    int files = 0;
    if (check_tensor_files(s, &files, &err) < 0) {
        log_error("event=check-failed msg=%s", LOG_Q(err.msg));
        failures++;
    }
    struct holder_count hc = {0};
    struct store_repair_report rep = {0};
    if (store_foreach_holder(s, count_holder, &hc, &err) < 0 || store_repair(s, &rep, &err) < 0) {
        log_error("event=holders-failed msg=%s", LOG_Q(err.msg));
        failures++;
    }
    int tmp_left = count_dir(store_root(s), "private/tmp");
    int holders_left = count_dir(store_root(s), "private/holders");
    printf("procs=%d tensors=%d reports=%d published=%d files=%d distinct_views=%d "
           "dead_holders=%d released=%zu tmp_left=%d holders_left=%d\n",
           o->procs, o->tensors, lines, published_total, files, distinct + (lines > 0), hc.dead,
           rep.dead_holders_released, tmp_left, holders_left);
    if (lines != o->procs || published_total != o->tensors || files != o->tensors ||
        distinct != 0 || hc.dead != o->procs || hc.alive != 0 ||
        rep.dead_holders_released != (size_t)o->procs || tmp_left != 0 || holders_left != 0)
        failures++;
    store_close(s);
    return failures == 0 ? 0 : EXIT_FAIL;
}

/* ---- fill ---- */

/* One process: publish its own tensors until the store says it is full.
 * Exit 0 when it saw TETRIS_E_FULL, 1 on any other outcome. */
static void fill_child(const struct options *o, int proc)
{
    tetris_error err;
    store *cs = NULL;
    if (open_store(o->store_dir, false, &cs, &err) < 0)
        _exit(EXIT_FAIL);
    for (int batch = 0; batch < 1000; batch++) {
        cleanup_free struct gen_tensor *set =
            make_set(4, o->seed * 7919u + (uint64_t)proc * 1000u + (uint64_t)batch, o->max_bytes);
        if (set == NULL)
            _exit(EXIT_FAIL);
        for (int i = 0; i < 4; i++) {
            bool published;
            int rc = store_publish_tensor(cs, &set[i].meta, fill_generated, &set[i].seed,
                                          &published, &err);
            if (rc == -TETRIS_E_FULL && strstr(err.msg, "store full: need ") != NULL)
                _exit(0);
            if (rc < 0) {
                log_error("event=publish-failed proc=%d msg=%s", proc, LOG_Q(err.msg));
                _exit(EXIT_FAIL);
            }
        }
    }
    _exit(EXIT_FAIL); /* never filled up */
}

static int run_fill(const struct options *o)
{
    tetris_error err;
    store *s = NULL;
    struct store_options so = {.create = true, .capacity_bytes = o->capacity};
    if (o->capacity == 0 || store_open(o->store_dir, &so, &s, &err) < 0) {
        log_error("event=open-failed msg=%s", LOG_Q(o->capacity ? err.msg : "no --capacity"));
        return o->capacity ? EXIT_FAIL : EXIT_USAGE;
    }
    cleanup_free pid_t *pids = calloc((size_t)o->procs, sizeof *pids);
    for (int p = 0; p < o->procs; p++) {
        pids[p] = fork();
        if (pids[p] < 0)
            return EXIT_FAIL;
        if (pids[p] == 0)
            fill_child(o, p);
    }
    int failures = 0;
    for (int p = 0; p < o->procs; p++) {
        int status;
        if (waitpid(pids[p], &status, 0) != pids[p] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            log_error("event=child-failed proc=%d status=%#x", p, status);
            failures++;
        }
    }
    uint64_t used = 0;
    int files = 0;
    if (store_usage_bytes(s, &used, &err) < 0 || check_tensor_files(s, &files, &err) < 0) {
        log_error("event=check-failed msg=%s", LOG_Q(err.msg));
        failures++;
    }
    int tmp_left = count_dir(store_root(s), "private/tmp");
    printf("procs=%d capacity=%llu used=%llu files=%d tmp_left=%d\n", o->procs,
           (unsigned long long)o->capacity, (unsigned long long)used, files, tmp_left);
    if (used > o->capacity || files == 0 || tmp_left != 0)
        failures++;
    store_close(s);
    return failures == 0 ? 0 : EXIT_FAIL;
}

/* ---- crash ---- */

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Forks a loader of set; kills it delay_ns after its ingest started unless
 * delay_ns is 0. Returns 1 if it was killed before finishing, 0 if it
 * finished (then *took_ns is how long its ingest took, by its own clock). */
static int run_loader(const struct options *o, const struct gen_tensor *set, int n,
                      uint64_t delay_ns, uint64_t *took_ns)
{
    int pipefd[2];
    if (pipe(pipefd) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(pipefd[0]);
        tetris_error err;
        store *cs = NULL;
        if (open_store(o->store_dir, false, &cs, &err) < 0)
            _exit(EXIT_FAIL);
        if (write(pipefd[1], "r", 1) != 1) /* the ingest starts now */
            _exit(EXIT_FAIL);
        uint64_t t0 = now_ns();
        if (load_set(cs, set, n, (uint64_t)getpid(), NULL, &err) < 0) {
            log_error("event=load-failed msg=%s", LOG_Q(err.msg));
            _exit(EXIT_FAIL);
        }
        uint64_t took = now_ns() - t0;
        if (write(pipefd[1], &took, sizeof took) != sizeof took)
            _exit(EXIT_FAIL);
        _exit(0);
    }
    close(pipefd[1]);
    char c;
    if (read(pipefd[0], &c, 1) == 1 && delay_ns > 0) {
        sleep_ns(delay_ns);
        kill(pid, SIGKILL);
    }
    int status;
    pid_t waited = waitpid(pid, &status, 0);
    ssize_t got = read(pipefd[0], took_ns, sizeof *took_ns);
    close(pipefd[0]);
    if (waited != pid)
        return -1;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        return 1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && got == sizeof *took_ns)
        return 0;
    log_error("event=loader-failed status=%#x", status);
    return -1;
}

/* After a kill: whatever of set is resident maps to exactly its bytes. */
static int check_set(store *s, const struct gen_tensor *set, int n, int *resident,
                     tetris_error *err)
{
    *resident = 0;
    for (int i = 0; i < n; i++) {
        store_mapping m;
        int rc = store_map_tensor(s, &set[i].meta.digest, &m, err);
        if (rc == -TETRIS_E_NOTFOUND)
            continue;
        if (rc < 0)
            return tetris_wrap(err, "tensor %d after kill", i);
        (*resident)++;
        cleanup_free void *want = malloc(m.nbytes + 1);
        if (want == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "allocating");
        generate(set[i].seed, want, m.nbytes);
        bool same = m.nbytes == set[i].meta.nbytes && memcmp(want, m.data, m.nbytes) == 0;
        store_unmap_tensor(&m);
        if (!same)
            return tetris_fail(err, TETRIS_E_CORRUPT, 0, "tensor %d is mappable but partial", i);
    }
    return 0;
}

/* What the crash trials saw: the kills, and which of them landed inside
 * an ingest (some of its tensors resident, not all). */
struct crash_counts {
    int killed;
    int partial;
};

static int crash_trial(const struct options *o, store *s, int trial, uint64_t *span_ns,
                       struct store_repair_report *total, struct crash_counts *seen,
                       tetris_error *err)
{
    int n = o->tensors;
    cleanup_free struct gen_tensor *set = make_set(n, o->seed * 1000003u + (uint64_t)trial,
                                                   o->max_bytes);
    if (set == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "making tensors");
    uint64_t state = o->seed ^ ((uint64_t)trial << 32);
    uint64_t delay = 1 + splitmix(&state) % (*span_ns + 1);
    uint64_t took = 0;
    int k = run_loader(o, set, n, delay, &took);
    if (k < 0)
        return tetris_fail(err, TETRIS_E_IO, 0, "loader failed on its own");
    seen->killed += k;
    if (k == 0) /* it finished: learn how long a whole ingest takes */
        *span_ns = (*span_ns * 3 + took) / 4;

    int files = 0, resident = 0;
    int rc = check_tensor_files(s, &files, err);
    if (rc == 0)
        rc = check_set(s, set, n, &resident, err);
    if (rc < 0)
        return rc;
    struct store_repair_report r;
    seen->partial += k == 1 && resident > 0 && resident < n;
    rc = store_repair(s, &r, err);
    if (rc < 0)
        return rc;
    total->dead_holders_released += r.dead_holders_released;
    total->temp_files_removed += r.temp_files_removed;
    total->bad_tensors_removed += r.bad_tensors_removed;
    rc = check_tensor_files(s, &files, err);
    if (rc < 0)
        return rc;
    struct holder_count hc = {0};
    rc = store_foreach_holder(s, count_holder, &hc, err);
    if (rc < 0)
        return rc;
    if (count_dir(store_root(s), "private/tmp") != 0 || hc.alive + hc.dead != 0 ||
        r.bad_tensors_removed)
        return tetris_fail(err, TETRIS_E_CORRUPT, 0,
                           "after repair: tmp=%d holders=%d bad_tensors_removed=%zu",
                           count_dir(store_root(s), "private/tmp"), hc.alive + hc.dead,
                           r.bad_tensors_removed);
    /* Start the next trial from an empty store. */
    for (int i = 0; i < n; i++) {
        rc = store_remove_tensor(s, &set[i].meta.digest, err);
        if (rc < 0 && rc != -TETRIS_E_NOTFOUND)
            return rc;
    }
    return 0;
}

static int run_crash(const struct options *o)
{
    tetris_error err;
    store *s = NULL;
    /* The loaders open the store as created: with its capacity, if any. */
    struct store_options so = {.create = true, .capacity_bytes = o->capacity};
    if (store_open(o->store_dir, &so, &s, &err) < 0) {
        log_error("event=open-failed msg=%s", LOG_Q(err.msg));
        return EXIT_FAIL;
    }
    /* Calibrate: how long one uninterrupted ingest of a set takes. */
    cleanup_free struct gen_tensor *warm = make_set(o->tensors, o->seed ^ 0xabcdef, o->max_bytes);
    uint64_t span = 0;
    if (warm == NULL || run_loader(o, warm, o->tensors, 0, &span) != 0) {
        log_error("event=calibration-failed");
        return EXIT_FAIL;
    }
    struct store_repair_report total = {0};
    if (store_repair(s, &total, &err) < 0)
        return EXIT_FAIL;
    for (int i = 0; i < o->tensors; i++)
        store_remove_tensor(s, &warm[i].meta.digest, NULL);
    memset(&total, 0, sizeof total);

    struct crash_counts seen = {0};
    for (int trial = 0; trial < o->trials; trial++) {
        if (crash_trial(o, s, trial, &span, &total, &seen, &err) < 0) {
            log_error("event=trial-failed trial=%d msg=%s", trial, LOG_Q(err.msg));
            store_close(s);
            return EXIT_FAIL;
        }
    }
    printf("trials=%d killed=%d partial=%d finished=%d temp_files_removed=%zu "
           "dead_holders_released=%zu bad_tensors_removed=%zu ingest_span_us=%llu capacity=%llu\n",
           o->trials, seen.killed, seen.partial, o->trials - seen.killed, total.temp_files_removed,
           total.dead_holders_released, total.bad_tensors_removed,
           (unsigned long long)(span / 1000), (unsigned long long)o->capacity);
    store_close(s);
    /* A run whose kills never landed inside an ingest tested nothing: some
     * must have left a set partly published, and with named temp files
     * some must have left one for repair. */
    if (seen.killed == 0 || seen.partial == 0 ||
        (o->capacity > 0 && total.temp_files_removed == 0)) {
        log_error("event=no-kill-landed-mid-ingest killed=%d partial=%d temp_files_removed=%zu",
                  seen.killed, seen.partial, total.temp_files_removed);
        return EXIT_FAIL;
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tetris-store-stress concurrent|fill|crash --store DIR [options]\n"
               "  concurrent   --procs N (32) --tensors N (24) --max-bytes B (262144)\n"
               "  fill         --capacity B --procs N (32) --max-bytes B (262144)\n"
               "  crash        --trials N (300) --tensors N (6) --max-bytes B (262144)\n"
               "               [--capacity B: named temp files]\n"
               "  --seed N     generator seed (1)\n"
               "exit status: 0 invariants held, 1 an invariant failed, 2 usage error\n");
}

int main(int argc, char **argv)
{
    log_init(argv[0]);
    static const struct option longopts[] = {
        {"store", required_argument, NULL, 's'},   {"procs", required_argument, NULL, 'p'},
        {"tensors", required_argument, NULL, 't'}, {"trials", required_argument, NULL, 'n'},
        {"seed", required_argument, NULL, 'S'},    {"max-bytes", required_argument, NULL, 'b'},
        {"capacity", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct options o = {.procs = 32, .tensors = -1, .trials = 300, .seed = 1, .max_bytes = 262144};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 's': o.store_dir = optarg; break;
        case 'p': o.procs = atoi(optarg); break;
        case 't': o.tensors = atoi(optarg); break;
        case 'n': o.trials = atoi(optarg); break;
        case 'S': o.seed = strtoull(optarg, NULL, 10); break;
        case 'b': o.max_bytes = strtoull(optarg, NULL, 10); break;
        case 'c': o.capacity = strtoull(optarg, NULL, 10); break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("tetris-store-stress %s\n", TETRIS_VERSION); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind != argc - 1 || o.store_dir == NULL || o.procs < 1 || o.trials < 1 ||
        o.max_bytes < 4) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *mode = argv[optind];
    if (strcmp(mode, "concurrent") == 0) {
        if (o.tensors < 0)
            o.tensors = 24;
        return o.tensors < 1 ? EXIT_USAGE : run_concurrent(&o);
    }
    if (strcmp(mode, "fill") == 0)
        return run_fill(&o);
    if (strcmp(mode, "crash") == 0) {
        if (o.tensors < 0)
            o.tensors = 6;
        return o.tensors < 1 ? EXIT_USAGE : run_crash(&o);
    }
    usage(stderr);
    return EXIT_USAGE;
}
