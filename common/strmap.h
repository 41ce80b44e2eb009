/* strmap.h - a string -> pointer hash map (chained, FNV-1a) for the
 * extender's per-node and per-model tables. Not thread-safe: callers lock. */
#ifndef TETRIS_STRMAP_H
#define TETRIS_STRMAP_H

#include <stddef.h>

typedef struct strmap strmap;

strmap *strmap_new(void);
/* Frees the map; free_value (may be NULL) is called on every value. */
void strmap_free(strmap *m, void (*free_value)(void *));
void *strmap_get(const strmap *m, const char *key);
/* Sets key (copied) to value and returns the value it replaces (or NULL).
 * Returns (void *)-1 when out of memory: the map is unchanged. */
void *strmap_put(strmap *m, const char *key, void *value);
/* Removes key and returns its value (or NULL). */
void *strmap_remove(strmap *m, const char *key);
size_t strmap_size(const strmap *m);
/* Calls fn on every entry until it returns non-zero. */
void strmap_foreach(const strmap *m, int (*fn)(const char *key, void *value, void *user),
                    void *user);

#define STRMAP_NOMEM ((void *)-1)

#endif
