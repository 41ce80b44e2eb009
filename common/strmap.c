/* strmap.c - chained hash map from strings to pointers; doubles its bucket
 * array when the load factor passes 1. */
#include "common/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct strmap_entry {
    struct strmap_entry *next;
    uint64_t hash;
    void *value;
    char key[];
} strmap_entry;

struct strmap {
    strmap_entry **buckets;
    size_t n_buckets; /* a power of two */
    size_t size;
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

strmap *strmap_new(void)
{
    strmap *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->n_buckets = 64;
    m->buckets = calloc(m->n_buckets, sizeof *m->buckets);
    if (m->buckets == NULL) {
        free(m);
        return NULL;
    }
    return m;
}

void strmap_free(strmap *m, void (*free_value)(void *))
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_buckets; i++) {
        strmap_entry *e = m->buckets[i];
        while (e != NULL) {
            strmap_entry *next = e->next;
            if (free_value != NULL)
                free_value(e->value);
            free(e);
            e = next;
        }
    }
    free(m->buckets);
    free(m);
}

static strmap_entry **find(const strmap *m, const char *key, uint64_t h)
{
    strmap_entry **p = &m->buckets[h & (m->n_buckets - 1)];
    while (*p != NULL && ((*p)->hash != h || strcmp((*p)->key, key) != 0))
        p = &(*p)->next;
    return p;
}

void *strmap_get(const strmap *m, const char *key)
{
    strmap_entry *e = *find(m, key, fnv1a(key));
    return e != NULL ? e->value : NULL;
}

static void grow(strmap *m)
{
    size_t n = m->n_buckets * 2;
    strmap_entry **b = calloc(n, sizeof *b);
    if (b == NULL)
        return; /* keep the longer chains; still correct */
    for (size_t i = 0; i < m->n_buckets; i++) {
        strmap_entry *e = m->buckets[i];
        while (e != NULL) {
            strmap_entry *next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->n_buckets = n;
}

void *strmap_put(strmap *m, const char *key, void *value)
{
    uint64_t h = fnv1a(key);
    strmap_entry **p = find(m, key, h);
    if (*p != NULL) {
        void *old = (*p)->value;
        (*p)->value = value;
        return old;
    }
    size_t len = strlen(key);
    strmap_entry *e = malloc(sizeof *e + len + 1);
    if (e == NULL)
        return STRMAP_NOMEM;
    e->next = NULL;
    e->hash = h;
    e->value = value;
    memcpy(e->key, key, len + 1);
    *p = e;
    if (++m->size > m->n_buckets)
        grow(m);
    return NULL;
}

void *strmap_remove(strmap *m, const char *key)
{
    strmap_entry **p = find(m, key, fnv1a(key));
    strmap_entry *e = *p;
    if (e == NULL)
        return NULL;
    *p = e->next;
    void *v = e->value;
    free(e);
    m->size--;
    return v;
}

size_t strmap_size(const strmap *m)
{
    return m->size;
}

void strmap_foreach(const strmap *m, int (*fn)(const char *key, void *value, void *user),
                    void *user)
{
    for (size_t i = 0; i < m->n_buckets; i++)
        for (strmap_entry *e = m->buckets[i]; e != NULL; e = e->next)
            if (fn(e->key, e->value, user) != 0)
                return;
}
