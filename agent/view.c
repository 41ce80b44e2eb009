/* view.c - write and remove a model view (see view.h; the format is
 * docs/PROTOCOLS.md, "Model view").
 *
 * Which tensors are the store's: when the load did not fall back, every
 * tensor with a digest is referenced for us (by the daemon, or by our
 * holder in DIRECT mode) and resident, mapped or not (the tiny ones and
 * those past the mapping budget are not); after a partial fallback only
 * the mapped ones are known to be both. Each is checked in the store
 * before its link is made.
 *
 * A model pulled from a registry (agent_model_graph) has no file: the
 * view's own copy of its non-weight part stands for it as "model" (ONNX:
 * model.onnx, the pulled graph, whose external data are already at the
 * store's names; safetensors: VIEW_HEADER_NAME, the pulled header), "ref"
 * names the reference, and every tensor is the store's (the daemon holds
 * them all for us, or the load failed).
 *
 * Everything is created relative to the view's directory descriptor, with
 * O_EXCL or its equivalent, and recorded; view_remove unlinks exactly the
 * recorded names (in reverse), each from a parent opened without following
 * links, so a link or file someone else put in the view is never followed
 * and never removed.
 *
 * A derived form (view_options) is looked up by the digest of the view's
 * own graph, model.onnx, which is a share image (protocol/derived.h): what
 * the daemon derives from when asked, with the runtime the view is for. */
#include "agent/view.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/derived_form.h"
#include "agent/onnx_share.h"
#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/log.h"
#include "model/onnx_rewrite.h"
#include "protocol/names.h"
#include "protocol/oci.h"

#define VIEW_TENSORS_DIR "tensors"
#define VIEW_INDEX_TMP ".tensors.json.tmp"

struct view_entry {
    char *path; /* relative to the view directory */
    bool is_dir;
};

struct model_view {
    char *dir; /* absolute */
    int dirfd;
    bool mounted_tensors;    /* view_options's */
    mode_t dir_mode;         /* 0700, or 0755 for a self-contained view */
    bool made_dir;           /* we created the directory itself */
    struct view_entry *made; /* in creation order */
    size_t n_made, cap_made;
    struct view_stats stats;
    char fallback[256];
    struct derived_form form; /* held while form_held */
    bool form_held;
};

/* ---- the directory and what is made in it ---- */

static int record(model_view *v, const char *path, bool is_dir, tetris_error *err)
{
    if (v->n_made == v->cap_made) {
        size_t cap = v->cap_made ? v->cap_made * 2 : 64;
        struct view_entry *e = realloc(v->made, cap * sizeof(*e));
        if (e == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
        v->made = e;
        v->cap_made = cap;
    }
    char *p = strdup(path);
    if (p == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    v->made[v->n_made++] = (struct view_entry){p, is_dir};
    return 0;
}

static int check_empty(int dirfd, const char *dir, tetris_error *err)
{
    int fd = dup(dirfd);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "dup");
    cleanup_closedir DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return tetris_fail(err, TETRIS_E_IO, errno, "read %s", dir);
    }
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            return tetris_fail(err, TETRIS_E_DENIED, 0,
                               "view directory %s is not empty (it has %s)", dir, de->d_name);
    if (errno != 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "read %s", dir);
    return 0;
}

/* Creates the view's directory (or takes an empty one of ours), dir_mode. */
static int make_dir(model_view *v, const char *dir, tetris_error *err)
{
    char path[PATH_MAX];
    int r;

    if (dir == NULL) {
        const char *tmp = getenv("TMPDIR");
        if (tmp == NULL || tmp[0] == '\0')
            tmp = "/tmp";
        if (snprintf(path, sizeof(path), "%s/tetris-view.XXXXXX", tmp) >= (int)sizeof(path))
            return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "TMPDIR %s: too long", tmp);
        if (mkdtemp(path) == NULL)
            return tetris_fail(err, TETRIS_E_IO, errno, "create a view directory in %s", tmp);
        v->made_dir = true;
    } else {
        if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
            return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "%s: too long", dir);
        if (mkdir(path, v->dir_mode) == 0)
            v->made_dir = true;
        else if (errno != EEXIST)
            return tetris_fail(err, TETRIS_E_IO, errno, "create view directory %s", path);
    }
    /* Named now, so that a failure below removes a directory we made. */
    if ((v->dir = strdup(path)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    v->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (v->dirfd < 0)
        return tetris_fail(err, errno == ELOOP || errno == ENOTDIR ? TETRIS_E_DENIED : TETRIS_E_IO,
                           errno, "view directory %s: not a directory of ours", path);
    if (!v->made_dir) {
        struct stat st;
        if (fstat(v->dirfd, &st) < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", path);
        if (st.st_uid != geteuid())
            return tetris_fail(err, TETRIS_E_DENIED, 0,
                               "view directory %s belongs to uid %u, not to us (uid %u)", path,
                               (unsigned)st.st_uid, (unsigned)geteuid());
        if ((r = check_empty(v->dirfd, path, err)) < 0)
            return r;
    }
    if (fchmod(v->dirfd, v->dir_mode) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "chmod %s", path);
    char *abs = realpath(path, NULL);
    if (abs == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "realpath %s", path);
    free(v->dir);
    v->dir = abs;
    return 0;
}

static int make_subdir(model_view *v, const char *rel, tetris_error *err)
{
    if (mkdirat(v->dirfd, rel, v->dir_mode) == 0)
        return record(v, rel, true, err);
    if (errno == EEXIST)
        return 0; /* ours: made for an earlier tensor (the view was empty) */
    return tetris_fail(err, TETRIS_E_IO, errno, "create %s/%s", v->dir, rel);
}

/* Creates rel (which must not exist), writes data and makes it 0444. */
static int write_file(model_view *v, const char *rel, const void *data, size_t len,
                      tetris_error *err)
{
    cleanup_close int fd = openat(v->dirfd, rel,
                                  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "create %s/%s", v->dir, rel);
    int r = record(v, rel, false, err);
    if (r == 0)
        r = fd_write_all(fd, data, len, "its bytes", err);
    if (r == 0 && fchmod(fd, 0444) < 0)
        r = tetris_fail(err, TETRIS_E_IO, errno, "chmod");
    if (r == 0 && close(steal_fd(&fd)) < 0)
        r = tetris_fail(err, TETRIS_E_IO, errno, "close");
    return r < 0 ? tetris_wrap(err, "%s/%s", v->dir, rel) : 0;
}

/* Opens the parent of rel beneath dirfd, following no link. Returns the
 * fd and points *base at rel's last component. */
static int open_parent(int dirfd, const char *rel, const char **base)
{
    const char *slash = strrchr(rel, '/');
    if (slash == NULL) {
        *base = rel;
        return dup(dirfd);
    }
    *base = slash + 1;
    char parent[PATH_MAX];
    snprintf(parent, sizeof(parent), "%.*s", (int)(slash - rel), rel);
    int fd = dup(dirfd);
    for (char *save = NULL, *c = strtok_r(parent, "/", &save); fd >= 0 && c != NULL;
         c = strtok_r(NULL, "/", &save)) {
        int next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(fd);
        fd = next;
    }
    return fd;
}

void view_remove(model_view *v)
{
    if (v == NULL)
        return;
    /* The index first: a reader never sees a view whose parts are going. */
    for (size_t k = v->n_made; k-- > 0;) {
        const struct view_entry *e = &v->made[k];
        const char *base;
        int fd = open_parent(v->dirfd, e->path, &base);
        if (fd < 0 || (unlinkat(fd, base, e->is_dir ? AT_REMOVEDIR : 0) < 0 && errno != ENOENT))
            log_warn("event=view-remove-failed view=%s path=%s errno=%d msg=%s", LOG_Q(v->dir),
                     LOG_Q(e->path), errno, LOG_Q(strerror(errno)));
        if (fd >= 0)
            close(fd);
        free(e->path);
    }
    /* rmdir never follows a link, and leaves a directory someone filled. */
    if (v->made_dir && v->dir != NULL && rmdir(v->dir) < 0 && errno != ENOENT)
        log_warn("event=view-remove-failed view=%s errno=%d msg=%s", LOG_Q(v->dir), errno,
                 LOG_Q(strerror(errno)));
    if (v->dirfd >= 0)
        close(v->dirfd);
    if (v->form_held)
        derived_form_release(&v->form);
    free(v->made);
    free(v->dir);
    free(v);
}

/* ---- which tensors are the store's ---- */

struct view_plan {
    const agent_model *am;
    char *store;    /* the store's public directory, absolute; NULL: none */
    bool *in_store; /* per tensor */
    char **files;   /* per tensor: "tensors/XX/<hex>", an absolute source, or NULL */
};

static void plan_free(struct view_plan *p)
{
    for (size_t i = 0; p->files != NULL && i < p->am->model->n_tensors; i++)
        free(p->files[i]);
    free(p->files);
    free(p->in_store);
    free(p->store);
}

static bool resident(const char *store_dir, const tensor_desc *d, char *rel, size_t rel_len)
{
    char hex[TENSOR_DIGEST_HEX_LEN + 1], path[PATH_MAX];
    struct stat st;
    tensor_digest_to_hex(&d->meta.digest, hex);
    snprintf(rel, rel_len, VIEW_TENSORS_DIR "/%.2s/%s", hex, hex);
    if (snprintf(path, sizeof(path), "%s/%s", store_dir, rel) >= (int)sizeof(path))
        return false;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size >= d->meta.nbytes;
}

/* Links tensors/XX/<hex> to the store's file (once per digest). A view
 * whose user mounts the store's tensors/ on its own gets the empty
 * directory only: a link would name a store its reader cannot see, and
 * ONNX's checker refuses external data that is a link (hard links
 * included) in a subgraph. */
static int link_tensor(model_view *v, const char *store_dir, const char *rel, tetris_error *err)
{
    char dir[sizeof(VIEW_TENSORS_DIR "/XX")], target[PATH_MAX];
    int r;
    if (v->mounted_tensors)
        return make_subdir(v, VIEW_TENSORS_DIR, err);
    snprintf(dir, sizeof(dir), "%.*s", (int)sizeof(dir) - 1, rel);
    if ((r = make_subdir(v, VIEW_TENSORS_DIR, err)) < 0 || (r = make_subdir(v, dir, err)) < 0)
        return r;
    if (snprintf(target, sizeof(target), "%s/%s", store_dir, rel) >= (int)sizeof(target))
        return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "%s: too long", store_dir);
    if (symlinkat(target, v->dirfd, rel) == 0)
        return record(v, rel, false, err);
    if (errno == EEXIST)
        return 0; /* a tensor of the same digest made it */
    return tetris_fail(err, TETRIS_E_IO, errno, "link %s/%s", v->dir, rel);
}

static int plan(model_view *v, const agent_model *am, struct view_plan *p, tetris_error *err)
{
    const model *m = am->model;
    const char *pub = agent_store_public_dir(am);
    int r;

    p->am = am;
    p->in_store = calloc(m->n_tensors + 1, sizeof(*p->in_store));
    p->files = calloc(m->n_tensors + 1, sizeof(*p->files));
    if (p->in_store == NULL || p->files == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    if (pub != NULL && (p->store = realpath(pub, NULL)) == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "realpath %s", pub);
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *d = &m->tensors[i];
        char rel[PATH_MAX];
        if (p->store != NULL && d->has_digest && d->meta.nbytes > 0 &&
            (am->tensors[i].shared || !am->stats.fell_back) &&
            resident(p->store, d, rel, sizeof(rel))) {
            if ((r = link_tensor(v, p->store, rel, err)) < 0)
                return r;
            p->in_store[i] = true;
            p->files[i] = strdup(rel);
        } else if (d->encoding == TENSOR_ENC_RAW && d->source != NULL) {
            p->files[i] = realpath(d->source, NULL);
            if (p->files[i] == NULL)
                return tetris_fail(err, TETRIS_E_IO, errno, "realpath %s", d->source);
            continue;
        } else {
            continue; /* varint-encoded: only the graph has it */
        }
        if (p->files[i] == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    }
    return 0;
}

/* ---- the graph ---- */

struct view_share {
    const struct view_plan *plan;
    struct onnx_share_match match;
    size_t externalised;
    size_t kept_external; /* external data the store does not hold */
};

/* onnx_share_fn: a proto whose bytes the store holds points at them. */
static bool share_proto(void *ctx, const struct onnx_tensor_ref *ref, struct onnx_external *ext)
{
    struct view_share *c = ctx;
    const agent_tensor *t = onnx_share_match_find(&c->match, ref);
    size_t i = t != NULL ? (size_t)(t - c->plan->am->tensors) : 0;
    /* A tiny tensor stays in the graph unless it was external already: a
     * file of its own would cost the runtime an open or a mapping for a
     * few bytes (the agent does not map such tensors either). */
    bool tiny = t != NULL && t->desc->meta.nbytes < AGENT_MIN_MAPPED_BYTES && ref->location == NULL;
    if (t == NULL || !c->plan->in_store[i] || tiny || !onnx_share_same_size(ref, t)) {
        c->kept_external += ref->location != NULL;
        return false;
    }
    snprintf(ext->location, sizeof(ext->location), "%s", c->plan->files[i]);
    ext->offset = 0;
    c->externalised++;
    return true;
}

/* Writes model.onnx, its bytes in *graph (malloc'd); *graph NULL when the
 * original must stay the graph (*reason says why, if not the load's own
 * fallback). A pulled model's graph is always written: there is no
 * original to name. */
static int write_graph(model_view *v, const char *model_path, const struct view_plan *p,
                       bool pulled, uint8_t **graph, size_t *graph_len, const char **reason,
                       tetris_error *err)
{
    cleanup_free uint8_t *out = NULL;
    size_t out_len = 0;
    struct onnx_share_image image;
    struct view_share c = {.plan = p};
    int r;

    *graph = NULL;
    if ((r = onnx_share_image_open(p->am, model_path, &image, err)) < 0)
        return r;
    if ((r = onnx_share_match_init(&c.match, p->am, model_path, err)) == 0)
        r = onnx_rewrite(image.bytes, image.len, share_proto, &c, &out, &out_len, err);
    onnx_share_match_release(&c.match);
    /* A pulled graph nothing was moved out of is written as it came. */
    if (r == 0 && pulled && c.externalised == 0) {
        free(out);
        out_len = image.len;
        if ((out = malloc(out_len > 0 ? out_len : 1)) == NULL)
            r = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
        else
            memcpy(out, image.bytes, out_len);
    }
    onnx_share_image_close(&image);
    if (r < 0)
        return tetris_wrap(err, "%s", model_path);
    /* A pulled graph's external data are store names: one the store lacks
     * is a tensor the daemon said it holds for us. */
    if (pulled && c.kept_external > 0)
        return tetris_fail(err, TETRIS_E_NOTFOUND, 0,
                           "%s: %zu tensors of the pulled graph are not in the store", model_path,
                           c.kept_external);
    /* Relative to the view, such a location would resolve nowhere. */
    if (c.kept_external > 0) {
        log_info("event=view-graph-original model=%s reason=external-data-not-in-store "
                 "tensors=%zu",
                 LOG_Q(model_path), c.kept_external);
        *reason = "external-data-not-in-store";
        return 0;
    }
    if (c.externalised == 0 && !pulled)
        return 0;
    if ((r = write_file(v, VIEW_GRAPH_NAME, out, out_len, err)) < 0)
        return r;
    *graph = steal_pointer(&out);
    *graph_len = out_len;
    return 0;
}

/* ---- the derived form ---- */

/* Adds the store's derived form of graph (the view's model.onnx) made by
 * o->runtime: derived.onnx and a link to its data file. 1 when the view
 * carries it; 0 when not (said in one log line: derived_form.h), asking
 * the daemon for it first or in the background as o says. */
static int add_derived(model_view *v, const char *model_path, const char *store_dir,
                       const uint8_t *graph, size_t graph_len, const struct view_options *o,
                       char *data_file, size_t data_file_len, tetris_error *err)
{
    tensor_digest source;
    bool absent = false;
    derived_source_digest(graph, graph_len, &source);
    if (o->derived == DERIVED_MAKE &&
        derived_form_request(model_path, store_dir, graph, graph_len, o->runtime, true, NULL) < 0)
        return 0;
    if (derived_form_find(model_path, store_dir, &source, o->runtime, &v->form, &absent) == 0) {
        if (absent && o->derived == DERIVED_AUTO)
            derived_form_request(model_path, store_dir, graph, graph_len, o->runtime, false, NULL);
        return 0;
    }
    cleanup_free uint8_t *form = NULL;
    size_t form_len = 0;
    tetris_error why = {0};
    int r = derived_form_hold(&v->form, store_dir, &form, &form_len, &why);
    if (r == -TETRIS_E_NOMEM)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", why.msg);
    if (r < 0) {
        log_warn("event=derived-ignored model=%s reason=%s action=plain-graph", LOG_Q(model_path),
                 LOG_Q(why.msg));
        return 0;
    }
    v->form_held = true;
    derived_form_store_name(&v->form.entry.data, data_file, data_file_len);
    if ((r = link_tensor(v, store_dir, data_file, err)) < 0 ||
        (r = write_file(v, VIEW_DERIVED_GRAPH_NAME, form, form_len, err)) < 0)
        return r;
    return 1;
}

/* ---- the index ---- */

static json_t *string_or_null(const char *s)
{
    return s != NULL ? json_string(s) : json_null();
}

static json_t *tensor_json(const struct view_index_tensor *t, tetris_error *err)
{
    char hex[TENSOR_DIGEST_HEX_LEN + 1], digest[TENSOR_DIGEST_HEX_LEN + 8];
    json_t *shape = json_array();
    for (int k = 0; shape != NULL && k < t->meta->ndim; k++)
        if (json_array_append_new(shape, json_integer(t->meta->shape[k])) < 0) {
            json_decref(shape);
            shape = NULL;
        }
    if (t->has_digest) {
        tensor_digest_to_hex(&t->meta->digest, hex);
        snprintf(digest, sizeof(digest), "sha256:%s", hex);
    }
    json_t *file = string_or_null(t->file);
    json_t *name = json_string(t->name);
    if (shape == NULL || file == NULL || name == NULL) {
        json_decref(shape);
        json_decref(file);
        json_decref(name);
        tetris_fail(err, TETRIS_E_FORMAT, 0,
                    "tensor \"%s\": name or file is not valid UTF-8 (or out of memory)", t->name);
        return NULL;
    }
    json_t *o = json_pack("{s:o, s:s, s:o, s:o, s:I, s:I, s:o, s:b}", "name", name, "dtype",
                          t->meta->dtype, "shape", shape, "file", file, "offset",
                          (json_int_t)t->offset, "length", (json_int_t)t->length, "digest",
                          t->has_digest ? json_string(digest) : json_null(), "shared", t->shared);
    if (o == NULL)
        tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor \"%s\": building its entry", t->name);
    return o;
}

/* "derived": the form's runtime and CPU (what its reader checks), its
 * graph and data file, and the options that open it: optimisation off
 * (the graph is optimised already), pre-packing on (its packs are in the
 * data file, mapped instead of computed), external data in the store. */
static json_t *derived_json(const struct view_index_derived *d, const char *store_dir)
{
    char identity[TENSOR_DIGEST_HEX_LEN + 8], digest[TENSOR_DIGEST_HEX_LEN + 8];
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    if (d == NULL)
        return json_null();
    tensor_digest_to_hex(&d->entry->identity, hex);
    snprintf(identity, sizeof(identity), "sha256:%s", hex);
    tensor_digest_to_hex(&d->entry->data.digest, hex);
    snprintf(digest, sizeof(digest), "sha256:%s", hex);
    return json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:I, s:s}, s:{s:s, s:s, s:o}}", "runtime",
                     d->entry->runtime, "cpu", d->entry->cpu, "identity", identity, "graph",
                     d->graph, "data", "file", d->data_file, "length",
                     (json_int_t)d->entry->data.nbytes, "digest", digest, "session_options",
                     "graph_optimization_level", "disabled", "session.disable_prepacking", "0",
                     "session.model_external_initializers_file_folder_path",
                     string_or_null(store_dir));
}

char *view_index_json(const struct view_index *ix, tetris_error *err)
{
    json_t *tensors = json_array();
    json_t *opts = NULL;
    if (tensors == NULL) {
        tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < ix->n_tensors; i++) {
        json_t *t = tensor_json(&ix->tensors[i], err);
        if (t == NULL || json_array_append_new(tensors, t) < 0) {
            if (t != NULL)
                tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
            json_decref(tensors);
            return NULL;
        }
    }
    /* What a runtime must set to compute on the shared pages: no graph
     * optimisations (they fold weights into private copies), no MLAS
     * pre-packing (a private copy of every GEMM weight), and, for a
     * session created from the graph's bytes, the folder its external
     * data resolves against. */
    if (ix->graph != NULL)
        opts = json_pack("{s:s, s:s, s:o}", "graph_optimization_level", "disabled",
                         "session.disable_prepacking", "1",
                         "session.model_external_initializers_file_folder_path",
                         string_or_null(ix->external_data_folder));
    json_t *root = json_pack("{s:s, s:o, s:o, s:s, s:o, s:o, s:b, s:o, s:o, s:o, s:o}", "format",
                             VIEW_FORMAT, "model", string_or_null(ix->model), "ref",
                             string_or_null(ix->ref), "model_format", ix->model_format, "graph",
                             string_or_null(ix->graph), "store", string_or_null(ix->store),
                             "shared", ix->shared, "fallback", string_or_null(ix->fallback),
                             "session_options", opts != NULL ? opts : json_null(), "derived",
                             derived_json(ix->derived, ix->store), "tensors", tensors);
    if (root == NULL) {
        tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: a path is not valid UTF-8 (or out of memory)",
                    ix->model);
        return NULL;
    }
    char *text = json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    if (text == NULL)
        tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    return text;
}

/* Writes tensors.json under a temporary name and renames it: the view is
 * complete once it appears. */
static int write_index(model_view *v, const struct view_index *ix, tetris_error *err)
{
    cleanup_free char *text = view_index_json(ix, err);
    int r;
    if (text == NULL)
        return -err->code;
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps' NUL becomes the final newline */
    if ((r = write_file(v, VIEW_INDEX_TMP, text, len + 1, err)) < 0)
        return r;
    if (renameat(v->dirfd, VIEW_INDEX_TMP, v->dirfd, VIEW_INDEX_NAME) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "rename %s/%s", v->dir, VIEW_INDEX_TMP);
    free(v->made[v->n_made - 1].path);
    v->made[v->n_made - 1].path = strdup(VIEW_INDEX_NAME);
    if (v->made[v->n_made - 1].path == NULL) {
        v->n_made--;
        unlinkat(v->dirfd, VIEW_INDEX_NAME, 0);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    }
    return 0;
}

static int build(model_view *v, const agent_model *am, const char *model_path,
                 const struct view_options *o, struct view_plan *p, tetris_error *err)
{
    const model *m = am->model;
    const char *reason = NULL;
    cleanup_free uint8_t *graph = NULL;
    size_t graph_len = 0;
    char data_file[sizeof(VIEW_TENSORS_DIR "/XX/") + TENSOR_DIGEST_HEX_LEN];
    int r;

    if ((r = plan(v, am, p, err)) < 0)
        return r;
    bool onnx = strcmp(m->format, "onnx") == 0;
    size_t pulled_len = 0;
    const uint8_t *pulled = agent_model_graph(am, &pulled_len);
    cleanup_free char *model_abs = NULL;
    if (pulled != NULL) {
        const char *own = onnx ? VIEW_GRAPH_NAME : VIEW_HEADER_NAME;
        if (!onnx && (r = write_file(v, VIEW_HEADER_NAME, pulled, pulled_len, err)) < 0)
            return r;
        if (asprintf(&model_abs, "%s/%s", v->dir, own) < 0) {
            model_abs = NULL;
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
        }
    } else if ((model_abs = realpath(model_path, NULL)) == NULL) {
        return tetris_fail(err, TETRIS_E_IO, errno, "realpath %s", model_path);
    }
    size_t in_store = 0;
    for (size_t i = 0; i < m->n_tensors; i++)
        in_store += p->in_store[i];
    if (onnx && (in_store > 0 || pulled != NULL) &&
        (r = write_graph(v, pulled != NULL ? model_path : model_abs, p, pulled != NULL, &graph,
                         &graph_len, &reason, err)) < 0)
        return r;
    bool graph_written = graph != NULL;
    /* Only a view whose graph is wholly the store's has a form: the
     * form is made of the store's tensors. */
    int derived = 0;
    if (graph_written && !am->stats.fell_back && o != NULL && o->derived != DERIVED_OFF &&
        (derived = add_derived(v, model_abs, p->store, graph, graph_len, o, data_file,
                               sizeof(data_file), err)) < 0)
        return derived;
    struct view_index_derived form = {&v->form.entry, VIEW_DERIVED_GRAPH_NAME, data_file};

    cleanup_free struct view_index_tensor *entries = calloc(m->n_tensors + 1, sizeof(*entries));
    if (entries == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    struct view_stats *s = &v->stats;
    s->tensors = m->n_tensors;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *d = &m->tensors[i];
        entries[i] = (struct view_index_tensor){
            .name = d->name,
            .meta = &d->meta,
            .has_digest = d->has_digest,
            .file = p->files[i],
            .offset = p->in_store[i] ? 0 : d->offset,
            .length = p->in_store[i] ? d->meta.nbytes : d->length,
            .shared = p->in_store[i],
        };
        s->bytes += d->meta.nbytes;
        if (p->in_store[i]) {
            s->shared_tensors++;
            s->shared_bytes += d->meta.nbytes;
        }
    }
    s->shared = onnx ? graph_written : s->shared_tensors > 0;
    if (am->stats.fell_back)
        reason = am->stats.fallback_reason;
    else if (p->store == NULL)
        reason = "private";
    else if (reason == NULL && in_store < m->n_tensors && !s->shared)
        reason = "not-in-store";
    if (reason != NULL) {
        snprintf(v->fallback, sizeof(v->fallback), "%s", reason);
        s->fallback = v->fallback;
    }
    cleanup_free char *model_dir = strdup(model_abs);
    if (model_dir == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    *strrchr(model_dir, '/') = '\0';
    struct view_index ix = {
        .model = model_abs,
        .ref = pulled != NULL ? model_path : NULL,
        .model_format = m->format,
        .graph = !onnx           ? NULL
                 : graph_written ? VIEW_GRAPH_NAME
                                 : model_abs,
        .store = v->mounted_tensors && p->store != NULL ? VIEW_SELF : p->store,
        .external_data_folder = graph_written && v->mounted_tensors ? VIEW_SELF
                                : graph_written                     ? p->store
                                : model_dir[0]                      ? model_dir
                                                                    : "/",
        .shared = s->shared,
        .fallback = s->fallback,
        .tensors = entries,
        .n_tensors = m->n_tensors,
        .derived = derived == 1 ? &form : NULL,
    };
    s->derived = derived == 1 ? v->form.entry.runtime : NULL;
    return write_index(v, &ix, err);
}

int view_write(const agent_model *am, const char *model_path, const char *dir,
               const struct view_options *o, model_view **out, tetris_error *err)
{
    struct view_plan p = {0};
    int r;

    if (o != NULL && o->derived != DERIVED_OFF && o->runtime != NULL &&
        !derived_name_valid(o->runtime))
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "runtime \"%s\": 1 to %d bytes without control characters or slashes "
                           "(\"onnxruntime 1.22.0\")",
                           o->runtime, DERIVED_NAME_MAX - 1);
    /* TETRIS_DERIVED may be set for a whole function's environment: a
     * view whose reader did not say which runtime it runs has no form. */
    struct view_options plain = {0};
    if (o != NULL && o->derived != DERIVED_OFF && o->runtime == NULL) {
        log_warn("event=view-derived-skipped model=%s reason=\"no runtime named (--runtime, "
                 "$" TETRIS_ENV_VIEW_RUNTIME ")\"",
                 LOG_Q(model_path));
        plain.mounted_tensors = o->mounted_tensors;
        o = &plain;
    }
    model_view *v = calloc(1, sizeof(*v));
    if (v == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    v->dirfd = -1;
    v->mounted_tensors = o != NULL && o->mounted_tensors;
    v->dir_mode = v->mounted_tensors ? 0755 : 0700;
    r = make_dir(v, dir, err);
    if (r == 0)
        r = build(v, am, model_path, o, &p, err);
    plan_free(&p);
    if (r < 0) {
        view_remove(v);
        return r;
    }
    log_info("event=view dir=%s model=%s shared=%s fallback=%s tensors=%zu shared_tensors=%zu "
             "shared_bytes=%llu derived=%s",
             LOG_Q(v->dir), LOG_Q(model_path), v->stats.shared ? "true" : "false",
             v->stats.fallback != NULL ? v->stats.fallback : "none", v->stats.tensors,
             v->stats.shared_tensors, (unsigned long long)v->stats.shared_bytes,
             LOG_Q(v->stats.derived != NULL ? v->stats.derived : "none"));
    *out = v;
    return 0;
}

void view_forget(model_view *v)
{
    if (v == NULL)
        return;
    for (size_t k = 0; k < v->n_made; k++)
        free(v->made[k].path);
    if (v->dirfd >= 0)
        close(v->dirfd);
    if (v->form_held)
        derived_form_release(&v->form);
    free(v->made);
    free(v->dir);
    free(v);
}

size_t view_derived_tensors(const model_view *v, tensor_digest d[2], uint64_t nbytes[2])
{
    if (!v->form_held)
        return 0;
    const struct derived_part *parts[2] = {&v->form.entry.graph, &v->form.entry.data};
    for (size_t i = 0; i < 2; i++) {
        d[i] = parts[i]->digest;
        nbytes[i] = parts[i]->nbytes;
    }
    return 2;
}

const char *view_dir(const model_view *v)
{
    return v->dir;
}

const struct view_stats *view_stats(const model_view *v)
{
    return &v->stats;
}

/* ---- checking a view, as its reader does ---- */

static int check_owner(const struct stat *st, const char *what, tetris_error *err)
{
    if (st->st_uid != geteuid() && st->st_uid != 0)
        return tetris_fail(err, TETRIS_E_DENIED, 0, "%s belongs to uid %u, neither us nor root",
                           what, (unsigned)st->st_uid);
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return tetris_fail(err, TETRIS_E_DENIED, 0, "%s is writable by group or others (mode %o)",
                           what, (unsigned)(st->st_mode & 07777));
    return 0;
}

/* Whether the resolved path is dir itself or beneath it. */
static bool beneath(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    if (n > 0 && dir[n - 1] == '/')
        n--;
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static int read_index(const char *dir, int dirfd, json_t **out, tetris_error *err)
{
    cleanup_close int fd = openat(dirfd, VIEW_INDEX_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    json_error_t jerr;
    if (fd < 0)
        return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_IO, errno,
                           "%s/" VIEW_INDEX_NAME, dir);
    if (fstat(fd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s/" VIEW_INDEX_NAME, dir);
    if (!S_ISREG(st.st_mode))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s/" VIEW_INDEX_NAME ": not a file", dir);
    int r = check_owner(&st, VIEW_INDEX_NAME, err);
    if (r < 0)
        return r;
    *out = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
    if (*out == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s/" VIEW_INDEX_NAME ": line %d: %s", dir,
                           jerr.line, jerr.text);
    return 0;
}

/* The file a tensor (or the graph) names, resolved; checked to be a
 * regular file beneath one of the allowed folders, at least `need` long. */
static int check_file(const char *dir, const char *file, const char *const *allowed, uint64_t need,
                      const char *what, tetris_error *err)
{
    char path[PATH_MAX];
    struct stat st;
    if (snprintf(path, sizeof(path), "%s/%s", file[0] == '/' ? "" : dir, file) >= (int)sizeof(path))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: file name too long", what);
    cleanup_free char *real = realpath(path, NULL);
    if (real == NULL)
        return tetris_fail(err, TETRIS_E_NOTFOUND, errno, "%s: %s", what, file);
    bool inside = false;
    for (size_t k = 0; allowed[k] != NULL && !inside; k++)
        inside = beneath(real, allowed[k]);
    if (!inside)
        return tetris_fail(err, TETRIS_E_NOTFOUND, 0, "%s: %s resolves to %s, outside %s", what,
                           file, real, allowed[0] != NULL ? allowed[0] : "the store");
    if (stat(real, &st) < 0)
        return tetris_fail(err, TETRIS_E_NOTFOUND, errno, "%s: %s", what, real);
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < need)
        return tetris_fail(err, TETRIS_E_NOTFOUND, 0,
                           "%s: %s is not a regular file of at least %llu bytes", what, real,
                           (unsigned long long)need);
    return 0;
}

/* A tensor's length is its dtype's size times its elements: a reader maps
 * exactly that many bytes as an array of that shape, so an index that says
 * otherwise would have it read past the tensor or misread it. */
static int check_length(json_t *t, uint64_t length, const char *what, tetris_error *err)
{
    const char *dtype = json_string_value(json_object_get(t, "dtype"));
    json_t *shape = json_object_get(t, "shape"), *dim;
    tensor_meta meta = {.nbytes = length};
    tetris_error cause = {0};
    size_t k;
    if (dtype == NULL || strlen(dtype) >= sizeof(meta.dtype) || !json_is_array(shape) ||
        json_array_size(shape) > TENSOR_MAX_DIMS)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: needs a dtype and a shape of at most %d dims", what,
                           TENSOR_MAX_DIMS);
    snprintf(meta.dtype, sizeof(meta.dtype), "%s", dtype);
    meta.ndim = (int)json_array_size(shape);
    json_array_foreach (shape, k, dim) {
        if (!json_is_integer(dim))
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: shape[%zu] is not an integer", what,
                               k);
        meta.shape[k] = json_integer_value(dim);
    }
    if (tensor_meta_validate(&meta, &cause) < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: length %llu: %s", what,
                           (unsigned long long)length, cause.msg);
    return 0;
}

static int check_tensors(const char *dir, json_t *tensors, const char *store_real,
                         const char *model_dir, struct view_check_result *out, tetris_error *err)
{
    const char *in_store[] = {store_real, NULL};
    const char *in_model[] = {model_dir, NULL};
    size_t i;
    json_t *t;
    json_array_foreach (tensors, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        json_t *file = json_object_get(t, "file");
        json_t *offset = json_object_get(t, "offset"), *length = json_object_get(t, "length");
        json_t *shared = json_object_get(t, "shared");
        char what[300];
        snprintf(what, sizeof(what), "tensors[%zu] (\"%s\")", i, name != NULL ? name : "?");
        if (name == NULL || !json_is_boolean(shared) || !json_is_integer(offset) ||
            !json_is_integer(length) || json_integer_value(offset) < 0 ||
            json_integer_value(length) < 0 || json_integer_value(offset) > INT64_MAX / 2 ||
            json_integer_value(length) > INT64_MAX / 2 ||
            (!json_is_string(file) && !json_is_null(file)))
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: needs name, file, offset, length and shared", what);
        out->tensors++;
        if (json_is_null(file))
            continue;
        bool is_shared = json_is_true(shared);
        if (is_shared && store_real == NULL)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: shared, but the view has no store",
                               what);
        uint64_t need = (uint64_t)json_integer_value(offset) + (uint64_t)json_integer_value(length);
        int r = check_file(dir, json_string_value(file), is_shared ? in_store : in_model, need,
                           what, err);
        if (r == 0)
            r = check_length(t, (uint64_t)json_integer_value(length), what, err);
        if (r < 0)
            return r;
        out->files++;
        out->shared_files += is_shared;
    }
    return 0;
}

/* "derived", when not null: the runtime its reader compares with its own,
 * its graph in the view, its data file in the store and that long, and
 * session options of strings. */
static int check_derived(const char *dir, const char *dir_real, json_t *d, const char *store_real,
                         struct view_check_result *out, tetris_error *err)
{
    const char *runtime = json_string_value(json_object_get(d, "runtime"));
    const char *graph = json_string_value(json_object_get(d, "graph"));
    json_t *data = json_object_get(d, "data"), *opts = json_object_get(d, "session_options");
    const char *file = json_string_value(json_object_get(data, "file"));
    json_t *length = json_object_get(data, "length"), *v;
    const char *key;
    if (!json_is_object(d) || !derived_name_valid(runtime) || graph == NULL || file == NULL ||
        !json_is_integer(length) || json_integer_value(length) <= 0 || !json_is_object(opts))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "derived: needs runtime, graph, data {file, length} and "
                           "session_options");
    json_object_foreach (opts, key, v)
        if (!json_is_string(v) && !json_is_null(v))
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "derived: session_options \"%s\" is neither a string nor null", key);
    if (store_real == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "derived: a form, but the view has no store");
    const char *in_view[] = {dir_real, NULL}, *in_store[] = {store_real, NULL};
    int r = check_file(dir, graph, in_view, 0, "derived graph", err);
    if (r == 0)
        r = check_file(dir, file, in_store, (uint64_t)json_integer_value(length), "derived data",
                       err);
    if (r == 0)
        snprintf(out->derived, sizeof(out->derived), "%s", runtime);
    return r;
}

int view_check(const char *dir, struct view_check_result *out, tetris_error *err)
{
    json_t *ix = NULL;
    int r = view_check_index(dir, out, &ix, err);
    json_decref(ix);
    return r;
}

int view_check_index(const char *dir, struct view_check_result *out, json_t **index,
                     tetris_error *err)
{
    struct stat st;
    json_t *ix = NULL;
    int r;

    memset(out, 0, sizeof(*out));
    cleanup_close int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_DENIED, errno,
                           "view directory %s", dir);
    if (fstat(dirfd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", dir);
    if ((r = check_owner(&st, "the view directory", err)) < 0 ||
        (r = read_index(dir, dirfd, &ix, err)) < 0)
        return r;
    const char *format = json_string_value(json_object_get(ix, "format"));
    const char *model_path = json_string_value(json_object_get(ix, "model"));
    json_t *graph = json_object_get(ix, "graph"), *store_v = json_object_get(ix, "store");
    json_t *shared = json_object_get(ix, "shared"), *fallback = json_object_get(ix, "fallback");
    json_t *tensors = json_object_get(ix, "tensors"), *ref = json_object_get(ix, "ref");
    if (format == NULL || strcmp(format, VIEW_FORMAT) != 0)
        r = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: format is not \"" VIEW_FORMAT "\"", dir);
    else if (model_path == NULL || model_path[0] != '/' || !json_is_boolean(shared) ||
             !json_is_array(tensors) || !(json_is_string(graph) || json_is_null(graph)) ||
             !(json_is_null(store_v) ||
               (json_is_string(store_v) && (json_string_value(store_v)[0] == '/' ||
                                            strcmp(json_string_value(store_v), VIEW_SELF) == 0))) ||
             !(json_is_string(fallback) || json_is_null(fallback)))
        r = tetris_fail(err, TETRIS_E_FORMAT, 0,
                        "%s: needs model (absolute), graph, store (absolute, \".\" or null), "
                        "shared, fallback, tensors",
                        dir);
    else if (ref != NULL && !json_is_null(ref) && !oci_ref_is(json_string_value(ref)))
        r = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: ref is neither null nor an oci:// reference",
                        dir);
    cleanup_free char *store_real = NULL, *model_dir = NULL;
    const char *store_path = json_string_value(store_v);
    if (store_path != NULL && strcmp(store_path, VIEW_SELF) == 0)
        store_path = dir; /* the store's tensors/ is mounted in the view */
    if (r == 0 && store_path != NULL && (store_real = realpath(store_path, NULL)) == NULL)
        r = tetris_fail(err, TETRIS_E_NOTFOUND, errno, "store %s", json_string_value(store_v));
    /* A CSI volume's view names the node's model, which its pod does not
     * see: then nothing may come from the model's folder. */
    if (r == 0 && (model_dir = realpath(model_path, NULL)) == NULL && errno != ENOENT)
        r = tetris_fail(err, TETRIS_E_NOTFOUND, errno, "model %s", model_path);
    cleanup_free char *dir_real = realpath(dir, NULL);
    if (r == 0) {
        if (model_dir != NULL)
            *strrchr(model_dir, '/') = '\0';
        const char *graph_allowed[] = {dir_real != NULL ? dir_real : dir, model_dir, NULL};
        if (json_is_string(graph))
            r = check_file(dir, json_string_value(graph), graph_allowed, 0, "graph", err);
    }
    if (r == 0)
        r = check_tensors(dir, tensors, store_real,
                          model_dir == NULL ? NULL
                          : model_dir[0]    ? model_dir
                                            : "/",
                          out, err);
    json_t *derived = json_object_get(ix, "derived");
    if (r == 0 && derived != NULL && !json_is_null(derived))
        r = check_derived(dir, dir_real != NULL ? dir_real : dir, derived, store_real, out, err);
    if (r == 0) {
        out->shared = json_is_true(shared);
        if (json_is_string(fallback))
            snprintf(out->fallback, sizeof(out->fallback), "%s", json_string_value(fallback));
        *index = steal_pointer(&ix);
    }
    json_decref(ix);
    return r;
}
