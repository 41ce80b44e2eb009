/* fuzz_store_files.h - what the harnesses of on-disk parsers share: a
 * store on tmpfs made once per process and removed at its exit (walked
 * with nftw, no shell), and writing an input as a file. */
#ifndef TETRIS_FUZZ_STORE_FILES_H
#define TETRIS_FUZZ_STORE_FILES_H

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz/fuzz_common.h"
#include "tensorstore/store.h"

static char fuzz_store_root[PATH_MAX];

static inline int fuzz_remove_entry(const char *path, const struct stat *st, int flag,
                                    struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void fuzz_store_remove(void)
{
    if (nftw(fuzz_store_root, fuzz_remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "fuzz: could not remove %s\n", fuzz_store_root);
}

/* A fresh store directory on tmpfs (created once, removed at exit), its
 * path in dir. */
static inline store *fuzz_store(char dir[PATH_MAX])
{
    char *root = fuzz_store_root;
    static store *s;
    if (s == NULL) {
        snprintf(root, PATH_MAX, "/dev/shm/tetris-fuzz.XXXXXX");
        if (mkdtemp(root) == NULL)
            abort();
        atexit(fuzz_store_remove);
        struct store_options o = {.create = true};
        tetris_error err;
        if (store_open(root, &o, &s, &err) < 0)
            abort();
    }
    memcpy(dir, root, PATH_MAX);
    return s;
}

/* Writes data to path (replacing it), or aborts. */
static inline void fuzz_write_file(const char *path, const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        abort();
    for (size_t off = 0; off < size;) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0)
            abort();
        off += (size_t)n;
    }
    close(fd);
}

#endif
