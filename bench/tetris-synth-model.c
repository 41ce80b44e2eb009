/* tetris-synth-model.c - writes synthetic paper-scale models for the
 * benchmarks: safetensors files whose tensors have the real names and shapes
 * of a BERT architecture and seeded pseudo-random float32 values.
 *
 * The weights are random, not trained: the files exist to measure memory and
 * load times at the sizes the Tetris paper reports (BERT-base ~440 MB,
 * BERT-large / "Bert-QA" ~1.3 GB), which no model we can install has.
 *
 * Same arch + seed gives the same bytes. A "fine-tuned variant" N with K
 * shared layers is bit-for-bit identical to the base model in its backbone
 * (embeddings and encoder layers 0..K-1) and differs above it (layers K.. and
 * the pooler), like models fine-tuned from one pretrained backbone with the
 * bottom layers frozen. Each tensor's values come from its own PRNG stream
 * seeded by (seed, tensor name, variant-or-0), so sharing needs no state. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/log.h"
#include "common/options.h"

#define WRITE_CHUNK (8u << 20) /* large writes: the files are GBs */

/* Exit codes (see --help). */
enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_USAGE = 2 };

struct arch {
    const char *name;
    const char *about;
    int64_t vocab, max_positions, type_vocab;
    int64_t hidden, layers, intermediate;
};

/* Hyper-parameters of the published BERT checkpoints (uncased). */
static const struct arch archs[] = {
    {"bert-tiny", "BERT-tiny shapes: 2 layers x 128 hidden, ~17.6 MB", 30522, 512, 2, 128, 2, 512},
    {"bert-base", "BERT-base shapes: 12 layers x 768 hidden, ~438 MB", 30522, 512, 2, 768, 12,
     3072},
    {"bert-large", "BERT-large shapes: 24 layers x 1024 hidden, ~1.34 GB", 30522, 512, 2, 1024, 24,
     4096},
};

/* How a tensor's values are distributed, roughly as in a trained BERT. */
enum init_kind {
    INIT_WEIGHT, /* uniform in [-0.05, 0.05) */
    INIT_BIAS,   /* uniform in [-0.01, 0.01) */
    INIT_GAIN,   /* LayerNorm gamma: 1 + uniform in [-0.05, 0.05) */
};

struct synth_tensor {
    char name[96];
    int ndim;
    int64_t shape[2];
    int layer; /* -1 embeddings, 0..layers-1 encoder, layers = pooler */
    enum init_kind init;
    uint64_t offset; /* in the data section */
    uint64_t nbytes;
};

struct plan {
    const struct arch *arch;
    uint64_t seed;
    unsigned variant;   /* 0: the base model */
    long shared_layers; /* for variant > 0 */
    struct synth_tensor *tensors;
    size_t n, cap;
    uint64_t data_bytes;
};

/* ---- the tensor list ---- */

static int plan_add(struct plan *p, int layer, enum init_kind init, int64_t rows, int64_t cols,
                    tetris_error *err, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

static int plan_add(struct plan *p, int layer, enum init_kind init, int64_t rows, int64_t cols,
                    tetris_error *err, const char *fmt, ...)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        struct synth_tensor *t = realloc(p->tensors, cap * sizeof *t);
        if (t == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "tensor list");
        p->tensors = t;
        p->cap = cap;
    }
    struct synth_tensor *t = &p->tensors[p->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->layer = layer;
    t->init = init;
    t->ndim = cols > 0 ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->nbytes = (uint64_t)rows * (uint64_t)(cols > 0 ? cols : 1) * sizeof(float);
    t->offset = p->data_bytes;
    p->data_bytes += t->nbytes;
    return 0;
}

/* A linear layer in PyTorch layout: weight [out, in], bias [out]. */
static int plan_add_linear(struct plan *p, int layer, const char *prefix, int64_t in, int64_t out,
                           tetris_error *err)
{
    int r = plan_add(p, layer, INIT_WEIGHT, out, in, err, "%s.weight", prefix);
    if (r == 0)
        r = plan_add(p, layer, INIT_BIAS, out, 0, err, "%s.bias", prefix);
    return r;
}

static int plan_add_layernorm(struct plan *p, int layer, const char *prefix, int64_t dim,
                              tetris_error *err)
{
    int r = plan_add(p, layer, INIT_GAIN, dim, 0, err, "%s.weight", prefix);
    if (r == 0)
        r = plan_add(p, layer, INIT_BIAS, dim, 0, err, "%s.bias", prefix);
    return r;
}

/* The tensors of a Hugging Face BertModel checkpoint, in its order. */
static int plan_build(struct plan *p, tetris_error *err)
{
    const struct arch *a = p->arch;
    int64_t h = a->hidden;
    int r;
    if ((r = plan_add(p, -1, INIT_WEIGHT, a->vocab, h, err, "embeddings.word_embeddings.weight")) ||
        (r = plan_add(p, -1, INIT_WEIGHT, a->max_positions, h, err,
                      "embeddings.position_embeddings.weight")) ||
        (r = plan_add(p, -1, INIT_WEIGHT, a->type_vocab, h, err,
                      "embeddings.token_type_embeddings.weight")) ||
        (r = plan_add_layernorm(p, -1, "embeddings.LayerNorm", h, err)))
        return r;
    for (int l = 0; l < a->layers; l++) {
        static const char *const attn[] = {"attention.self.query", "attention.self.key",
                                           "attention.self.value", "attention.output.dense"};
        char prefix[80];
        for (size_t i = 0; i < sizeof attn / sizeof attn[0]; i++) {
            snprintf(prefix, sizeof prefix, "encoder.layer.%d.%s", l, attn[i]);
            if ((r = plan_add_linear(p, l, prefix, h, h, err)))
                return r;
        }
        snprintf(prefix, sizeof prefix, "encoder.layer.%d.attention.output.LayerNorm", l);
        if ((r = plan_add_layernorm(p, l, prefix, h, err)))
            return r;
        snprintf(prefix, sizeof prefix, "encoder.layer.%d.intermediate.dense", l);
        if ((r = plan_add_linear(p, l, prefix, h, a->intermediate, err)))
            return r;
        snprintf(prefix, sizeof prefix, "encoder.layer.%d.output.dense", l);
        if ((r = plan_add_linear(p, l, prefix, a->intermediate, h, err)))
            return r;
        snprintf(prefix, sizeof prefix, "encoder.layer.%d.output.LayerNorm", l);
        if ((r = plan_add_layernorm(p, l, prefix, h, err)))
            return r;
    }
    return plan_add_linear(p, (int)a->layers, "pooler.dense", h, h, err);
}

/* True when tensor t of a variant is the base model's tensor, bit for bit. */
static bool plan_tensor_shared(const struct plan *p, const struct synth_tensor *t)
{
    return p->variant == 0 || (p->shared_layers > 0 && t->layer < p->shared_layers);
}

/* ---- the safetensors header ---- */

/* {"__metadata__":{...},"NAME":{"dtype":"F32","shape":[..],"data_offsets":[b,e]},...}
 * padded with spaces to a multiple of 8 so the data section is aligned. */
static int plan_header(const struct plan *p, char **out, size_t *out_len, tetris_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    cleanup_fclose FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "header buffer");
    fprintf(f,
            "{\"__metadata__\":{\"format\":\"pt\",\"synthetic\":\"true\",\"arch\":\"%s\","
            "\"seed\":\"%" PRIu64 "\",\"variant\":\"%u\",\"shared_layers\":\"%ld\"}",
            p->arch->name, p->seed, p->variant, p->variant ? p->shared_layers : p->arch->layers);
    for (size_t i = 0; i < p->n; i++) {
        const struct synth_tensor *t = &p->tensors[i];
        fprintf(f, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%" PRId64, t->name, t->shape[0]);
        if (t->ndim == 2)
            fprintf(f, ",%" PRId64, t->shape[1]);
        fprintf(f, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", t->offset,
                t->offset + t->nbytes);
    }
    fputc('}', f);
    long pos = ftell(f);
    while (pos >= 0 && pos % 8 != 0) {
        fputc(' ', f);
        pos++;
    }
    bool failed = ferror(f) || pos < 0;
    failed |= fclose(f) != 0; /* buf is only valid once the stream is closed */
    f = NULL;
    if (failed) {
        free(buf);
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "header buffer");
    }
    *out = buf;
    *out_len = len;
    return 0;
}

/* ---- values: one xoshiro256** stream per tensor ---- */

struct rng {
    uint64_t s[4];
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Stream for (seed, name, tag): FNV-1a of the name mixed through splitmix64. */
static void rng_seed(struct rng *r, uint64_t seed, const char *name, uint64_t tag)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = (h ^ *c) * 0x100000001b3ull;
    uint64_t x = seed ^ rotl(h, 17) ^ (tag * 0xd6e8feb86659fd93ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

/* A float in [-0.5, 0.5) from 23 random bits, via the [1, 2) exponent trick. */
static float unit_float(uint32_t bits23)
{
    union {
        uint32_t u;
        float f;
    } v = {.u = 0x3f800000u | bits23};
    return v.f - 1.5f;
}

/* Fills n floats; two per 64-bit draw. n is even for every BERT tensor. */
static void rng_fill(struct rng *r, enum init_kind init, float *dst, size_t n)
{
    float scale = init == INIT_BIAS ? 0.02f : 0.1f;
    float base = init == INIT_GAIN ? 1.0f : 0.0f;
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t x = rng_next(r);
        dst[i] = base + scale * unit_float((uint32_t)(x >> 41));
        dst[i + 1] = base + scale * unit_float((uint32_t)x & 0x7fffffu);
    }
    if (i < n)
        dst[i] = base + scale * unit_float((uint32_t)(rng_next(r) >> 41));
}

/* ---- writing ---- */

static int write_all(int fd, const void *buf, size_t len, const char *path, tetris_error *err)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "write %s", path);
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static void show_progress(uint64_t done, uint64_t total)
{
    if (log_is_tty())
        fprintf(stderr, "\rwriting %3d%%", (int)(done * 100 / (total ? total : 1)));
}

/* Writes the model to tmp_path (created exclusively). */
static int plan_write(const struct plan *p, const char *tmp_path, tetris_error *err)
{
    cleanup_free char *header = NULL;
    size_t header_len;
    int r = plan_header(p, &header, &header_len, err);
    if (r < 0)
        return r;
    cleanup_free float *buf = malloc(WRITE_CHUNK);
    if (buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "write buffer");
    cleanup_close int fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "create %s", tmp_path);

    uint8_t len_le[8];
    for (int i = 0; i < 8; i++)
        len_le[i] = (uint8_t)((uint64_t)header_len >> (8 * i));
    if ((r = write_all(fd, len_le, sizeof len_le, tmp_path, err)) < 0 ||
        (r = write_all(fd, header, header_len, tmp_path, err)) < 0)
        return r;

    /* Tensors are back to back in plan order: stream them through buf. */
    const size_t buf_floats = WRITE_CHUNK / sizeof(float);
    size_t used = 0;
    uint64_t written = 0;
    for (size_t i = 0; i < p->n; i++) {
        const struct synth_tensor *t = &p->tensors[i];
        struct rng rng;
        rng_seed(&rng, p->seed, t->name, plan_tensor_shared(p, t) ? 0 : p->variant);
        size_t left = t->nbytes / sizeof(float);
        while (left > 0) {
            size_t n = buf_floats - used < left ? buf_floats - used : left;
            rng_fill(&rng, t->init, buf + used, n);
            used += n;
            left -= n;
            if (used == buf_floats) {
                if ((r = write_all(fd, buf, used * sizeof(float), tmp_path, err)) < 0)
                    return r;
                written += used * sizeof(float);
                used = 0;
                show_progress(written, p->data_bytes);
            }
        }
    }
    if ((r = write_all(fd, buf, used * sizeof(float), tmp_path, err)) < 0)
        return r;
    show_progress(p->data_bytes, p->data_bytes);
    if (log_is_tty())
        fputc('\n', stderr);
    if (close(steal_fd(&fd)) != 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "close %s", tmp_path);
    return 0;
}

/* Writes to a temp name next to path, then renames: a reader (or a
 * concurrent benchmark) never sees a half-written model. */
static int plan_write_atomic(const struct plan *p, const char *path, tetris_error *err)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "path too long: %s", path);
    int r = plan_write(p, tmp, err);
    if (r == 0 && rename(tmp, path) != 0)
        r = tetris_fail(err, TETRIS_E_IO, errno, "rename %s to %s", tmp, path);
    if (r < 0)
        unlink(tmp);
    return r;
}

/* ---- the cache ---- */

static int mkdir_p(const char *path, tetris_error *err)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "path too long: %s", path);
    for (char *s = buf + 1;; s++) {
        bool end = *s == '\0';
        if (*s == '/' || end) {
            *s = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return tetris_fail(err, TETRIS_E_IO, errno, "mkdir %s", buf);
            if (end)
                return 0;
            *s = '/';
        }
    }
}

/* ${TETRIS_CACHE:-$HOME/.cache/tetris}/synthetic/<name>.safetensors */
static int cache_path(const struct plan *p, char *out, size_t len, tetris_error *err)
{
    const char *cache = getenv("TETRIS_CACHE");
    const char *home = getenv("HOME");
    char dir[PATH_MAX];
    int n;
    if (cache != NULL && *cache != '\0')
        n = snprintf(dir, sizeof dir, "%s/synthetic", cache);
    else if (home != NULL && *home != '\0')
        n = snprintf(dir, sizeof dir, "%s/.cache/tetris/synthetic", home);
    else
        return tetris_fail(err, TETRIS_E_INVAL, 0, "neither TETRIS_CACHE nor HOME is set");
    if (n >= (int)sizeof dir)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "cache path too long");
    int r = mkdir_p(dir, err);
    if (r < 0)
        return r;
    if (p->variant == 0)
        n = snprintf(out, len, "%s/synthetic-%s-seed%" PRIu64 ".safetensors", dir, p->arch->name,
                     p->seed);
    else
        n = snprintf(out, len, "%s/synthetic-%s-seed%" PRIu64 "-variant%u-shared%ld.safetensors",
                     dir, p->arch->name, p->seed, p->variant, p->shared_layers);
    if (n < 0 || (size_t)n >= len)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "cache path too long");
    return 0;
}

/* A cached file is reused when it has exactly the expected size (an
 * interrupted write never has: it is renamed into place only when done). */
static bool cache_file_ok(const struct plan *p, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    cleanup_free char *header = NULL;
    size_t header_len;
    if (plan_header(p, &header, &header_len, NULL) < 0)
        return false;
    return (uint64_t)st.st_size == 8 + header_len + p->data_bytes;
}

/* ---- command line ---- */

/* "ARCH:" and one line per architecture, for the help. */
static void describe_archs(char *buf, size_t size)
{
    size_t len = (size_t)
        snprintf(buf, size,
                 "Writes a SYNTHETIC model: a safetensors file with the real tensor "
                 "names and\nshapes of ARCH and seeded pseudo-random float32 values "
                 "(not trained weights),\nfor memory and load-time benchmarks. "
                 "Prints the file's path on stdout.\n\nARCH:\n");
    for (size_t i = 0; i < sizeof archs / sizeof archs[0] && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "  %-12s %s\n", archs[i].name,
                                archs[i].about);
}

/* The options and ARCH into p and the output file; -1 after a usage
 * error. */
static int parse_args(int argc, char **argv, struct plan *p, const char **output, bool *force)
{
    uint64_t variant = 0, shared_layers = UINT64_MAX; /* not given */
    char about[2048];
    const struct opt_spec options[] = {
        {.name = "output",
         .short_name = 'o',
         .type = OPT_TYPE_STRING,
         .dest = output,
         .meta = "FILE",
         .help = "write FILE (always rewritten); default: the cache, reused when already there: "
                 "${TETRIS_CACHE:-$HOME/.cache/tetris}/synthetic/"},
        {.name = "seed",
         .short_name = 's',
         .type = OPT_TYPE_U64,
         .dest = &p->seed,
         .meta = "N",
         .help = "seed (default 1); same ARCH and seed, same bytes"},
        {.name = "variant",
         .type = OPT_TYPE_U64,
         .dest = &variant,
         .umin = 1,
         .umax = 1000000,
         .meta = "N",
         .help = "synthetic fine-tuned variant N >= 1 of the seed's model"},
        {.name = "shared-layers",
         .type = OPT_TYPE_U64,
         .dest = &shared_layers,
         .umin = 0,
         .umax = 1000,
         .meta = "K",
         .help = "with --variant: the embeddings and encoder layers 0..K-1 are bit-for-bit those "
                 "of the base model, layers K.. and the pooler differ (K=0: nothing shared)"},
        {.name = "force",
         .short_name = 'f',
         .type = OPT_TYPE_FLAG,
         .dest = force,
         .help = "rewrite a cached file"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-synth-model",
        .synopsis = "[OPTION]... ARCH",
        .about = about,
        .options = options,
        .epilogue = "Exit status: 0 written or reused, 1 error (I/O, memory), 2 usage error.\n",
    };
    int first;

    describe_archs(about, sizeof(about));
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return -1;
    if (first != argc - 1)
        return opt_usage_error(&prog, "expected one ARCH");
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(argv[first], archs[i].name) == 0)
            p->arch = &archs[i];
    if (p->arch == NULL)
        return opt_usage_error(&prog, "unknown ARCH '%s'", argv[first]);
    if ((variant > 0) != (shared_layers != UINT64_MAX))
        return opt_usage_error(&prog, "--variant and --shared-layers go together");
    if (variant > 0 && (int64_t)shared_layers > p->arch->layers)
        return opt_usage_error(&prog, "--shared-layers exceeds the %" PRId64 " layers of %s",
                               p->arch->layers, p->arch->name);
    p->variant = (unsigned)variant;
    p->shared_layers = variant > 0 ? (long)shared_layers : -1;
    return 0;
}

int main(int argc, char **argv)
{
    struct plan p = {.seed = 1, .shared_layers = -1};
    const char *output = NULL;
    bool force = false;
    tetris_error err = {0};
    int r;

    log_init(argv[0]);
    if (parse_args(argc, argv, &p, &output, &force) < 0)
        return EXIT_USAGE;
    r = plan_build(&p, &err);
    char path[PATH_MAX];
    if (r == 0 && output == NULL)
        r = cache_path(&p, path, sizeof path, &err);
    else if (r == 0 && snprintf(path, sizeof path, "%s", output) >= (int)sizeof path)
        r = tetris_fail(&err, TETRIS_E_INVAL, 0, "path too long: %s", output);
    if (r == 0) {
        if (output == NULL && !force && cache_file_ok(&p, path)) {
            log_info("event=reuse path=%s bytes=%" PRIu64, path, p.data_bytes);
        } else {
            r = plan_write_atomic(&p, path, &err);
            if (r == 0)
                log_info("event=written path=%s arch=%s seed=%" PRIu64
                         " variant=%u tensors=%zu bytes=%" PRIu64,
                         path, p.arch->name, p.seed, p.variant, p.n, p.data_bytes);
        }
    }
    free(p.tensors);
    if (r < 0) {
        log_error("event=failed code=%s msg=%s", tetris_code_name(r), LOG_Q(err.msg));
        return EXIT_ERROR;
    }
    printf("%s\n", path);
    return EXIT_OK;
}
