/* derived_form.c - finding, holding and asking for derived forms (see
 * derived_form.h; the contract is protocol/derived.h). */
#include "agent/derived_form.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/log.h"
#include "model/onnx_rewrite.h"

void derived_form_store_name(const struct derived_part *p, char *out, size_t cap)
{
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(&p->digest, hex);
    snprintf(out, cap, "tensors/%.2s/%s", hex, hex);
}

int derived_form_find(const char *label, const char *root, const tensor_digest *source,
                      const char *runtime, struct derived_form *f, bool *absent)
{
    char cpu[DERIVED_NAME_MAX];
    tetris_error why = {0};
    memset(f, 0, sizeof(*f));
    *absent = false;
    if (derived_cpu_features(cpu, sizeof(cpu), &why) < 0) {
        log_warn("event=derived-ignored model=%s reason=%s", LOG_Q(label), LOG_Q(why.msg));
        return 0;
    }
    int r = derived_entry_lookup(root, DERIVED_TRANSFORM_ORT, runtime, cpu, source, &f->entry,
                                 &why);
    if (r == -TETRIS_E_NOTFOUND) {
        *absent = true;
        log_info("event=derived-none model=%s runtime=%s cpu=%s action=plain-weights", LOG_Q(label),
                 LOG_Q(runtime), LOG_Q(cpu));
        return 0;
    }
    if (r < 0) {
        log_warn("event=derived-ignored model=%s reason=%s action=plain-weights", LOG_Q(label),
                 LOG_Q(why.msg));
        return 0;
    }
    /* The identity the entry is named by covers these (derived_entry_read
     * checked it against the fields and the name). */
    assert(strcmp(f->entry.runtime, runtime) == 0 && strcmp(f->entry.cpu, cpu) == 0);
    return 1;
}

/* onnx_share_fn for a derived graph: every initializer in the data file
 * moves to the data tensor's store file, pre-packed blobs included. */
static bool relocate_tensor(void *ctx, const struct onnx_tensor_ref *ref, struct onnx_external *ext)
{
    const derived_entry *e = ctx;
    const char *loc = e->data_location;
    if (ref->location == NULL || ref->location_len != strlen(loc) ||
        memcmp(ref->location, loc, ref->location_len) != 0)
        return false;
    derived_form_store_name(&e->data, ext->location, sizeof(ext->location));
    ext->offset = ref->offset;
    ext->keep_prepacked = true;
    return true;
}

/* References the form's tensors (the graph, the data, the ORT-format part
 * if it has one: a form is reclaimed whole or not at all) through a
 * connection of its own (the agent's connection has its watcher), so the
 * daemon keeps them while the form is used, across daemon restarts as the
 * agent's own references are (a watcher of this connection registers them
 * again). */
static int hold_refs(struct derived_form *f, const char *root, tetris_error *err)
{
    size_t n = derived_entry_parts(&f->entry);
    char sock[PATH_MAX], name[sizeof("tensors/XX/") + TENSOR_DIGEST_HEX_LEN];
    tensor_desc *t = f->descs;
    memset(f->descs, 0, sizeof(f->descs));
    for (size_t i = 0; i < n; i++) {
        const struct derived_part *part = derived_entry_part(&f->entry, i);
        derived_form_store_name(part, name, sizeof(name));
        if (snprintf(f->paths[i], sizeof(f->paths[i]), "%s/%s", root, name) >=
            (int)sizeof(f->paths[i]))
            return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "%s: too long", root);
        t[i].name = derived_part_label(i);
        snprintf(t[i].meta.dtype, sizeof(t[i].meta.dtype), "uint8");
        t[i].meta.ndim = 1;
        t[i].meta.shape[0] = (int64_t)part->nbytes;
        t[i].meta.nbytes = t[i].length = part->nbytes;
        t[i].meta.digest = part->digest;
        t[i].meta.crc32 = part->crc32;
        t[i].has_digest = true;
        t[i].source = f->paths[i];
    }
    f->refs_model = (model){.path = f->paths[0], .format = "onnx", .n_tensors = n, .tensors = t};
    struct ingest_tensor_result res[DERIVED_PARTS];
    struct ingest_summary summary;
    tetris_error werr;
    snprintf(sock, sizeof(sock), "%s/%s", root, INGEST_SOCKET_NAME);
    int r = ingest_client_connect(sock, 30000, &f->refs, err);
    if (r == 0)
        r = ingest_client_ingest(f->refs, "derived", &f->refs_model, res, &summary, err);
    for (size_t i = 0; r == 0 && summary.rejected > 0 && i < n; i++)
        if (res[i].status == INGEST_REJECTED)
            r = tetris_fail(err, TETRIS_E_NOTFOUND, 0, "the daemon rejected a tensor of it: %s",
                            res[i].reason);
    /* Without the watcher the references still hold until a restart. */
    if (r == 0 && ingest_client_keep_registered(f->refs, &werr) < 0)
        log_warn("event=daemon-watch-failed model=derived detail=%s", LOG_Q(werr.msg));
    return r;
}

static int read_store_file(const char *path, uint64_t nbytes, uint8_t **out, tetris_error *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_NOTFOUND, errno, "%s", path);
    cleanup_free uint8_t *buf = malloc(nbytes > 0 ? nbytes : 1);
    if (buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "derived graph");
    for (uint64_t got = 0; got < nbytes;) {
        ssize_t n = pread(fd, buf + got, nbytes - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return tetris_fail(err, TETRIS_E_IO, n < 0 ? errno : 0, "%s: short", path);
        got += (uint64_t)n;
    }
    *out = steal_pointer(&buf);
    return 0;
}

int derived_form_hold(struct derived_form *f, const char *root, uint8_t **graph, size_t *len,
                      tetris_error *err)
{
    cleanup_free uint8_t *bytes = NULL;
    int r = hold_refs(f, root, err);
    if (r == 0)
        r = read_store_file(f->paths[0], f->entry.graph.nbytes, &bytes, err);
    if (r == 0)
        r = onnx_rewrite(bytes, f->entry.graph.nbytes, relocate_tensor, &f->entry, graph, len, err);
    if (r < 0)
        derived_form_release(f);
    return r;
}

/* Maps the ORT-format part's store file (its bytes, not its trailer),
 * with its page tables filled: the session reads all of it at once. */
static int map_ort(struct derived_form *f, tetris_error *err)
{
    const char *path = f->paths[DERIVED_PART_ORT];
    size_t len = (size_t)f->entry.ort.nbytes;
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_NOTFOUND, errno, "%s", path);
    if (fstat(fd, &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size < f->entry.ort.nbytes)
        return tetris_fail(err, TETRIS_E_IO, errno, "%s: shorter than its entry says", path);
    void *bytes = mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (bytes == MAP_FAILED)
        return tetris_fail(err, TETRIS_E_IO, errno, "mmap %s", path);
    /* Published on 4 KiB pages (store.h, STORE_PUBLISH_SMALL_PAGES): no
     * khugepaged collapse through this mapping. EINVAL: a kernel without
     * transparent huge pages. */
    if (madvise(bytes, len, MADV_NOHUGEPAGE) != 0 && errno != EINVAL) {
        int e = errno;
        munmap(bytes, len);
        return tetris_fail(err, TETRIS_E_IO, e, "madvise(MADV_NOHUGEPAGE) on %s", path);
    }
    f->ort = bytes;
    f->ort_len = len;
    return 0;
}

int derived_form_hold_ort(struct derived_form *f, const char *root, tetris_error *err)
{
    assert(f->entry.has_ort);
    int r = hold_refs(f, root, err);
    if (r == 0)
        r = map_ort(f, err);
    if (r < 0)
        derived_form_release(f);
    return r;
}

void derived_form_release(struct derived_form *f)
{
    ingest_client_close(f->refs);
    f->refs = NULL;
    if (f->ort != NULL)
        munmap((void *)f->ort, f->ort_len);
    f->ort = NULL;
    f->ort_len = 0;
}

/* ---- asking the daemon ---- */

void derived_wait_init(struct derived_wait *w)
{
    pthread_condattr_t ca;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->woken, &ca);
    pthread_condattr_destroy(&ca);
    w->asking = NULL;
    w->cancelled = false;
}

void derived_wait_cancel(struct derived_wait *w)
{
    pthread_mutex_lock(&w->lock);
    w->cancelled = true;
    if (w->asking != NULL)
        ingest_client_interrupt(w->asking);
    pthread_cond_broadcast(&w->woken);
    pthread_mutex_unlock(&w->lock);
}

void derived_wait_destroy(struct derived_wait *w)
{
    assert(w->asking == NULL);
    pthread_cond_destroy(&w->woken);
    pthread_mutex_destroy(&w->lock);
}

/* Sets the connection a cancel interrupts (NULL: none); false when the
 * wait is cancelled already. */
static bool wait_on(struct derived_wait *w, ingest_client *c)
{
    if (w == NULL)
        return true;
    pthread_mutex_lock(&w->lock);
    bool cancelled = w->cancelled;
    w->asking = cancelled ? NULL : c;
    pthread_mutex_unlock(&w->lock);
    return !cancelled;
}

/* Pauses ms milliseconds between tries; false when w is cancelled first. */
static bool wait_pause(struct derived_wait *w, long ms)
{
    struct timespec until = clock_timespec(clock_now_ms() + (double)ms);
    pthread_mutex_lock(&w->lock);
    while (!w->cancelled && pthread_cond_timedwait(&w->woken, &w->lock, &until) != ETIMEDOUT)
        ;
    bool cancelled = w->cancelled;
    pthread_mutex_unlock(&w->lock);
    return !cancelled;
}

/* One try: asks for the form of the share image behind fd on a connection
 * of its own and waits for the answer, at most wait_ms or until w (NULL:
 * none) is cancelled. *reached: a daemon took the connection; *answered:
 * its answer came (else the connection was lost or never made). */
static int ask_once(const char *label, const char *root, int fd, const char *runtime,
                    int64_t wait_ms, struct derived_wait *w, bool *reached, bool *answered,
                    tetris_error *err)
{
    char sock[PATH_MAX];
    ingest_client *c = NULL;
    snprintf(sock, sizeof(sock), "%s/%s", root, INGEST_SOCKET_NAME);
    *answered = false;
    int r = ingest_client_connect(sock, 30000, &c, err);
    *reached = c != NULL;
    if (r == 0 && !wait_on(w, c))
        r = tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "cancelled");
    else if (r == 0)
        r = ingest_client_derive(c, label, fd, runtime, (int)wait_ms, answered, err);
    if (c != NULL)
        wait_on(w, NULL);
    ingest_client_close(c);
    return r;
}

static bool wait_cancelled(struct derived_wait *w)
{
    return w != NULL && !wait_on(w, NULL);
}

/* Asks for the form of the share image behind fd and waits for the
 * answer (derived_form_request: a server's wait, w, tries again after a
 * daemon went away); one log line for the outcome (a node without a
 * daemon, direct mode, is no failure; nor is a cancelled wait, the
 * caller's). */
static int ask(const char *label, const char *root, int fd, const char *runtime, const char *how,
               struct derived_wait *w)
{
    const char *rt = runtime != NULL ? runtime : "default";
    int64_t end = clock_mono_ms() + DERIVED_FORM_WAIT_MS;
    tetris_error err = {0};
    bool reached = false, reached_once = false, answered = false;
    int r;
    for (int attempt = 1;; attempt++) {
        r = ask_once(label, root, fd, runtime, end - clock_mono_ms(), w, &reached, &answered,
                     &err);
        reached_once = reached_once || reached;
        if (wait_cancelled(w))
            return -TETRIS_E_UNAVAILABLE;
        /* Only a daemon lost before it answered is asked again: an answer
         * (a failure too: forms off on this node) is its verdict. */
        if (w == NULL || r == 0 || answered || !reached_once)
            break;
        long pause_ms = clock_backoff_ms(250, 5000, attempt);
        if (clock_mono_ms() + pause_ms >= end)
            break;
        log_info("event=derive-request-retry model=%s runtime=%s msg=%s retry_ms=%ld", LOG_Q(label),
                 LOG_Q(rt), LOG_Q(err.msg), pause_ms);
        if (!wait_pause(w, pause_ms))
            return -TETRIS_E_UNAVAILABLE;
    }
    if (r == -TETRIS_E_UNAVAILABLE && !reached_once)
        log_info("event=derive-request-skipped model=%s reason=%s", LOG_Q(label), LOG_Q(err.msg));
    else if (r < 0)
        log_warn("event=derive-request-failed model=%s runtime=%s wait=%s msg=%s", LOG_Q(label),
                 LOG_Q(rt), how, LOG_Q(err.msg));
    else
        log_info("event=derive-requested model=%s runtime=%s wait=%s result=made", LOG_Q(label),
                 LOG_Q(rt), how);
    return r;
}

static int image_memfd(const uint8_t *image, size_t len, int *out, tetris_error *err)
{
    cleanup_close int fd = memfd_create("tetris-share-image", MFD_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "memfd_create");
    int r = fd_write_all(fd, image, len, "the share image", err);
    if (r < 0)
        return r;
    *out = steal_fd(&fd);
    return 0;
}

/* A background ask: what the detached thread owns. */
struct derive_ask {
    char *label, *root, *runtime;
    int fd;
};

static void ask_free(struct derive_ask *a)
{
    if (a == NULL)
        return;
    free(a->label);
    free(a->root);
    free(a->runtime);
    free(a);
}

static void *ask_main(void *arg)
{
    struct derive_ask *a = arg;
    ask(a->label, a->root, a->fd, a->runtime, "background", NULL);
    close(a->fd);
    ask_free(a);
    return NULL;
}

int derived_form_request(const char *label, const char *root, const uint8_t *image, size_t len,
                         const char *runtime, bool wait, struct derived_wait *w)
{
    tetris_error err = {0};
    int fd = -1;
    if (image_memfd(image, len, &fd, &err) < 0) {
        log_warn("event=derive-request-failed model=%s msg=%s", LOG_Q(label), LOG_Q(err.msg));
        return -err.code;
    }
    if (wait || w != NULL) {
        /* A cancellable ask is a serving process's: no start waits. */
        int r = ask(label, root, fd, runtime, wait ? "yes" : "background", w);
        close(fd);
        return r;
    }
    struct derive_ask *a = calloc(1, sizeof(*a));
    pthread_attr_t attr;
    pthread_t t;
    int rc = ENOMEM;
    if (a != NULL && (a->label = strdup(label)) != NULL && (a->root = strdup(root)) != NULL &&
        (runtime == NULL || (a->runtime = strdup(runtime)) != NULL) &&
        (rc = pthread_attr_init(&attr)) == 0) {
        a->fd = fd;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* The thread takes no signals: they stay with the threads that
         * wait for them, whatever the process's disposition. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = pthread_create(&t, &attr, ask_main, a);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc == 0)
        return 0;
    log_warn("event=derive-request-failed model=%s wait=background msg=%s", LOG_Q(label),
             LOG_Q(strerror(rc)));
    close(fd);
    ask_free(a);
    return -TETRIS_E_NOMEM;
}
