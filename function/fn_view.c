/* fn_view.c - tetris-function on a model view the platform made: a
 * tetris-csi volume (docs/PROTOCOLS.md, "Model view"; TETRIS_MODEL_VIEW).
 * The pod mounts no store and runs no agent: the volume's kept holder holds
 * the tensors for the volume's life, and the view's graph names the store's
 * tensor files (mounted read-only on its tensors/) as external data, which
 * ONNX Runtime maps read-only and shared, as it does the agent's files.
 *
 * So the function only checks the view as any reader must (view_check:
 * owners, modes, every file inside the store or the view and long enough)
 * and opens a session on its graph with the view's session options, which
 * are the adapter's defaults: graph optimisation off and no pre-packing,
 * so the weights ORT computes with are the store's pages. A view may carry
 * the store's derived form of the graph (the volume's "derived" attribute:
 * the pod opted in): opened instead, with its session options
 * (optimisation off, pre-packing on, its packs mapped from the store),
 * when ONNX Runtime of this very version made it for this CPU; else the
 * plain graph, with one log line. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "agent/view.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "common/strmap.h"
#include "function/function.h"
#include "protocol/derived.h"

static int read_index(const char *dir, json_t *ix, struct fn_view *out, tetris_error *err)
{
    const char *graph = json_string_value(json_object_get(ix, "graph"));
    const char *original = json_string_value(json_object_get(ix, "model"));
    if (graph == NULL || graph[0] == '\0')
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "model view %s has no ONNX graph (a safetensors model?)", dir);
    if ((graph[0] == '/' ? asprintf(&out->graph, "%s", graph)
                         : asprintf(&out->graph, "%s/%s", dir, graph)) < 0) {
        out->graph = NULL;
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    if ((out->model = strdup(original != NULL ? original : out->graph)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    if ((out->dir = realpath(dir, NULL)) == NULL)
        return tetris_fail(err, TETRIS_E_NOTFOUND, errno, "model view %s", dir);
    out->index = json_incref(ix);
    return 0;
}

/* mapped_files: the prefix the files have, and where they go. */
struct mapped_under {
    const char *prefix; /* "DIR/" */
    size_t prefix_len;
    strmap *out;
};

static int add_mapped(void *ctx, const store_own_mapping *m)
{
    struct mapped_under *u = ctx;
    if (m->path != NULL && strncmp(m->path, u->prefix, u->prefix_len) == 0 &&
        strncmp(m->path + u->prefix_len, "tensors/", 8) == 0)
        strmap_put(u->out, m->path + u->prefix_len, u->out);
    return 0;
}

/* The files under dir's tensors/ (the store's, or the view's with the
 * store's tensors mounted in it) that this process maps, relative to dir
 * ("tensors/XX/<hex>", as the index names them), from /proc/self/maps. */
static int mapped_files(const char *dir, strmap *out, tetris_error *err)
{
    char prefix[PATH_MAX];
    int n = snprintf(prefix, sizeof(prefix), "%s/", dir);
    if (n < 0 || n >= (int)sizeof(prefix))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "model view %s: path too long", dir);
    struct mapped_under u = {.prefix = prefix, .prefix_len = (size_t)n, .out = out};
    return store_each_own_mapping(add_mapped, &u, err);
}

int fn_view_read(const char *dir, struct fn_view *out, tetris_error *err)
{
    struct view_check_result checked;
    int r;

    memset(out, 0, sizeof(*out));
    json_t *ix = NULL;
    if ((r = view_check_index(dir, &checked, &ix, err)) < 0)
        return tetris_wrap(err, "model view %s", dir);
    r = read_index(dir, ix, out, err);
    json_decref(ix);
    if (r < 0) {
        fn_view_free(out);
        return r;
    }
    log_info("event=model-view view=%s graph=%s model=%s shared=%d fallback=%s tensors=%zu "
             "shared_files=%zu",
             LOG_Q(dir), LOG_Q(out->graph), LOG_Q(out->model), checked.shared,
             LOG_Q(checked.fallback[0] != '\0' ? checked.fallback : "none"), checked.tensors,
             checked.shared_files);
    return 0;
}

/* The derived form a view names: its graph and data file, relative to the
 * view, and the data file's length. */
struct view_form {
    const char *graph, *data;
    uint64_t data_length;
};

/* Whether this process can open the view's derived form, into *f: made by
 * this ONNX Runtime for this CPU. false: the plain graph, said in one line
 * when the view carries a form. view_check_index checked both files. */
static bool usable_form(const struct fn_view *v, struct view_form *f)
{
    json_t *d = json_object_get(v->index, "derived");
    if (!json_is_object(d))
        return false;
    const char *runtime = json_string_value(json_object_get(d, "runtime"));
    const char *cpu = json_string_value(json_object_get(d, "cpu"));
    json_t *data = json_object_get(d, "data");
    f->graph = json_string_value(json_object_get(d, "graph"));
    f->data = json_string_value(json_object_get(data, "file"));
    f->data_length = (uint64_t)json_integer_value(json_object_get(data, "length"));
    char own[DERIVED_NAME_MAX], own_cpu[DERIVED_NAME_MAX];
    tetris_error err = {0};
    ort_runtime_name(own, sizeof(own));
    const char *why = NULL;
    if (runtime == NULL || strcmp(runtime, own) != 0)
        why = "made by another runtime";
    else if (derived_cpu_features(own_cpu, sizeof(own_cpu), &err) < 0)
        why = err.msg;
    else if (cpu == NULL || strcmp(cpu, own_cpu) != 0)
        why = "made for another CPU";
    if (why != NULL || f->graph == NULL || f->data == NULL) {
        log_warn("event=view-derived-mismatch view=%s runtime=%s form=%s reason=%s "
                 "action=plain-graph",
                 LOG_Q(v->dir), LOG_Q(own), LOG_Q(runtime != NULL ? runtime : "none"),
                 LOG_Q(why != NULL ? why : "incomplete"));
        return false;
    }
    return true;
}

int fn_view_open(const struct fn_view *v, const struct ort_adapter_options *oo, ort_model **out,
                 tetris_error *err)
{
    struct view_form form = {0};
    struct ort_adapter_options vo = *oo;
    int r;
    /* External data resolves against the store's own files, not the
     * view's links to them: ONNX Runtime 1.24 and later refuse data that
     * resolves, links followed, outside the folder it resolves it against
     * (PROTOCOLS.md, "Model view"). view_check_index checked `store`:
     * absolute, "." (the store's tensors mounted in the view) or null (the
     * original model, whose own folder holds its data). */
    const char *view_store = json_string_value(json_object_get(v->index, "store"));
    if (view_store != NULL)
        vo.external_data_folder = strcmp(view_store, ".") == 0 ? v->dir : view_store;
    if (usable_form(v, &form)) {
        char path[PATH_MAX], data[PATH_MAX];
        struct ort_adapter_options fo = vo;
        fo.graph_optimization = ORT_DISABLE_ALL;
        fo.prepack = true;
        if (snprintf(path, sizeof(path), "%s/%s", v->dir, form.graph) >= (int)sizeof(path) ||
            snprintf(data, sizeof(data), "%s/%s", v->dir, form.data) >= (int)sizeof(data))
            return tetris_fail(err, TETRIS_E_INVAL, 0, "model view %s: path too long", v->dir);
        if ((r = ort_model_open(path, NULL, &fo, out, err)) < 0)
            return r;
        (*out)->derived = true;
        ort_keep_form_small_pages(data, path);
    } else if ((r = ort_model_open(v->graph, NULL, &vo, out, err)) < 0) {
        return r;
    }
    /* ONNX Runtime maps a tensor's external data, the store's file, when
     * it is large enough to be worth a mapping, and reads the others into
     * its own memory: the shared ones are the files it maps. */
    strmap *mapped = strmap_new();
    if (mapped == NULL) {
        ort_model_free(*out);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    /* The files are mapped by the names they resolve to: the store's. */
    cleanup_free char *mapped_dir =
        realpath(vo.external_data_folder != NULL ? vo.external_data_folder : v->dir, NULL);
    if ((r = mapped_files(mapped_dir != NULL ? mapped_dir : v->dir, mapped, err)) < 0) {
        strmap_free(mapped, NULL);
        ort_model_free(*out);
        return r;
    }
    ort_model *m = *out;
    m->shared_tensors = 0;
    m->shared_bytes = 0;
    size_t i;
    json_t *t;
    json_array_foreach (json_object_get(v->index, "tensors"), i, t) {
        const char *file = json_string_value(json_object_get(t, "file"));
        if (json_is_true(json_object_get(t, "shared")) && file != NULL &&
            strmap_get(mapped, file) != NULL) {
            m->shared_tensors++;
            m->shared_bytes += (uint64_t)json_integer_value(json_object_get(t, "length"));
        }
    }
    if (m->derived && strmap_get(mapped, form.data) != NULL) {
        m->shared_tensors++;
        m->shared_bytes += form.data_length;
    }
    log_info("event=model-view-mapped view=%s files=%zu shared_tensors=%zu shared_bytes=%llu "
             "derived=%d",
             LOG_Q(v->dir), strmap_size(mapped), m->shared_tensors,
             (unsigned long long)m->shared_bytes, m->derived);
    strmap_free(mapped, NULL);
    return 0;
}

void fn_view_free(struct fn_view *v)
{
    free(v->dir);
    free(v->graph);
    free(v->model);
    json_decref(v->index);
    memset(v, 0, sizeof(*v));
}
