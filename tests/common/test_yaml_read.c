/* test_yaml_read.c - the one YAML reader: the tree it builds (objects in
 * document order, arrays, every scalar a string as written), the
 * positions it records, and every input it refuses with a format error
 * that names the input, the line and the column. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/yaml_read.h"
#include "tests/lib/unit.h"

static json_t *read_ok(const char *text, yaml_read_marks **marks)
{
    json_t *root = NULL;
    tetris_error err = {0};
    int rc = yaml_read_json(text, strlen(text), "t.yaml", &root, marks, &err);
    ck_assert_msg(rc == 0, "read failed: %s", err.msg);
    return root;
}

/* Reads text expecting a format error whose message holds want. */
static void read_bad(const char *text, size_t len, const char *want)
{
    json_t *root = NULL;
    yaml_read_marks *marks = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(yaml_read_json(text, len, "t.yaml", &root, &marks, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_null(root);
    ck_assert_ptr_null(marks);
    ck_assert_msg(strstr(err.msg, want) != NULL, "error '%s' lacks '%s'", err.msg, want);
    ck_assert_msg(strstr(err.msg, "t.yaml: YAML: ") == err.msg, "error '%s' names no input",
                  err.msg);
}

START_TEST(mappings_sequences_and_scalars)
{
    json_t *root = read_ok("b: 1\n"
                           "a: [x, {y: z}]\n"
                           "c:\n"
                           "  d: e\n",
                           NULL);
    char *dump = json_dumps(root, JSON_COMPACT);
    ck_assert_str_eq(dump, "{\"b\":\"1\",\"a\":[\"x\",{\"y\":\"z\"}],\"c\":{\"d\":\"e\"}}");
    free(dump);
    json_decref(root);
}
END_TEST

/* Plain and quoted scalars alike are their text: no numbers, booleans or
 * nulls, tags ignored. */
START_TEST(every_scalar_is_its_text)
{
    json_t *root = read_ok("int: 5\n"
                           "quoted: \"5\"\n"
                           "single: '007'\n"
                           "yes: true\n"
                           "null: null\n"
                           "tilde: ~\n"
                           "empty:\n"
                           "tagged: !!int 12\n"
                           "float: 1.5e3\n"
                           "escaped: \"a\\tb\"\n"
                           "folded: >\n  one\n  two\n",
                           NULL);
    static const char *const want[][2] = {
        {"int", "5"},       {"quoted", "5"},     {"single", "007"},       {"yes", "true"},
        {"null", "null"},   {"tilde", "~"},      {"empty", ""},           {"tagged", "12"},
        {"float", "1.5e3"}, {"escaped", "a\tb"}, {"folded", "one two\n"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        json_t *v = json_object_get(root, want[i][0]);
        ck_assert_msg(json_is_string(v), "%s is not a string", want[i][0]);
        ck_assert_str_eq(json_string_value(v), want[i][1]);
    }
    json_decref(root);
}
END_TEST

START_TEST(no_document_is_null)
{
    static const char *const empty[] = {"", "# only a comment\n", "\n\n"};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        json_t *root = (json_t *)1;
        tetris_error err = {0};
        ck_assert_int_eq(yaml_read_json(empty[i], strlen(empty[i]), "t", &root, NULL, &err), 0);
        ck_assert_ptr_null(root);
    }
    /* Marks of no nodes: every lookup is unknown. */
    yaml_read_marks *marks = NULL;
    json_t *none = read_ok("", &marks);
    ck_assert_ptr_null(none);
    ck_assert_ptr_nonnull(marks);
    json_t *other = json_string("x");
    ck_assert_uint_eq(yaml_read_pos_of(marks, other).line, 0);
    ck_assert_uint_eq(yaml_read_key_pos_of(marks, other).line, 0);
    json_decref(other);
    yaml_read_marks_free(marks);
    /* An explicit empty document is one empty scalar. */
    json_t *root = read_ok("---\n", NULL);
    ck_assert_str_eq(json_string_value(root), "");
    json_decref(root);
}
END_TEST

START_TEST(positions_of_values_and_keys)
{
    yaml_read_marks *marks = NULL;
    json_t *root = read_ok("top: 1\n"
                           "list:\n"
                           "  - {k: v}\n"
                           "nested:\n"
                           "    deep: x\n",
                           &marks);
    ck_assert_ptr_nonnull(marks);
    yaml_read_pos p = yaml_read_pos_of(marks, root);
    ck_assert_uint_eq(p.line, 1);
    ck_assert_uint_eq(p.column, 1);
    ck_assert_uint_eq(yaml_read_key_pos_of(marks, root).line, 0);

    json_t *top = json_object_get(root, "top");
    p = yaml_read_pos_of(marks, top);
    ck_assert_uint_eq(p.line, 1);
    ck_assert_uint_eq(p.column, 6);
    p = yaml_read_key_pos_of(marks, top);
    ck_assert_uint_eq(p.line, 1);
    ck_assert_uint_eq(p.column, 1);

    json_t *item = json_array_get(json_object_get(root, "list"), 0);
    p = yaml_read_pos_of(marks, item);
    ck_assert_uint_eq(p.line, 3);
    ck_assert_uint_eq(p.column, 5);
    ck_assert_uint_eq(yaml_read_key_pos_of(marks, item).line, 0); /* an array's item */
    p = yaml_read_key_pos_of(marks, json_object_get(item, "k"));
    ck_assert_uint_eq(p.line, 3);
    ck_assert_uint_eq(p.column, 6);

    json_t *deep = json_object_get(json_object_get(root, "nested"), "deep");
    p = yaml_read_pos_of(marks, deep);
    ck_assert_uint_eq(p.line, 5);
    ck_assert_uint_eq(p.column, 11);
    p = yaml_read_key_pos_of(marks, json_object_get(root, "nested"));
    ck_assert_uint_eq(p.line, 4);

    /* A node of another tree is unknown. */
    json_t *other = json_string("x");
    p = yaml_read_pos_of(marks, other);
    ck_assert_uint_eq(p.line, 0);
    ck_assert_uint_eq(p.column, 0);
    json_decref(other);
    json_decref(root);
    yaml_read_marks_free(marks);
}
END_TEST

START_TEST(malformed_yaml_names_line_and_column)
{
    read_bad("a: b\nc: [unclosed\n", 18, "at line 3, column 1");
    read_bad("a: {b: c\n", 9, "line 2");
    read_bad("a: b\n  c: d\n", 11, "at line 2, column 4");
    read_bad("a: \"open\n", 9, "at line 2");
    read_bad("\tkey: tab\n", 10, "line 1");
    /* Not UTF-8: libyaml's reader gives an offset, turned into a line. */
    read_bad("a: b\nc: \xff\n", 9, "at line 2, column 4");
    /* An escaped NUL would cut the string short for every C caller. */
    read_bad("a: \"x\\0y\"\n", 10, "NUL");
    read_bad("\"k\\0\": v\n", 9, "NUL");
}
END_TEST

START_TEST(duplicate_keys_are_refused)
{
    read_bad("a: 1\nb: 2\na: 3\n", 12, "duplicate key 'a' at line 3, column 1");
    read_bad("m: {x: 1, x: 2}\n", 16, "duplicate key 'x' at line 1, column 11");
    read_bad("\"q\": 1\nq: 2\n", 11, "duplicate key 'q'");
    /* The same key in different mappings is fine. */
    json_t *root = read_ok("a: {x: 1}\nb: {x: 2}\n", NULL);
    json_decref(root);
}
END_TEST

START_TEST(non_scalar_keys_are_refused)
{
    read_bad("? {a: b}\n: c\n", 12, "a mapping key is not a scalar at line 1, column 3");
    read_bad("? [a, b]\n: c\n", 12, "a mapping key is not a scalar");
    read_bad("{[a]: b}\n", 8, "a mapping key is not a scalar");
}
END_TEST

START_TEST(anchors_and_aliases_are_refused)
{
    read_bad("a: &x 1\nb: *x\n", 14, "anchors and aliases are not supported at line 1");
    read_bad("a: &x [1]\n", 10, "anchors and aliases are not supported");
    read_bad("a: &x {b: 1}\n", 13, "anchors and aliases are not supported");
    read_bad("&k a: 1\n", 8, "anchors and aliases are not supported");
    read_bad("- *x\n", 5, "anchors and aliases are not supported");
    /* Billion laughs: refused at the first anchor, nothing expanded. */
    const char *laughs = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
                         "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                         "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                         "d: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n";
    read_bad(laughs, strlen(laughs), "at line 1, column 4");
}
END_TEST

START_TEST(more_than_one_document_is_refused)
{
    read_bad("a: 1\n---\nb: 2\n", 14, "more than one document at line 2");
    read_bad("---\na: 1\n...\n---\n", 17, "more than one document at line 4");
    /* One document with explicit markers is fine. */
    json_t *root = read_ok("---\na: 1\n...\n", NULL);
    ck_assert_str_eq(json_string_value(json_object_get(root, "a")), "1");
    json_decref(root);
}
END_TEST

/* YAML_READ_MAX_DEPTH collections nest; one more is refused at the one
 * that goes too deep, flow and block alike. */
START_TEST(depth_is_bounded)
{
    char text[4 * YAML_READ_MAX_DEPTH + 16];
    memset(text, '[', YAML_READ_MAX_DEPTH);
    memset(text + YAML_READ_MAX_DEPTH, ']', YAML_READ_MAX_DEPTH);
    text[2 * YAML_READ_MAX_DEPTH] = '\0';
    json_t *root = read_ok(text, NULL);
    json_decref(root);

    memset(text, '[', YAML_READ_MAX_DEPTH + 1);
    memset(text + YAML_READ_MAX_DEPTH + 1, ']', YAML_READ_MAX_DEPTH + 1);
    text[2 * YAML_READ_MAX_DEPTH + 2] = '\0';
    char want[64];
    snprintf(want, sizeof want, "nested more than %d deep at line 1, column %d",
             YAML_READ_MAX_DEPTH, YAML_READ_MAX_DEPTH + 1);
    read_bad(text, strlen(text), want);

    /* Far deeper: refused, not recursed into until the stack ends. */
    static char deep[200001];
    memset(deep, '[', sizeof deep - 1);
    read_bad(deep, sizeof deep - 1, "nested more than");

    /* Block mappings, one key per level. */
    char block[8192] = "";
    size_t n = 0;
    for (int i = 0; i <= YAML_READ_MAX_DEPTH; i++)
        n += (size_t)snprintf(block + n, sizeof block - n, "%*sk:\n", i, "");
    snprintf(block + n, sizeof block - n, "%*sv\n", YAML_READ_MAX_DEPTH + 1, "");
    snprintf(want, sizeof want, "at line %d", YAML_READ_MAX_DEPTH + 1);
    read_bad(block, strlen(block), want);
}
END_TEST

START_TEST(json_text_reads)
{
    json_t *root = read_ok("{\"a\": [1, 2.5, true, null, \"s\"], \"b\": {}}", NULL);
    char *dump = json_dumps(root, JSON_COMPACT);
    ck_assert_str_eq(dump, "{\"a\":[\"1\",\"2.5\",\"true\",\"null\",\"s\"],\"b\":{}}");
    free(dump);
    json_decref(root);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, mappings_sequences_and_scalars);
    tcase_add_test(tc, every_scalar_is_its_text);
    tcase_add_test(tc, no_document_is_null);
    tcase_add_test(tc, positions_of_values_and_keys);
    tcase_add_test(tc, malformed_yaml_names_line_and_column);
    tcase_add_test(tc, duplicate_keys_are_refused);
    tcase_add_test(tc, non_scalar_keys_are_refused);
    tcase_add_test(tc, anchors_and_aliases_are_refused);
    tcase_add_test(tc, more_than_one_document_is_refused);
    tcase_add_test(tc, depth_is_bounded);
    tcase_add_test(tc, json_text_reads);
}

UNIT_MAIN("yaml_read")
