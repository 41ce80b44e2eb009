/* fuzz_yaml.c - libFuzzer harness for the one YAML reader
 * (common/yaml_read.c) and the two readers on top of it that take files
 * from outside: daemon settings (common/config_yaml.c) and model profiles
 * (protocol/profile.c). Each input is read by all three. A refusal is a
 * format error naming the input; an accepted tree keeps the promises of
 * yaml_read.h (only objects, arrays and NUL-free strings, bounded depth,
 * a position for every node); accepted settings carry their lines; an
 * accepted profile writes out and reads back to the same text.
 * (kubeconfig.c reads through the same reader but opens the files a
 * kubeconfig names, so it is not fuzzed here.) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_common.h"
#include "common/config_yaml.h"
#include "common/log.h"
#include "common/yaml_read.h"
#include "protocol/profile.h"

#define NAME "fuzz.yaml"

static void check_refusal(const tetris_error *err)
{
    if (err->code != TETRIS_E_FORMAT || strstr(err->msg, NAME) == NULL)
        abort();
}

static void check_node(const yaml_read_marks *marks, json_t *node, int depth, bool in_map)
{
    yaml_read_pos at = yaml_read_pos_of(marks, node);
    yaml_read_pos key_at = yaml_read_key_pos_of(marks, node);
    if (at.line == 0 || at.column == 0 || (key_at.line != 0) != in_map)
        abort();
    if (json_is_string(node)) {
        if (strlen(json_string_value(node)) != json_string_length(node))
            abort();
        return;
    }
    if (depth >= YAML_READ_MAX_DEPTH)
        abort();
    const char *key;
    json_t *child;
    size_t i;
    if (json_is_object(node)) {
        json_object_foreach (node, key, child)
            check_node(marks, child, depth + 1, true);
    } else if (json_is_array(node)) {
        json_array_foreach (node, i, child)
            check_node(marks, child, depth + 1, false);
    } else {
        abort(); /* no numbers, booleans or nulls */
    }
}

static void fuzz_tree(const char *text, size_t size)
{
    json_t *root = NULL;
    yaml_read_marks *marks = NULL;
    tetris_error err;
    if (yaml_read_json(text, size, NAME, &root, &marks, &err) < 0) {
        check_refusal(&err);
        if (root != NULL || marks != NULL)
            abort();
        return;
    }
    if (root != NULL)
        check_node(marks, root, 0, false);
    json_decref(root);
    yaml_read_marks_free(marks);
}

static void fuzz_settings(const char *text, size_t size)
{
    config_yaml *c = NULL;
    tetris_error err;
    if (config_yaml_parse(text, size, NAME, &c, &err) < 0) {
        check_refusal(&err);
        return;
    }
    for (size_t i = 0; i < c->n_items; i++)
        if (c->items[i].line < 1 || config_yaml_get(c, c->items[i].key) == NULL)
            abort();
    config_yaml_free(c);
}

static char *write_profile(const profile *p)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    tetris_error err;
    if (f == NULL || profile_write(f, p, &err) < 0 || fclose(f) != 0)
        abort();
    return out;
}

static void fuzz_profile(const char *text, size_t size)
{
    profile *p = NULL;
    tetris_error err;
    if (profile_parse(text, size, NAME, &p, &err) < 0) {
        check_refusal(&err);
        return;
    }
    if (p->model == NULL || p->model[0] == '\0' || p->n_configs == 0)
        abort();
    /* Numbers are printed to 10 digits, so the first write may round; from
     * then on the text is a fixed point. */
    char *once = write_profile(p);
    profile *back = NULL;
    if (profile_parse(once, strlen(once), NAME, &back, &err) < 0) {
        fprintf(stderr, "written profile does not read back: %s\n%s", err.msg, once);
        abort();
    }
    char *twice = write_profile(back);
    if (strcmp(once, twice) != 0)
        abort();
    free(once);
    free(twice);
    profile_free(back);
    profile_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    fuzz_tree(text, size);
    fuzz_settings(text, size);
    fuzz_profile(text, size);
    return 0;
}
