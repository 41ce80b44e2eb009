/* trusted_path.c - code paths only root could have written (see
 * trusted_path.h). */
#include "reclaimer/trusted_path.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether a file or directory is root's (or the daemon's own user's)
 * alone: owned so and not writable by group or others, so no one else
 * could have put or swapped code there. */
static int check_owned(const char *what, const char *kind, const char *path, tetris_error *err)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, errno, "%s: %s %s", what, kind, path);
    if (st.st_uid != 0 && st.st_uid != geteuid())
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "%s: %s %s is owned by uid %u, not root: refusing to load it", what,
                           kind, path, (unsigned)st.st_uid);
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "%s: %s %s is writable by group or others (mode %04o): refusing to "
                           "load it",
                           what, kind, path, (unsigned)(st.st_mode & 07777));
    return 0;
}

int trusted_path_resolve(const char *what, const char *path, char *out, size_t len,
                         tetris_error *err)
{
    char real[PATH_MAX], dir[PATH_MAX];
    if (realpath(path, real) == NULL)
        return errno == ENOENT
                   ? tetris_fail(err, TETRIS_E_NOTFOUND, 0, "%s: %s not found", what, path)
                   : tetris_fail(err, TETRIS_E_UNAVAILABLE, errno, "%s: %s", what, path);
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash != NULL)
        *slash = '\0';
    int rc = check_owned(what, "directory", dir[0] != '\0' ? dir : "/", err);
    if (rc == 0)
        rc = check_owned(what, "file", real, err);
    snprintf(dir, sizeof(dir), "%s", real);
    *strrchr(dir, '/') = '\0';
    if (rc == 0)
        rc = check_owned(what, "directory", dir[0] != '\0' ? dir : "/", err);
    if (rc == 0 && (size_t)snprintf(out, len, "%s", real) >= len)
        rc = tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "%s: %s: too long", what, real);
    return rc;
}
