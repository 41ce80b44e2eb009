/* maintenance.c - listing, removing and quarantining resident tensors, and
 * crash repair: dead holders, dead writers' temp files, and anything under
 * tensors/ that is not a complete tensor file named by its digest. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "tensorstore/store_private.h"

static int open_dir_stream(int parent_fd, const char *name, const char *what, DIR **out,
                           tetris_error *err)
{
    int fd = store_open_dir(parent_fd, name);
    if (fd < 0)
        return tetris_fail(err, store_errno_code(errno), errno, "open %s", what);
    *out = fdopendir(fd);
    if (*out == NULL) {
        int rc = tetris_fail(err, TETRIS_E_IO, errno, "open %s", what);
        close(fd);
        return rc;
    }
    return 0;
}

static bool is_fanout_name(const char *name)
{
    return strlen(name) == 2 && strspn(name, "0123456789abcdef") == 2;
}

/* The digest a tensors/XX/<name> file claims to be, if its name is one. */
static bool digest_of_name(const char *fanout, const char *name, tensor_digest *d)
{
    return strlen(name) == TENSOR_DIGEST_HEX_LEN &&
           strspn(name, "0123456789abcdef") == TENSOR_DIGEST_HEX_LEN &&
           strncmp(name, fanout, 2) == 0 && tensor_digest_from_hex(name, d, NULL) == 0;
}

/* Calls visit(s, fanout_fd, fanout, name, ctx) for every entry of every
 * tensors/XX directory, and visit(s, tensors_fd, NULL, name, ctx) for an
 * entry of tensors/ that is not a fanout directory (a link, a file):
 * nothing is followed out of the store. */
typedef int (*tensor_visit_fn)(store *s, int fanout_fd, const char *fanout, const char *name,
                               void *ctx, tetris_error *err);

static int walk_tensors(store *s, tensor_visit_fn visit, void *ctx, tetris_error *err)
{
    char what[4096];
    snprintf(what, sizeof what, "%s/tensors", s->public_dir);
    cleanup_closedir DIR *top = NULL;
    int rc = open_dir_stream(s->tensors_fd, ".", what, &top, err);
    if (rc < 0)
        return rc;
    struct dirent *de;
    while ((de = readdir(top)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(s->tensors_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* removed meanwhile */
        if (!is_fanout_name(de->d_name) || !S_ISDIR(st.st_mode)) {
            rc = visit(s, s->tensors_fd, NULL, de->d_name, ctx, err);
            if (rc != 0)
                return rc;
            continue;
        }
        cleanup_closedir DIR *sub = NULL;
        rc = open_dir_stream(s->tensors_fd, de->d_name, de->d_name, &sub, err);
        if (rc < 0)
            return rc;
        struct dirent *fe;
        while ((fe = readdir(sub)) != NULL) {
            if (strcmp(fe->d_name, ".") == 0 || strcmp(fe->d_name, "..") == 0)
                continue;
            rc = visit(s, dirfd(sub), de->d_name, fe->d_name, ctx, err);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

/* ---- listing ---- */

struct foreach_ctx {
    int (*cb)(void *ctx, const struct store_entry *e);
    void *ctx;
};

static int visit_list(store *s, int fanout_fd, const char *fanout, const char *name, void *ctx,
                      tetris_error *err)
{
    (void)s;
    (void)err;
    struct foreach_ctx *fc = ctx;
    tensor_digest d;
    if (fanout == NULL || !digest_of_name(fanout, name, &d))
        return 0;
    cleanup_close int fd = store_openat(fanout_fd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
    if (fd < 0)
        return 0; /* removed meanwhile */
    struct store_entry e;
    struct stat st;
    if (tensor_file_check(fd, &d, name, &e.meta, NULL) < 0 || fstat(fd, &st) < 0)
        return 0; /* not a complete tensor: repair's business, not a listing's */
    e.file_bytes = (uint64_t)st.st_size;
    e.mtime = st.st_mtim;
    return fc->cb(fc->ctx, &e);
}

int store_foreach_tensor(store *s, int (*cb)(void *ctx, const struct store_entry *e), void *ctx,
                         tetris_error *err)
{
    struct foreach_ctx fc = {cb, ctx};
    return walk_tensors(s, visit_list, &fc, err);
}

/* ---- removal ---- */

/* The fanout directory of d, opened without following a link. */
static int open_fanout(store *s, const tensor_digest *d, char hex[TENSOR_DIGEST_HEX_LEN + 1],
                       tetris_error *err)
{
    tensor_digest_to_hex(d, hex);
    char fanout[3] = {hex[0], hex[1], '\0'};
    int fd = store_open_dir(s->tensors_fd, fanout);
    if (fd < 0)
        return tetris_fail(err, errno == ELOOP ? TETRIS_E_CORRUPT : store_errno_code(errno), errno,
                           "tensor %s in %s", hex, s->root);
    return fd;
}

int store_remove_tensor(store *s, const tensor_digest *d, tetris_error *err)
{
    int rc = store_require_writable(s, "remove", err);
    if (rc < 0)
        return rc;
    cleanup_close int lock = store_lock_tensor(s, d, err);
    if (lock < 0)
        return lock;
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    cleanup_close int fanout_fd = open_fanout(s, d, hex, err);
    if (fanout_fd < 0)
        return fanout_fd;
    if (unlinkat(fanout_fd, hex, 0) < 0)
        return tetris_fail(err, store_errno_code(errno), errno, "remove tensor %s from %s", hex,
                           s->root);
    return 0;
}

int store_quarantine_tensor(store *s, const tensor_digest *d, tetris_error *err)
{
    int rc = store_require_writable(s, "quarantine", err);
    if (rc < 0)
        return rc;
    cleanup_close int lock = store_lock_tensor(s, d, err);
    if (lock < 0)
        return lock;
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    cleanup_close int fanout_fd = open_fanout(s, d, hex, err);
    if (fanout_fd < 0)
        return fanout_fd;
    if (renameat(fanout_fd, hex, s->quarantine_fd, hex) < 0)
        return tetris_fail(err, store_errno_code(errno), errno, "quarantine tensor %s in %s", hex,
                           s->root);
    return 0;
}

int store_clear_quarantine(store *s, size_t *removed, tetris_error *err)
{
    *removed = 0;
    int rc = store_require_writable(s, "clear quarantine", err);
    if (rc < 0)
        return rc;
    cleanup_closedir DIR *dir = NULL;
    rc = open_dir_stream(s->quarantine_fd, ".", "quarantine", &dir, err);
    if (rc < 0)
        return rc;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (unlinkat(s->quarantine_fd, de->d_name, 0) < 0 && errno != ENOENT)
            return tetris_fail(err, store_errno_code(errno), errno, "remove quarantined %.80s",
                               de->d_name);
        (*removed)++;
    }
    return 0;
}

/* ---- repair ---- */

/* Removes every file in dir_fd accepted by want() whose flock can be
 * taken (its writer is dead), holding the lock while unlinking. */
static int remove_dead_files(int dir_fd, const char *what, bool (*want)(const char *name),
                             size_t *count, tetris_error *err)
{
    cleanup_closedir DIR *d = NULL;
    int rc = open_dir_stream(dir_fd, ".", what, &d, err);
    if (rc < 0)
        return rc;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 || !want(de->d_name))
            continue;
        struct stat lst;
        if (fstatat(dir_fd, de->d_name, &lst, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(lst.st_mode))
            continue;
        if (!S_ISREG(lst.st_mode)) {
            /* A link or a FIFO is nobody's temp file: unlinkat removes the
             * entry itself, never what a link points to. */
            if (unlinkat(dir_fd, de->d_name, 0) < 0 && errno != ENOENT)
                return tetris_fail(err, store_errno_code(errno), errno, "remove %s/%s", what,
                                   de->d_name);
            (*count)++;
            continue;
        }
        cleanup_close int fd = -1;
        int dead = store_probe_dead(dir_fd, de->d_name, &fd, err);
        if (dead == -TETRIS_E_NOTFOUND)
            continue;
        if (dead < 0) {
            tetris_wrap(err, "%s", what);
            return dead;
        }
        struct stat st;
        if (dead == 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (unlinkat(dir_fd, de->d_name, 0) < 0 && errno != ENOENT)
            return tetris_fail(err, store_errno_code(errno), errno, "remove %s/%s", what,
                               de->d_name);
        (*count)++;
    }
    return 0;
}

static bool is_holder_file(const char *name)
{
    size_t n = strlen(name), m = strlen(HOLDER_SUFFIX);
    return name[0] != '.' && n > m && strcmp(name + n - m, HOLDER_SUFFIX) == 0;
}

static bool is_holder_temp(const char *name)
{
    return strncmp(name, HOLDER_TEMP_PREFIX "-", strlen(HOLDER_TEMP_PREFIX) + 1) == 0;
}

static bool any_file(const char *name)
{
    (void)name;
    return true;
}

struct repair_ctx {
    size_t removed;
};

static int visit_repair(store *s, int fanout_fd, const char *fanout, const char *name, void *ctx,
                        tetris_error *err)
{
    struct repair_ctx *rep = ctx;
    struct stat st;
    /* unlinkat removes a link itself, never what it points to. */
    if (fstatat(fanout_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
        return 0;
    tensor_digest d;
    tensor_meta meta;
    if (fanout != NULL && digest_of_name(fanout, name, &d)) {
        cleanup_close int fd = store_openat(fanout_fd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
        if (fd < 0 || tensor_file_check(fd, &d, name, &meta, NULL) == 0)
            return 0;
        /* Re-check under the tensor's lock: a publisher may just have
         * replaced the bad file with a good copy. */
        cleanup_close int lock = store_lock_tensor(s, &d, err);
        if (lock < 0)
            return lock;
        cleanup_close int again = store_openat(fanout_fd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK,
                                               0);
        if (again < 0 || tensor_file_check(again, &d, name, &meta, NULL) == 0)
            return 0;
    }
    if (unlinkat(fanout_fd, name, 0) < 0 && errno != ENOENT)
        return tetris_fail(err, store_errno_code(errno), errno, "remove %s/tensors/%s%s%s",
                           s->public_dir, fanout != NULL ? fanout : "", fanout != NULL ? "/" : "",
                           name);
    rep->removed++;
    return 0;
}

/* The cheap part: holders/ and tmp/ hold one file per live (or crashed)
 * holder and ingest, a handful, whatever the number of tensors. */
static int repair_dead_writers(store *s, struct store_repair_report *r, tetris_error *err)
{
    int rc = store_require_writable(s, "repair", err);
    if (rc < 0)
        return rc;
    char what[4096];
    snprintf(what, sizeof what, "%s/private/holders", s->root);
    rc = remove_dead_files(s->holders_fd, what, is_holder_file, &r->dead_holders_released, err);
    if (rc == 0)
        rc = remove_dead_files(s->holders_fd, what, is_holder_temp, &r->temp_files_removed, err);
    snprintf(what, sizeof what, "%s/private/tmp", s->root);
    if (rc == 0)
        rc = remove_dead_files(s->tmp_fd, what, any_file, &r->temp_files_removed, err);
    return rc;
}

int store_repair_light(store *s, struct store_repair_report *report, tetris_error *err)
{
    struct store_repair_report r = {0};
    int rc = repair_dead_writers(s, &r, err);
    if (report != NULL)
        *report = r;
    return rc;
}

int store_repair(store *s, struct store_repair_report *report, tetris_error *err)
{
    struct store_repair_report r = {0};
    int rc = repair_dead_writers(s, &r, err);
    struct repair_ctx rctx = {0};
    if (rc == 0)
        rc = walk_tensors(s, visit_repair, &rctx, err);
    r.bad_tensors_removed = rctx.removed;
    if (report != NULL)
        *report = r;
    return rc;
}
