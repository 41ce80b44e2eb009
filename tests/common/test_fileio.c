/* test_fileio.c - file_read_all (common/fileio.h): the whole file, NUL
 * terminated, up to and including its bound; one byte more, a missing file
 * and a directory are errors with their codes, never a prefix. file_replace:
 * the new bytes whole, with the caller's mode, no temporary left behind, and
 * a failed replacement leaves the old file as it was. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* The number of entries in d besides . and .. */
static int entries_in(const char *d)
{
    DIR *dp = opendir(d);
    ck_assert_ptr_nonnull(dp);
    int n = 0;
    for (struct dirent *e; (e = readdir(dp)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(dp);
    return n;
}

START_TEST(replace_writes_the_whole_file_and_leaves_no_temporary)
{
    char sub[4096], path[4200];
    snprintf(sub, sizeof(sub), "%s/replace", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    snprintf(path, sizeof(path), "%s/file", sub);
    tetris_error err = {0};
    mode_t old_mask = umask(077);
    ck_assert_msg(file_replace(path, "first\n", 6, 0644, &err) == 0, "%s", err.msg);
    ck_assert_msg(file_replace(path, "second\0x", 9, 0644, &err) == 0, "%s", err.msg);
    umask(old_mask);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0644); /* not the umask's */
    char *buf;
    size_t len;
    ck_assert_int_eq(file_read_all(path, 100, &buf, &len, &err), 0);
    ck_assert_uint_eq(len, 9);
    ck_assert_int_eq(memcmp(buf, "second\0x", 9), 0);
    free(buf);
    ck_assert_int_eq(entries_in(sub), 1);
    unlink(path);
    rmdir(sub);
}
END_TEST

START_TEST(a_failed_replace_leaves_the_old_file)
{
    char sub[4096], path[4200];
    snprintf(sub, sizeof(sub), "%s/failing", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    snprintf(path, sizeof(path), "%s/file", sub);
    tetris_error err = {0};
    ck_assert_int_eq(file_replace(path, "old", 3, 0600, &err), 0);
    /* A directory in the file's place: the rename fails after the write. */
    char blocked[4300];
    snprintf(blocked, sizeof(blocked), "%s/dir", sub);
    ck_assert_int_eq(mkdir(blocked, 0755), 0);
    char inner[4400];
    snprintf(inner, sizeof(inner), "%s/x", blocked);
    ck_assert_int_eq(mkdir(inner, 0755), 0);
    ck_assert_int_eq(file_replace(blocked, "new", 3, 0600, &err), -TETRIS_E_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "rename"));
    ck_assert_int_eq(entries_in(sub), 2); /* file and dir, no temporary */
    char *buf;
    size_t len;
    ck_assert_int_eq(file_read_all(path, 100, &buf, &len, &err), 0);
    ck_assert_str_eq(buf, "old");
    free(buf);
    /* A folder that does not exist: nothing is created. */
    char missing[4300];
    snprintf(missing, sizeof(missing), "%s/none/file", sub);
    ck_assert_int_eq(file_replace(missing, "x", 1, 0600, &err), -TETRIS_E_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "create"));
    rmdir(inner);
    rmdir(blocked);
    unlink(path);
    rmdir(sub);
}
END_TEST

static void unit_tests(Suite *s)
{
    dir = unit_scratch_dir("test-fileio");
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, reads_the_whole_file_up_to_its_bound);
    tcase_add_test(tc, large_files_grow_the_buffer);
    tcase_add_test(tc, missing_files_and_directories_are_refused);
    tcase_add_test(tc, replace_writes_the_whole_file_and_leaves_no_temporary);
    tcase_add_test(tc, a_failed_replace_leaves_the_old_file);
}

UNIT_MAIN("fileio")
