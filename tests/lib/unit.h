/* unit.h - what every Check unit test shares, so that a test file holds
 * only its tests: the main() that builds the suite, runs it and turns the
 * result into an exit status, scratch directories that are removed at
 * exit, and whole-file writes and reads that fail the
 * test rather than return an error. Linked into every unit binary
 * (tests/lib/unit.c).
 *
 * A test file ends with its cases and UNIT_MAIN:
 *
 *   static void unit_tests(Suite *s)
 *   {
 *       TCase *tc = unit_tcase(s, "core", 60);
 *       tcase_add_test(tc, round_trips);
 *   }
 *   UNIT_MAIN("store")
 *
 * unit_tests runs once, in the runner's process, before any test: it adds
 * the cases and does whatever set-up the whole binary needs (log levels,
 * library initialisation). The runner follows Check's environment
 * (CK_FORK, CK_VERBOSITY, CK_RUN_CASE, CK_DEFAULT_TIMEOUT...). */
#ifndef TETRIS_TESTS_UNIT_H
#define TETRIS_TESTS_UNIT_H

#include <check.h>
#include <stddef.h>

/* Adds a test case called name to s and returns it for tcase_add_test.
 * timeout_s > 0 is the case's per-test timeout in seconds; 0 keeps
 * Check's default (CK_DEFAULT_TIMEOUT, else 4 s). */
TCase *unit_tcase(Suite *s, const char *name, double timeout_s);

/* Runs every case of s and frees the runner: EXIT_SUCCESS when no test
 * failed, EXIT_FAILURE otherwise. */
int unit_run(Suite *s);

/* main() for a test file that defines static void unit_tests(Suite *s). */
#define UNIT_MAIN(suite_name)                                                                      \
    static void unit_tests(Suite *s);                                                              \
    int main(void)                                                                                 \
    {                                                                                              \
        Suite *s = suite_create(suite_name);                                                       \
        unit_tests(s);                                                                             \
        return unit_run(s);                                                                        \
    }

/* Makes a new, empty directory "<name>.XXXXXX" and returns its path, valid
 * until the process exits. It is made in the runner's root directory,
 * "tetris-<program>.XXXXXX" on tmpfs (/dev/shm where writable, else
 * $TMPDIR or /tmp; mode 0711). The directory and everything in it are
 * removed when the process that made it exits, or earlier by
 * unit_remove_tree: a directory made before Check forks a test is not
 * removed by the test's child. One a test's child leaves (it failed, or
 * timed out) goes with the root when the runner exits. Fails the current
 * test (or aborts before the runner starts) if the directory cannot be
 * made. */
const char *unit_scratch_dir(const char *name);

/* Removes path and everything under it, read-only directories included
 * (tests make stores read-only); symbolic links are removed, never
 * followed. A path that does not exist is not an error. Fails the test
 * on any other error. */
void unit_remove_tree(const char *path);

/* Creates or truncates path (mode 0644) and writes the len bytes of data;
 * fails the test on any error. */
void unit_write_file(const char *path, const void *data, size_t len);

/* unit_write_file of a NUL-terminated text, without its NUL. */
void unit_write_text(const char *path, const char *text);

/* Reads the whole of path into a malloc'd buffer, NUL-terminated after
 * its bytes (common/fileio.h's reader); *len, if len is not NULL, is the
 * byte count. Fails the test if the file cannot be read. The caller
 * frees the buffer. */
char *unit_read_file(const char *path, size_t *len);

#endif
