/* tensor_ids.c - the digest -> id intern table: open addressing over the
 * first 8 bytes of the digest (already uniformly distributed), digests kept
 * in an array indexed by id. */
#include "scheduler-ext/extender/tensor_ids.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define DIGEST_BYTES TENSOR_DIGEST_BYTES
#define EMPTY UINT32_MAX

struct tensor_ids {
    pthread_mutex_t lock;
    uint8_t (*digests)[DIGEST_BYTES]; /* by id */
    size_t n, cap;
    uint32_t *slots; /* ids; EMPTY when free */
    size_t n_slots;  /* a power of two, at least 2n */
};

tensor_ids *tensor_ids_new(void)
{
    tensor_ids *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->n_slots = 1024;
    t->slots = malloc(t->n_slots * sizeof *t->slots);
    if (t->slots == NULL) {
        free(t);
        return NULL;
    }
    memset(t->slots, 0xff, t->n_slots * sizeof *t->slots);
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

void tensor_ids_free(tensor_ids *t)
{
    if (t == NULL)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t->digests);
    free(t->slots);
    free(t);
}

static size_t slot_of(const tensor_ids *t, const uint8_t d[DIGEST_BYTES])
{
    uint64_t h;
    memcpy(&h, d, sizeof h);
    size_t i = (size_t)h & (t->n_slots - 1);
    while (t->slots[i] != EMPTY && memcmp(t->digests[t->slots[i]], d, DIGEST_BYTES) != 0)
        i = (i + 1) & (t->n_slots - 1);
    return i;
}

static int grow_slots(tensor_ids *t)
{
    size_t n = t->n_slots * 2;
    uint32_t *s = malloc(n * sizeof *s);
    if (s == NULL)
        return -1;
    memset(s, 0xff, n * sizeof *s);
    free(t->slots);
    t->slots = s;
    t->n_slots = n;
    for (uint32_t id = 0; id < t->n; id++)
        t->slots[slot_of(t, t->digests[id])] = id;
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
        pthread_mutex_unlock(&t->lock);
        return 0;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        void *p = cap < EMPTY ? realloc(t->digests, cap * DIGEST_BYTES) : NULL;
        if (p == NULL) {
            pthread_mutex_unlock(&t->lock);
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor id table");
        }
        t->digests = p;
        t->cap = cap;
    }
    memcpy(t->digests[t->n], d, DIGEST_BYTES);
    t->slots[i] = (uint32_t)t->n;
    *id = (uint32_t)t->n++;
    if (t->n * 2 > t->n_slots && grow_slots(t) < 0) {
        /* Undo: the table must keep at least one free slot. */
        t->n--;
        t->slots[i] = EMPTY;
        pthread_mutex_unlock(&t->lock);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tensor id table");
    }
    pthread_mutex_unlock(&t->lock);
    return 0;
}

size_t tensor_ids_count(tensor_ids *t)
{
    pthread_mutex_lock(&t->lock);
    size_t n = t->n;
    pthread_mutex_unlock(&t->lock);
    return n;
}
