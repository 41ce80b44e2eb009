/* tensor_ids.c - the digest -> id intern table: open addressing over the
 * first 8 bytes of the digest (already uniformly distributed), digests and
 * reference counts kept in arrays indexed by id, released ids on a free
 * stack for reuse. */
#include "scheduler-ext/extender/tensor_ids.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define DIGEST_BYTES TENSOR_DIGEST_BYTES
#define EMPTY UINT32_MAX
#define MIN_SLOTS 1024

struct tensor_ids {
    pthread_mutex_t lock;
    uint8_t (*digests)[DIGEST_BYTES]; /* by id */
    uint32_t *refs;                   /* by id; 0: the id is free */
    size_t n, cap;                    /* ids handed out (live or free), allocated */
    size_t live;                      /* ids with references */
    uint32_t *free_ids;               /* a stack of released ids, cap entries */
    size_t n_free;
    uint32_t *slots; /* live ids; EMPTY when free */
    size_t n_slots;  /* a power of two, at least 2 live */
};

static uint32_t *empty_slots(size_t n)
{
    uint32_t *s = malloc(n * sizeof *s);
    if (s != NULL)
        memset(s, 0xff, n * sizeof *s);
    return s;
}

tensor_ids *tensor_ids_new(void)
{
    tensor_ids *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->n_slots = MIN_SLOTS;
    t->slots = empty_slots(t->n_slots);
    if (t->slots == NULL) {
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

void tensor_ids_free(tensor_ids *t)
{
    if (t == NULL)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t->digests);
    free(t->refs);
    free(t->free_ids);
    free(t->slots);
    free(t);
}

static size_t home_of(const tensor_ids *t, const uint8_t d[DIGEST_BYTES])
{
    uint64_t h;
    memcpy(&h, d, sizeof h);
    return (size_t)h & (t->n_slots - 1);
}

static size_t slot_of(const tensor_ids *t, const uint8_t d[DIGEST_BYTES])
{
    size_t i = home_of(t, d);
    while (t->slots[i] != EMPTY && memcmp(t->digests[t->slots[i]], d, DIGEST_BYTES) != 0)
        i = (i + 1) & (t->n_slots - 1);
    return i;
}

/* Rehashes the live ids into n slots. */
static int resize_slots(tensor_ids *t, size_t n)
{
    uint32_t *s = empty_slots(n);
    if (s == NULL)
        return -1;
    free(t->slots);
    t->slots = s;
    t->n_slots = n;
    for (uint32_t id = 0; id < t->n; id++)
        if (t->refs[id] > 0)
            t->slots[slot_of(t, t->digests[id])] = id;
    return 0;
}

static int grow_ids(tensor_ids *t)
{
    size_t cap = t->cap ? t->cap * 2 : 1024;
    if (cap >= EMPTY)
        return -1;
    void *d = realloc(t->digests, cap * DIGEST_BYTES);
    if (d == NULL)
        return -1;
    t->digests = d;
    uint32_t *r = realloc(t->refs, cap * sizeof *r);
    if (r == NULL)
        return -1;
    t->refs = r;
    uint32_t *f = realloc(t->free_ids, cap * sizeof *f);
    if (f == NULL)
        return -1;
    t->free_ids = f;
    t->cap = cap;
    return 0;
}

int tensor_ids_intern(tensor_ids *t, const char *digest, uint32_t *id, tetris_error *err)
{
    tensor_digest d;
    int r = tensor_digest_from_hex(digest, &d, err);
    if (r < 0)
        return r;
    return tensor_ids_intern_digest(t, &d, id, err);
}

int tensor_ids_intern_digest(tensor_ids *t, const tensor_digest *digest, uint32_t *id,
                             tetris_error *err)
{
    const uint8_t *d = digest->bytes;
    pthread_mutex_lock(&t->lock);
    size_t i = slot_of(t, d);
    if (t->slots[i] != EMPTY) {
        *id = t->slots[i];
        if (t->refs[*id] == UINT32_MAX) {
            pthread_mutex_unlock(&t->lock);
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor id references");
        }
        t->refs[*id]++;
        pthread_mutex_unlock(&t->lock);
        return 0;
    }
    if ((t->live + 1) * 2 > t->n_slots) {
        if (resize_slots(t, t->n_slots * 2) < 0) {
            pthread_mutex_unlock(&t->lock);
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor id table");
        }
        i = slot_of(t, d);
    }
    uint32_t new_id;
    if (t->n_free > 0) {
        new_id = t->free_ids[--t->n_free];
    } else {
        if (t->n == t->cap && grow_ids(t) < 0) {
            pthread_mutex_unlock(&t->lock);
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor id table");
        }
        new_id = (uint32_t)t->n++;
    }
    memcpy(t->digests[new_id], d, DIGEST_BYTES);
    t->refs[new_id] = 1;
    t->slots[i] = new_id;
    t->live++;
    *id = new_id;
    pthread_mutex_unlock(&t->lock);
    return 0;
}

/* Empties slot i, moving later entries of its probe run back so that
 * every live id stays reachable from its home slot. */
static void remove_slot(tensor_ids *t, size_t i)
{
    size_t mask = t->n_slots - 1, j = i;
    t->slots[i] = EMPTY;
    for (;;) {
        j = (j + 1) & mask;
        if (t->slots[j] == EMPTY)
            return;
        size_t k = home_of(t, t->digests[t->slots[j]]);
        /* Stays when its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            t->slots[i] = t->slots[j];
            t->slots[j] = EMPTY;
            i = j;
        }
    }
}

void tensor_ids_release(tensor_ids *t, const uint32_t *ids, size_t n)
{
    if (t == NULL || n == 0)
        return;
    pthread_mutex_lock(&t->lock);
    for (size_t k = 0; k < n; k++) {
        uint32_t id = ids[k];
        if (id >= t->n || t->refs[id] == 0 || --t->refs[id] > 0)
            continue;
        remove_slot(t, slot_of(t, t->digests[id]));
        t->free_ids[t->n_free++] = id;
        t->live--;
    }
    /* Shrink the index once it is mostly empty; failing to is harmless. */
    if (t->n_slots > MIN_SLOTS && t->live * 8 < t->n_slots)
        resize_slots(t, t->n_slots / 2);
    pthread_mutex_unlock(&t->lock);
}

size_t tensor_ids_count(tensor_ids *t)
{
    pthread_mutex_lock(&t->lock);
    size_t n = t->live;
    pthread_mutex_unlock(&t->lock);
    return n;
}

size_t tensor_ids_bytes(tensor_ids *t)
{
    pthread_mutex_lock(&t->lock);
    size_t n = sizeof *t + t->cap * (DIGEST_BYTES + sizeof *t->refs + sizeof *t->free_ids) +
               t->n_slots * sizeof *t->slots;
    pthread_mutex_unlock(&t->lock);
    return n;
}

size_t tensor_ids_slots(tensor_ids *t)
{
    pthread_mutex_lock(&t->lock);
    size_t n = t->n_slots;
    pthread_mutex_unlock(&t->lock);
    return n;
}
