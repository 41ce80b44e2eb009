/* test_fileio.c - file_read_all (common/fileio.h): the whole file, NUL
 * terminated, up to and including its bound; one byte more, a missing file
 * and a directory are errors with their codes, never a prefix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "tests/lib/unit.h"

static const char *dir;

START_TEST(reads_the_whole_file_up_to_its_bound)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/f", dir);
    unit_write_file(path, "ab\0cd", 5);
    char *buf;
    size_t len;
    tetris_error err = {0};
    ck_assert_msg(file_read_all(path, 5, &buf, &len, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(len, 5);
    ck_assert_int_eq(memcmp(buf, "ab\0cd", 6), 0); /* and the NUL after */
    free(buf);
    ck_assert_int_eq(file_read_all(path, 4, &buf, &len, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_null(buf);
    ck_assert_ptr_nonnull(strstr(err.msg, "larger than 4 bytes"));
    unit_write_file(path, "", 0);
    ck_assert_int_eq(file_read_all(path, 4, &buf, &len, &err), 0);
    ck_assert_uint_eq(len, 0);
    ck_assert_str_eq(buf, "");
    free(buf);
    unlink(path);
}
END_TEST

START_TEST(large_files_grow_the_buffer)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/big", dir);
    size_t n = 3 * 1024 * 1024 + 7;
    char *text = malloc(n);
    ck_assert_ptr_nonnull(text);
    for (size_t i = 0; i < n; i++)
        text[i] = (char)('a' + i % 26);
    unit_write_file(path, text, n);
    char *buf;
    size_t len;
    tetris_error err = {0};
    ck_assert_msg(file_read_all(path, n, &buf, &len, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(len, n);
    ck_assert_int_eq(memcmp(buf, text, n), 0);
    free(buf);
    free(text);
    unlink(path);
}
END_TEST

START_TEST(missing_files_and_directories_are_refused)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/none", dir);
    char *buf;
    size_t len;
    tetris_error err = {0};
    ck_assert_int_eq(file_read_all(path, 10, &buf, &len, &err), -TETRIS_E_NOTFOUND);
    ck_assert_int_eq(file_read_all(dir, 10, &buf, &len, &err), -TETRIS_E_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a regular file"));
}
END_TEST

static void unit_tests(Suite *s)
{
    dir = unit_scratch_dir("test-fileio");
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, reads_the_whole_file_up_to_its_bound);
    tcase_add_test(tc, large_files_grow_the_buffer);
    tcase_add_test(tc, missing_files_and_directories_are_refused);
}

UNIT_MAIN("fileio")
