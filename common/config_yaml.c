/* config_yaml.c - libyaml event parser folding nested mappings into dotted
 * keys (see config_yaml.h). */
#include "common/config_yaml.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "common/cleanup.h"
#include "common/fileio.h"

#define MAX_DEPTH 8
#define MAX_CONFIG_BYTES (1 << 20)

struct fold {
    config_yaml *cfg;
    const char *name;
    char *keys[MAX_DEPTH]; /* keys[i]: the current key of open mapping i */
    int depth;             /* open mappings */
    bool want_key;         /* next scalar in the innermost mapping is a key */
};

static int add_item(struct fold *f, const char *value, int line, tetris_error *err)
{
    size_t klen = 0;
    for (int i = 0; i < f->depth; i++)
        klen += strlen(f->keys[i]) + 1;
    char *key = malloc(klen + 1);
    char *val = strdup(value);
    struct config_item *items =
        realloc(f->cfg->items, (f->cfg->n_items + 1) * sizeof(*f->cfg->items));
    if (items != NULL)
        f->cfg->items = items;
    if (key == NULL || val == NULL || items == NULL) {
        free(key);
        free(val);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", f->name);
    }
    key[0] = '\0';
    for (int i = 0; i < f->depth; i++) {
        if (i > 0)
            strcat(key, ".");
        strcat(key, f->keys[i]);
    }
    items[f->cfg->n_items++] = (struct config_item){key, val, line};
    return 0;
}

static int on_event(struct fold *f, const yaml_event_t *ev, tetris_error *err)
{
    int line = (int)ev->start_mark.line + 1;
    switch (ev->type) {
    case YAML_MAPPING_START_EVENT:
        if (f->depth > 0 && f->want_key)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s:%d: a mapping cannot be a key",
                               f->name, line);
        if (f->depth >= MAX_DEPTH)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s:%d: nested too deeply", f->name,
                               line);
        f->depth++;
        f->want_key = true;
        return 0;
    case YAML_MAPPING_END_EVENT:
        f->depth--;
        free(f->keys[f->depth]);
        f->keys[f->depth] = NULL;
        f->want_key = true;
        return 0;
    case YAML_SEQUENCE_START_EVENT:
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s:%d: lists are not supported here",
                           f->name, line);
    case YAML_ALIAS_EVENT:
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s:%d: aliases are not supported",
                           f->name, line);
    case YAML_SCALAR_EVENT: {
        const char *v = (const char *)ev->data.scalar.value;
        if (f->depth == 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s:%d: expected a mapping of settings", f->name, line);
        if (f->want_key) {
            free(f->keys[f->depth - 1]);
            f->keys[f->depth - 1] = strdup(v);
            if (f->keys[f->depth - 1] == NULL)
                return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", f->name);
            f->want_key = false;
            return 0;
        }
        f->want_key = true;
        return add_item(f, v, line, err);
    }
    default:
        return 0;
    }
}

int config_yaml_parse(const char *text, size_t len, const char *name, config_yaml **out,
                      tetris_error *err)
{
    config_yaml *cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s", name);
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        free(cfg);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: yaml parser", name);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    struct fold f = {.cfg = cfg, .name = name, .want_key = true};
    int rc = 0;
    for (bool done = false; !done && rc == 0;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s:%zu: %s", name,
                             parser.problem_mark.line + 1,
                             parser.problem ? parser.problem : "YAML syntax error");
            break;
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        rc = on_event(&f, &ev, err);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    for (int i = 0; i < MAX_DEPTH; i++)
        free(f.keys[i]);
    if (rc < 0) {
        config_yaml_free(cfg);
        return rc;
    }
    *out = cfg;
    return 0;
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
