/* pull.c - a model from a registry, for the node daemon (see pull.h):
 * the manifest, the cached config and non-weight layer, and each tensor
 * blob streamed into the store's temp file.
 *
 * Memory stays bounded whatever a registry sends: a manifest is at most
 * OCI_MANIFEST_MAX_BYTES, a config at most OCI_CONFIG_MAX_BYTES (it is
 * read whole to be decoded), and blobs never pass through a buffer of
 * their size: the graph is streamed into a cache file, a tensor into the
 * store's mapping of its temp file. */
#include "reclaimer/pull.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "model/manifest.h"

#define CACHE_DIR "registry"
#define CACHE_TMP_PREFIX ".tmp-"
#define CACHE_TMP_STALE_S 3600 /* a temp file this old is a dead pull's */
/* How often a tensor's download asks whether its request may go on. */
#define CHECK_EVERY_BYTES (8u << 20)

const double pull_duration_bounds[PULL_DURATION_BUCKETS] = {
    0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
};

const char *pull_failure_name(enum pull_failure f)
{
    static const char *const names[PULL_FAIL_REASONS] = {
        [PULL_FAIL_DENIED] = "denied", [PULL_FAIL_REGISTRY] = "registry",
        [PULL_FAIL_FORMAT] = "format", [PULL_FAIL_CORRUPT] = "corrupt",
        [PULL_FAIL_STORE] = "store",   [PULL_FAIL_TIMEOUT] = "timeout",
    };
    return (size_t)f < PULL_FAIL_REASONS ? names[f] : "registry";
}

enum pull_failure pull_failure_of(int code)
{
    switch (code < 0 ? -code : code) {
    case TETRIS_E_DENIED: return PULL_FAIL_DENIED;
    case TETRIS_E_CORRUPT: return PULL_FAIL_CORRUPT;
    case TETRIS_E_FORMAT:
    case TETRIS_E_INVAL: return PULL_FAIL_FORMAT;
    case TETRIS_E_FULL:
    case TETRIS_E_IO:
    case TETRIS_E_NOMEM: return PULL_FAIL_STORE;
    case TETRIS_E_TIMEOUT: return PULL_FAIL_TIMEOUT;
    default: return PULL_FAIL_REGISTRY;
    }
}

static int admit(void *ctx, const char *host, unsigned port, char *resolve, size_t cap,
                 enum oci_scheme *scheme, tetris_error *err)
{
    const struct reclaimer_registries *allowed = ctx;
    return registry_admit(allowed, host, port, resolve, cap, scheme, err);
}

/* ---- the cache of configs and graphs: private/registry/<hex> ----
 * A file there is complete and hashes to its name: it is written under a
 * temp name, hashed on the way, and renamed only once its digest and size
 * are the manifest's. Its mtime is its last use; past cache_max bytes the
 * least recently used go (a descriptor already handed out keeps working). */

static int cache_dir_open(store *s, int *out, tetris_error *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s/%s", store_root(s), STORE_PRIVATE_DIR, CACHE_DIR);
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return tetris_fail(err, TETRIS_E_IO, errno, "mkdir %s", path);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", path);
    *out = fd;
    return 0;
}

struct cache_file {
    char name[TENSOR_DIGEST_HEX_LEN + 64];
    off_t size;
    time_t mtime;
};

static int by_mtime(const void *a, const void *b)
{
    const struct cache_file *x = a, *y = b;
    return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

/* Removes the least recently used files (never keep) until the cache
 * holds at most cache_max bytes, and dead pulls' temp files. */
static void cache_trim(int dir, const char *keep, uint64_t cache_max)
{
    int fd = dup(dir);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
    rewinddir(d);
    struct cache_file *files = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (e->d_name[0] == '.' && strncmp(e->d_name, CACHE_TMP_PREFIX, 5) != 0)
            continue;
        if (fstatat(dir, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (strncmp(e->d_name, CACHE_TMP_PREFIX, 5) == 0) {
            if (now - st.st_mtime > CACHE_TMP_STALE_S)
                unlinkat(dir, e->d_name, 0);
            continue;
        }
        total += (uint64_t)st.st_size;
        size_t name_len = strlen(e->d_name);
        if (strcmp(e->d_name, keep) == 0 || name_len >= sizeof(files[0].name))
            continue;
        if (n == cap) {
            size_t c = cap ? cap * 2 : 16;
            struct cache_file *f = realloc(files, c * sizeof(*f));
            if (f == NULL)
                break;
            files = f;
            cap = c;
        }
        memcpy(files[n].name, e->d_name, name_len + 1);
        files[n].size = st.st_size;
        files[n].mtime = st.st_mtime;
        n++;
    }
    closedir(d);
    if (n > 1)
        qsort(files, n, sizeof(*files), by_mtime);
    for (size_t i = 0; i < n && total > cache_max; i++)
        if (unlinkat(dir, files[i].name, 0) == 0)
            total -= (uint64_t)files[i].size;
    free(files);
}

/* What a blob's download writes through: the cache's temp file, hashed. */
struct cache_sink {
    int fd;
    EVP_MD_CTX *sha;
};

static int cache_write(void *ctx, const void *data, size_t len, tetris_error *err)
{
    struct cache_sink *c = ctx;
    if (EVP_DigestUpdate(c->sha, data, len) != 1)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "SHA-256 failed");
    for (const char *p = data; len > 0;) {
        ssize_t w = write(c->fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return tetris_fail(err, errno == ENOSPC ? TETRIS_E_FULL : TETRIS_E_IO, errno,
                               "write to the registry cache");
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Fetches blob desc into the cache as <hex>, verified. */
static int cache_fetch(struct pull_plan *plan, int dir, const oci_descriptor *desc, const char *hex,
                       tetris_error *err)
{
    static atomic_uint seq;
    char tmp[128];
    snprintf(tmp, sizeof(tmp), CACHE_TMP_PREFIX "%.16s-%d-%u", hex, (int)getpid(),
             atomic_fetch_add(&seq, 1));
    cleanup_close int fd = openat(dir, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                  0400);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "create %s in the registry cache", tmp);
    struct cache_sink c = {.fd = fd, .sha = EVP_MD_CTX_new()};
    int rc = c.sha != NULL && EVP_DigestInit_ex(c.sha, EVP_sha256(), NULL) == 1
                 ? 0
                 : tetris_fail(err, TETRIS_E_NOMEM, 0, "SHA-256");
    if (rc == 0)
        rc = oci_blob_get(&plan->reg, &desc->digest, desc->size, cache_write, &c, err);
    tensor_digest got;
    unsigned int n = 0;
    if (rc == 0 && (EVP_DigestFinal_ex(c.sha, got.bytes, &n) != 1 || n != TENSOR_DIGEST_BYTES))
        rc = tetris_fail(err, TETRIS_E_RUNTIME, 0, "SHA-256 failed");
    EVP_MD_CTX_free(c.sha);
    if (rc == 0 && !tensor_digest_equal(&got, &desc->digest))
        rc = tetris_fail(err, TETRIS_E_CORRUPT, 0,
                         "blob sha256:%s: the registry's bytes hash to something else", hex);
    if (rc == 0 && renameat(dir, tmp, dir, hex) < 0)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "rename into the registry cache");
    if (rc < 0)
        unlinkat(dir, tmp, 0);
    return rc;
}

/* A read-only descriptor of blob desc, from the cache or fetched into it. */
static int cache_get(struct pull_plan *plan, const oci_descriptor *desc, uint64_t cache_max,
                     int *out, tetris_error *err)
{
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(&desc->digest, hex);
    cleanup_close int dir = -1;
    int rc = cache_dir_open(plan->store, &dir, err);
    if (rc < 0)
        return rc;
    int fd = openat(dir, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 &&
        (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != desc->size)) {
        /* Not what the manifest says it is: fetched again. */
        close(fd);
        fd = -1;
        unlinkat(dir, hex, 0);
    }
    bool fetched = false;
    if (fd < 0) {
        if ((rc = cache_fetch(plan, dir, desc, hex, err)) < 0)
            return rc;
        fetched = true;
        fd = openat(dir, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "open sha256:%s in the registry cache",
                               hex);
    } else if (futimens(fd, NULL) < 0) {
        log_debug("event=registry-cache-touch-failed errno=%d", errno);
    }
    if (fetched)
        cache_trim(dir, hex, cache_max);
    *out = fd;
    return 0;
}

/* The config, decoded: at most OCI_CONFIG_MAX_BYTES (the decoder held
 * the size to it). */
static int read_config(int fd, uint64_t size, model **out, tetris_error *err)
{
    cleanup_free char *text = malloc(size + 1);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "the config");
    uint64_t done = 0;
    while (done < size) {
        ssize_t r = pread(fd, text + done, size - done, (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return tetris_fail(err, TETRIS_E_IO, r < 0 ? errno : 0, "read the config");
        done += (uint64_t)r;
    }
    text[size] = '\0';
    int rc = manifest_parse(text, size, out, err);
    return rc < 0 ? tetris_wrap(err, "the artifact's config") : 0;
}

int pull_prepare(store *s, const char *ref_text, const struct pull_settings *settings,
                 struct pull_plan *plan, tetris_error *err)
{
    memset(plan, 0, sizeof(*plan));
    plan->config_fd = plan->graph_fd = -1;
    plan->store = s;
    plan->settings = *settings;
    int rc = oci_ref_parse(ref_text, &plan->ref, err);
    if (rc < 0)
        return rc;
    if (settings->auth_path[0] != '\0' &&
        (rc = oci_credentials_read(settings->auth_path, &plan->credentials, err)) < 0)
        return tetris_wrap(err, "%s: --registry-auth", ref_text);
    oci_options o = {.timeout_ms = (long)(settings->timeout_s * 1000),
                     .ca_file = settings->ca_file[0] != '\0' ? settings->ca_file : NULL,
                     .credentials = plan->credentials,
                     .admit = admit,
                     .admit_ctx = &plan->settings.allowed};
    if ((rc = oci_registry_open(&plan->reg, &plan->ref, &o, err)) < 0)
        return rc;
    /* A tag is resolved once, here: everything after is by digest. */
    char reference[7 + TENSOR_DIGEST_HEX_LEN + OCI_TAG_MAX + 1];
    if (plan->ref.has_digest)
        oci_digest_format(&plan->ref.digest, reference);
    else
        snprintf(reference, sizeof(reference), "%s", plan->ref.tag);
    cleanup_free char *json = NULL;
    size_t len = 0;
    if ((rc = oci_manifest_get(&plan->reg, reference, &json, &len, &plan->manifest_digest, err)) <
        0)
        return rc;
    if (plan->ref.has_digest && !tensor_digest_equal(&plan->ref.digest, &plan->manifest_digest))
        return tetris_fail(err, TETRIS_E_CORRUPT, 0,
                           "%s: the registry's manifest is not the digest the reference pins",
                           ref_text);
    if ((rc = oci_artifact_parse(json, len, "the registry's manifest", &plan->artifact, err)) < 0)
        return rc;
    uint64_t cache_max = settings->cache_max;
    if ((rc = cache_get(plan, &plan->artifact->config, cache_max, &plan->config_fd, err)) < 0)
        return tetris_wrap(err, "%s: the config", ref_text);
    if ((rc = read_config(plan->config_fd, plan->artifact->config.size, &plan->model, err)) < 0)
        return rc;
    if ((rc = oci_artifact_check_model(plan->artifact, plan->model, err)) < 0)
        return tetris_wrap(err, "%s", ref_text);
    if ((rc = cache_get(plan, &plan->artifact->graph, cache_max, &plan->graph_fd, err)) < 0)
        return tetris_wrap(err, "%s: the non-weight layer", ref_text);
    return 0;
}

void pull_plan_release(struct pull_plan *plan)
{
    oci_registry_close(&plan->reg);
    oci_credentials_free(plan->credentials);
    plan->credentials = NULL;
    oci_artifact_free(plan->artifact);
    model_free(plan->model);
    if (plan->config_fd >= 0)
        close(plan->config_fd);
    if (plan->graph_fd >= 0)
        close(plan->graph_fd);
    plan->artifact = NULL;
    plan->model = NULL;
    plan->config_fd = plan->graph_fd = -1;
}

/* ---- a tensor blob, into the store ---- */

/* What one tensor's download writes: its blob is the identity's header
 * (checked against the one its meta makes) then the bytes (into dst). */
struct tensor_sink {
    uint8_t header[TENSOR_DIGEST_HEADER_MAX];
    size_t header_len;
    uint8_t *dst;
    uint64_t nbytes;
    uint64_t at; /* bytes of the blob received */
    uint64_t next_check;
    int (*check)(void *ctx, tetris_error *err);
    void *check_ctx;
};

static int tensor_write(void *ctx, const void *data, size_t len, tetris_error *err)
{
    struct tensor_sink *t = ctx;
    const uint8_t *p = data;
    /* oci_blob_get held the blob to header_len + nbytes already. */
    if (t->at < t->header_len) {
        size_t n = t->header_len - (size_t)t->at < len ? t->header_len - (size_t)t->at : len;
        if (memcmp(p, t->header + t->at, n) != 0)
            return tetris_fail(err, TETRIS_E_CORRUPT, 0,
                               "the blob does not start with its tensor's dtype and shape");
        t->at += n;
        p += n;
        len -= n;
    }
    if (len > 0) {
        memcpy(t->dst + (t->at - t->header_len), p, len);
        t->at += len;
    }
    if (t->check != NULL && t->at >= t->next_check) {
        t->next_check = t->at + CHECK_EVERY_BYTES;
        return t->check(t->check_ctx, err);
    }
    return 0;
}

struct tensor_fill {
    const struct pull_plan *plan;
    const tensor_desc *t;
    int (*check)(void *ctx, tetris_error *err);
    void *check_ctx;
};

static int fill_tensor(void *ctx, void *dst, uint64_t len, tetris_error *err)
{
    struct tensor_fill *f = ctx;
    struct tensor_sink sink = {.dst = dst,
                               .nbytes = len,
                               .check = f->check,
                               .check_ctx = f->check_ctx,
                               .next_check = CHECK_EVERY_BYTES};
    sink.header_len = tensor_digest_header(&f->t->meta, sink.header);
    /* A copy per download: requests run on several threads at once (the
     * session, with the credentials, is shared). */
    oci_registry reg = f->plan->reg;
    return oci_blob_get(&reg, &f->t->meta.digest, sink.header_len + len, tensor_write, &sink, err);
}

int pull_publish_tensor(struct pull_plan *plan, const tensor_desc *t,
                        int (*check)(void *ctx, tetris_error *err), void *check_ctx,
                        bool *published, tetris_error *err)
{
    if (check != NULL) {
        int rc = check(check_ctx, err);
        if (rc != 0)
            return rc;
    }
    struct tensor_fill f = {.plan = plan, .t = t, .check = check, .check_ctx = check_ctx};
    /* store_publish_tensor's messages name the tensor by its digest. */
    return store_publish_tensor(plan->store, &t->meta, fill_tensor, &f, published, err);
}
