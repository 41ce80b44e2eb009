/* id_set.c - the chunked id set (see id_set.h). One allocation: the
 * header, the chunk table sorted by key, then the payload: every bitmap
 * chunk (8-byte aligned, read as uint64 words), then every array chunk. */
#include "scheduler-ext/extender/id_set.h"

#include <stdlib.h>
#include <string.h>

#define ARRAY_MAX 4096 /* more ids than this: a bitmap is no bigger */
#define BITMAP_BYTES (65536 / 8)

typedef struct id_chunk {
    uint16_t key;   /* the ids' high 16 bits */
    uint32_t count; /* ids in the chunk, 1..65536 */
    uint32_t off;   /* of its payload, in bytes from the payload's start */
} id_chunk;

struct id_set {
    size_t n;
    size_t bytes;
    uint32_t n_chunks;
    const unsigned char *payload;
    id_chunk chunks[];
};

static bool is_bitmap(const id_chunk *c)
{
    return c->count > ARRAY_MAX;
}

/* Calls fn(user, key, first, count) for every chunk of ids. */
static void each_chunk(const uint32_t *ids, size_t n,
                       void (*fn)(void *user, uint16_t key, size_t first, uint32_t count),
                       void *user)
{
    for (size_t i = 0; i < n;) {
        uint32_t key = ids[i] >> 16;
        size_t j = i + 1;
        while (j < n && ids[j] >> 16 == key)
            j++;
        fn(user, (uint16_t)key, i, (uint32_t)(j - i));
        i = j;
    }
}

typedef struct sizing {
    uint32_t n_chunks;
    size_t bitmaps, array_ids;
} sizing;

static void size_chunk(void *user, uint16_t key, size_t first, uint32_t count)
{
    (void)key;
    (void)first;
    sizing *z = user;
    z->n_chunks++;
    if (count > ARRAY_MAX)
        z->bitmaps++;
    else
        z->array_ids += count;
}

typedef struct filling {
    id_set *s;
    const uint32_t *ids;
    size_t next_bitmap, next_array; /* payload offsets */
} filling;

static void fill_chunk(void *user, uint16_t key, size_t first, uint32_t count)
{
    filling *f = user;
    id_set *s = f->s;
    id_chunk *c = &s->chunks[s->n_chunks++];
    *c = (id_chunk){.key = key, .count = count};
    unsigned char *payload = (unsigned char *)s->payload;
    if (is_bitmap(c)) {
        c->off = (uint32_t)f->next_bitmap;
        f->next_bitmap += BITMAP_BYTES;
        uint64_t *bm = (uint64_t *)(void *)(payload + c->off);
        for (uint32_t k = 0; k < count; k++) {
            uint32_t low = f->ids[first + k] & 0xffff;
            bm[low >> 6] |= 1ull << (low & 63);
        }
    } else {
        c->off = (uint32_t)f->next_array;
        f->next_array += (size_t)count * sizeof(uint16_t);
        uint16_t *a = (uint16_t *)(void *)(payload + c->off);
        for (uint32_t k = 0; k < count; k++)
            a[k] = (uint16_t)(f->ids[first + k] & 0xffff);
    }
}

id_set *id_set_new(const uint32_t *ids, size_t n)
{
    sizing z = {0};
    each_chunk(ids, n, size_chunk, &z);
    size_t head = sizeof(id_set) + z.n_chunks * sizeof(id_chunk);
    head = (head + 7) & ~(size_t)7;
    size_t bytes = head + z.bitmaps * BITMAP_BYTES + z.array_ids * sizeof(uint16_t);
    id_set *s = malloc(bytes);
    if (s == NULL)
        return NULL;
    *s = (id_set){.n = n, .bytes = bytes, .payload = (unsigned char *)s + head};
    memset((unsigned char *)s + head, 0, z.bitmaps * BITMAP_BYTES);
    filling f = {.s = s, .ids = ids, .next_array = z.bitmaps * BITMAP_BYTES};
    each_chunk(ids, n, fill_chunk, &f);
    return s;
}

void id_set_free(id_set *s)
{
    free(s);
}

size_t id_set_count(const id_set *s)
{
    return s->n;
}

size_t id_set_bytes(const id_set *s)
{
    return s->bytes;
}

static const id_chunk *find_chunk(const id_set *s, uint16_t key)
{
    size_t lo = 0, hi = s->n_chunks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->chunks[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n_chunks && s->chunks[lo].key == key ? &s->chunks[lo] : NULL;
}

bool id_set_contains(const id_set *s, uint32_t id)
{
    const id_chunk *c = find_chunk(s, (uint16_t)(id >> 16));
    if (c == NULL)
        return false;
    uint32_t low = id & 0xffff;
    if (is_bitmap(c)) {
        const uint64_t *bm = (const uint64_t *)(const void *)(s->payload + c->off);
        return (bm[low >> 6] >> (low & 63)) & 1;
    }
    const uint16_t *a = (const uint16_t *)(const void *)(s->payload + c->off);
    size_t lo = 0, hi = c->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < low)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->count && a[lo] == low;
}

size_t id_set_next(const id_set *s, id_set_cursor *cur, uint32_t *out, size_t max)
{
    size_t k = 0;
    while (k < max && cur->chunk < s->n_chunks) {
        const id_chunk *c = &s->chunks[cur->chunk];
        uint32_t high = (uint32_t)c->key << 16;
        if (is_bitmap(c)) {
            const uint64_t *bm = (const uint64_t *)(const void *)(s->payload + c->off);
            while (k < max && cur->pos < 65536) {
                uint64_t word = bm[cur->pos >> 6] >> (cur->pos & 63);
                if (word == 0) {
                    cur->pos = (cur->pos | 63) + 1;
                    continue;
                }
                cur->pos += (uint32_t)__builtin_ctzll(word);
                out[k++] = high | cur->pos++;
            }
            if (cur->pos < 65536)
                break;
        } else {
            const uint16_t *a = (const uint16_t *)(const void *)(s->payload + c->off);
            while (k < max && cur->pos < c->count)
                out[k++] = high | a[cur->pos++];
            if (cur->pos < c->count)
                break;
        }
        cur->chunk++;
        cur->pos = 0;
    }
    return k;
}
