/* config_yaml.c - settings files: the tree yaml_read gives, its nested
 * mappings folded into dotted keys (see config_yaml.h). */
#include "common/config_yaml.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/yaml_read.h"

/* The deepest nesting of mappings a setting may have (root included). */
#define MAX_DEPTH 8
#define MAX_CONFIG_BYTES (1 << 20)

struct fold {
    config_yaml *cfg;
    const yaml_read_marks *marks;
    const char *name;
    tetris_error *err;
};

static int fold_mapping(struct fold *f, json_t *map, const char *prefix, int depth);
static int add_item(struct fold *f, const char *key, json_t *value);
static int fail_at(struct fold *f, const json_t *node, const char *what);

int config_yaml_parse(const char *text, size_t len, const char *name, config_yaml **out,
                      tetris_error *err)
{
    json_t *root = NULL;
    yaml_read_marks *marks = NULL;
    int rc = yaml_read_json(text, len, name, &root, &marks, err);
    if (rc < 0)
        return rc;
    config_yaml *cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL)
        rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", name);
    struct fold f = {.cfg = cfg, .marks = marks, .name = name, .err = err};
    if (rc == 0 && json_is_array(root))
        rc = fail_at(&f, root, "lists are not supported here");
    else if (rc == 0 && json_is_string(root))
        rc = fail_at(&f, root, "expected a mapping of settings");
    else if (rc == 0 && root != NULL)
        rc = fold_mapping(&f, root, "", 1);
    json_decref(root);
    yaml_read_marks_free(marks);
    if (rc < 0) {
        config_yaml_free(cfg);
        return rc;
    }
    *out = cfg;
    return 0;
}

/* The settings of map (depth mappings deep), their keys after prefix. */
static int fold_mapping(struct fold *f, json_t *map, const char *prefix, int depth)
{
    const char *key;
    json_t *value;
    json_object_foreach (map, key, value) {
        cleanup_free char *full = NULL;
        if (asprintf(&full, "%s%s%s", prefix, prefix[0] != '\0' ? "." : "", key) < 0)
            return tetris_fail(f->err, TETRIS_E_NOMEM, ENOMEM, "%s", f->name);
        int rc;
        if (json_is_array(value))
            rc = fail_at(f, value, "lists are not supported here");
        else if (json_is_object(value) && depth >= MAX_DEPTH)
            rc = fail_at(f, value, "nested too deeply");
        else if (json_is_object(value))
            rc = fold_mapping(f, value, full, depth + 1);
        else
            rc = add_item(f, full, value);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Appends the setting key with value's text and line. */
static int add_item(struct fold *f, const char *key, json_t *value)
{
    char *k = strdup(key);
    char *v = strdup(json_string_value(value));
    struct config_item *items = realloc(f->cfg->items,
                                        (f->cfg->n_items + 1) * sizeof(*f->cfg->items));
    if (items != NULL)
        f->cfg->items = items;
    if (k == NULL || v == NULL || items == NULL) {
        free(k);
        free(v);
        return tetris_fail(f->err, TETRIS_E_NOMEM, ENOMEM, "%s", f->name);
    }
    int line = (int)yaml_read_pos_of(f->marks, value).line;
    items[f->cfg->n_items++] = (struct config_item){k, v, line};
    return 0;
}

static int fail_at(struct fold *f, const json_t *node, const char *what)
{
    return tetris_fail(f->err, TETRIS_E_FORMAT, 0, "%s:%zu: %s", f->name,
                       yaml_read_pos_of(f->marks, node).line, what);
}

int config_yaml_load(const char *path, config_yaml **out, tetris_error *err)
{
    cleanup_free char *buf = NULL;
    size_t n;
    int rc = file_read_all(path, MAX_CONFIG_BYTES, &buf, &n, err);
    if (rc == -TETRIS_E_NOTFOUND) /* the contract: any failure to read is I/O */
        return tetris_fail(err, TETRIS_E_IO, ENOENT, "open %s", path);
    if (rc < 0)
        return rc;
    return config_yaml_parse(buf, n, path, out, err);
}

const struct config_item *config_yaml_get(const config_yaml *c, const char *key)
{
    for (size_t i = c->n_items; i > 0; i--)
        if (strcmp(c->items[i - 1].key, key) == 0)
            return &c->items[i - 1];
    return NULL;
}

void config_yaml_free(config_yaml *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n_items; i++) {
        free(c->items[i].key);
        free(c->items[i].value);
    }
    free(c->items);
    free(c);
}

int config_parse_bytes(const char *s, uint64_t *out, tetris_error *err)
{
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {
        {"", 1},          {"k", 1e3},           {"K", 1e3},           {"M", 1e6},
        {"G", 1e9},       {"T", 1e12},          {"Ki", 1024.0},       {"Mi", 1048576.0},
        {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}, {"B", 1},
    };
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno != 0 || !isfinite(v) || v < 0)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "bad byte count \"%s\"", s);
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            double b = v * units[i].mult;
            if (b >= 1.8e19)
                return tetris_fail(err, TETRIS_E_INVAL, 0, "byte count \"%s\" too large", s);
            *out = (uint64_t)b;
            return 0;
        }
    }
    return tetris_fail(err, TETRIS_E_INVAL, 0,
                       "bad byte count \"%s\" (suffixes: Ki Mi Gi Ti k M G T)", s);
}

int config_parse_seconds(const char *s, double *out, tetris_error *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno != 0 || !isfinite(v) || v < 0)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "bad duration \"%s\"", s);
    double mult = 1;
    if (strcmp(end, "") == 0 || strcmp(end, "s") == 0)
        mult = 1;
    else if (strcmp(end, "ms") == 0)
        mult = 0.001;
    else if (strcmp(end, "m") == 0)
        mult = 60;
    else if (strcmp(end, "h") == 0)
        mult = 3600;
    else if (strcmp(end, "d") == 0)
        mult = 86400;
    else
        return tetris_fail(err, TETRIS_E_INVAL, 0, "bad duration \"%s\" (suffixes: ms s m h d)",
                           s);
    *out = v * mult;
    return 0;
}
