/* tetris-derive - the node daemon's derivation child: optimises one
 * model's share image (protocol/derived.h) with ONNX Runtime at level
 * `all`, with MLAS pre-packing, and writes the optimised graph and one
 * external data file holding its initializers and their pre-packed forms,
 * which the daemon then publishes into the store as a derived form.
 *
 * Why a program of its own: the graph comes from a pod, and ONNX Runtime
 * is a large parser and optimiser. tetris-reclaimer runs this with bounded
 * resources (address space, CPU time, file size, descriptors), no new
 * privileges and a deadline (reclaimer/derive.c), so a hostile graph can at
 * worst fail its own derivation; the daemon names the result by the digest
 * of the bytes it handed over, not by anything this program says.
 *
 * Which runtime: the ONNX Runtime installed beside the build (the
 * libonnxruntime.so.1 the program's run path finds), or the one in the
 * library --runtime-lib names (the daemon's --derive-runtimes: an
 * operator's list, e.g. onnxruntime-node's own library, so that a Node.js
 * function's view can carry a form its runtime may open). The program
 * links no ONNX Runtime: it loads exactly one, at run time, so two
 * versions never share a process, and asks it for the C API of its own
 * version, of which only calls as old as DERIVE_MIN_API are made. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/options.h"
#include "agent/ort_adapter.h"
#include "agent/unprivileged.h"
#include "common/fileio.h"
#include "model/onnx_rewrite.h"
#include "protocol/derived.h"
#include "protocol/ingest.h"

enum exit_code { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2, EXIT_BAD_INPUT = 3 };

/* The oldest C API a --runtime-lib must offer: every call made here is at
 * least this old (AddExternalInitializersFromFilesInMemory: 18), and 22 is
 * the oldest runtime whose forms were checked against its stock output
 * (onnxruntime-node 1.22, tests/langs/test-node-derived.sh). */
#define DERIVE_MIN_API 22
/* The runtime without --runtime-lib: the build's, by its soname. */
#define DERIVE_DEFAULT_RUNTIME "libonnxruntime.so.1"

struct derive_options {
    int graph_fd;
    const char *external_dir;
    const char *out_dir;
    const char *runtime_lib; /* NULL: the linked runtime */
    int threads;
    int uid, gid; /* -1: keep the caller's */
    bool runtime; /* print the runtime's name only */
};

/* The runtime forms are made with. */
struct runtime {
    const OrtApiBase *base;
    const OrtApi *api;
};

static const char about[] =
    "Optimises the ONNX graph read from --graph-fd at level all with pre-packing\n"
    "and writes DIR/graph.onnx and DIR/" DERIVED_DATA_LOCATION " (initializers of\n"
    "128 bytes or more and their pre-packed forms); when those pre-packed forms\n"
    "are small, also DIR/" DERIVED_ORT_FILE ", the same model in the ORT format.\n"
    "Prints one JSON line with the runtime that made them, the pre-packed bytes,\n"
    "whether the ORT format was written and the credentials it ran with. With --uid and\n"
    "--gid it becomes that user, without groups or capabilities, before it\n"
    "reads the graph. With --runtime-lib it derives with the ONNX Runtime of\n"
    "that shared library instead of its own. Run by tetris-reclaimer, not by\n"
    "hand.\n";

static const char epilogue[] =
    "Exit status: 0 ok, 1 the runtime failed, 2 usage, 3 the graph is not one\n"
    "the runtime accepts.\n";

/* ---- re-laying out the data file ----
 *
 * ONNX Runtime 1.29 writes pre-packed blobs at whatever offset the file has
 * reached (it aligns only blobs over 1 MiB), and maps them where they lie:
 * a packed GEMM weight at an offset that is not a multiple of 64 makes
 * MLAS's aligned loads fault (PP-OCRv4 rec, its own output opened the
 * stock way, crashes). So every tensor and blob is copied to an offset
 * aligned to 64 bytes (4096 from a page up, so that it can be mapped on
 * its own), and the graph's offsets rewritten to match. */
struct relayout {
    const uint8_t *data; /* the data file ORT wrote */
    size_t data_len;
    int out_fd; /* the new data file */
    uint64_t cursor;
    bool failed;
    bool foreign; /* a tensor's external data is elsewhere (the store) */
    uint64_t prepacked_bytes; /* of every pre-packed blob */
};

static uint64_t align_for(uint64_t n)
{
    return n >= 4096 ? 4096 : 64;
}

/* Copies [offset, offset + len) of the old file to the next aligned
 * offset of the new one; returns that offset, or UINT64_MAX. */
static uint64_t relayout_copy(struct relayout *r, uint64_t offset, uint64_t len)
{
    if (offset > r->data_len || len > r->data_len - offset)
        return UINT64_MAX;
    uint64_t a = align_for(len);
    uint64_t at = (r->cursor + a - 1) / a * a;
    for (uint64_t done = 0; done < len;) {
        ssize_t w = pwrite(r->out_fd, r->data + offset + done, len - done, (off_t)(at + done));
        if (w <= 0)
            return UINT64_MAX;
        done += (uint64_t)w;
    }
    r->cursor = at + len;
    return at;
}

/* "KEY|off;len;sum|off;len;sum..." with every blob moved. */
static bool relayout_blobs(void *ctx, const char *value, size_t len, char *out, size_t cap)
{
    struct relayout *r = ctx;
    char in[4096];
    if (len >= sizeof(in))
        return false;
    memcpy(in, value, len);
    in[len] = '\0';
    char *save = NULL, *field = strtok_r(in, "|", &save);
    if (field == NULL)
        return false;
    size_t used = (size_t)snprintf(out, cap, "%s", field);
    while ((field = strtok_r(NULL, "|", &save)) != NULL) {
        unsigned long long off, n;
        char sum[64];
        if (sscanf(field, "%llu;%llu;%63s", &off, &n, sum) != 3)
            return false;
        uint64_t at = relayout_copy(r, off, n);
        if (at == UINT64_MAX || used >= cap)
            return false;
        r->prepacked_bytes += n;
        used += (size_t)snprintf(out + used, cap - used, "|%llu;%llu;%s", (unsigned long long)at, n,
                                 sum);
    }
    return used < cap;
}

static bool relayout_tensor(void *ctx, const struct onnx_tensor_ref *ref, struct onnx_external *ext)
{
    struct relayout *r = ctx;
    size_t n = strlen(DERIVED_DATA_LOCATION);
    if (r->failed || ref->location == NULL)
        return false;
    if (ref->location_len != n || memcmp(ref->location, DERIVED_DATA_LOCATION, n) != 0) {
        r->foreign = true;
        return false;
    }
    uint64_t at = relayout_copy(r, ref->offset, ref->length);
    if (at == UINT64_MAX) {
        r->failed = true;
        return false;
    }
    snprintf(ext->location, sizeof(ext->location), "%s", DERIVED_DATA_LOCATION);
    ext->offset = at;
    ext->keep_prepacked = true;
    ext->map_prepacked = relayout_blobs;
    ext->map_ctx = r;
    return true;
}

static int write_file(const char *path, const uint8_t *bytes, size_t len, tetris_error *err)
{
    cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "%s", path);
    return fd_write_all(fd, bytes, len, path, err);
}

/* What ONNX Runtime wrote to out_dir: the graph, read whole, and the data
 * file, mapped. */
struct written_form {
    char graph_path[4096], data_path[4096];
    char *graph;
    size_t graph_len;
    uint8_t *data;
    size_t data_len;
};

static int written_form_open(const char *out_dir, struct written_form *f, tetris_error *err)
{
    memset(f, 0, sizeof(*f));
    f->data = MAP_FAILED;
    snprintf(f->graph_path, sizeof(f->graph_path), "%s/graph.onnx", out_dir);
    snprintf(f->data_path, sizeof(f->data_path), "%s/%s", out_dir, DERIVED_DATA_LOCATION);
    int r = file_read_all(f->graph_path, INGEST_MAX_DERIVE_IMAGE, &f->graph, &f->graph_len, err);
    if (r < 0)
        return r;
    cleanup_close int fd = open(f->data_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0)
        return tetris_fail(err, TETRIS_E_RUNTIME, errno, "%s: none written", f->data_path);
    f->data_len = (size_t)st.st_size;
    f->data = mmap(NULL, f->data_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->data == MAP_FAILED)
        return tetris_fail(err, TETRIS_E_IO, errno, "mmap %s", f->data_path);
    return 0;
}

static void written_form_close(struct written_form *f)
{
    free(f->graph);
    f->graph = NULL;
    if (f->data != MAP_FAILED)
        munmap(f->data, f->data_len);
    f->data = MAP_FAILED;
}

/* What a form holds, as re-laid out. */
struct form_bytes {
    uint64_t data;      /* the data file */
    uint64_t prepacked; /* of it, the pre-packed blobs */
};

/* Re-lays out the form ONNX Runtime wrote in out_dir; *bytes: what the
 * new data file holds. */
static int relayout(const char *out_dir, struct form_bytes *bytes, tetris_error *err)
{
    struct written_form f;
    int rc = written_form_open(out_dir, &f, err);
    if (rc < 0) {
        written_form_close(&f);
        return rc;
    }
    char new_data[sizeof(f.data_path) + 16];
    snprintf(new_data, sizeof(new_data), "%s.aligned", f.data_path);
    struct relayout r = {.data = f.data, .data_len = f.data_len};
    r.out_fd = open(new_data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    cleanup_free uint8_t *rewritten = NULL;
    size_t rewritten_len = 0;
    if (r.out_fd < 0)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "%s", new_data);
    else
        rc = onnx_rewrite((const uint8_t *)f.graph, f.graph_len, relayout_tensor, &r, &rewritten,
                          &rewritten_len, err);
    if (rc == 0 && r.failed)
        rc = tetris_fail(err, TETRIS_E_RUNTIME, 0,
                         "the data file does not hold what the graph names");
    /* A form is its graph and its one data file: one that still names the
     * store's tensors (ORT leaves some subgraph initializers where they
     * were) could not be checked here, nor opened as one unit. */
    if (rc == 0 && r.foreign)
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0,
                         "the optimised graph keeps external data outside %s",
                         DERIVED_DATA_LOCATION);
    if (r.out_fd >= 0 && close(r.out_fd) != 0 && rc == 0)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "%s", new_data);
    if (rc == 0)
        rc = write_file(f.graph_path, rewritten, rewritten_len, err);
    if (rc == 0 && rename(new_data, f.data_path) != 0)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "%s", f.data_path);
    *bytes = (struct form_bytes){.data = r.cursor, .prepacked = r.prepacked_bytes};
    written_form_close(&f);
    return rc;
}

/* A session made here only to be checked or to have ONNX Runtime write
 * what it optimised: its environment, options and session. */
struct trial {
    OrtEnv *env;
    OrtSessionOptions *so;
    OrtSession *session;
};

/* The environment and options of a trial at graph optimisation level. */
static int trial_begin(const OrtApi *api, OrtLoggingLevel logging, GraphOptimizationLevel level,
                       struct trial *t, tetris_error *err)
{
    memset(t, 0, sizeof(*t));
    int r = ort_check(api, api->CreateEnv(logging, "tetris-derive", &t->env), "create environment",
                      err);
    if (r == 0)
        r = ort_check(api, api->CreateSessionOptions(&t->so), "create session options", err);
    if (r == 0)
        r = ort_check(api, api->SetSessionGraphOptimizationLevel(t->so, level),
                      "set graph optimization", err);
    return r;
}

/* Adds config entries {key, value} to the trial's options. */
static int trial_config(const OrtApi *api, struct trial *t, const char *const (*entries)[2],
                        size_t n, tetris_error *err)
{
    int r = 0;
    for (size_t i = 0; r == 0 && i < n; i++)
        r = ort_check(api, api->AddSessionConfigEntry(t->so, entries[i][0], entries[i][1]),
                      entries[i][0], err);
    return r;
}

/* Opens the model in bytes with the trial's options. */
static int trial_open(const OrtApi *api, struct trial *t, const void *bytes, size_t len,
                      const char *what, tetris_error *err)
{
    return ort_check(api, api->CreateSessionFromArray(t->env, bytes, len, t->so, &t->session), what,
                     err);
}

static void trial_end(const OrtApi *api, struct trial *t)
{
    if (t->session != NULL)
        api->ReleaseSession(t->session);
    if (t->so != NULL)
        api->ReleaseSessionOptions(t->so);
    if (t->env != NULL)
        api->ReleaseEnv(t->env);
    memset(t, 0, sizeof(*t));
}

/* Opens the form as instances will (optimisation off, pre-packing on):
 * ONNX Runtime cannot open every graph it optimises (Silero VAD v5's If
 * branches: "initializer name is not unique"), and such a form must not
 * be published. The data file is handed over in memory: ONNX Runtime
 * resolves a data folder by its canonical path, which an unprivileged
 * child cannot walk to its output directory (a store's private one). */
static int check_opens(const OrtApi *api, const char *out_dir, tetris_error *err)
{
    struct written_form f;
    int r = written_form_open(out_dir, &f, err);
    if (r < 0) {
        written_form_close(&f);
        return r;
    }
    const ORTCHAR_T *names[] = {DERIVED_DATA_LOCATION};
    char *buffers[] = {(char *)f.data};
    struct trial t;
    r = trial_begin(api, ORT_LOGGING_LEVEL_FATAL, ORT_DISABLE_ALL, &t, err);
    if (r == 0)
        r = ort_check(api,
                      api->AddExternalInitializersFromFilesInMemory(t.so, names, buffers,
                                                                    &f.data_len, 1),
                      "hand over the data file", err);
    if (r == 0)
        r = trial_open(api, &t, f.graph, f.graph_len, "open the optimised graph", err);
    trial_end(api, &t);
    written_form_close(&f);
    if (r < 0)
        err->code = TETRIS_E_FORMAT;
    return r;
}

static int read_image(int fd, uint8_t **out, size_t *len, tetris_error *err)
{
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    if (buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "graph");
    for (;;) {
        if (n == cap) {
            if (cap >= INGEST_MAX_DERIVE_IMAGE) {
                free(buf);
                return tetris_fail(err, TETRIS_E_FORMAT, 0, "graph larger than %u bytes",
                                   INGEST_MAX_DERIVE_IMAGE);
            }
            uint8_t *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "graph");
            }
            buf = bigger;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            return tetris_fail(err, TETRIS_E_IO, errno, "read the graph");
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *out = buf;
    *len = n;
    return 0;
}

/* What a run of ONNX Runtime's optimiser writes: the ONNX form (graph and
 * one data file with the pre-packed weights) or the ORT-format part. */
enum output_format { OUTPUT_ONNX, OUTPUT_ORT };

/* Optimises the share image at level `all` and has ONNX Runtime write the
 * result to out_dir in format. */
static int optimise(const OrtApi *api, const struct derive_options *o, const uint8_t *image,
                    size_t len, enum output_format format, tetris_error *err)
{
    char out[4096];
    char min_size[16];
    struct trial t;
    snprintf(out, sizeof(out), "%s/%s", o->out_dir,
             format == OUTPUT_ONNX ? "graph.onnx" : DERIVED_ORT_FILE);
    snprintf(min_size, sizeof(min_size), "%d", DERIVED_MIN_EXTERNAL_BYTES);
    int r = trial_begin(api, ORT_LOGGING_LEVEL_ERROR, ORT_ENABLE_ALL, &t, err);
    if (r == 0)
        r = ort_check(api, api->SetIntraOpNumThreads(t.so, o->threads), "set threads", err);
    if (r == 0)
        r = ort_check(api, api->SetOptimizedModelFilePath(t.so, out), "set the output", err);
    const char *const onnx_entries[][2] = {
        {"session.model_external_initializers_file_folder_path", o->external_dir},
        {"session.optimized_model_external_initializers_file_name", DERIVED_DATA_LOCATION},
        {"session.optimized_model_external_initializers_min_size_in_bytes", min_size},
        {"session.save_external_prepacked_constant_initializers", "1"},
    };
    /* The ORT format holds its initializers itself (and no pre-packed
     * ones: each session packs its own). */
    const char *const ort_entries[][2] = {
        {"session.model_external_initializers_file_folder_path", o->external_dir},
        {"session.save_model_format", "ORT"},
    };
    if (r == 0 && format == OUTPUT_ONNX)
        r = trial_config(api, &t, onnx_entries, sizeof(onnx_entries) / sizeof(onnx_entries[0]),
                         err);
    else if (r == 0)
        r = trial_config(api, &t, ort_entries, sizeof(ort_entries) / sizeof(ort_entries[0]), err);
    if (r == 0)
        r = trial_open(api, &t, image, len, "optimise the graph", err);
    trial_end(api, &t);
    return r;
}

/* Opens the ORT-format part as instances will: from a read-only mapping
 * of its file, used in place (initializers included), optimisation off,
 * pre-packing on. */
static int check_ort_opens(const OrtApi *api, const char *out_dir, tetris_error *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", out_dir, DERIVED_ORT_FILE);
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0)
        return tetris_fail(err, TETRIS_E_RUNTIME, errno, "%s: none written", path);
    void *bytes = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (bytes == MAP_FAILED)
        return tetris_fail(err, TETRIS_E_IO, errno, "mmap %s", path);
    static const char *const in_place[] = ORT_IN_PLACE_ENTRIES;
    struct trial t;
    int r = trial_begin(api, ORT_LOGGING_LEVEL_FATAL, ORT_DISABLE_ALL, &t, err);
    for (size_t i = 0; r == 0 && i < sizeof(in_place) / sizeof(in_place[0]); i++)
        r = ort_check(api, api->AddSessionConfigEntry(t.so, in_place[i], "1"), in_place[i], err);
    if (r == 0)
        r = trial_open(api, &t, bytes, (size_t)st.st_size, "open the ORT-format model", err);
    trial_end(api, &t);
    munmap(bytes, (size_t)st.st_size);
    return r;
}

/* The ORT-format part, made when the form's pre-packed weights are small
 * enough for every instance to pack its own, and the form small enough to
 * be held a third time (derived.h). Best effort: a part that cannot be
 * made or opened is left out, said in one line, and the form is the graph
 * and data alone. *made: whether it was. */
static void make_ort_part(const OrtApi *api, const struct derive_options *o, const uint8_t *image,
                          size_t len, const struct form_bytes *form, bool *made)
{
    char path[4096];
    tetris_error err = {0};
    *made = false;
    snprintf(path, sizeof(path), "%s/%s", o->out_dir, DERIVED_ORT_FILE);
    if (form->prepacked > DERIVED_ORT_MAX_PREPACKED_BYTES || form->data > DERIVED_ORT_MAX_BYTES) {
        log_info("event=derive-ort-skipped prepacked_bytes=%llu data_bytes=%llu max_prepacked=%u "
                 "max_data=%llu",
                 (unsigned long long)form->prepacked, (unsigned long long)form->data,
                 DERIVED_ORT_MAX_PREPACKED_BYTES, (unsigned long long)DERIVED_ORT_MAX_BYTES);
        return;
    }
    if (optimise(api, o, image, len, OUTPUT_ORT, &err) == 0 &&
        check_ort_opens(api, o->out_dir, &err) == 0) {
        *made = true;
        return;
    }
    unlink(path);
    log_warn("event=derive-ort-failed msg=%s action=onnx-form-only", LOG_Q(err.msg));
}

/* The output directory, opened while the process may still reach it (a
 * store's private directory is its owner's only): after the drop it is
 * named through /proc/self/fd, which a process may always follow. */
static int open_out_dir(const struct derive_options *o, int *out_fd, tetris_error *err)
{
    *out_fd = open(o->out_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (*out_fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "%s", o->out_dir);
    return 0;
}

/* ONNX Runtime resolves external data by the folder's canonical path, so
 * the store's public directory must be reachable by its real name, as it
 * is on a node (its parents are 0755). */
static int check_external_dir(const struct derive_options *o, tetris_error *err)
{
    if (access(o->external_dir, R_OK | X_OK) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno,
                           "%s is not readable by uid %d: the store's public directory and its "
                           "parents must be readable and searchable by others",
                           o->external_dir, o->uid);
    return 0;
}

/* The API version a runtime of version "1.MINOR.PATCH" offers (ONNX
 * Runtime's C API version is its minor version), at most the one this
 * program was built with: the table's first entries are the same in every
 * version, so an older runtime's table serves every call as old as it. */
static int api_version(const char *version, tetris_error *err)
{
    unsigned major = 0, minor = 0;
    if (sscanf(version, "%u.%u", &major, &minor) != 2 || major != 1)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "onnxruntime version \"%s\" is not 1.N.M",
                           version);
    if (minor < DERIVE_MIN_API)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0,
                           "onnxruntime %s is older than 1.%d, the oldest derived with", version,
                           DERIVE_MIN_API);
    return minor < ORT_API_VERSION ? (int)minor : ORT_API_VERSION;
}

/* The build's runtime: DERIVE_DEFAULT_RUNTIME in the first directory of
 * this program's library search path that has it (LD_LIBRARY_PATH, its
 * run path, the system's: as the dynamic loader would find a linked
 * one), else the bare name. Searched here rather than by dlopen, which
 * uses the run path of its caller: under ASan that is the sanitizer's
 * interceptor, which has none. */
static void default_runtime(char *out, size_t cap)
{
    snprintf(out, cap, "%s", DERIVE_DEFAULT_RUNTIME);
    void *self = dlopen(NULL, RTLD_NOW);
    Dl_serinfo size;
    if (self == NULL || dlinfo(self, RTLD_DI_SERINFOSIZE, &size) != 0)
        return;
    cleanup_free Dl_serinfo *info = malloc(size.dls_size);
    if (info == NULL)
        return;
    *info = size;
    if (dlinfo(self, RTLD_DI_SERINFOSIZE, info) != 0 || dlinfo(self, RTLD_DI_SERINFO, info) != 0)
        return;
    for (unsigned i = 0; i < info->dls_cnt; i++) {
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", info->dls_serpath[i].dls_name,
                             DERIVE_DEFAULT_RUNTIME) < sizeof(path) &&
            access(path, R_OK) == 0) {
            snprintf(out, cap, "%s", path);
            return;
        }
    }
}

/* The runtime in lib (a path the daemon gave: its operator's), else the
 * build's. The handle stays open for the life of the process. */
static int runtime_open(const char *lib, struct runtime *rt, tetris_error *err)
{
    char path[PATH_MAX];
    if (lib != NULL)
        snprintf(path, sizeof(path), "%s", lib);
    else
        default_runtime(path, sizeof(path));
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const OrtApiBase *(*get_base)(void) = NULL;
    if (h == NULL)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "%s", dlerror());
    *(void **)&get_base = dlsym(h, "OrtGetApiBase");
    if (get_base == NULL || (rt->base = get_base()) == NULL)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "%s: no OrtGetApiBase", path);
    int version = api_version(rt->base->GetVersionString(), err);
    if (version < 0)
        return version;
    rt->api = rt->base->GetApi((uint32_t)version);
    if (rt->api == NULL)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "onnxruntime %s lacks API version %d",
                           rt->base->GetVersionString(), version);
    return 0;
}

/* --runtime: what the daemon compares index entries with before it
 * derives again; no graph is read. */
static int print_runtime(const struct runtime *rt)
{
    char runtime[DERIVED_NAME_MAX];
    derived_runtime_name(rt->base->GetVersionString(), runtime, sizeof(runtime));
    printf("{\"runtime\":\"%s\"}\n", runtime);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAILED;
}

/* The result line: the runtime, what was made (the pre-packed bytes,
 * whether the ORT-format part was), and the credentials the kernel shows
 * for this process, which the daemon checks and logs. */
static int print_result(const struct runtime *rt, uint64_t prepacked, bool ort, tetris_error *err)
{
    struct unprivileged_creds c;
    int rc = unprivileged_read(&c, err);
    if (rc < 0) {
        log_error("event=derive-failed msg=%s", LOG_Q(err->msg));
        return rc;
    }
    char runtime[DERIVED_NAME_MAX];
    derived_runtime_name(rt->base->GetVersionString(), runtime, sizeof(runtime));
    printf("{\"runtime\":\"%s\",\"prepacked_bytes\":%" PRIu64 ",\"ort\":%s,\"uid\":%u,"
           "\"gid\":%u,\"groups\":%u,\"cap_eff\":\"%016" PRIx64 "\",\"cap_prm\":\"%016" PRIx64
           "\",\"cap_bnd\":\"%016" PRIx64 "\",\"no_new_privs\":%s}\n",
           runtime, prepacked, ort ? "true" : "false", (unsigned)c.uid[1], (unsigned)c.gid[1],
           c.n_groups, c.cap_eff, c.cap_prm, c.cap_bnd, c.no_new_privs ? "true" : "false");
    return fflush(stdout) == 0 ? 0 : tetris_fail(err, TETRIS_E_IO, errno, "stdout");
}

int main(int argc, char **argv)
{
    struct derive_options o = {.graph_fd = -1, .threads = 1, .uid = -1, .gid = -1};
    const struct opt_spec options[] = {
        {.name = "graph-fd",
         .type = OPT_TYPE_INT,
         .dest = &o.graph_fd,
         .min = 0,
         .max = 1 << 20,
         .meta = "N",
         .help = "read the share image from descriptor N"},
        {.name = "external-dir",
         .type = OPT_TYPE_STRING,
         .dest = &o.external_dir,
         .meta = "DIR",
         .help = "the store's public directory the graph's external data resolve in"},
        {.name = "out-dir",
         .type = OPT_TYPE_STRING,
         .dest = &o.out_dir,
         .meta = "DIR",
         .help = "write graph.onnx and " DERIVED_DATA_LOCATION " here"},
        {.name = "threads",
         .type = OPT_TYPE_INT,
         .dest = &o.threads,
         .min = 1,
         .max = 64,
         .meta = "N",
         .help = "intra-op threads (default 1)"},
        {.name = "uid",
         .type = OPT_TYPE_INT,
         .dest = &o.uid,
         .min = 1,
         .max = INT32_MAX,
         .meta = "N",
         .help = "become this user before reading the graph (with --gid; needs root)"},
        {.name = "gid",
         .type = OPT_TYPE_INT,
         .dest = &o.gid,
         .min = 1,
         .max = INT32_MAX,
         .meta = "N",
         .help = "and this group, without supplementary groups"},
        {.name = "runtime-lib",
         .type = OPT_TYPE_STRING,
         .dest = &o.runtime_lib,
         .meta = "PATH",
         .help = "derive with the ONNX Runtime in this shared library (1.22 or later) instead "
                 "of the linked one"},
        {.name = "runtime",
         .type = OPT_TYPE_FLAG,
         .dest = &o.runtime,
         .help = "print {\"runtime\":\"onnxruntime VERSION\"}, the runtime forms are made "
                 "with, and exit (the daemon asks once per runtime, to find forms it made "
                 "before)"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-derive",
        .synopsis = "--graph-fd N --external-dir DIR --out-dir DIR [--threads N]\n"
                    "[--uid N --gid N] [--runtime-lib PATH]\n"
                    "--runtime [--runtime-lib PATH]",
        .about = about,
        .options = options,
        .epilogue = epilogue,
    };
    int first = opt_parse(&prog, argc, argv);
    if (first < 0)
        return EXIT_USAGE;
    ort_telemetry_default_off();
    tetris_error err = {0};
    struct runtime rt = {0};
    if ((o.uid < 0) != (o.gid < 0)) {
        fprintf(stderr, "tetris-derive: --uid and --gid go together\n");
        return EXIT_USAGE;
    }
    bool probe = o.runtime && first == argc;
    if (!probe && (first < argc || o.graph_fd < 0 || o.external_dir == NULL || o.out_dir == NULL)) {
        fprintf(stderr, "tetris-derive: --graph-fd, --external-dir and --out-dir are needed\n");
        return EXIT_USAGE;
    }
    /* Loaded before the drop, as the dynamic loader loads a linked
     * library: a runtime may lie where only root can reach, and it is the
     * operator's, a file root alone could have written (the daemon checks
     * --runtime-lib), not the pod's. */
    if (runtime_open(o.runtime_lib, &rt, &err) < 0) {
        log_error("event=derive-failed msg=%s", LOG_Q(err.msg));
        return EXIT_FAILED;
    }
    if (probe)
        return print_runtime(&rt);
    char out_dir[64];
    cleanup_close int out_fd = -1;
    if (o.uid >= 0) {
        if (open_out_dir(&o, &out_fd, &err) < 0 ||
            unprivileged_become((uid_t)o.uid, (gid_t)o.gid, &err) < 0 ||
            check_external_dir(&o, &err) < 0) {
            log_error("event=derive-failed msg=%s", LOG_Q(err.msg));
            return EXIT_FAILED;
        }
        snprintf(out_dir, sizeof(out_dir), "/proc/self/fd/%d", out_fd);
        o.out_dir = out_dir;
    }
    /* What it writes is readable by others (0644 here and in write_file
     * and the relayout): a daemon without CAP_DAC_OVERRIDE (the chart's)
     * reads what this user wrote as "other". Nobody else reaches it: the
     * directory is beneath the store's private/, root's alone. */
    umask(022);
    cleanup_free uint8_t *image = NULL;
    size_t len = 0;
    if (read_image(o.graph_fd, &image, &len, &err) < 0) {
        log_error("event=derive-failed msg=%s", LOG_Q(err.msg));
        return err.code == TETRIS_E_FORMAT ? EXIT_BAD_INPUT : EXIT_FAILED;
    }
    struct form_bytes form = {0};
    if (optimise(rt.api, &o, image, len, OUTPUT_ONNX, &err) < 0 ||
        relayout(o.out_dir, &form, &err) < 0 || check_opens(rt.api, o.out_dir, &err) < 0) {
        log_error("event=derive-failed msg=%s", LOG_Q(err.msg));
        return err.code == TETRIS_E_FORMAT ? EXIT_BAD_INPUT : EXIT_FAILED;
    }
    bool ort = false;
    make_ort_part(rt.api, &o, image, len, &form, &ort);
    return print_result(&rt, form.prepacked, ort, &err) == 0 ? EXIT_OK : EXIT_FAILED;
}
