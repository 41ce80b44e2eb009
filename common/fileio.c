/* fileio.c - whole-file reads, bounded; whole writes and replacements (see
 * fileio.h). */
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"

int file_read_all(const char *path, size_t max_bytes, char **out, size_t *len, tetris_error *err)
{
    *out = NULL;
    *len = 0;
    /* O_NONBLOCK: opening a FIFO without a writer would wait for one; this
     * way it is refused below like any other file that is not regular
     * (O_NONBLOCK changes nothing for a regular file's reads). */
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_IO, errno, "open %s",
                           path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", path);
    if (!S_ISREG(st.st_mode))
        return tetris_fail(err, TETRIS_E_IO, 0, "%s: not a regular file", path);
    /* The size is a hint only (the file may grow while it is read): the
     * bound is checked on what is read, one byte past it. Room for the
     * NUL and one byte more, so that the read that finds the end needs no
     * larger buffer (a copy of the whole file, and past 128 KiB a fresh
     * mapping's page faults, for nothing). */
    size_t cap = st.st_size > 0 && (uint64_t)st.st_size < max_bytes ? (size_t)st.st_size + 2 : 4096;
    cleanup_free char *buf = NULL;
    size_t n = 0;
    for (;;) {
        if (n + 1 >= cap || buf == NULL) {
            size_t want = buf == NULL ? cap : cap * 2;
            if (want > max_bytes + 2)
                want = max_bytes + 2;
            char *grown = realloc(buf, want);
            if (grown == NULL)
                return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "read %s", path);
            buf = grown;
            cap = want;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "read %s", path);
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > max_bytes)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: larger than %zu bytes", path,
                               max_bytes);
    }
    buf[n] = '\0';
    *out = steal_pointer(&buf);
    *len = n;
    return 0;
}

int fd_write_all(int fd, const void *buf, size_t len, const char *what, tetris_error *err)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return tetris_fail(err, TETRIS_E_IO, n < 0 ? errno : EIO, "write %s", what);
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int file_replace(const char *path, const void *buf, size_t len, mode_t mode, tetris_error *err)
{
    cleanup_free char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp.XXXXXX", path) < 0)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "replace %s", path);
    /* A random name created exclusively: nothing planted under a name we
     * would pick can be written through, and no crashed writer's leftover
     * blocks the next one. */
    cleanup_close int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "create %s", tmp);
    int rc = fd_write_all(fd, buf, len, tmp, err);
    /* mkostemp creates 0600; the caller's mode is the file's. */
    if (rc == 0 && fchmod(fd, mode) < 0)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "chmod %s", tmp);
    if (rc == 0 && fsync(fd) < 0)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "fsync %s", tmp);
    if (rc == 0 && close(steal_fd(&fd)) < 0)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "close %s", tmp);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = tetris_fail(err, TETRIS_E_IO, errno, "rename %s to %s", tmp, path);
    if (rc < 0)
        unlink(tmp);
    return rc;
}
