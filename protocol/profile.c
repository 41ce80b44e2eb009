/* profile.c - reading and writing model profiles (YAML, see profile.h).
 *
 * Reading takes the document as a tree from common/yaml_read.h (every
 * scalar a string) and walks it, checking every key and value; errors name
 * the file, the line and the key. Writing goes through libyaml's emitter so
 * strings are always quoted correctly. */
#include "protocol/profile.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <yaml.h>

#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/yaml_read.h"
#include "common/yaml_write.h"

/* ---- latency statistic ---- */

int profile_stat_parse(const char *s, enum profile_stat *out, tetris_error *err)
{
    if (strcmp(s, "mean") == 0)
        *out = PROFILE_STAT_MEAN;
    else if (strcmp(s, "p95") == 0)
        *out = PROFILE_STAT_P95;
    else if (strcmp(s, "p99") == 0)
        *out = PROFILE_STAT_P99;
    else
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "latency statistic '%s': expected mean, p95 or p99", s);
    return 0;
}

const char *profile_stat_name(enum profile_stat stat)
{
    switch (stat) {
    case PROFILE_STAT_MEAN:
        return "mean";
    case PROFILE_STAT_P95:
        return "p95";
    case PROFILE_STAT_P99:
        return "p99";
    }
    return "?";
}

double profile_config_latency(const profile_config *cfg, enum profile_stat stat)
{
    switch (stat) {
    case PROFILE_STAT_MEAN:
        return cfg->latency_ms.mean;
    case PROFILE_STAT_P95:
        return cfg->latency_ms.p95;
    case PROFILE_STAT_P99:
        return cfg->latency_ms.p99;
    }
    return cfg->latency_ms.mean;
}

/* ---- reading ---- */

/* What the walk over one profile's tree needs to report errors. */
typedef struct reader {
    const yaml_read_marks *marks;
    const char *name;
    tetris_error *err;
} reader;

static int fail_at(reader *r, yaml_read_pos at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_at(reader *r, yaml_read_pos at, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tetris_fail(r->err, TETRIS_E_FORMAT, 0, "%s:%zu: %s", r->name, at.line, what);
}

/* Where node, or the key it is the value of, was written. */
static yaml_read_pos at(reader *r, const json_t *node)
{
    return yaml_read_pos_of(r->marks, node);
}

static yaml_read_pos key_at(reader *r, const json_t *value)
{
    return yaml_read_key_pos_of(r->marks, value);
}

/* Every scalar reads as a string (yaml_read.h); NULL for a collection. */
static const char *scalar(const json_t *node)
{
    return json_string_value(node);
}

static int read_double(reader *r, const json_t *node, const char *key, double min,
                       bool min_exclusive, double *out)
{
    const char *s = scalar(node);
    if (s == NULL || *s == '\0')
        return fail_at(r, at(r, node), "%s: expected a number", key);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v))
        return fail_at(r, at(r, node), "%s: '%s' is not a number", key, s);
    if (v < min || (min_exclusive && v == min))
        return fail_at(r, at(r, node), "%s: %s must be %s %g", key, s,
                       min_exclusive ? ">" : ">=", min);
    *out = v;
    return 0;
}

static int read_u64(reader *r, const json_t *node, const char *key, uint64_t *out)
{
    const char *s = scalar(node);
    if (s == NULL || *s == '\0')
        return fail_at(r, at(r, node), "%s: expected a non-negative integer", key);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || *s == '-')
        return fail_at(r, at(r, node), "%s: '%s' is not a non-negative integer", key, s);
    *out = v;
    return 0;
}

static int read_positive_int(reader *r, const json_t *node, const char *key, int *out)
{
    const char *s = scalar(node);
    if (s == NULL || *s == '\0')
        return fail_at(r, at(r, node), "%s: expected a positive integer", key);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < 1 || v > INT_MAX)
        return fail_at(r, at(r, node), "%s: '%s' is not a positive integer", key, s);
    *out = (int)v;
    return 0;
}

static int read_string(reader *r, const json_t *node, const char *key, char **out)
{
    const char *s = scalar(node);
    if (s == NULL)
        return fail_at(r, at(r, node), "%s: expected a string", key);
    char *copy = strdup(s);
    if (copy == NULL)
        return tetris_fail(r->err, TETRIS_E_NOMEM, errno, "%s", key);
    free(*out);
    *out = copy;
    return 0;
}

static int read_bool(reader *r, const json_t *node, const char *key, bool *out)
{
    const char *s = scalar(node);
    if (s != NULL && strcmp(s, "true") == 0)
        *out = true;
    else if (s != NULL && strcmp(s, "false") == 0)
        *out = false;
    else
        return fail_at(r, at(r, node), "%s: expected true or false", key);
    return 0;
}

/* Bits of the keys a config has seen, to report missing required ones. */
enum {
    SEEN_C = 1 << 0,
    SEEN_M = 1 << 1,
    SEEN_B = 1 << 2,
    SEEN_P = 1 << 3,
    SEEN_LATENCY = 1 << 4,
    SEEN_MEAN = 1 << 5,
    SEEN_P95 = 1 << 6,
    SEEN_P99 = 1 << 7,
};

static int read_latency(reader *r, json_t *map, profile_latency *lat, unsigned *seen)
{
    if (!json_is_object(map))
        return fail_at(r, at(r, map), "latency_ms: expected a mapping {mean, p95, p99}");
    const char *key;
    json_t *v;
    json_object_foreach (map, key, v) {
        int rc;
        if (strcmp(key, "mean") == 0) {
            rc = read_double(r, v, "latency_ms.mean", 0, true, &lat->mean);
            *seen |= SEEN_MEAN;
        } else if (strcmp(key, "p95") == 0) {
            rc = read_double(r, v, "latency_ms.p95", 0, true, &lat->p95);
            *seen |= SEEN_P95;
        } else if (strcmp(key, "p99") == 0) {
            rc = read_double(r, v, "latency_ms.p99", 0, true, &lat->p99);
            *seen |= SEEN_P99;
        } else {
            return fail_at(r, key_at(r, v),
                           "latency_ms: unknown key '%s' (expected mean, p95, p99)", key);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int read_config(reader *r, json_t *map, profile_config *cfg)
{
    if (!json_is_object(map))
        return fail_at(r, at(r, map), "configs: each entry must be a mapping");
    unsigned seen = 0;
    const char *key;
    json_t *v;
    json_object_foreach (map, key, v) {
        int rc;
        if (strcmp(key, "c") == 0) {
            rc = read_double(r, v, "c", 0, true, &cfg->c);
            seen |= SEEN_C;
        } else if (strcmp(key, "m_mib") == 0) {
            rc = read_double(r, v, "m_mib", 0, true, &cfg->m_mib);
            seen |= SEEN_M;
        } else if (strcmp(key, "b") == 0) {
            rc = read_positive_int(r, v, "b", &cfg->b);
            seen |= SEEN_B;
        } else if (strcmp(key, "p") == 0) {
            rc = read_positive_int(r, v, "p", &cfg->p);
            seen |= SEEN_P;
        } else if (strcmp(key, "latency_ms") == 0) {
            rc = read_latency(r, v, &cfg->latency_ms, &seen);
            seen |= SEEN_LATENCY;
        } else if (strcmp(key, "throughput_rps") == 0) {
            rc = read_double(r, v, "throughput_rps", 0, false, &cfg->throughput_rps);
        } else if (strcmp(key, "private_bytes") == 0) {
            rc = read_u64(r, v, "private_bytes", &cfg->private_bytes);
        } else if (strcmp(key, "shared_bytes") == 0) {
            rc = read_u64(r, v, "shared_bytes", &cfg->shared_bytes);
        } else {
            return fail_at(r, key_at(r, v),
                           "config: unknown key '%s' (expected c, m_mib, b, p, latency_ms, "
                           "throughput_rps, private_bytes, shared_bytes)",
                           key);
        }
        if (rc < 0)
            return rc;
    }
    static const struct {
        unsigned bit;
        const char *key;
    } required[] = {
        {SEEN_C, "c"},
        {SEEN_M, "m_mib"},
        {SEEN_B, "b"},
        {SEEN_P, "p"},
        {SEEN_LATENCY, "latency_ms"},
        {SEEN_MEAN, "latency_ms.mean"},
        {SEEN_P95, "latency_ms.p95"},
        {SEEN_P99, "latency_ms.p99"},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!(seen & required[i].bit))
            return fail_at(r, at(r, map), "config: missing '%s'", required[i].key);
    return 0;
}

static int read_configs(reader *r, json_t *seq, profile *p)
{
    if (!json_is_array(seq))
        return fail_at(r, at(r, seq), "configs: expected a list");
    size_t n = json_array_size(seq);
    if (n == 0)
        return fail_at(r, at(r, seq), "configs: the list is empty");
    free(p->configs);
    p->configs = calloc(n, sizeof *p->configs);
    if (p->configs == NULL)
        return tetris_fail(r->err, TETRIS_E_NOMEM, errno, "%zu configs", n);
    p->n_configs = n;
    for (size_t i = 0; i < n; i++) {
        int rc = read_config(r, json_array_get(seq, i), &p->configs[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int read_profile(reader *r, json_t *root, profile *p)
{
    if (root == NULL)
        return tetris_fail(r->err, TETRIS_E_FORMAT, 0, "%s: empty document", r->name);
    if (!json_is_object(root))
        return fail_at(r, at(r, root),
                       "a profile must be a mapping (tetris_profile, model, configs)");
    bool seen_version = false, seen_configs = false;
    const char *key;
    json_t *v;
    json_object_foreach (root, key, v) {
        int rc;
        if (strcmp(key, "tetris_profile") == 0) {
            int version = 0;
            rc = read_positive_int(r, v, "tetris_profile", &version);
            if (rc == 0 && version != PROFILE_SCHEMA_VERSION)
                return fail_at(r, at(r, v),
                               "tetris_profile: version %d is not supported (expected %d)", version,
                               PROFILE_SCHEMA_VERSION);
            seen_version = true;
        } else if (strcmp(key, "model") == 0) {
            rc = read_string(r, v, "model", &p->model);
        } else if (strcmp(key, "model_file") == 0) {
            rc = read_string(r, v, "model_file", &p->model_file);
        } else if (strcmp(key, "source") == 0) {
            rc = read_string(r, v, "source", &p->source);
        } else if (strcmp(key, "measured") == 0) {
            rc = read_bool(r, v, "measured", &p->measured);
        } else if (strcmp(key, "configs") == 0) {
            rc = read_configs(r, v, p);
            seen_configs = true;
        } else {
            return fail_at(r, key_at(r, v),
                           "unknown key '%s' (expected tetris_profile, model, model_file, "
                           "measured, source, configs)",
                           key);
        }
        if (rc < 0)
            return rc;
    }
    if (!seen_version)
        return fail_at(r, at(r, root), "missing 'tetris_profile: %d'", PROFILE_SCHEMA_VERSION);
    if (p->model == NULL || p->model[0] == '\0')
        return fail_at(r, at(r, root), "missing 'model'");
    if (!seen_configs)
        return fail_at(r, at(r, root), "missing 'configs'");
    return 0;
}

int profile_parse(const char *text, size_t len, const char *name, profile **out,
                  tetris_error *err)
{
    json_t *root = NULL;
    yaml_read_marks *marks = NULL;
    int rc = yaml_read_json(text, len, name, &root, &marks, err);
    if (rc < 0)
        return rc;
    profile *p = calloc(1, sizeof *p);
    if (p == NULL)
        rc = tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", name);
    reader r = {.marks = marks, .name = name, .err = err};
    if (rc == 0)
        rc = read_profile(&r, root, p);
    json_decref(root);
    yaml_read_marks_free(marks);
    if (rc < 0) {
        profile_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int profile_load(const char *path, profile **out, tetris_error *err)
{
    cleanup_free char *text = NULL;
    size_t len;
    int rc = file_read_all(path, PROFILE_MAX_BYTES, &text, &len, err);
    if (rc == -TETRIS_E_NOTFOUND) /* the contract: any failure to read is I/O */
        return tetris_fail(err, TETRIS_E_IO, ENOENT, "open profile %s", path);
    if (rc < 0)
        return tetris_wrap(err, "profile");
    return profile_parse(text, len, path, out, err);
}

void profile_free(profile *p)
{
    if (p == NULL)
        return;
    free(p->model);
    free(p->model_file);
    free(p->source);
    free(p->configs);
    free(p);
}

/* ---- writing ---- */

static int emit_key_string(yaml_emitter_t *e, const char *key, const char *value,
                           tetris_error *err)
{
    int rc = yaml_write_scalar(e, key, YAML_PLAIN_SCALAR_STYLE, err);
    return rc < 0 ? rc : yaml_write_scalar(e, value, YAML_DOUBLE_QUOTED_SCALAR_STYLE, err);
}

static int emit_key_plain(yaml_emitter_t *e, const char *key, const char *value,
                          tetris_error *err)
{
    int rc = yaml_write_scalar(e, key, YAML_PLAIN_SCALAR_STYLE, err);
    return rc < 0 ? rc : yaml_write_scalar(e, value, YAML_PLAIN_SCALAR_STYLE, err);
}

static int emit_key_double(yaml_emitter_t *e, const char *key, double v, tetris_error *err)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.10g", v);
    return emit_key_plain(e, key, buf, err);
}

static int emit_key_u64(yaml_emitter_t *e, const char *key, uint64_t v, tetris_error *err)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return emit_key_plain(e, key, buf, err);
}

static int emit_mapping_start(yaml_emitter_t *e, yaml_mapping_style_t style, tetris_error *err)
{
    yaml_event_t ev;
    yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, style);
    return yaml_write_event(e, &ev, err);
}

static int emit_mapping_end(yaml_emitter_t *e, tetris_error *err)
{
    yaml_event_t ev;
    yaml_mapping_end_event_initialize(&ev);
    return yaml_write_event(e, &ev, err);
}

static int emit_config(yaml_emitter_t *e, const profile_config *cfg, tetris_error *err)
{
    int rc;
    if ((rc = emit_mapping_start(e, YAML_FLOW_MAPPING_STYLE, err)) < 0 ||
        (rc = emit_key_double(e, "c", cfg->c, err)) < 0 ||
        (rc = emit_key_double(e, "m_mib", cfg->m_mib, err)) < 0 ||
        (rc = emit_key_u64(e, "b", (uint64_t)cfg->b, err)) < 0 ||
        (rc = emit_key_u64(e, "p", (uint64_t)cfg->p, err)) < 0 ||
        (rc = yaml_write_scalar(e, "latency_ms", YAML_PLAIN_SCALAR_STYLE, err)) < 0 ||
        (rc = emit_mapping_start(e, YAML_FLOW_MAPPING_STYLE, err)) < 0 ||
        (rc = emit_key_double(e, "mean", cfg->latency_ms.mean, err)) < 0 ||
        (rc = emit_key_double(e, "p95", cfg->latency_ms.p95, err)) < 0 ||
        (rc = emit_key_double(e, "p99", cfg->latency_ms.p99, err)) < 0 ||
        (rc = emit_mapping_end(e, err)) < 0 ||
        (rc = emit_key_double(e, "throughput_rps", cfg->throughput_rps, err)) < 0 ||
        (rc = emit_key_u64(e, "private_bytes", cfg->private_bytes, err)) < 0 ||
        (rc = emit_key_u64(e, "shared_bytes", cfg->shared_bytes, err)) < 0)
        return rc;
    return emit_mapping_end(e, err);
}

static int emit_profile(yaml_emitter_t *e, void *ctx, tetris_error *err)
{
    const profile *p = ctx;
    yaml_event_t ev;
    int rc;
    yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
    if ((rc = yaml_write_event(e, &ev, err)) < 0 ||
        (rc = emit_mapping_start(e, YAML_BLOCK_MAPPING_STYLE, err)) < 0 ||
        (rc = emit_key_u64(e, "tetris_profile", PROFILE_SCHEMA_VERSION, err)) < 0 ||
        (rc = emit_key_string(e, "model", p->model, err)) < 0 ||
        (p->model_file && (rc = emit_key_string(e, "model_file", p->model_file, err)) < 0) ||
        (rc = emit_key_plain(e, "measured", p->measured ? "true" : "false", err)) < 0 ||
        (p->source && (rc = emit_key_string(e, "source", p->source, err)) < 0) ||
        (rc = yaml_write_scalar(e, "configs", YAML_PLAIN_SCALAR_STYLE, err)) < 0)
        return rc;
    yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
    if ((rc = yaml_write_event(e, &ev, err)) < 0)
        return rc;
    for (size_t i = 0; i < p->n_configs; i++)
        if ((rc = emit_config(e, &p->configs[i], err)) < 0)
            return rc;
    yaml_sequence_end_event_initialize(&ev);
    if ((rc = yaml_write_event(e, &ev, err)) < 0 || (rc = emit_mapping_end(e, err)) < 0)
        return rc;
    yaml_document_end_event_initialize(&ev, 1);
    return yaml_write_event(e, &ev, err);
}

int profile_write(FILE *f, const profile *p, tetris_error *err)
{
    if (p->model == NULL || p->n_configs == 0)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "write profile: needs a model and configs");
    int rc = yaml_write_stream(f, 200, emit_profile, (void *)p, err);
    return rc < 0 ? tetris_wrap(err, "write profile") : 0;
}

int profile_save(const char *path, const profile *p, tetris_error *err)
{
    cleanup_free char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "save profile %s", path);
    int rc = profile_write(mem, p, err);
    if (fclose(mem) != 0 && rc == 0)
        rc = tetris_fail(err, TETRIS_E_NOMEM, errno, "save profile %s", path);
    if (rc < 0)
        return rc;
    return file_replace(path, text, len, 0644, err);
}
