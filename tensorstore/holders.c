/* holders.c - who maps what, recorded so that it survives the holder.
 *
 * A holder is a text file holders/<id>.ref:
 *   tetris-holder 1
 *   pid <owner pid>
 *   label <free text, control characters replaced>
 *   <64 hex digest> <bytes>        one line per reference, appended
 * The holder keeps an exclusive flock on it for its lifetime; the file is
 * created under a temp name, locked, then renamed, so a .ref file whose lock
 * can be taken always belongs to a dead holder (see layout.c on probing
 * liveness from the holder's own process). References are appended with one
 * write(2) each, so a reader sees whole lines unless it races an append;
 * loaders append under store_use_begin and reclaim reads under
 * store_reclaim_begin, which excludes that race. Readers still parse
 * defensively: a line that does not parse is skipped and counted. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fileio.h"
#include "tensorstore/store_private.h"

#define HOLDER_MAGIC "tetris-holder 1"
#define HOLDER_LABEL_MAX 200
#define HOLDER_REF_LINE_MAX (TENSOR_DIGEST_HEX_LEN + 1 + 20 + 1)

struct store_holder {
    store *s;
    int fd;
    char id[48];   /* <owner pid>-<random> */
    char name[64]; /* <id>.ref */
};

/* fd_write_all with the store's code for its errno (a full store is
 * TETRIS_E_FULL, which callers tell apart from other failures). */
static int holder_write(int fd, const char *buf, size_t len, tetris_error *err)
{
    tetris_error write_err = {0};
    if (fd_write_all(fd, buf, len, "holder file", &write_err) == 0)
        return 0;
    return tetris_fail(err, store_errno_code(write_err.errnum), write_err.errnum, "%s",
                       write_err.msg);
}

static void sanitize_label(const char *label, char *out, size_t out_len)
{
    size_t i = 0;
    for (; label != NULL && label[i] != '\0' && i + 1 < out_len; i++) {
        unsigned char c = (unsigned char)label[i];
        out[i] = (c < 0x20 || c == 0x7f) ? '_' : (char)c;
    }
    out[i] = '\0';
}

int store_holder_open(store *s, const char *label, pid_t owner_pid, store_holder **out,
                      tetris_error *err)
{
    if (s->read_only)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "cannot record references in read-only store %s (the node daemon "
                           "records them for function pods)",
                           s->root);
    store_holder *h = calloc(1, sizeof *h);
    if (h == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "allocating a holder");
    h->s = s;
    char temp[64];
    char prefix[32];
    snprintf(prefix, sizeof prefix, HOLDER_TEMP_PREFIX "-%ld", (long)owner_pid);
    h->fd = store_create_locked(s->holders_fd, prefix, "", 0644, temp, sizeof temp, err);
    if (h->fd < 0) {
        int rc = h->fd;
        free(h);
        tetris_wrap(err, "record references in %s/private/holders", s->root);
        return rc;
    }

    char clean[HOLDER_LABEL_MAX + 1];
    sanitize_label(label, clean, sizeof clean);
    char header[HOLDER_LABEL_MAX + 96];
    int n = snprintf(header, sizeof header, HOLDER_MAGIC "\npid %ld\nlabel %s\n", (long)owner_pid,
                     clean);
    /* The id: owner pid plus the temp file's random part, unique per store. */
    snprintf(h->id, sizeof h->id, "%ld-%s", (long)owner_pid, temp + strlen(prefix) + 1);
    snprintf(h->name, sizeof h->name, "%s" HOLDER_SUFFIX, h->id);
    int rc = 0;
    if (holder_write(h->fd, header, (size_t)n, err) < 0)
        rc = tetris_wrap(err, "write holder %s", temp);
    else if (renameat(s->holders_fd, temp, s->holders_fd, h->name) < 0)
        rc = tetris_fail(err, store_errno_code(errno), errno,
                         "publish holder %s/private/holders/%s", s->root, h->name);
    if (rc < 0) {
        unlinkat(s->holders_fd, temp, 0);
        close(h->fd);
        free(h);
        return rc;
    }
    *out = h;
    return 0;
}

static size_t format_ref(char *out, const tensor_digest *d, uint64_t nbytes)
{
    tensor_digest_to_hex(d, out);
    int n = snprintf(out + TENSOR_DIGEST_HEX_LEN, HOLDER_REF_LINE_MAX + 1 - TENSOR_DIGEST_HEX_LEN,
                     " %" PRIu64 "\n", nbytes);
    return TENSOR_DIGEST_HEX_LEN + (size_t)n;
}

int store_holder_add(store_holder *h, const tensor_digest *d, uint64_t nbytes, tetris_error *err)
{
    return store_holder_add_many(h, d, &nbytes, 1, err);
}

int store_holder_add_many(store_holder *h, const tensor_digest *d, const uint64_t *nbytes,
                          size_t n, tetris_error *err)
{
    if (n == 0)
        return 0;
    cleanup_free char *buf = malloc(n * (HOLDER_REF_LINE_MAX + 1));
    if (buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "allocating %zu reference lines", n);
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += format_ref(buf + len, &d[i], nbytes[i]);
    if (holder_write(h->fd, buf, len, err) < 0)
        return tetris_wrap(err, "record references in %s/private/holders/%s", h->s->root, h->name);
    return 0;
}

const char *store_holder_id(const store_holder *h)
{
    return h->id;
}

void store_holder_close(store_holder *h)
{
    if (h == NULL)
        return;
    unlinkat(h->s->holders_fd, h->name, 0);
    close(h->fd);
    free(h);
}

/* ---- kept holders ---- */

static int kept_name_check(const char *name, tetris_error *err)
{
    size_t n = strlen(name);
    if (n == 0 || n > STORE_KEPT_NAME_MAX || name[0] == '.' ||
        strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789._-") != n)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "kept holder name '%s': want 1 to %d of [a-z0-9._-], not starting "
                           "with '.'",
                           name, STORE_KEPT_NAME_MAX);
    return 0;
}

static int kept_file_name(const char *name, char *out, size_t out_len, tetris_error *err)
{
    int r = kept_name_check(name, err);
    if (r < 0)
        return r;
    snprintf(out, out_len, "%s" HOLDER_KEPT_SUFFIX, name);
    return 0;
}

int store_kept_hold(store *s, const char *name, const char *label, const tensor_digest *d,
                    const uint64_t *nbytes, size_t n, tetris_error *err)
{
    char file[STORE_KEPT_NAME_MAX + sizeof(HOLDER_KEPT_SUFFIX)];
    int r = kept_file_name(name, file, sizeof file, err);
    if (r < 0)
        return r;
    if (s->read_only || s->holders_fd < 0)
        return tetris_fail(err, TETRIS_E_DENIED, 0, "cannot keep references in read-only store %s",
                           s->root);
    char clean[HOLDER_LABEL_MAX + 1];
    sanitize_label(label, clean, sizeof clean);
    char header[HOLDER_LABEL_MAX + 64];
    int hn = snprintf(header, sizeof header, HOLDER_MAGIC "\npid 0\nlabel %s\n", clean);
    cleanup_free char *refs = malloc(n * (HOLDER_REF_LINE_MAX + 1) + 1);
    if (refs == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "allocating %zu reference lines", n);
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += format_ref(refs + len, &d[i], nbytes[i]);

    /* Locked while it is a temp file, so repair knows a live writer's. */
    char temp[64], prefix[32];
    snprintf(prefix, sizeof prefix, HOLDER_TEMP_PREFIX "-%ld", (long)getpid());
    cleanup_close int fd = store_create_locked(s->holders_fd, prefix, "", 0644, temp, sizeof temp,
                                               err);
    if (fd < 0)
        return tetris_wrap(err, "keep references in %s/private/holders", s->root);
    if (holder_write(fd, header, (size_t)hn, err) < 0 || holder_write(fd, refs, len, err) < 0)
        r = tetris_wrap(err, "write kept holder %s", temp);
    else if (renameat2(s->holders_fd, temp, s->holders_fd, file, RENAME_NOREPLACE) < 0)
        r = errno == EEXIST
                ? tetris_fail(err, TETRIS_E_CONFLICT, errno, "kept holder %s exists already", name)
                : tetris_fail(err, store_errno_code(errno), errno,
                              "publish kept holder %s/private/holders/%s", s->root, file);
    if (r < 0)
        unlinkat(s->holders_fd, temp, 0);
    return r;
}

int store_kept_release(store *s, const char *name, tetris_error *err)
{
    char file[STORE_KEPT_NAME_MAX + sizeof(HOLDER_KEPT_SUFFIX)];
    int r = kept_file_name(name, file, sizeof file, err);
    if (r < 0)
        return r;
    if (s->read_only || s->holders_fd < 0)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "cannot release references in read-only store %s", s->root);
    if (unlinkat(s->holders_fd, file, 0) < 0 && errno != ENOENT)
        return tetris_fail(err, store_errno_code(errno), errno,
                           "release kept holder %s/private/holders/%s", s->root, file);
    return 0;
}

int store_kept_exists(store *s, const char *name, tetris_error *err)
{
    char file[STORE_KEPT_NAME_MAX + sizeof(HOLDER_KEPT_SUFFIX)];
    int r = kept_file_name(name, file, sizeof file, err);
    if (r < 0)
        return r;
    if (s->holders_fd < 0)
        return tetris_fail(err, TETRIS_E_DENIED, 0, "the holders of %s are private", s->root);
    struct stat st;
    if (fstatat(s->holders_fd, file, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return S_ISREG(st.st_mode) ? 1 : 0;
    if (errno == ENOENT)
        return 0;
    return tetris_fail(err, store_errno_code(errno), errno, "stat %s/private/holders/%s", s->root,
                       file);
}

/* ---- reading holder files ---- */

struct holder_parse {
    char *label;
    pid_t pid;
    tensor_digest *refs;
    uint64_t *ref_bytes;
    size_t n_refs, cap;
    size_t n_garbage;
};

static void holder_parse_free(struct holder_parse *p)
{
    free(p->label);
    free(p->refs);
    free(p->ref_bytes);
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int add_parsed_ref(struct holder_parse *p, const tensor_digest *d, uint64_t nbytes)
{
    if (p->n_refs == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        tensor_digest *refs = realloc(p->refs, cap * sizeof *refs);
        if (refs == NULL)
            return -1;
        p->refs = refs;
        uint64_t *bytes = realloc(p->ref_bytes, cap * sizeof *bytes);
        if (bytes == NULL)
            return -1;
        p->ref_bytes = bytes;
        p->cap = cap;
    }
    p->refs[p->n_refs] = *d;
    p->ref_bytes[p->n_refs] = nbytes;
    p->n_refs++;
    return 0;
}

/* One complete line (newline stripped). Returns -1 only when out of memory. */
static int parse_line(struct holder_parse *p, char *line, size_t lineno)
{
    if (lineno == 0 && strcmp(line, HOLDER_MAGIC) == 0)
        return 0;
    if (strncmp(line, "pid ", 4) == 0) {
        uint64_t pid;
        if (parse_u64(line + 4, &pid) == 0 && pid <= INT32_MAX)
            p->pid = (pid_t)pid;
        else
            p->n_garbage++;
        return 0;
    }
    if (strncmp(line, "label ", 6) == 0) {
        free(p->label);
        p->label = strdup(line + 6);
        return p->label == NULL ? -1 : 0;
    }
    tensor_digest d;
    uint64_t nbytes;
    if (strlen(line) > TENSOR_DIGEST_HEX_LEN && line[TENSOR_DIGEST_HEX_LEN] == ' ') {
        line[TENSOR_DIGEST_HEX_LEN] = '\0';
        if (tensor_digest_from_hex(line, &d, NULL) == 0 &&
            parse_u64(line + TENSOR_DIGEST_HEX_LEN + 1, &nbytes) == 0)
            return add_parsed_ref(p, &d, nbytes);
    }
    p->n_garbage++;
    return 0;
}

static int parse_holder_file(int fd, const char *name, struct holder_parse *p, tetris_error *err)
{
    cleanup_fclose FILE *f = fdopen(fd, "r");
    if (f == NULL) {
        close(fd);
        return tetris_fail(err, TETRIS_E_IO, errno, "read holder %s", name);
    }
    cleanup_free char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    for (size_t lineno = 0; (len = getline(&line, &cap, f)) >= 0; lineno++) {
        if (len == 0 || line[len - 1] != '\n' || memchr(line, '\0', (size_t)len) != NULL) {
            p->n_garbage++; /* torn last line, or binary junk */
            continue;
        }
        line[len - 1] = '\0';
        if (parse_line(p, line, lineno) < 0)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "parsing holder %s", name);
    }
    if (ferror(f))
        return tetris_fail(err, TETRIS_E_IO, errno, "read holder %s", name);
    return 0;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

int store_foreach_holder(store *s, int (*cb)(void *ctx, const struct store_holder_info *h),
                         void *ctx, tetris_error *err)
{
    if (s->holders_fd < 0)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "the holders of %s are private to the node daemon (%s/private)", s->root,
                           s->root);
    int dfd = openat(s->holders_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s/private/holders", s->root);
    cleanup_closedir DIR *dir = fdopendir(dfd);
    if (dir == NULL) {
        close(dfd);
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s/private/holders", s->root);
    }
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        bool kept = has_suffix(de->d_name, HOLDER_KEPT_SUFFIX);
        if (de->d_name[0] == '.' || (!kept && !has_suffix(de->d_name, HOLDER_SUFFIX)))
            continue;
        struct stat lst;
        if (fstatat(s->holders_fd, de->d_name, &lst, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(lst.st_mode))
            continue; /* gone, or not a holder (repair removes links and FIFOs) */
        /* The probe opens its own description: our own holders read alive.
         * A kept holder lives as long as its file. */
        int dead = kept ? 0 : store_probe_dead(s->holders_fd, de->d_name, NULL, err);
        if (dead == -TETRIS_E_NOTFOUND)
            continue; /* closed meanwhile */
        if (dead < 0)
            return dead;
        /* Non-blocking, and only regular files: a FIFO planted here must
         * not hang the reclaimer. */
        int fd = store_openat(s->holders_fd, de->d_name, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
        if (fd < 0) {
            if (errno == ENOENT)
                continue;
            return tetris_fail(err, store_errno_code(errno), errno, "open %s/holders/%s",
                               s->root, de->d_name);
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            continue;
        }
        struct holder_parse p = {0};
        int rc = parse_holder_file(fd, de->d_name, &p, err);
        if (rc < 0) {
            holder_parse_free(&p);
            return rc;
        }
        char id[256];
        size_t suffix = strlen(kept ? HOLDER_KEPT_SUFFIX : HOLDER_SUFFIX);
        snprintf(id, sizeof id, "%.*s", (int)(strlen(de->d_name) - suffix), de->d_name);
        struct store_holder_info info = {
            .id = id,
            .label = p.label != NULL ? p.label : "",
            .pid = p.pid,
            .alive = dead == 0,
            .kept = kept,
            .n_refs = p.n_refs,
            .refs = p.refs,
            .ref_bytes = p.ref_bytes,
            .n_garbage = p.n_garbage,
        };
        rc = cb(ctx, &info);
        holder_parse_free(&p);
        if (rc != 0)
            return rc;
    }
    return 0;
}
