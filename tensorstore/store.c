/* store.c - opening a store (layout, options, tenants), capacity and usage
 * accounting, and the use lock that keeps reclaim away from loaders.
 *
 * The .tetris-store marker is written last when a store is created, so a
 * directory with a marker has its whole layout. */
#include "tensorstore/store.h"

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

/* The writers' directories under private/, in the order of the handle's
 * descriptors (see open_private). */
static const char *const private_dirs[] = {"tmp", "locks", "holders", "quarantine"};

int store_tenant_check(const char *name, tetris_error *err)
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

/* A writer trusts a directory only if it is its own and nobody else can
 * write to it: otherwise another user could plant links or files where
 * the writer (often root) creates, renames and removes. private/ must
 * also be closed to reading; a directory of ours with a looser mode (an
 * umask, an older version) is tightened. */
static int check_owned(int fd, const char *path, mode_t forbidden, tetris_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", path);
    if (!S_ISDIR(st.st_mode))
        return tetris_fail(err, TETRIS_E_DENIED, 0, "%s is not a directory", path);
    if (st.st_uid != geteuid())
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "refusing store directory %s: it belongs to uid %u, not to this "
                           "process (uid %u); only the store's owner may write it",
                           path, (unsigned)st.st_uid, (unsigned)geteuid());
    if ((st.st_mode & forbidden) != 0 && fchmod(fd, st.st_mode & 07777 & ~forbidden) < 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno,
                           "refusing store directory %s: mode %04o lets others write it", path,
                           (unsigned)(st.st_mode & 07777));
    return 0;
}

/* The store root itself is the administrator's: it is refused, not
 * changed, when group or others may write it. */
static int check_root(int fd, const char *path, tetris_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", path);
    if (st.st_uid == geteuid() && (st.st_mode & 022) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "refusing store root %s: mode %04o lets group or others write it "
                           "(chmod go-w it, or use another directory)",
                           path, (unsigned)(st.st_mode & 07777));
    return check_owned(fd, path, 022, err);
}

static int open_subdir(int parent_fd, const char *parent, const char *name, tetris_error *err)
{
    int fd = store_open_dir(parent_fd, name);
    if (fd < 0)
        return tetris_fail(err, errno == ELOOP ? TETRIS_E_DENIED : store_errno_code(errno), errno,
                           "open %s/%s%s", parent, name,
                           errno == ELOOP ? " (a symbolic link: refused)" : "");
    return fd;
}

/* mkdir, then open without following a link and check it is ours. */
static int make_subdir(int parent_fd, const char *parent, const char *name, mode_t mode,
                       mode_t forbidden, tetris_error *err)
{
    if (mkdirat(parent_fd, name, mode) < 0 && errno != EEXIST)
        return tetris_fail(err, store_errno_code(errno), errno, "create %s/%s", parent, name);
    cleanup_close int fd = open_subdir(parent_fd, parent, name, err);
    if (fd < 0)
        return fd;
    char what[PATH_MAX];
    snprintf(what, sizeof what, "%s/%s", parent, name);
    int rc = check_owned(fd, what, forbidden, err);
    return rc < 0 ? rc : steal_fd(&fd);
}

/* public/ (mode 0755: what pods mount) with tensors/, and private/ (0700:
 * the writers' coordination) with tmp/, locks/, holders/, quarantine/ and
 * the use lock. Idempotent: concurrent creators agree. */
static int create_layout(store *s, tetris_error *err)
{
    cleanup_close int pub = make_subdir(s->root_fd, s->root, STORE_PUBLIC_DIR, 0755, 022, err);
    if (pub < 0)
        return pub;
    cleanup_close int tensors = make_subdir(pub, s->public_dir, "tensors", 0755, 022, err);
    if (tensors < 0)
        return tensors;
    cleanup_close int priv = make_subdir(s->root_fd, s->root, STORE_PRIVATE_DIR, 0700, 077, err);
    if (priv < 0)
        return priv;
    char what[PATH_MAX];
    snprintf(what, sizeof what, "%s/" STORE_PRIVATE_DIR, s->root);
    for (size_t i = 0; i < sizeof private_dirs / sizeof private_dirs[0]; i++) {
        int fd = make_subdir(priv, what, private_dirs[i], 0700, 077, err);
        if (fd < 0)
            return fd;
        close(fd);
    }
    int fd = store_openat(priv, STORE_USE_LOCK, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return tetris_fail(err, store_errno_code(errno), errno, "create %s/%s", what,
                           STORE_USE_LOCK);
    close(fd);
    return 0;
}

/* Writes the marker under a temp name in private/tmp/ (where repair cleans
 * up after a crashed creator) and links it into public/, so concurrent
 * creators agree on one marker: the first link wins. */
static int write_marker(store *s, uint64_t capacity, tetris_error *err)
{
    json_t *doc = json_pack("{s:s, s:i, s:I}", "format", "tetris-store", "version",
                            STORE_FORMAT_VERSION, "capacity_bytes", (json_int_t)capacity);
    if (doc == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "building the store marker");
    cleanup_free char *text = json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(doc);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "serialising the store marker");

    char tmp[64];
    cleanup_close int fd = store_create_locked(s->tmp_fd, STORE_MARKER, "", 0644, tmp, sizeof tmp,
                                               err);
    if (fd < 0) {
        tetris_wrap(err, "store %s", s->root);
        return fd;
    }
    size_t len = strlen(text);
    int rc = 0;
    if (write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "write %s/private/tmp/%s", s->root, tmp);
    else if (linkat(s->tmp_fd, tmp, s->public_fd, STORE_MARKER, 0) < 0 && errno != EEXIST)
        rc = tetris_fail(err, store_errno_code(errno), errno, "publish %s/%s", s->public_dir,
                         STORE_MARKER);
    unlinkat(s->tmp_fd, tmp, 0);
    return rc;
}

/* The marker's format version (and capacity), or TETRIS_E_NOTFOUND. */
static int read_marker(int dir_fd, const char *dir, int *version, uint64_t *capacity,
                       tetris_error *err)
{
    cleanup_close int fd = store_openat(dir_fd, STORE_MARKER, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
    if (fd < 0) {
        if (errno == ENOENT)
            return tetris_fail(err, TETRIS_E_NOTFOUND, 0,
                               "%s is not a tetris store (no %s); create it first", dir,
                               STORE_MARKER);
        return tetris_fail(err, store_errno_code(errno), errno, "open %s/%s", dir, STORE_MARKER);
    }
    json_error_t jerr;
    json_t *doc = json_loadfd(fd, 0, &jerr);
    if (doc == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s/%s: %s (line %d)", dir, STORE_MARKER,
                           jerr.text, jerr.line);
    const char *format = json_string_value(json_object_get(doc, "format"));
    json_t *v = json_object_get(doc, "version");
    json_t *cap = json_object_get(doc, "capacity_bytes");
    int rc = 0;
    if (format == NULL || strcmp(format, "tetris-store") != 0)
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s/%s: not a tetris store marker", dir,
                         STORE_MARKER);
    else if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000)
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s/%s: no store version", dir, STORE_MARKER);
    else if (cap != NULL && (!json_is_integer(cap) || json_integer_value(cap) < 0))
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s/%s: capacity_bytes is not a byte count", dir,
                         STORE_MARKER);
    else {
        *version = (int)json_integer_value(v);
        *capacity = cap != NULL ? (uint64_t)json_integer_value(cap) : 0;
    }
    json_decref(doc);
    return rc;
}

static int check_version(int version, const char *dir, tetris_error *err)
{
    if (version == STORE_OLD_FORMAT_VERSION)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s has the old store layout (format 1: locks and holders beside the "
                           "tensors, where function pods could lock them); it is not migrated: "
                           "stop the node daemon and the pods that map it, remove the directory "
                           "(the store is a cache) and start the daemon again",
                           dir);
    if (version != STORE_FORMAT_VERSION)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s/%s: unsupported store version %d (want %d)",
                           dir, STORE_MARKER, version, STORE_FORMAT_VERSION);
    return 0;
}

/* The writers' descriptors under private/. */
static int open_private(store *s, tetris_error *err)
{
    s->private_fd = open_subdir(s->root_fd, s->root, STORE_PRIVATE_DIR, err);
    if (s->private_fd < 0)
        return s->private_fd;
    char what[PATH_MAX];
    snprintf(what, sizeof what, "%s/" STORE_PRIVATE_DIR, s->root);
    int rc = check_owned(s->private_fd, what, 077, err);
    int *fds[] = {&s->tmp_fd, &s->locks_fd, &s->holders_fd, &s->quarantine_fd};
    for (size_t i = 0; rc == 0 && i < sizeof fds / sizeof fds[0]; i++) {
        *fds[i] = open_subdir(s->private_fd, what, private_dirs[i], err);
        if (*fds[i] < 0)
            rc = *fds[i];
    }
    if (rc < 0)
        return rc;
    s->use_lock_fd = store_openat(s->private_fd, STORE_USE_LOCK, O_RDONLY | O_CLOEXEC, 0);
    if (s->use_lock_fd < 0)
        return tetris_fail(err, store_errno_code(errno), errno, "open %s/%s", what, STORE_USE_LOCK);
    return 0;
}

static store *store_alloc(void)
{
    store *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->root_fd = s->public_fd = s->private_fd = s->tensors_fd = s->tmp_fd = s->locks_fd = -1;
    s->holders_fd = s->quarantine_fd = s->use_lock_fd = -1;
    for (size_t i = 0; i < STORE_TENSOR_FANOUT; i++)
        atomic_init(&s->fanout_fds[i], -1);
    pthread_mutex_init(&s->mutex, NULL);
    pthread_mutex_init(&s->use_mutex, NULL);
    return s;
}

/* Finds public/ under the root, or, for a reader, takes the root as a
 * mounted public/ (what function pods see). Creates the layout when asked
 * and there is none. Reads the marker. */
static int open_public(store *s, bool create, uint64_t create_capacity, uint64_t *capacity,
                       tetris_error *err)
{
    int version = 0;
    s->public_fd = store_open_dir(s->root_fd, STORE_PUBLIC_DIR);
    if (s->public_fd < 0 && errno != ENOENT)
        return tetris_fail(err, errno == ELOOP ? TETRIS_E_DENIED : store_errno_code(errno), errno,
                           "open %s/" STORE_PUBLIC_DIR, s->root);
    if (s->public_fd < 0) {
        /* No public/: an old store, a mounted public/, or nothing yet. */
        tetris_error merr;
        int rc = read_marker(s->root_fd, s->root, &version, capacity, &merr);
        if (rc == 0 && (rc = check_version(version, s->root, err)) < 0)
            return rc;
        if (rc == 0) {
            if (!s->read_only)
                return tetris_fail(err, TETRIS_E_INVAL, 0,
                                   "%s is a store's public directory: writers open the store "
                                   "root above it",
                                   s->root);
            s->public_fd = dup(s->root_fd);
            s->public_dir = strdup(s->root);
            if (s->public_fd < 0 || s->public_dir == NULL)
                return tetris_fail(err, TETRIS_E_NOMEM, errno, "store handle");
            return 0;
        }
        if (rc != -TETRIS_E_NOTFOUND || !create) {
            *err = merr;
            return rc;
        }
    }
    if (asprintf(&s->public_dir, "%s/" STORE_PUBLIC_DIR, s->root) < 0) {
        s->public_dir = NULL;
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "allocating the store path");
    }
    if (s->public_fd < 0) {
        int rc = create_layout(s, err);
        if (rc < 0)
            return rc;
        s->public_fd = open_subdir(s->root_fd, s->root, STORE_PUBLIC_DIR, err);
        if (s->public_fd < 0)
            return s->public_fd;
    }
    if (!s->read_only) {
        int rc = check_owned(s->public_fd, s->public_dir, 022, err);
        if (rc == 0 && create)
            rc = create_layout(s, err); /* completes a layout a crash interrupted */
        if (rc == 0)
            rc = open_private(s, err);
        if (rc < 0)
            return rc;
        if (create && faccessat(s->public_fd, STORE_MARKER, F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
            (rc = write_marker(s, create_capacity, err)) < 0)
            return rc;
    }
    int rc = read_marker(s->public_fd, s->public_dir, &version, capacity, err);
    if (rc == 0)
        rc = check_version(version, s->public_dir, err);
    return rc;
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
        int rc = store_tenant_check(opts->tenant, err);
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
        /* A writer follows no link to its root (a planted one in a shared
         * parent like /dev/shm would lead it anywhere). */
        int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (s->read_only ? 0 : O_NOFOLLOW);
        s->root_fd = open(s->root, flags);
        struct stat lst;
        if (s->root_fd < 0 && !s->read_only && lstat(s->root, &lst) == 0 && S_ISLNK(lst.st_mode))
            rc = tetris_fail(err, TETRIS_E_DENIED, ELOOP,
                             "refusing store root %s: it is a symbolic link (give the real "
                             "directory)",
                             s->root);
        else if (s->root_fd < 0)
            rc = tetris_fail(err, store_errno_code(errno), errno, "no store at %s", s->root);
    }
    if (rc == 0 && !s->read_only)
        rc = check_root(s->root_fd, s->root, err);
    uint64_t capacity = 0;
    if (rc == 0)
        rc = open_public(s, opts->create, opts->capacity_bytes, &capacity, err);
    if (rc == 0) {
        s->tensors_fd = open_subdir(s->public_fd, s->public_dir, "tensors", err);
        if (s->tensors_fd < 0)
            rc = s->tensors_fd;
    }
    if (rc == 0 && s->read_only && strcmp(s->public_dir, s->root) != 0) {
        /* Listing holders is harmless where private/ is readable (root on
         * the node); a function pod never sees private/. */
        int priv = store_open_dir(s->root_fd, STORE_PRIVATE_DIR);
        if (priv >= 0) {
            s->holders_fd = store_open_dir(priv, "holders");
            close(priv);
        }
    }
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
    int fds[] = {s->root_fd,  s->public_fd,  s->private_fd,    s->tensors_fd, s->tmp_fd,
                 s->locks_fd, s->holders_fd, s->quarantine_fd, s->use_lock_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    size_t kept = 0;
    for (size_t i = 0; i < STORE_TENSOR_FANOUT; i++) {
        int fd = atomic_load(&s->fanout_fds[i]);
        if (fd >= 0) {
            close(fd);
            kept++;
        }
    }
    store_release_fanout_fds(kept);
    pthread_mutex_destroy(&s->mutex);
    pthread_mutex_destroy(&s->use_mutex);
    free(s->root);
    free(s->public_dir);
    free(s);
}

const char *store_root(const store *s)
{
    return s->root;
}

const char *store_public_dir(const store *s)
{
    return s->public_dir;
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
    if (fstatat(s->tensors_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) {
        if (errno == ENOENT || !S_ISDIR(st.st_mode)) {
            *out = 0; /* gone, or not ours to count (repair removes it) */
            return 0;
        }
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s/tensors/%s", s->public_dir, name);
    }
    struct usage_cache_entry *c = &s->usage[idx];
    if (c->valid && c->mtime.tv_sec == st.st_mtim.tv_sec && c->mtime.tv_nsec == st.st_mtim.tv_nsec) {
        *out = c->bytes;
        return 0;
    }
    struct timespec before;
    clock_gettime(CLOCK_REALTIME_COARSE, &before);
    cleanup_close int fd = open_subdir(s->tensors_fd, s->public_dir, name, err);
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
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s/tensors", s->public_dir);
    cleanup_closedir DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s/tensors", s->public_dir);
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
 * One flock on the handle's own open file description (private/use.lock),
 * counted so that threads sharing a handle can nest use_begin/use_end. A
 * process that both loads and reclaims must use two handles: flock would
 * silently convert the shared lock of one description into the exclusive
 * one. Read-only handles take no lock: their references are recorded by
 * the node daemon before it answers, and a lock a reader could take is a
 * lock a reader could hold forever. */

static int use_lock(store *s, int op, const char *how, tetris_error *err)
{
    if (store_flock(s->use_lock_fd, op, STORE_LOCK_TIMEOUT_MS) == 0)
        return 0;
    return tetris_fail(err, errno == ETIMEDOUT ? TETRIS_E_TIMEOUT : TETRIS_E_IO, errno,
                       "lock %s/" STORE_PRIVATE_DIR "/%s %s", s->root, STORE_USE_LOCK, how);
}

int store_use_begin(store *s, tetris_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&s->use_mutex);
    if (s->reclaiming)
        rc = tetris_fail(err, TETRIS_E_INVAL, 0,
                         "store handle is inside a reclaim pass; use a separate handle to load");
    else if (s->use_depth == 0 && s->use_lock_fd >= 0)
        rc = use_lock(s, LOCK_SH, "shared", err);
    if (rc == 0)
        s->use_depth++;
    pthread_mutex_unlock(&s->use_mutex);
    return rc;
}

void store_use_end(store *s)
{
    pthread_mutex_lock(&s->use_mutex);
    if (s->use_depth > 0 && --s->use_depth == 0 && s->use_lock_fd >= 0)
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
    else if ((rc = use_lock(s, LOCK_EX, "exclusive", err)) == 0)
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
