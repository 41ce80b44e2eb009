/* test_id_set.c - the extender's compact id set: it holds exactly the ids
 * it was built from (membership and the ids read back, in order) whatever
 * mix of array and bitmap chunks they make, empty sets and the chunk
 * boundaries included; its size is what the layout promises (2 bytes an id
 * in sparse chunks, 8 KiB for a full one); reading back in small batches
 * resumes where it stopped. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler-ext/extender/id_set.h"
#include "tests/lib/unit.h"

static uint64_t rng_state = 12345;

static uint32_t rng(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorted, distinct. */
static size_t normalise(uint32_t *ids, size_t n)
{
    if (n == 0)
        return 0;
    qsort(ids, n, sizeof *ids, cmp_u32);
    size_t out = 1;
    for (size_t i = 1; i < n; i++)
        if (ids[i] != ids[out - 1])
            ids[out++] = ids[i];
    return out;
}

static bool in_sorted(const uint32_t *ids, size_t n, uint32_t id)
{
    return bsearch(&id, ids, n, sizeof *ids, cmp_u32) != NULL;
}

/* The set of ids answers every probe as the array does and reads back as
 * the array, in batches of `batch`. */
static void check_same(const uint32_t *ids, size_t n, size_t batch)
{
    id_set *s = id_set_new(ids, n);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(id_set_count(s), n);
    /* Counted, then asserted once: a Check assertion per id is slow
     * under the sanitizers. */
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        wrong += !id_set_contains(s, ids[i]);
        /* Neighbours: in the set exactly when in the array. */
        if (ids[i] > 0)
            wrong += id_set_contains(s, ids[i] - 1) != in_sorted(ids, n, ids[i] - 1);
        if (ids[i] < UINT32_MAX)
            wrong += id_set_contains(s, ids[i] + 1) != in_sorted(ids, n, ids[i] + 1);
    }
    for (int k = 0; k < 2000; k++) {
        uint32_t probe = rng() % (n > 0 && ids[n - 1] < UINT32_MAX - 1 ? ids[n - 1] + 2 : 100000);
        wrong += id_set_contains(s, probe) != in_sorted(ids, n, probe);
    }
    ck_assert_uint_eq(wrong, 0);
    uint32_t *back = malloc((n + batch) * sizeof *back);
    ck_assert_ptr_nonnull(back);
    id_set_cursor cur = {0};
    size_t got = 0, k;
    while ((k = id_set_next(s, &cur, back + got, batch)) > 0) {
        ck_assert_uint_le(k, batch);
        got += k;
        ck_assert_uint_le(got, n);
    }
    ck_assert_uint_eq(got, n);
    ck_assert_int_eq(memcmp(back, ids, n * sizeof *ids), 0);
    ck_assert_uint_eq(id_set_next(s, &cur, back, batch), 0);
    free(back);
    id_set_free(s);
}

START_TEST(empty_set)
{
    id_set *s = id_set_new(NULL, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(id_set_count(s), 0);
    ck_assert(!id_set_contains(s, 0));
    ck_assert(!id_set_contains(s, UINT32_MAX));
    uint32_t out[4];
    id_set_cursor cur = {0};
    ck_assert_uint_eq(id_set_next(s, &cur, out, 4), 0);
    id_set_free(s);
}
END_TEST

START_TEST(chunk_boundaries)
{
    /* The ends of chunks, the first and last ids, one id per chunk. */
    uint32_t ids[] = {0,          1,          65535,
                      65536,      65537,      131071,
                      131072,     1u << 20,   (1u << 20) + 65535,
                      0xfffeffff, 0xffff0000, UINT32_MAX - 1,
                      UINT32_MAX};
    size_t n = normalise(ids, sizeof ids / sizeof *ids);
    check_same(ids, n, 1);
    check_same(ids, n, 3);
    check_same(ids, n, 256);
}
END_TEST

/* Random sets of every density: sparse (array chunks), dense (bitmap
 * chunks), and chunks right at the array/bitmap threshold. */
START_TEST(random_sets_match_arrays)
{
    static const struct {
        size_t n;
        uint32_t span;
    } cases[] = {{1, 10},       {100, 1u << 30}, {4096, 65536},  {4097, 65536},
                 {8960, 40000}, {30000, 200000}, {65536, 65536}, {20000, 1u << 24}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        uint32_t *ids = malloc(cases[c].n * sizeof *ids);
        ck_assert_ptr_nonnull(ids);
        size_t n;
        if (cases[c].n == cases[c].span) {
            for (n = 0; n < cases[c].n; n++)
                ids[n] = (uint32_t)n; /* a full chunk */
        } else {
            for (size_t i = 0; i < cases[c].n; i++)
                ids[i] = rng() % cases[c].span;
            n = normalise(ids, cases[c].n);
        }
        check_same(ids, n, 256);
        check_same(ids, n, 7);
        free(ids);
    }
}
END_TEST

START_TEST(size_is_what_the_layout_promises)
{
    enum { N = 4096 };
    uint32_t *ids = malloc(65536 * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    /* A sparse chunk: 2 bytes an id, plus a fixed header. */
    for (uint32_t i = 0; i < N; i++)
        ids[i] = i * 16;
    id_set *sparse = id_set_new(ids, N);
    ck_assert_ptr_nonnull(sparse);
    ck_assert_uint_ge(id_set_bytes(sparse), 2 * N);
    ck_assert_uint_le(id_set_bytes(sparse), 2 * N + 128);
    /* One more id and it is a bitmap: 8 KiB however many ids. */
    for (uint32_t i = 0; i < 65536; i++)
        ids[i] = i;
    id_set *full = id_set_new(ids, 65536);
    id_set *just_over = id_set_new(ids, N + 1);
    ck_assert_ptr_nonnull(full);
    ck_assert_ptr_nonnull(just_over);
    ck_assert_uint_le(id_set_bytes(full), 8192 + 128);
    ck_assert_uint_eq(id_set_bytes(full), id_set_bytes(just_over));
    /* 10,000 ids of a 40,000-id space, as in the extender's benchmark: a
     * quarter of the bytes of a uint32 array, or less. */
    for (uint32_t i = 0; i < 10000; i++)
        ids[i] = i * 4;
    id_set *bench = id_set_new(ids, 10000);
    ck_assert_ptr_nonnull(bench);
    ck_assert_uint_le(id_set_bytes(bench), 10000 * sizeof(uint32_t) / 4 + 128);
    id_set_free(sparse);
    id_set_free(full);
    id_set_free(just_over);
    id_set_free(bench);
    free(ids);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 60); /* sanitizer builds */
    tcase_add_test(tc, empty_set);
    tcase_add_test(tc, chunk_boundaries);
    tcase_add_test(tc, random_sets_match_arrays);
    tcase_add_test(tc, size_is_what_the_layout_promises);
}

UNIT_MAIN("id_set")
