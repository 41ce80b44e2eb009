/* adopt.c - holders a previous daemon kept, adopted so that no tensor an
 * agent still maps is freed across a daemon restart.
 *
 * Why: the daemon records an agent's references in a holder file
 * that the daemon itself keeps locked for as long as the agent's
 * connection is open. If the daemon dies, those locks go with it although
 * the agents still map their tensors. At start-up, before repair releases
 * dead holders, the daemon re-records the references of every dead holder
 * whose owner process still exists and keeps them until that process exits
 * (watched through a pidfd), or until that process registers the same
 * references over a connection of its own (agents reconnect after a
 * restart), so no holder is counted twice. */
#include "reclaimer/daemon.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"

struct adopted_holder {
    store_holder *holder;
    int pidfd;
    pid_t pid;
    char label[256];
    tensor_digest *refs; /* what the holder keeps, for store_replace_adopted */
    size_t n_refs;
};

static void adopted_holder_free(struct adopted_holder *a)
{
    store_holder_close(a->holder);
    close(a->pidfd);
    free(a->refs);
}

struct orphan {
    pid_t pid;
    char label[256];
    size_t n;
    tensor_digest *refs;
    uint64_t *bytes;
};

struct orphan_scan {
    struct orphan *list;
    size_t n;
    size_t cap;
    int err;
};

static int pidfd_open_pid(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int collect_orphan(void *ctx, const struct store_holder_info *h)
{
    struct orphan_scan *scan = ctx;
    if (h->alive || h->pid <= 0 || h->pid == getpid() || h->n_refs == 0)
        return 0;
    /* A dead holder whose owner still runs: the previous daemon held it. */
    if (kill(h->pid, 0) < 0 && errno == ESRCH)
        return 0;
    if (scan->n == scan->cap) {
        size_t cap = scan->cap ? scan->cap * 2 : 16;
        struct orphan *l = realloc(scan->list, cap * sizeof(*l));
        if (l == NULL)
            return scan->err = -TETRIS_E_NOMEM;
        scan->list = l;
        scan->cap = cap;
    }
    struct orphan *o = &scan->list[scan->n];
    memset(o, 0, sizeof(*o));
    o->pid = h->pid;
    snprintf(o->label, sizeof(o->label), "%s", h->label ? h->label : "");
    o->refs = malloc(h->n_refs * sizeof(*o->refs));
    o->bytes = malloc(h->n_refs * sizeof(*o->bytes));
    if (o->refs == NULL || o->bytes == NULL) {
        free(o->refs);
        free(o->bytes);
        return scan->err = -TETRIS_E_NOMEM;
    }
    memcpy(o->refs, h->refs, h->n_refs * sizeof(*o->refs));
    memcpy(o->bytes, h->ref_bytes, h->n_refs * sizeof(*o->bytes));
    o->n = h->n_refs;
    scan->n++;
    return 0;
}

/* Takes o->refs over on success. */
static int adopt_one(struct served_store *ss, struct orphan *o, tetris_error *err)
{
    int pidfd = pidfd_open_pid(o->pid);
    if (pidfd < 0)
        return 0; /* exited meanwhile (or no pidfd support): nothing to keep */
    store_holder *h;
    int rc = store_holder_open(ss->store, o->label, o->pid, &h, err);
    if (rc < 0) {
        close(pidfd);
        return rc;
    }
    rc = store_holder_add_many(h, o->refs, o->bytes, o->n, err);
    if (rc < 0) {
        store_holder_close(h);
        close(pidfd);
        return rc;
    }
    pthread_mutex_lock(&ss->adopted_lock);
    struct adopted_holder *a = realloc(ss->adopted, (ss->n_adopted + 1) * sizeof(*a));
    if (a == NULL) {
        pthread_mutex_unlock(&ss->adopted_lock);
        store_holder_close(h);
        close(pidfd);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "adopted holders");
    }
    ss->adopted = a;
    a = &ss->adopted[ss->n_adopted++];
    *a = (struct adopted_holder){.holder = h,
                                 .pidfd = pidfd,
                                 .pid = o->pid,
                                 .refs = steal_pointer(&o->refs),
                                 .n_refs = o->n};
    snprintf(a->label, sizeof(a->label), "%s", o->label);
    pthread_mutex_unlock(&ss->adopted_lock);
    atomic_fetch_add(&ss->counters.adopted_holders, 1);
    log_info("event=holder-adopted tenant=%s pid=%d label=%s refs=%zu", tenant_name(ss),
             (int)o->pid, LOG_Q(o->label), o->n);
    return 0;
}

int store_adopt_orphans(struct served_store *ss, tetris_error *err)
{
    struct orphan_scan scan = {0};
    int rc = store_foreach_holder(ss->store, collect_orphan, &scan, err);
    if (rc == 0 && scan.err < 0)
        rc = tetris_fail(err, -scan.err, ENOMEM, "scanning holders");
    for (size_t i = 0; i < scan.n; i++) {
        if (rc == 0)
            rc = adopt_one(ss, &scan.list[i], err);
        free(scan.list[i].refs);
        free(scan.list[i].bytes);
    }
    free(scan.list);
    return rc;
}

static void poll_adopted(struct served_store *ss)
{
    pthread_mutex_lock(&ss->adopted_lock);
    for (size_t i = 0; i < ss->n_adopted;) {
        struct pollfd p = {.fd = ss->adopted[i].pidfd, .events = POLLIN};
        if (poll(&p, 1, 0) == 1) {
            log_info("event=adopted-holder-released pid=%d", (int)ss->adopted[i].pid);
            adopted_holder_free(&ss->adopted[i]);
            ss->adopted[i] = ss->adopted[--ss->n_adopted];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&ss->adopted_lock);
}

static int digest_cmp(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(tensor_digest));
}

bool store_replace_adopted(struct served_store *ss, pid_t pid, const char *label,
                           const tensor_digest *sorted_refs, size_t n)
{
    if (pid <= 0)
        return false;
    bool replaced = false;
    pthread_mutex_lock(&ss->adopted_lock);
    for (size_t i = 0; i < ss->n_adopted && !replaced; i++) {
        struct adopted_holder *a = &ss->adopted[i];
        if (a->pid != pid || strcmp(a->label, label) != 0)
            continue;
        size_t k = 0;
        while (k < a->n_refs &&
               bsearch(&a->refs[k], sorted_refs, n, sizeof(*sorted_refs), digest_cmp) != NULL)
            k++;
        if (k < a->n_refs)
            continue; /* it keeps something the connection does not */
        log_info("event=adopted-holder-replaced tenant=%s pid=%d label=%s refs=%zu",
                 tenant_name(ss), (int)pid, LOG_Q(label), a->n_refs);
        adopted_holder_free(a);
        ss->adopted[i] = ss->adopted[--ss->n_adopted];
        replaced = true;
    }
    pthread_mutex_unlock(&ss->adopted_lock);
    return replaced;
}

void store_sort_refs(tensor_digest *refs, size_t n)
{
    qsort(refs, n, sizeof(*refs), digest_cmp);
}

void daemon_poll_adopted(struct daemon *d)
{
    for (size_t i = 0; i < daemon_store_count(d); i++)
        poll_adopted(d->stores[i]);
}

/* Adopted holders still open when the daemon stops. Main thread only. */
static store_holder **kept_at_exit;
static size_t n_kept_at_exit;

void store_release_adopted(struct served_store *ss)
{
    /* On a clean stop the holder files must stay (their owners still map):
     * close only the pidfds; the holders stay open and reachable here,
     * locked until the process exits, and the next daemon adopts them
     * again. */
    pthread_mutex_lock(&ss->adopted_lock);
    for (size_t i = 0; i < ss->n_adopted; i++) {
        close(ss->adopted[i].pidfd);
        free(ss->adopted[i].refs);
    }
    store_holder **k = NULL;
    if (ss->n_adopted > 0)
        k = realloc(kept_at_exit, (n_kept_at_exit + ss->n_adopted) * sizeof(*k));
    if (k != NULL) { /* else the files stay all the same; only the pointers are lost */
        kept_at_exit = k;
        for (size_t i = 0; i < ss->n_adopted; i++)
            kept_at_exit[n_kept_at_exit++] = ss->adopted[i].holder;
    }
    ss->n_adopted = 0;
    pthread_mutex_unlock(&ss->adopted_lock);
}
