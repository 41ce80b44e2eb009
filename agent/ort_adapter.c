/* ort_adapter.c - ONNX Runtime sessions over store mappings (see
 * ort_adapter.h for the approach and what stays private). */
#include "agent/ort_adapter.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "agent/derived_form.h"
#include "agent/onnx_share.h"
#include "protocol/derived.h"
#include "protocol/ingest.h"

struct ort_model_private {
    OrtEnv *env;
    OrtMemoryInfo *cpu;
    OrtValue **values; /* one per shared initializer, wrapping a mapping */
    char **names;
    size_t n, cap;
    struct derived_form form; /* held while the session is on it */
    bool ask_derived; /* no form to use: ask the daemon once the session is open */
    ort_upgrade *upgrade; /* o->upgrade: the move to the form, until taken */
};

/* State of one rewrite pass: which agent tensors can back which protos. */
struct share_ctx {
    ort_model *m;
    const char *store_root;
    struct onnx_share_match match;
    size_t kept_external; /* external-data tensors left as they were */
    tetris_error *err;
    int failed;           /* an error inside the callback, reported after the pass */
};

void ort_adapter_options_init(struct ort_adapter_options *o)
{
    memset(o, 0, sizeof(*o));
    o->graph_optimization = ORT_DISABLE_ALL;
}

int ort_parse_graph_optimization(const char *s, int *out, tetris_error *err)
{
    static const struct {
        const char *name;
        int level;
    } levels[] = {{"none", ORT_DISABLE_ALL},
                  {"basic", ORT_ENABLE_BASIC},
                  {"extended", ORT_ENABLE_EXTENDED},
                  {"all", ORT_ENABLE_ALL}};
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        if (strcmp(s, levels[i].name) == 0) {
            *out = levels[i].level;
            return 0;
        }
    }
    return tetris_fail(err, TETRIS_E_INVAL, 0,
                       "graph optimization '%s': expected none, basic, extended or all", s);
}

int ort_derived_option(const struct opt_spec *spec, const char *label, const char *value,
                       tetris_error *err)
{
    return derived_mode_parse(label, value, spec->dest, err);
}

static bool name_taken(const struct ort_model_private *p, const char *name, size_t len)
{
    for (size_t i = 0; i < p->n; i++)
        if (strlen(p->names[i]) == len && memcmp(p->names[i], name, len) == 0)
            return true;
    return false;
}

static int add_initializer(struct share_ctx *c, const struct onnx_tensor_ref *ref,
                           const agent_tensor *t)
{
    ort_model *m = c->m;
    struct ort_model_private *p = m->priv;
    OrtValue *v = NULL;

    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        OrtValue **values = realloc(p->values, cap * sizeof(*values));
        if (values == NULL)
            return tetris_fail(c->err, TETRIS_E_NOMEM, 0, "out of memory");
        p->values = values;
        char **names = realloc(p->names, cap * sizeof(*names));
        if (names == NULL)
            return tetris_fail(c->err, TETRIS_E_NOMEM, 0, "out of memory");
        p->names = names;
        p->cap = cap;
    }
    char *name = strndup(ref->name, ref->name_len);
    if (name == NULL)
        return tetris_fail(c->err, TETRIS_E_NOMEM, 0, "out of memory");
    /* ORT never writes initializers; the API just lacks a const variant. */
    int r = ort_check(m->api,
                      m->api->CreateTensorWithDataAsOrtValue(
                          p->cpu, (void *)t->data, t->desc->meta.nbytes, ref->dims,
                          (size_t)ref->ndim, (ONNXTensorElementDataType)ref->data_type, &v),
                      "wrap a store mapping", c->err);
    if (r < 0) {
        free(name);
        return r;
    }
    p->values[p->n] = v;
    p->names[p->n] = name;
    p->n++;
    return 0;
}

/* Whether ref can be served by a store mapping; if so registers it and
 * points ext at the store file. */
static bool try_share(struct share_ctx *c, const struct onnx_tensor_ref *ref,
                      struct onnx_external *ext)
{
    const agent_tensor *t = onnx_share_match_find(&c->match, ref);
    char hex[TENSOR_DIGEST_HEX_LEN + 1], path[PATH_MAX];
    struct stat st;

    if (c->failed || t == NULL || !t->shared || !onnx_share_same_size(ref, t) ||
        ref->name_len == 0 || name_taken(c->m->priv, ref->name, ref->name_len))
        return false;
    uint64_t nbytes = t->desc->meta.nbytes;
    /* The store's own file is the external data: ORT validates that it
     * exists, and any code path in ORT that reads it gets the right bytes. */
    tensor_digest_to_hex(&t->desc->meta.digest, hex);
    snprintf(ext->location, sizeof(ext->location), "tensors/%.2s/%s", hex, hex);
    ext->offset = 0;
    snprintf(path, sizeof(path), "%s/%s", c->store_root, ext->location);
    if (stat(path, &st) != 0 || (uint64_t)st.st_size < nbytes)
        return false;
    if (add_initializer(c, ref, t) < 0) {
        c->failed = 1;
        return false;
    }
    c->m->shared_tensors++;
    c->m->shared_bytes += nbytes;
    return true;
}

/* onnx_share_fn: externalise a proto when the agent maps its bytes from
 * the store and the store file can stand as its external data. */
static bool share_tensor(void *ctx, const struct onnx_tensor_ref *ref, struct onnx_external *ext)
{
    struct share_ctx *c = ctx;
    bool shared = try_share(c, ref, ext);
    if (!shared && ref->location != NULL)
        c->kept_external++;
    return shared;
}

void ort_runtime_name(char *out, size_t cap)
{
    derived_runtime_name(OrtGetApiBase()->GetVersionString(), out, cap);
}

/* Looks up and holds the derived form of the share image (image). 1 when
 * one for this runtime and CPU is there and referenced: with its
 * ORT-format part mapped (m->priv->form.ort) when it has one, else with
 * its relocated graph in *graph; 0 when the session should use the plain
 * weights (said in one log line, derived_form.h). *absent: there is no
 * form the daemon could answer with (no entry, or its tensors are gone),
 * so asking for one may give one. */
static int use_derived(ort_model *m, const char *model_path, const char *root, const uint8_t *image,
                       size_t image_len, uint8_t **graph, size_t *graph_len, bool *absent,
                       tetris_error *err)
{
    char runtime[DERIVED_NAME_MAX];
    tensor_digest source;
    tetris_error why = {0};
    ort_runtime_name(runtime, sizeof(runtime));
    derived_source_digest(image, image_len, &source);
    if (derived_form_find(model_path, root, &source, runtime, &m->priv->form, absent) == 0)
        return 0;
    struct derived_form *f = &m->priv->form;
    int r = f->entry.has_ort ? derived_form_hold_ort(f, root, &why)
                             : derived_form_hold(f, root, graph, graph_len, &why);
    *absent = r == -TETRIS_E_NOTFOUND;
    if (r == -TETRIS_E_NOMEM)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", why.msg);
    if (r < 0) {
        log_warn("event=derived-ignored model=%s reason=%s action=plain-weights", model_path,
                 LOG_Q(why.msg));
        return 0;
    }
    return 1;
}

/* Builds the stripped image and registers the shared initializers. Leaves
 * *image NULL when ORT should load the model file itself: nothing is
 * shared, or external data the store cannot serve would resolve against
 * the store instead of the model's directory. */
static int prepare_shared(ort_model *m, const char *model_path, agent_model *am,
                          const struct ort_adapter_options *o, OrtSessionOptions *so,
                          uint8_t **image, size_t *image_len, tetris_error *err)
{
    struct ort_model_private *p = m->priv;
    const char *root = agent_store_public_dir(am);
    cleanup_free uint8_t *rewritten = NULL;
    size_t rewritten_len = 0;
    struct onnx_share_image orig;
    int r;

    for (size_t i = 0; i < am->model->n_tensors; i++) {
        m->inline_tensors++;
        m->inline_bytes += am->model->tensors[i].meta.nbytes;
    }
    if (root == NULL)
        return 0; /* nothing mapped from a store */
    if ((r = onnx_share_image_open(am, model_path, &orig, err)) < 0)
        return r;
    struct share_ctx c = {.m = m, .store_root = root, .err = err};
    if ((r = onnx_share_match_init(&c.match, am, model_path, err)) == 0)
        r = onnx_rewrite(orig.bytes, orig.len, share_tensor, &c, &rewritten, &rewritten_len, err);
    onnx_share_match_release(&c.match);
    onnx_share_image_close(&orig);
    if (r < 0)
        return r;
    if (c.failed)
        return -err->code;
    if (c.kept_external > 0) {
        log_warn("event=ort-no-sharing model=%s reason=external-data-not-in-store tensors=%zu",
                 model_path, c.kept_external);
        m->shared_tensors = 0;
        m->shared_bytes = 0;
        return 0;
    }
    /* Inline: what the store did not serve, whichever weights the session
     * then opens (the plain ones or a derived form). */
    m->inline_tensors -= m->shared_tensors;
    m->inline_bytes -= m->shared_bytes;
    r = ort_check(m->api,
                  m->api->AddSessionConfigEntry(
                      so, "session.model_external_initializers_file_folder_path", root),
                  "set the external data folder", err);
    uint8_t *derived = NULL;
    size_t derived_len = 0;
    bool absent = false;
    if (r == 0 && o->derived != DERIVED_OFF && o->save_optimized == NULL)
        r = use_derived(m, model_path, root, rewritten, rewritten_len, &derived, &derived_len,
                        &absent, err);
    p->ask_derived = absent && (o->derived == DERIVED_AUTO || o->derived == DERIVED_MAKE);
    if (r == 1) {
        /* The form is optimised and pre-packed already: ORT must neither
         * optimise again nor ignore the pre-packed blobs. */
        r = ort_check(m->api, m->api->SetSessionGraphOptimizationLevel(so, ORT_DISABLE_ALL),
                      "set graph optimization", err);
        if (r == 0)
            r = ort_check(m->api,
                          m->api->AddSessionConfigEntry(so, "session.disable_prepacking", "0"),
                          "enable pre-packing", err);
        /* The ORT-format part is read where it is mapped, its initializers
         * included (derived.h): the session holds no copy of them. */
        static const char *const in_place[] = ORT_IN_PLACE_ENTRIES;
        for (size_t i = 0;
             r == 0 && p->form.ort != NULL && i < sizeof(in_place) / sizeof(in_place[0]); i++)
            r = ort_check(m->api, m->api->AddSessionConfigEntry(so, in_place[i], "1"), in_place[i],
                          err);
        m->derived_ort = p->form.ort != NULL;
        /* The plain weights' wrappers are not the session's: only the
         * form's graph and data are. */
        for (size_t i = 0; i < p->n; i++) {
            m->api->ReleaseValue(p->values[i]);
            free(p->names[i]);
        }
        p->n = 0;
        m->derived = true;
        *image = derived;
        *image_len = derived_len;
        return r;
    }
    for (size_t i = 0; r == 0 && i < p->n; i++)
        r = ort_check(m->api, m->api->AddInitializer(so, p->names[i], p->values[i]),
                      "add a shared initializer", err);
    if (r < 0)
        return r;
    *image = steal_pointer(&rewritten);
    *image_len = rewritten_len;
    return 0;
}

static int session_options(const ort_model *m, const struct ort_adapter_options *o,
                           OrtSessionOptions **out, tetris_error *err)
{
    const OrtApi *api = m->api;
    OrtSessionOptions *so = NULL;
    int r = ort_check(api, api->CreateSessionOptions(&so), "create session options", err);
    if (r == 0 && o->intra_op_threads > 0)
        r = ort_check(api, api->SetIntraOpNumThreads(so, o->intra_op_threads),
                      "set intra-op threads", err);
    if (r == 0)
        r = ort_check(api, api->SetInterOpNumThreads(so, 1), "set inter-op threads", err);
    if (r == 0)
        r = ort_check(api,
                      api->SetSessionGraphOptimizationLevel(
                          so, (GraphOptimizationLevel)o->graph_optimization),
                      "set graph optimization", err);
    if (r == 0 && o->save_optimized != NULL)
        r = ort_check(api, api->SetOptimizedModelFilePath(so, o->save_optimized),
                      "set the optimised model path", err);
    if (r == 0 && !o->prepack)
        r = ort_check(api, api->AddSessionConfigEntry(so, "session.disable_prepacking", "1"),
                      "disable pre-packing", err);
    if (r == 0 && o->external_data_folder != NULL)
        r = ort_check(
            api,
            api->AddSessionConfigEntry(so, "session.model_external_initializers_file_folder_path",
                                       o->external_data_folder),
            "set the external data folder", err);
    if (r < 0) {
        if (so != NULL)
            api->ReleaseSessionOptions(so);
        return r;
    }
    *out = so;
    return 0;
}

void ort_keep_form_small_pages(const char *data_path, const char *model_path)
{
    tetris_error err = {0};
    size_t marked = 0;
    if (store_keep_small_pages(data_path, &marked, &err) < 0)
        log_warn("event=derived-pages-unmarked model=%s msg=%s", LOG_Q(model_path), LOG_Q(err.msg));
    else
        log_debug("event=derived-pages-marked model=%s mappings=%zu", LOG_Q(model_path), marked);
}

static int upgrade_new(const char *model_path, agent_model *am, const struct ort_adapter_options *o,
                       uint8_t *image, size_t image_len, ort_upgrade **out, tetris_error *err);

/* ort_model_open; form_only: an upgrade's session, on the derived form or
 * none (TETRIS_E_NOTFOUND), the plain weights left mapped for the session
 * it replaces. */
static int model_open(const char *model_path, agent_model *am, const struct ort_adapter_options *o,
                      bool form_only, ort_model **out, tetris_error *err)
{
    struct ort_adapter_options defaults;
    OrtSessionOptions *so = NULL;
    cleanup_free uint8_t *image = NULL;
    size_t image_len = 0;
    int r;

    if (o == NULL) {
        ort_adapter_options_init(&defaults);
        o = &defaults;
    }
    ort_model *m = calloc(1, sizeof(*m));
    if (m == NULL || (m->priv = calloc(1, sizeof(*m->priv))) == NULL) {
        free(m);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    m->api = OrtGetApiBase()->GetApi(ORT_API_VERSION);
    if (m->api == NULL) {
        ort_model_free(m);
        return tetris_fail(err, TETRIS_E_RUNTIME, 0,
                           "onnxruntime %s does not provide API version %d",
                           OrtGetApiBase()->GetVersionString(), ORT_API_VERSION);
    }
    r = ort_check(m->api, m->api->CreateEnv(ORT_LOGGING_LEVEL_FATAL, "tetris", &m->priv->env),
                  "create environment", err);
    if (r == 0)
        r = ort_check(m->api,
                      m->api->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault,
                                                  &m->priv->cpu),
                      "create memory info", err);
    if (r == 0)
        r = session_options(m, o, &so, err);
    if (r == 0 && am != NULL)
        r = prepare_shared(m, model_path, am, o, so, &image, &image_len, err);
    if (r == 0 && form_only && !m->derived)
        r = tetris_fail(err, TETRIS_E_NOTFOUND, 0, "no derived form this session can open");
    if (r == 0 && m->derived_ort)
        r = ort_check(m->api,
                      m->api->CreateSessionFromArray(m->priv->env, m->priv->form.ort,
                                                     m->priv->form.ort_len, so, &m->session),
                      "create session", err);
    else if (r == 0 && image != NULL)
        r = ort_check(m->api,
                      m->api->CreateSessionFromArray(m->priv->env, image, image_len, so,
                                                     &m->session),
                      "create session", err);
    else if (r == 0)
        r = ort_check(m->api, m->api->CreateSession(m->priv->env, model_path, so, &m->session),
                      "create session", err);
    if (so != NULL)
        m->api->ReleaseSessionOptions(so);
    if (r < 0 && m->derived && !form_only) {
        /* The form was checked when it was made; a session that still
         * cannot open it runs on the plain weights. */
        log_warn("event=derived-ignored model=%s reason=%s action=plain-weights", model_path,
                 LOG_Q(err->msg));
        ort_model_free(m);
        struct ort_adapter_options plain = *o;
        plain.derived = DERIVED_OFF;
        return model_open(model_path, am, &plain, false, out, err);
    }
    if (r < 0) {
        ort_model_free(m);
        return tetris_wrap(err, "%s", model_path);
    }
    log_debug("event=ort-session model=%s shared_tensors=%zu shared_bytes=%llu "
              "inline_tensors=%zu inline_bytes=%llu derived=%d derived_ort=%d",
              model_path, m->shared_tensors, (unsigned long long)m->shared_bytes, m->inline_tensors,
              (unsigned long long)m->inline_bytes, m->derived, m->derived_ort);
    if (m->derived && !m->derived_ort)
        ort_keep_form_small_pages(m->priv->form.paths[DERIVED_PART_DATA], model_path);
    /* The session reads the form, none of the plain weights: their
     * mappings go (the references stay, the form is made of them). */
    if (m->derived && !form_only)
        agent_model_unmap(am);
    if (m->priv->ask_derived && !m->derived && image != NULL && o->upgrade &&
        o->derived == DERIVED_AUTO) {
        r = upgrade_new(model_path, am, o, steal_pointer(&image), image_len, &m->priv->upgrade,
                        err);
        if (r < 0) {
            ort_model_free(m);
            return r;
        }
    } else if (m->priv->ask_derived && !m->derived && image != NULL) {
        char runtime[DERIVED_NAME_MAX];
        ort_runtime_name(runtime, sizeof(runtime));
        derived_form_request(model_path, agent_store_public_dir(am), image, image_len, runtime,
                             o->derived == DERIVED_MAKE, NULL);
    }
    *out = m;
    return 0;
}

int ort_model_open(const char *model_path, agent_model *am, const struct ort_adapter_options *o,
                   ort_model **out, tetris_error *err)
{
    return model_open(model_path, am, o, false, out, err);
}

ort_upgrade *ort_model_take_upgrade(ort_model *m)
{
    return steal_pointer(&m->priv->upgrade);
}

/* ---- moving to the derived form ---- */

struct ort_upgrade {
    char *model_path;
    agent_model *am;
    struct ort_adapter_options o; /* the plain session's, derived: use */
    uint8_t *image;               /* the plain session's share image */
    size_t image_len;
    struct derived_wait wait;
};

/* The upgrade of a plain session (o: its options) opened from the share
 * image image, which it takes. */
static int upgrade_new(const char *model_path, agent_model *am, const struct ort_adapter_options *o,
                       uint8_t *image, size_t image_len, ort_upgrade **out, tetris_error *err)
{
    ort_upgrade *u = calloc(1, sizeof(*u));
    if (u == NULL || (u->model_path = strdup(model_path)) == NULL) {
        free(u);
        free(image);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    }
    u->am = am;
    u->o = *o;
    u->o.derived = DERIVED_USE;
    u->o.upgrade = false;
    u->image = image;
    u->image_len = image_len;
    derived_wait_init(&u->wait);
    *out = u;
    return 0;
}

int ort_upgrade_run(ort_upgrade *u, ort_model **out, tetris_error *err)
{
    char runtime[DERIVED_NAME_MAX];
    ort_runtime_name(runtime, sizeof(runtime));
    int r = derived_form_request(u->model_path, agent_store_public_dir(u->am), u->image,
                                 u->image_len, runtime, false, &u->wait);
    if (r == -TETRIS_E_UNAVAILABLE)
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0,
                           "no derived form: cancelled, or no daemon");
    if (r < 0)
        return tetris_fail(err, -r, 0, "the node daemon made no derived form (its log says why)");
    return model_open(u->model_path, u->am, &u->o, true, out, err);
}

void ort_upgrade_cancel(ort_upgrade *u)
{
    derived_wait_cancel(&u->wait);
}

void ort_upgrade_free(ort_upgrade *u)
{
    if (u == NULL)
        return;
    derived_wait_destroy(&u->wait);
    free(u->image);
    free(u->model_path);
    free(u);
}

void ort_model_free(ort_model *m)
{
    if (m == NULL)
        return;
    struct ort_model_private *p = m->priv;
    if (m->session != NULL)
        m->api->ReleaseSession(m->session);
    if (p != NULL) {
        for (size_t i = 0; i < p->n; i++) {
            m->api->ReleaseValue(p->values[i]);
            free(p->names[i]);
        }
        free(p->values);
        free(p->names);
        derived_form_release(&p->form);
        ort_upgrade_free(p->upgrade);
        if (p->cpu != NULL)
            m->api->ReleaseMemoryInfo(p->cpu);
        if (p->env != NULL)
            m->api->ReleaseEnv(p->env);
        free(p);
    }
    free(m);
}
