/* fileio.h - reading a whole file into memory, bounded: the one reader of
 * manifests, settings, profiles and tokens; and writing a whole buffer, or
 * replacing a whole file. A file larger than the bound is an error, never
 * silently cut, so a caller never parses a prefix; a replaced file is never
 * seen half written, so a reader never parses one either. */
#ifndef TETRIS_FILEIO_H
#define TETRIS_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

#include "common/error.h"

/* Reads path (at most max_bytes) into a malloc'd buffer, NUL-terminated
 * after its *len bytes (which may hold NULs of their own): the caller
 * frees *out. Errors: TETRIS_E_NOTFOUND (no such file), TETRIS_E_IO (open
 * or read failed, or not a regular file), TETRIS_E_FORMAT (larger than
 * max_bytes), TETRIS_E_NOMEM. A FIFO or device is refused without waiting
 * on it (TETRIS_E_IO, "not a regular file"). */
int file_read_all(const char *path, size_t max_bytes, char **out, size_t *len, tetris_error *err);

/* Writes all len bytes of buf to fd (retrying short writes and EINTR).
 * TETRIS_E_IO "write WHAT: ..." on failure. */
int fd_write_all(int fd, const void *buf, size_t len, const char *what, tetris_error *err);

/* Replaces path with the len bytes of buf, mode `mode`: written to a new
 * file of a random name "path.tmp.XXXXXX" beside it (created exclusively),
 * synced, then renamed over path, so a reader sees the old file or the new
 * one, whole. On failure the temporary file is removed and path is as it
 * was. TETRIS_E_IO naming the step that failed. */
int file_replace(const char *path, const void *buf, size_t len, mode_t mode, tetris_error *err);

#endif
