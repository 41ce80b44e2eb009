/* test_names.c - the shared names: a model name must be a valid label value
 * to label pods with, and the names that live in two places (the store's
 * directory, the listen addresses) say the same thing in both. */
#include <stdlib.h>
#include <string.h>

#include "protocol/names.h"
#include "tensorstore/store.h"
#include "tests/lib/unit.h"

START_TEST(label_values)
{
    ck_assert(names_label_value_valid("silero_vad_v5"));
    ck_assert(names_label_value_valid("ch_PP-OCRv4.det"));
    ck_assert(names_label_value_valid("a"));
    ck_assert(
        names_label_value_valid("a23456789012345678901234567890123456789012345678901234567890123"));
    ck_assert(!names_label_value_valid(""));
    ck_assert(!names_label_value_valid("-bad-"));
    ck_assert(!names_label_value_valid("model."));
    ck_assert(!names_label_value_valid("a/b"));
    ck_assert(!names_label_value_valid("two words"));
    ck_assert(!names_label_value_valid(
        "a234567890123456789012345678901234567890123456789012345678901234"));
}
END_TEST

START_TEST(names_agree)
{
    ck_assert_str_eq(TETRIS_STORE_DIR, STORE_DEFAULT_DIR);
    ck_assert_str_eq(TETRIS_RECLAIMER_LISTEN, "127.0.0.1:9464");
    ck_assert_str_eq(TETRIS_EXTENDER_LISTEN, "127.0.0.1:8888");
    ck_assert_int_eq(strncmp(TETRIS_LABEL_MODEL, "tetris.io/", 10), 0);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, label_values);
    tcase_add_test(tc, names_agree);
}

UNIT_MAIN("names")
