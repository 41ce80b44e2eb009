/* store.c - opening a store (layout, options, tenants), capacity and usage
 * accounting, and the use lock that keeps reclaim away from loaders.
 *
 * The .tetris-store marker is written last when a store is created, so a
 * directory with a marker has its whole layout. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "tensorstore/store_private.h"

#define TENANT_NAME_MAX 63

static const char *const layout_dirs[] = {"tensors", "tmp", "locks", "holders", "quarantine"};

static int validate_tenant(const char *name, tetris_error *err)
{
    size_t len = strlen(name);
    if (len == 0 || len > TENANT_NAME_MAX)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "tenant name must be 1..%d characters",
                           TENANT_NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                  c == '-';
        if (!ok)
            return tetris_fail(err, TETRIS_E_INVAL, 0,
                               "tenant name '%.64s' may only contain [a-z0-9._-]", name);
    }
    if (strcmp(name, ".") == 0 || strstr(name, "..") != NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "tenant name '%.64s' is not a plain name", name);
    return 0;
}

/* mkdir -p for the store root (and the tenants/ levels above a tenant). */
static int mkdir_parents(const char *path, tetris_error *err)
{
    cleanup_free char *copy = strdup(path);
    if (copy == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "strdup");
    for (char *p = copy + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(copy, 0755) < 0 && errno != EEXIST)
            return tetris_fail(err, store_errno_code(errno), errno, "create store directory %s",
                               copy);
        if (saved == '\0')
            break;
        *p = saved;
    }
    return 0;
}

static int create_layout(int root_fd, const char *root, tetris_error *err)
{
    for (size_t i = 0; i < sizeof layout_dirs / sizeof layout_dirs[0]; i++)
        if (mkdirat(root_fd, layout_dirs[i], 0755) < 0 && errno != EEXIST)
            return tetris_fail(err, store_errno_code(errno), errno, "create %s/%s", root,
                               layout_dirs[i]);
    int fd = openat(root_fd, STORE_USE_LOCK, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return tetris_fail(err, store_errno_code(errno), errno, "create %s/%s", root,
                           STORE_USE_LOCK);
    close(fd);
    return 0;
}

static int open_dir(int parent_fd, const char *root, const char *name, tetris_error *err)
{
    int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, store_errno_code(errno), errno, "open %s/%s", root, name);
    return fd;
}

/* Writes the marker under a temp name in tmp/ (where repair cleans up after
 * a crashed creator) and links it into place, so concurrent creators agree
 * on one marker: the first link wins. */
static int write_marker(int root_fd, const char *root, uint64_t capacity, tetris_error *err)
{
    json_t *doc = json_pack("{s:s, s:i, s:I}", "format", "tetris-store", "version",
                            STORE_FORMAT_VERSION, "capacity_bytes", (json_int_t)capacity);
    if (doc == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "building the store marker");
    cleanup_free char *text = json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(doc);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "serialising the store marker");

    cleanup_close int tmp_fd = open_dir(root_fd, root, "tmp", err);
    if (tmp_fd < 0)
        return tmp_fd;
    char tmp[64];
    cleanup_close int fd =
        store_create_locked(tmp_fd, STORE_MARKER, "", 0644, tmp, sizeof tmp, err);
    if (fd < 0) {
        tetris_wrap(err, "store %s", root);
        return fd;
    }
    size_t len = strlen(text);
    int rc = 0;
    if (write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "write %s/tmp/%s", root, tmp);
    else if (linkat(tmp_fd, tmp, root_fd, STORE_MARKER, 0) < 0 && errno != EEXIST)
        rc = tetris_fail(err, store_errno_code(errno), errno, "publish %s/%s", root, STORE_MARKER);
    unlinkat(tmp_fd, tmp, 0);
    return rc;
}

static int read_marker(int root_fd, const char *root, uint64_t *capacity, tetris_error *err)
{
    cleanup_close int fd = openat(root_fd, STORE_MARKER, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return tetris_fail(err, TETRIS_E_NOTFOUND, 0,
                               "%s is not a tetris store (no %s); create it first", root,
                               STORE_MARKER);
        return tetris_fail(err, store_errno_code(errno), errno, "open %s/%s", root, STORE_MARKER);
    }
    json_error_t jerr;
    json_t *doc = json_loadfd(fd, 0, &jerr);
    if (doc == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s/%s: %s (line %d)", root, STORE_MARKER,
                           jerr.text, jerr.line);
    const char *format = json_string_value(json_object_get(doc, "format"));
    json_t *version = json_object_get(doc, "version");
    json_t *cap = json_object_get(doc, "capacity_bytes");
    int rc = 0;
    if (format == NULL || strcmp(format, "tetris-store") != 0)
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s/%s: not a tetris store marker", root,
                         STORE_MARKER);
    else if (!json_is_integer(version) || json_integer_value(version) != STORE_FORMAT_VERSION)
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s/%s: unsupported store version (want %d)",
                         root, STORE_MARKER, STORE_FORMAT_VERSION);
    else if (cap != NULL && (!json_is_integer(cap) || json_integer_value(cap) < 0))
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s/%s: capacity_bytes is not a byte count",
                         root, STORE_MARKER);
    else
        *capacity = cap != NULL ? (uint64_t)json_integer_value(cap) : 0;
    json_decref(doc);
    return rc;
}

static int open_layout(store *s, tetris_error *err)
{
    int *fds[] = {&s->tensors_fd, &s->tmp_fd, &s->locks_fd, &s->holders_fd, &s->quarantine_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
        if (s->read_only && fds[i] == &s->locks_fd)
            continue;
        *fds[i] = open_dir(s->root_fd, s->root, layout_dirs[i], err);
        if (*fds[i] < 0)
            return *fds[i];
    }
    s->use_lock_fd = openat(s->root_fd, STORE_USE_LOCK, O_RDONLY | O_CLOEXEC);
    if (s->use_lock_fd < 0)
        return tetris_fail(err, store_errno_code(errno), errno, "open %s/%s", s->root,
                           STORE_USE_LOCK);
    return 0;
}

static store *store_alloc(void)
{
    store *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->root_fd = s->tensors_fd = s->tmp_fd = s->locks_fd = -1;
    s->holders_fd = s->quarantine_fd = s->use_lock_fd = -1;
    pthread_mutex_init(&s->mutex, NULL);
    pthread_mutex_init(&s->use_mutex, NULL);
    return s;
}

int store_open(const char *dir, const struct store_options *opts, store **out, tetris_error *err)
{
    static const struct store_options defaults = {0};
    if (opts == NULL)
        opts = &defaults;
    if (dir == NULL || dir[0] == '\0')
        dir = STORE_DEFAULT_DIR;
    if (opts->create && opts->read_only)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "a store cannot be created read-only");
    if (opts->tenant != NULL) {
        int rc = validate_tenant(opts->tenant, err);
        if (rc < 0)
            return rc;
    }

    store *s = store_alloc();
    if (s == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "allocating a store handle");
    s->read_only = opts->read_only;
    int rc;
    if (opts->tenant != NULL)
        rc = asprintf(&s->root, "%s/tenants/%s", dir, opts->tenant);
    else
        rc = asprintf(&s->root, "%s", dir);
    if (rc < 0) {
        s->root = NULL;
        store_close(s);
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "allocating the store path");
    }

    rc = 0;
    if (opts->create)
        rc = mkdir_parents(s->root, err);
    if (rc == 0) {
        s->root_fd = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (s->root_fd < 0)
            rc = tetris_fail(err, store_errno_code(errno), errno, "no store at %s", s->root);
    }
    uint64_t capacity = 0;
    if (rc == 0 && opts->create && faccessat(s->root_fd, STORE_MARKER, F_OK, 0) < 0) {
        rc = create_layout(s->root_fd, s->root, err);
        if (rc == 0)
            rc = write_marker(s->root_fd, s->root, opts->capacity_bytes, err);
    }
    if (rc == 0)
        rc = read_marker(s->root_fd, s->root, &capacity, err);
    if (rc == 0)
        rc = open_layout(s, err);
    if (rc < 0) {
        store_close(s);
        return rc;
    }
    s->capacity_bytes = opts->capacity_bytes != 0 ? opts->capacity_bytes : capacity;
    *out = s;
    return 0;
}

void store_close(store *s)
{
    if (s == NULL)
        return;
    int fds[] = {s->root_fd,    s->tensors_fd,      s->tmp_fd,     s->locks_fd,
                 s->holders_fd, s->quarantine_fd, s->use_lock_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    pthread_mutex_destroy(&s->mutex);
    pthread_mutex_destroy(&s->use_mutex);
    free(s->root);
    free(s);
}

const char *store_root(const store *s)
{
    return s->root;
}

uint64_t store_capacity(const store *s)
{
    return s->capacity_bytes;
}

/* ---- usage ---- */

uint64_t store_charged_bytes(uint64_t file_bytes)
{
    long p = sysconf(_SC_PAGESIZE); /* from the auxiliary vector: no syscall */
    uint64_t page = p > 0 ? (uint64_t)p : 4096;
    if (file_bytes > UINT64_MAX - page - STORE_INODE_CHARGE)
        return UINT64_MAX;
    return (file_bytes + page - 1) / page * page + STORE_INODE_CHARGE;
}

uint64_t store_tensor_charge(uint64_t nbytes)
{
    if (nbytes > UINT64_MAX - TENSOR_TRAILER_BYTES)
        return UINT64_MAX;
    return store_charged_bytes(nbytes + TENSOR_TRAILER_BYTES);
}

static int hex_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The fanout index of a tensors/ subdirectory name, -1 for anything else. */
static int fanout_index(const char *name)
{
    if (strlen(name) != 2 || hex_nibble(name[0]) < 0 || hex_nibble(name[1]) < 0)
        return -1;
    return hex_nibble(name[0]) << 4 | hex_nibble(name[1]);
}

static bool timespec_less(struct timespec a, struct timespec b)
{
    return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

static int sum_file_sizes(int dir_fd, const char *what, bool live_only, uint64_t *out,
                          tetris_error *err)
{
    int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", what);
    cleanup_closedir DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", what);
    }
    uint64_t sum = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        struct stat st;
        if (fstatat(dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue; /* removed meanwhile, or not ours */
        if (live_only && store_probe_dead(dir_fd, de->d_name, NULL, NULL) != 0)
            continue; /* a dead writer's leftover (repair removes it) or gone */
        sum += store_charged_bytes((uint64_t)st.st_size);
    }
    *out = sum;
    return 0;
}

/* Bytes in one fanout directory. The cached sum is trusted while the
 * directory's mtime is unchanged, and only if that mtime is older than the
 * (coarse) clock reading taken before the scan: every later rename or unlink
 * then stamps a newer mtime, even on filesystems with tick-granular times. */
static int usage_scan_dir(store *s, int idx, const char *name, uint64_t *out, tetris_error *err)
{
    struct stat st;
    if (fstatat(s->tensors_fd, name, &st, 0) < 0) {
        if (errno == ENOENT) {
            *out = 0;
            return 0;
        }
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s/tensors/%s", s->root, name);
    }
    struct usage_cache_entry *c = &s->usage[idx];
    if (c->valid && c->mtime.tv_sec == st.st_mtim.tv_sec && c->mtime.tv_nsec == st.st_mtim.tv_nsec) {
        *out = c->bytes;
        return 0;
    }
    struct timespec before;
    clock_gettime(CLOCK_REALTIME_COARSE, &before);
    cleanup_close int fd = open_dir(s->tensors_fd, s->root, name, err);
    if (fd < 0)
        return fd;
    uint64_t bytes = 0;
    int rc = sum_file_sizes(fd, name, false, &bytes, err);
    if (rc < 0)
        return rc;
    c->valid = timespec_less(st.st_mtim, before);
    c->mtime = st.st_mtim;
    c->bytes = bytes;
    *out = bytes;
    return 0;
}

static int usage_locked(store *s, uint64_t *out, tetris_error *err)
{
    int fd = openat(s->tensors_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s/tensors", s->root);
    cleanup_closedir DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s/tensors", s->root);
    }
    uint64_t total = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int idx = fanout_index(de->d_name);
        if (idx < 0)
            continue;
        uint64_t bytes = 0;
        int rc = usage_scan_dir(s, idx, de->d_name, &bytes, err);
        if (rc < 0)
            return rc;
        total += bytes;
    }
    *out = total;
    return 0;
}

int store_usage_bytes(store *s, uint64_t *out, tetris_error *err)
{
    pthread_mutex_lock(&s->mutex);
    int rc = usage_locked(s, out, err);
    pthread_mutex_unlock(&s->mutex);
    return rc;
}

int store_usage_with_reservations(store *s, uint64_t *out, tetris_error *err)
{
    uint64_t resident = 0, reserved = 0;
    /* tmp/ before tensors/: a temp file renamed into place between the two
     * walks is then counted twice (harmless) rather than not at all, which
     * let concurrent publishers overshoot the capacity. */
    int rc = sum_file_sizes(s->tmp_fd, "tmp", true, &reserved, err);
    if (rc == 0)
        rc = store_usage_bytes(s, &resident, err);
    if (rc < 0)
        return rc;
    *out = resident + reserved;
    return 0;
}

/* ---- use lock ----
 * One flock on the handle's own open file description, counted so that
 * threads sharing a handle can nest use_begin/use_end. A process that both
 * loads and reclaims must use two handles: flock would silently convert the
 * shared lock of one description into the exclusive one. */

int store_use_begin(store *s, tetris_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&s->use_mutex);
    if (s->reclaiming)
        rc = tetris_fail(err, TETRIS_E_INVAL, 0,
                         "store handle is inside a reclaim pass; use a separate handle to load");
    else if (s->use_depth == 0 && store_flock(s->use_lock_fd, LOCK_SH) < 0)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "lock %s/%s shared", s->root, STORE_USE_LOCK);
    if (rc == 0)
        s->use_depth++;
    pthread_mutex_unlock(&s->use_mutex);
    return rc;
}

void store_use_end(store *s)
{
    pthread_mutex_lock(&s->use_mutex);
    if (s->use_depth > 0 && --s->use_depth == 0)
        flock(s->use_lock_fd, LOCK_UN);
    pthread_mutex_unlock(&s->use_mutex);
}

int store_reclaim_begin(store *s, tetris_error *err)
{
    int rc = store_require_writable(s, "reclaim", err);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&s->use_mutex);
    if (s->use_depth > 0 || s->reclaiming)
        rc = tetris_fail(err, TETRIS_E_INVAL, 0,
                         "store handle already holds the use lock; reclaim with a separate handle");
    else if (store_flock(s->use_lock_fd, LOCK_EX) < 0)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "lock %s/%s exclusive", s->root, STORE_USE_LOCK);
    else
        s->reclaiming = true;
    pthread_mutex_unlock(&s->use_mutex);
    return rc;
}

void store_reclaim_end(store *s)
{
    pthread_mutex_lock(&s->use_mutex);
    if (s->reclaiming) {
        flock(s->use_lock_fd, LOCK_UN);
        s->reclaiming = false;
    }
    pthread_mutex_unlock(&s->use_mutex);
}
