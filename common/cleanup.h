/* cleanup.h - scope-bound release of resources (gcc cleanup attribute).
 *
 * Declare `cleanup_free char *p = NULL;` or `cleanup_close int fd = -1;` and
 * the resource is released on every return path. Hand ownership out by
 * setting the variable back to NULL / -1 (see steal_pointer, steal_fd). */
#ifndef TETRIS_CLEANUP_H
#define TETRIS_CLEANUP_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void cleanup_freep(void *p)
{
    free(*(void **)p);
}

static inline void cleanup_closep(int *fd)
{
    if (*fd >= 0)
        close(*fd);
}

static inline void cleanup_fclosep(FILE **f)
{
    if (*f != NULL)
        fclose(*f);
}

static inline void cleanup_closedirp(DIR **d)
{
    if (*d != NULL)
        closedir(*d);
}

#define cleanup_free __attribute__((cleanup(cleanup_freep)))
#define cleanup_close __attribute__((cleanup(cleanup_closep)))
#define cleanup_fclose __attribute__((cleanup(cleanup_fclosep)))
#define cleanup_closedir __attribute__((cleanup(cleanup_closedirp)))

static inline void *steal_pointer_impl(void *pp)
{
    void **p = pp;
    void *v = *p;
    *p = NULL;
    return v;
}
#define steal_pointer(pp) steal_pointer_impl(pp)

static inline int steal_fd(int *fd)
{
    int v = *fd;
    *fd = -1;
    return v;
}

#endif
