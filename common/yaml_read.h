/* yaml_read.h - the one YAML reader: text to a jansson tree.
 *
 * Every YAML file the suite reads (kubeconfigs, model profiles, daemon
 * settings) goes through yaml_read_json, so the same limits hold for all
 * of them and each caller walks plain jansson values. The tree:
 *
 *  - The text holds at most one document. None (empty text, comments
 *    only) gives *out == NULL; a second one is refused.
 *  - A mapping becomes an object with its entries in document order. Keys
 *    must be scalars and unique within their mapping.
 *  - A sequence becomes an array.
 *  - Every scalar becomes a JSON string of its text as written, plain or
 *    quoted alike: `5`, `"5"`, `true`, `null`, `~` and an empty value give
 *    "5", "5", "true", "null", "~" and "". Tags are ignored. Callers parse
 *    numbers and booleans themselves, as their own formats define them.
 *  - Anchors and aliases are refused: none of these files needs them, and
 *    aliases are how a few hundred bytes expand into gigabytes ("billion
 *    laughs").
 *  - Collections nest at most YAML_READ_MAX_DEPTH deep, so a hostile file
 *    cannot recurse the reader off its stack.
 *  - A scalar holding a NUL (an escaped "\0") is refused, so every string
 *    is a C string.
 *
 * A refusal is -TETRIS_E_FORMAT with "WHAT: YAML: PROBLEM at line L,
 * column C"; -TETRIS_E_NOMEM when memory runs out.
 *
 * Where each value was written (for a caller's own messages) comes back in
 * an optional yaml_read_marks, looked up by the value's json_t: every node
 * of the tree is a distinct object (no shared json_true()/json_null()
 * singletons), so the pointer names one place in the text. */
#ifndef TETRIS_YAML_READ_H
#define TETRIS_YAML_READ_H

#include <stddef.h>

#include <jansson.h>

#include "common/error.h"

/* The deepest nesting of collections accepted: the root mapping or
 * sequence is level 1. */
#define YAML_READ_MAX_DEPTH 64

/* A place in the text, 1-based; {0, 0} when unknown. */
typedef struct yaml_read_pos {
    size_t line, column;
} yaml_read_pos;

/* Where each node of one tree was written. */
typedef struct yaml_read_marks yaml_read_marks;

/* Reads the len bytes at text (what names them in errors). On success
 * *out is the tree, or NULL for a text without a document, and *marks
 * (when marks is not NULL) its positions, freed with yaml_read_marks_free;
 * on failure neither is set. */
int yaml_read_json(const char *text, size_t len, const char *what, json_t **out,
                   yaml_read_marks **marks, tetris_error *err);

/* Where node starts (a collection: its first token); {0, 0} when node is
 * not in the tree the marks came with. */
yaml_read_pos yaml_read_pos_of(const yaml_read_marks *marks, const json_t *node);
/* Where the key of value's mapping entry starts; {0, 0} when value is not
 * a mapping's value. */
yaml_read_pos yaml_read_key_pos_of(const yaml_read_marks *marks, const json_t *value);

void yaml_read_marks_free(yaml_read_marks *marks);

#endif
