/* unit.c - the shared part of every Check unit test (see unit.h): the
 * runner, scratch directories removed at exit, and whole-file writes and
 * reads that fail the test on error.
 *
 * Check forks a child per test (CK_FORK, its default). A child that passes
 * ends with exit(), so atexit handlers run in children too: each scratch
 * directory remembers the pid that made it, and only that process removes
 * it (a child never removes its parent's directory). A child that fails an
 * assertion ends with _exit() and one that times out is killed, so its
 * handlers never run: every scratch directory is therefore made inside one
 * root directory of the runner's process, which removes the root, and
 * whatever its children left there, when it exits.
 *
 * Check's assertions work only inside a test, and unit_scratch_dir also
 * serves unit_tests() before the runner starts: it fails through
 * require(), which exits there instead. */
#include "tests/lib/unit.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h"

/* A file a test reads back is a model, a manifest or a rewritten model:
 * far below this bound, which only keeps a runaway test from eating the
 * machine. */
#define UNIT_READ_MAX ((size_t)1 << 30)

struct scratch {
    char *path;
    pid_t owner;
};

static struct scratch *scratches;
static size_t n_scratches;
/* "tetris-<program>.XXXXXX": made by the runner's process before any
 * child, removed at its exit. */
static char *root;
static pid_t root_owner;
/* Set once the runner starts; Check's forked children inherit it. */
static bool running;

static void require(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int remove_at(int parent, const char *name);
static void remove_scratches_at_exit(void);
static const char *scratch_root(void);

TCase *unit_tcase(Suite *s, const char *name, double timeout_s)
{
    TCase *tc = tcase_create(name);
    if (timeout_s > 0)
        tcase_set_timeout(tc, timeout_s);
    suite_add_tcase(s, tc);
    return tc;
}

int unit_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    scratch_root();
    running = true;
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

const char *unit_scratch_dir(const char *name)
{
    char *path = NULL;
    require(asprintf(&path, "%s/%s.XXXXXX", scratch_root(), name) >= 0, "out of memory");
    require(mkdtemp(path) != NULL, "mkdtemp %s: %s", path, strerror(errno));
    struct scratch *grown = realloc(scratches, (n_scratches + 1) * sizeof(*grown));
    require(grown != NULL, "out of memory");
    scratches = grown;
    scratches[n_scratches++] = (struct scratch){.path = path, .owner = getpid()};
    return path;
}

/* The root every scratch directory is made in, made on first use (by the
 * runner's process: unit_run makes it before the first fork). Others may
 * pass through it (0711): tests run parts of themselves as another user. */
static const char *scratch_root(void)
{
    if (root != NULL)
        return root;
    const char *base = "/dev/shm";
    if (access(base, W_OK) != 0) {
        base = getenv("TMPDIR");
        if (base == NULL || base[0] == '\0')
            base = "/tmp";
    }
    require(asprintf(&root, "%s/tetris-%s.XXXXXX", base, program_invocation_short_name) >= 0,
            "out of memory");
    require(mkdtemp(root) != NULL, "mkdtemp %s: %s", root, strerror(errno));
    require(chmod(root, 0711) == 0, "chmod %s: %s", root, strerror(errno));
    root_owner = getpid();
    require(atexit(remove_scratches_at_exit) == 0, "atexit failed");
    return root;
}

void unit_remove_tree(const char *path)
{
    require(remove_at(AT_FDCWD, path) == 0, "removing %s: %s", path, strerror(errno));
}

/* Fails the running test, or before the runner starts, the binary. */
static void require(bool ok, const char *fmt, ...)
{
    if (ok)
        return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!running) {
        fprintf(stderr, "unit: %s\n", msg);
        exit(EXIT_FAILURE);
    }
    ck_abort_msg("%s", msg);
}

/* Removes name (relative to the directory parent) and, for a directory,
 * everything under it first. A directory gets u+rwx before it is read, so
 * read-only ones go too. -1 with errno on the first failure. */
static int remove_at(int parent, const char *name)
{
    struct stat st;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(parent, name, 0);
    if ((st.st_mode & S_IRWXU) != S_IRWXU && fchmodat(parent, name, st.st_mode | S_IRWXU, 0) != 0)
        return -1;
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    DIR *dir = fdopendir(fd);
    if (dir == NULL) {
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    errno = 0;
    while (rc == 0 && (e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            rc = remove_at(dirfd(dir), e->d_name);
        errno = 0;
    }
    if (rc == 0 && errno != 0)
        rc = -1;
    int saved = errno;
    closedir(dir);
    errno = saved;
    if (rc != 0)
        return -1;
    return unlinkat(parent, name, AT_REMOVEDIR);
}

/* The directories this process made; its children's exits leave them.
 * The root's owner then removes the root with whatever children that
 * ended without their handlers left in it. A failure here is reported but
 * cannot fail a test any more. */
static void remove_scratches_at_exit(void)
{
    pid_t self = getpid();
    for (size_t i = 0; i < n_scratches; i++) {
        if (scratches[i].owner == self && remove_at(AT_FDCWD, scratches[i].path) != 0)
            fprintf(stderr, "unit: cannot remove scratch directory %s: %s\n", scratches[i].path,
                    strerror(errno));
        free(scratches[i].path);
    }
    free(scratches);
    scratches = NULL;
    n_scratches = 0;
    if (root != NULL && root_owner == self && remove_at(AT_FDCWD, root) != 0)
        fprintf(stderr, "unit: cannot remove scratch directory %s: %s\n", root, strerror(errno));
    free(root);
    root = NULL;
}

void unit_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        ck_assert_msg(n > 0, "write %s: %s", path, strerror(errno));
        p += n;
        len -= (size_t)n;
    }
    ck_assert_msg(close(fd) == 0, "close %s: %s", path, strerror(errno));
}

void unit_write_text(const char *path, const char *text)
{
    unit_write_file(path, text, strlen(text));
}

char *unit_read_file(const char *path, size_t *len)
{
    tetris_error err = {0};
    char *buf = NULL;
    size_t n = 0;
    ck_assert_msg(file_read_all(path, UNIT_READ_MAX, &buf, &n, &err) == 0, "reading %s: %s", path,
                  err.msg);
    if (len != NULL)
        *len = n;
    return buf;
}
