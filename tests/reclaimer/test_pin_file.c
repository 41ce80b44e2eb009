/* test_pin_file.c - the pin file reader (reclaimer/pin_file.h): what a
 * line may say, and that one bad line refuses the whole file with the line
 * named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reclaimer/pin_file.h"
#include "tests/lib/unit.h"

#define HEX_A "aa00000000000000000000000000000000000000000000000000000000000001"
#define HEX_B "bb00000000000000000000000000000000000000000000000000000000000002"

static int parse(const char *text, struct pin **pins, size_t *n, tetris_error *err)
{
    return pin_file_parse(text, strlen(text), "pins", pins, n, err);
}

START_TEST(test_pin_lines)
{
    const char *text = "# pins of node-0\n"
                       "\n" HEX_A "\n"
                       "  sha256:" HEX_B "\talpha   # a comment\r\n" HEX_A " beta";
    struct pin *pins = NULL;
    size_t n = 0;
    tetris_error err;
    ck_assert_int_eq(parse(text, &pins, &n, &err), 0);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(pins[0].tenant, "");
    ck_assert_str_eq(pins[1].tenant, "alpha");
    ck_assert_str_eq(pins[2].tenant, "beta");
    tensor_digest b;
    ck_assert_int_eq(tensor_digest_from_hex(HEX_B, &b, &err), 0);
    ck_assert(tensor_digest_equal(&pins[1].digest, &b));
    free(pins);

    ck_assert_int_eq(parse("# nothing\n\n", &pins, &n, &err), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(pins);
}
END_TEST

/* Each bad file is refused as a format error naming its line. */
START_TEST(test_pin_bad)
{
    char long_line[PIN_LINE_MAX + 40];
    memset(long_line, ' ', sizeof(long_line) - 1);
    long_line[sizeof(long_line) - 1] = '\0';
    memcpy(long_line, HEX_A, 64);
    static const struct {
        const char *text;
        const char *says;
    } bad[] = {
        {HEX_A "\nnot-a-digest\n", "pins:2"},
        {HEX_A " ../../etc\n", "pins:1"},
        {HEX_A " alpha extra\n", "more than a digest"},
        {"\n\n" HEX_A "0\n", "pins:3"},
        {HEX_A " " HEX_B "0000000000000000000000000000000000000000000000000000000000000000000000",
         "pins:1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct pin *pins = NULL;
        size_t n = 0;
        tetris_error err;
        ck_assert_int_eq(parse(bad[i].text, &pins, &n, &err), -TETRIS_E_FORMAT);
        ck_assert_msg(strstr(err.msg, bad[i].says) != NULL, "%zu: %s", i, err.msg);
        ck_assert_ptr_null(pins);
    }
    struct pin *pins = NULL;
    size_t n = 0;
    tetris_error err;
    ck_assert_int_eq(parse(long_line, &pins, &n, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "longer than"));
    static const char with_nul[] = HEX_A "\0 alpha\n";
    ck_assert_int_eq(pin_file_parse(with_nul, sizeof(with_nul) - 1, "pins", &pins, &n, &err),
                     -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "NUL"));
}
END_TEST

START_TEST(test_pin_file_missing_and_present)
{
    const char *dir = unit_scratch_dir("pins");
    char path[512];
    snprintf(path, sizeof(path), "%s/absent", dir);
    struct pin *pins = NULL;
    size_t n = 7;
    tetris_error err;
    ck_assert_int_eq(pin_file_read(path, &pins, &n, &err), 0);
    ck_assert_uint_eq(n, 0);
    snprintf(path, sizeof(path), "%s/pins", dir);
    unit_write_text(path, HEX_A " alpha\nbad\n");
    ck_assert_int_eq(pin_file_read(path, &pins, &n, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    unit_write_text(path, HEX_A " alpha\n");
    ck_assert_int_eq(pin_file_read(path, &pins, &n, &err), 0);
    ck_assert_uint_eq(n, 1);
    free(pins);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "pin_file", 0);
    tcase_add_test(tc, test_pin_lines);
    tcase_add_test(tc, test_pin_bad);
    tcase_add_test(tc, test_pin_file_missing_and_present);
}

UNIT_MAIN("pin_file")
