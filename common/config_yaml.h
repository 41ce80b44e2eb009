/* config_yaml.h - read a YAML configuration file into flat key/value pairs.
 *
 * The file is read by common/yaml_read.h (one document, no duplicate keys,
 * no anchors or aliases). Nested mappings become dotted keys:
 * `scrub: {rate: 10Mi}` gives "scrub.rate" = "10Mi", in document order.
 * Values are scalars as written (the caller parses numbers and sizes);
 * sequences are refused with TETRIS_E_FORMAT. The line of each value is
 * kept so errors can point at it. */
#ifndef TETRIS_CONFIG_YAML_H
#define TETRIS_CONFIG_YAML_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct config_item {
    char *key;
    char *value;
    int line; /* 1-based */
};

typedef struct config_yaml {
    size_t n_items;
    struct config_item *items;
} config_yaml;

int config_yaml_load(const char *path, config_yaml **out, tetris_error *err);
int config_yaml_parse(const char *text, size_t len, const char *name, config_yaml **out,
                      tetris_error *err);
/* The last value given for key (`a.b: 1` and `a: {b: 2}` are distinct
 * YAML keys but one setting), or NULL. */
const struct config_item *config_yaml_get(const config_yaml *c, const char *key);
void config_yaml_free(config_yaml *c);

/* Setting values. "4096", "64Ki", "2Gi", "1.5G", "10M": bytes, with binary
 * (Ki Mi Gi Ti) and decimal (k/K M G T) suffixes as Kubernetes quantities. */
int config_parse_bytes(const char *s, uint64_t *out, tetris_error *err);
/* "30", "2.5", "30s", "500ms", "5m", "1h", "1d": seconds. */
int config_parse_seconds(const char *s, double *out, tetris_error *err);

#endif
