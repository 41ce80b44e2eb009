/* trusted_path.h - files the node daemon loads or runs code from that its
 * operator names (--libcuda, --derive-runtimes): taken only when root (or
 * the daemon's own user) alone could have put or swapped the code there.
 * A pod, a tenant or a settings file's writer never names such a file. */
#ifndef TETRIS_RECLAIMER_TRUSTED_PATH_H
#define TETRIS_RECLAIMER_TRUSTED_PATH_H

#include <stddef.h>

#include "common/error.h"

/* Resolves path (which has a '/') into out: the file, its directory and
 * the directory it was named in must be owned by root or the daemon's
 * user and not writable by group or others. what names the setting in the
 * messages ("libcuda"). TETRIS_E_NOTFOUND when the file is not there,
 * TETRIS_E_UNAVAILABLE when it cannot be looked at, TETRIS_E_DENIED when
 * it is not trusted. */
int trusted_path_resolve(const char *what, const char *path, char *out, size_t len,
                         tetris_error *err);

#endif
