/* test_agent.c - the agent loader in every mode over a real model and a
 * real store: the bytes it hands out equal a private load's, direct loads
 * share and reuse the store, every degraded case (no store, full store)
 * still serves the whole model; and the ONNX rewriter keeps models intact
 * and rejects garbage. Needs the real models (.deps/models, or
 * TETRIS_MODELS). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/log.h"
#include "model/onnx_rewrite.h"
#include "tests/lib/unit.h"

static char model_path[4096];
static const char *scratch;

static void setup(void)
{
    const char *dir = getenv("TETRIS_MODELS");
    snprintf(model_path, sizeof(model_path), "%s/silero_vad_v5.onnx",
             dir != NULL ? dir : ".deps/models");
    ck_assert_msg(access(model_path, R_OK) == 0, "missing real model %s", model_path);
    scratch = unit_scratch_dir("test-agent");
}

static void teardown(void)
{
    unit_remove_tree(scratch);
}

static agent_model *load(enum agent_mode mode, const char *store_dir)
{
    struct agent_options o;
    tetris_error err = {0};
    agent_model *am = NULL;
    agent_options_init(&o);
    o.mode = mode;
    o.store_dir = store_dir;
    int r = agent_load(model_path, &o, &am, &err);
    ck_assert_msg(r == 0, "agent_load: %s", err.msg);
    return am;
}

/* Every tensor of a holds the same bytes as in b. */
static void assert_same_bytes(const agent_model *a, const agent_model *b)
{
    ck_assert_uint_eq(a->model->n_tensors, b->model->n_tensors);
    for (size_t i = 0; i < a->model->n_tensors; i++) {
        const agent_tensor *t = &a->tensors[i];
        const agent_tensor *u = agent_find_tensor(b, t->desc->name);
        ck_assert_ptr_nonnull(u);
        ck_assert_uint_eq(t->desc->meta.nbytes, u->desc->meta.nbytes);
        ck_assert_msg(memcmp(t->data, u->data, t->desc->meta.nbytes) == 0, "tensor %s differs",
                      t->desc->name);
    }
}

/* Every tensor but the tiny ones is a store mapping; the stats agree. */
static void assert_shared(const agent_model *am)
{
    uint64_t mapped = 0, priv = 0;
    ck_assert(!am->stats.fell_back);
    for (size_t i = 0; i < am->stats.tensors; i++) {
        const agent_tensor *t = &am->tensors[i];
        bool tiny = t->desc->meta.nbytes < AGENT_MIN_MAPPED_BYTES;
        ck_assert_msg(t->shared == !tiny, "tensor %s (%llu bytes) shared=%d", t->desc->name,
                      (unsigned long long)t->desc->meta.nbytes, t->shared);
        *(t->shared ? &mapped : &priv) += t->desc->meta.nbytes;
    }
    ck_assert_uint_gt(mapped, 0);
    ck_assert_uint_eq(am->stats.mapped_bytes, mapped);
    ck_assert_uint_eq(am->stats.private_bytes, priv);
}

START_TEST(private_load_reads_everything)
{
    agent_model *am = load(AGENT_MODE_PRIVATE, NULL);
    ck_assert_uint_gt(am->stats.tensors, 0);
    ck_assert_uint_eq(am->stats.private_bytes, am->stats.bytes);
    ck_assert_uint_eq(am->stats.mapped_bytes, 0);
    ck_assert(!am->stats.fell_back);
    ck_assert_ptr_null(agent_store_public_dir(am));
    for (size_t i = 0; i < am->stats.tensors; i++)
        ck_assert(!am->tensors[i].shared && am->tensors[i].data != NULL);
    ck_assert_ptr_null(agent_find_tensor(am, "no such tensor"));
    agent_model_free(am);
}
END_TEST

START_TEST(direct_load_shares_and_reuses)
{
    agent_model *base = load(AGENT_MODE_PRIVATE, NULL);
    agent_model *cold = load(AGENT_MODE_DIRECT, scratch);
    assert_shared(cold);
    ck_assert_uint_gt(cold->stats.ingested_bytes, 0);
    char *pub;
    ck_assert_int_ge(asprintf(&pub, "%s/public", scratch), 0);
    ck_assert_str_eq(agent_store_public_dir(cold), pub);
    free(pub);
    assert_same_bytes(cold, base);

    agent_model *warm = load(AGENT_MODE_DIRECT, scratch);
    ck_assert_uint_eq(warm->stats.ingested_bytes, 0);
    assert_shared(warm);
    assert_same_bytes(warm, base);
    agent_model_free(warm);
    agent_model_free(cold);
    agent_model_free(base);
}
END_TEST

static int count_live_holders(void *ctx, const struct store_holder_info *h)
{
    if (h->alive)
        (*(int *)ctx)++;
    return 0;
}

START_TEST(direct_load_records_references_until_freed)
{
    agent_model *am = load(AGENT_MODE_DIRECT, scratch);
    struct store_options so = {.read_only = true};
    tetris_error err = {0};
    store *s = NULL;
    int live = 0;
    ck_assert_int_eq(store_open(scratch, &so, &s, &err), 0);
    ck_assert_int_eq(store_foreach_holder(s, count_live_holders, &live, &err), 0);
    ck_assert_int_eq(live, 1);
    agent_model_free(am);
    live = 0;
    ck_assert_int_eq(store_foreach_holder(s, count_live_holders, &live, &err), 0);
    ck_assert_int_eq(live, 0);
    store_close(s);
}
END_TEST

START_TEST(full_store_falls_back_with_every_tensor_served)
{
    struct store_options so = {.create = true, .capacity_bytes = 64 * 1024};
    tetris_error err = {0};
    store *s = NULL;
    ck_assert_int_eq(store_open(scratch, &so, &s, &err), 0);
    store_close(s);

    agent_model *base = load(AGENT_MODE_PRIVATE, NULL);
    agent_model *am = load(AGENT_MODE_DIRECT, scratch);
    ck_assert(am->stats.fell_back);
    ck_assert_str_eq(am->stats.fallback_reason, "store-full");
    ck_assert_uint_gt(am->stats.private_bytes, 0);
    ck_assert_uint_eq(am->stats.mapped_bytes + am->stats.private_bytes, am->stats.bytes);
    assert_same_bytes(am, base);
    agent_model_free(am);
    agent_model_free(base);
}
END_TEST

START_TEST(missing_store_falls_back)
{
    char missing[4200];
    snprintf(missing, sizeof(missing), "%s/absent", scratch);
    for (int mode = AGENT_MODE_STORE; mode <= AGENT_MODE_DIRECT; mode++) {
        agent_model *am = load((enum agent_mode)mode, missing);
        ck_assert(am->stats.fell_back);
        ck_assert_str_eq(am->stats.fallback_reason, "store-unavailable");
        ck_assert_uint_eq(am->stats.private_bytes, am->stats.bytes);
        ck_assert_int_ne(access(missing, F_OK), 0); /* nothing was created */
        agent_model_free(am);
    }
}
END_TEST

START_TEST(store_mode_without_daemon_falls_back)
{
    agent_model *seed = load(AGENT_MODE_DIRECT, scratch); /* lays the store out */
    agent_model_free(seed);
    agent_model *am = load(AGENT_MODE_STORE, scratch);
    ck_assert(am->stats.fell_back);
    ck_assert_str_eq(am->stats.fallback_reason, "daemon-unavailable");
    ck_assert_uint_eq(am->stats.private_bytes, am->stats.bytes);
    agent_model_free(am);
}
END_TEST

START_TEST(tenants_have_their_own_stores)
{
    struct agent_options o;
    tetris_error err = {0};
    agent_model *a = NULL, *b = NULL;
    agent_options_init(&o);
    o.mode = AGENT_MODE_DIRECT;
    o.store_dir = scratch;
    o.tenant = "alpha";
    ck_assert_int_eq(agent_load(model_path, &o, &a, &err), 0);
    o.tenant = "beta";
    ck_assert_int_eq(agent_load(model_path, &o, &b, &err), 0);
    /* beta sees none of alpha's tensors: it ingests its own copies */
    ck_assert_uint_gt(a->stats.ingested_bytes, 0);
    ck_assert_uint_eq(b->stats.ingested_bytes, a->stats.ingested_bytes);
    ck_assert_ptr_nonnull(strstr(agent_store_public_dir(a), "/tenants/alpha"));
    ck_assert_ptr_nonnull(strstr(agent_store_public_dir(b), "/tenants/beta"));
    assert_same_bytes(a, b);
    agent_model_free(b);
    agent_model_free(a);
}
END_TEST

/* With fewer mappings allowed than the model has tensors to map, the
 * largest ones are mapped, the rest load privately, and every tensor is
 * still published: a second load ingests nothing. */
START_TEST(map_budget_maps_the_largest_tensors)
{
    struct agent_options o;
    tetris_error err = {0};
    agent_model *am = NULL, *again = NULL;
    agent_model *base = load(AGENT_MODE_PRIVATE, NULL);
    agent_options_init(&o);
    o.mode = AGENT_MODE_DIRECT;
    o.store_dir = scratch;
    o.max_mappings = 2;
    ck_assert_int_eq(agent_load(model_path, &o, &am, &err), 0);
    ck_assert(!am->stats.fell_back);
    ck_assert_uint_gt(am->stats.ingested_bytes, 0);

    size_t shared = 0, eligible = 0;
    uint64_t smallest_shared = UINT64_MAX, largest_private = 0, mapped = 0;
    for (size_t i = 0; i < am->stats.tensors; i++) {
        const agent_tensor *t = &am->tensors[i];
        uint64_t nbytes = t->desc->meta.nbytes;
        if (nbytes < AGENT_MIN_MAPPED_BYTES) {
            ck_assert(!t->shared);
            continue;
        }
        eligible++;
        if (t->shared) {
            shared++;
            mapped += nbytes;
            smallest_shared = nbytes < smallest_shared ? nbytes : smallest_shared;
        } else {
            largest_private = nbytes > largest_private ? nbytes : largest_private;
        }
    }
    ck_assert_uint_gt(eligible, 2); /* the model must exceed the budget */
    ck_assert_uint_eq(shared, 2);
    ck_assert_uint_ge(smallest_shared, largest_private);
    ck_assert_uint_eq(am->stats.mapped_bytes, mapped);
    ck_assert_uint_eq(am->stats.mapped_bytes + am->stats.private_bytes, am->stats.bytes);
    assert_same_bytes(am, base);

    o.max_mappings = 0; /* what vm.max_map_count leaves: all of them */
    ck_assert_int_eq(agent_load(model_path, &o, &again, &err), 0);
    ck_assert_uint_eq(again->stats.ingested_bytes, 0);
    assert_shared(again);
    agent_model_free(again);
    agent_model_free(am);
    agent_model_free(base);
}
END_TEST

START_TEST(bad_model_is_a_format_error)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/garbage.onnx", scratch);
    unit_write_text(path, "\x0a\xff\xff\xff\xff\x0f garbage");
    struct agent_options o;
    tetris_error err = {0};
    agent_model *am = NULL;
    agent_options_init(&o);
    o.mode = AGENT_MODE_DIRECT;
    o.store_dir = scratch;
    ck_assert_int_eq(agent_load(path, &o, &am, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_null(am);
}
END_TEST

/* ---- onnx_rewrite ---- */

struct seen {
    size_t tensors, constants;
    uint64_t bytes;
    bool share;
};

static bool count_tensor(void *ctx, const struct onnx_tensor_ref *t, struct onnx_external *ext)
{
    struct seen *s = ctx;
    s->tensors++;
    s->constants += t->from_constant;
    s->bytes += t->length;
    snprintf(ext->location, sizeof(ext->location), "weights.bin");
    ext->offset = 0;
    return s->share;
}

START_TEST(rewrite_without_sharing_is_identity)
{
    size_t len, out_len;
    uint8_t *img = (uint8_t *)unit_read_file(model_path, &len), *out = NULL;
    struct seen s = {0};
    tetris_error err = {0};
    ck_assert_int_eq(onnx_rewrite(img, len, count_tensor, &s, &out, &out_len, &err), 0);
    ck_assert_uint_gt(s.tensors, 0);
    ck_assert_uint_gt(s.constants, 0); /* silero keeps weights in Constant nodes */
    ck_assert_uint_eq(out_len, len);
    ck_assert(memcmp(out, img, len) == 0);
    free(out);
    free(img);
}
END_TEST

START_TEST(rewrite_with_sharing_strips_payloads)
{
    size_t len, out_len;
    uint8_t *img = (uint8_t *)unit_read_file(model_path, &len), *out = NULL;
    struct seen s = {.share = true};
    tetris_error err = {0};
    ck_assert_int_eq(onnx_rewrite(img, len, count_tensor, &s, &out, &out_len, &err), 0);
    ck_assert_uint_lt(out_len, len - s.bytes + s.tensors * 256);
    ck_assert_ptr_nonnull(memmem(out, out_len, "weights.bin", 11));
    free(out);
    free(img);
}
END_TEST

START_TEST(rewrite_rejects_garbage)
{
    static const uint8_t bad[][8] = {
        {0x3a, 0x7f, 0x00},             /* graph length past the end */
        {0x0f, 0x00},                   /* wire type 7 */
        {0x08, 0xff, 0xff, 0xff, 0xff}, /* truncated varint */
        {0x08, 0x01},                   /* no graph at all */
    };
    static const size_t lens[] = {3, 2, 5, 2};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        struct seen s = {0};
        tetris_error err = {0};
        uint8_t *out = NULL;
        size_t out_len = 0;
        ck_assert_int_eq(onnx_rewrite(bad[i], lens[i], count_tensor, &s, &out, &out_len, &err),
                         -TETRIS_E_FORMAT);
        ck_assert_ptr_null(out);
        ck_assert_str_ne(err.msg, "");
    }
}
END_TEST

/* Inputs the fuzzer (fuzz/fuzz_onnx_rewrite.c) found, with what it
 * checks: an image rewritten with everything shared rewrites again. */
START_TEST(rewrite_fuzz_regressions)
{
    /* An initializer whose dims multiply past 2^64: its size wrapped, was
     * written into external_data with 20 digits, and the rewritten image
     * no longer parsed. A tensor of no real size is not offered now. */
    static const uint8_t huge_dims[] = {
        0x08, 0x08, 0x12, 0x0c, 0x74, 0x65, 0x74, 0x19, 0x19, 0x19, 0x19, 0x19, 0x19, 0x19,
        0x19, 0x73, 0x3a, 0x1e, 0x12, 0x01, 0x67, 0x2a, 0x19, 0x08, 0x80, 0x80, 0xff, 0xff,
        0xff, 0x16, 0x08, 0x80, 0x87, 0x80, 0x80, 0x80, 0x20, 0x10, 0x01, 0x42, 0x01, 0x77,
        0x4a, 0x04, 0x61, 0x62, 0x63, 0x11,
    };
    struct seen s = {.share = true}, again = {0};
    tetris_error err = {0};
    uint8_t *out = NULL, *twice = NULL;
    size_t out_len = 0, twice_len = 0;
    ck_assert_int_eq(onnx_rewrite(huge_dims, sizeof(huge_dims), count_tensor, &s, &out, &out_len,
                                  &err),
                     0);
    ck_assert_uint_eq(s.tensors, 0);
    ck_assert_msg(onnx_rewrite(out, out_len, count_tensor, &again, &twice, &twice_len, &err) == 0,
                  "rewritten image does not parse: %s", err.msg);
    ck_assert_uint_eq(twice_len, sizeof(huge_dims));
    ck_assert(memcmp(twice, huge_dims, sizeof(huge_dims)) == 0);
    free(out);
    free(twice);
}
END_TEST

/* Seeded mutations of a real model (byte flips, truncation, spliced
 * lengths): the rewriter either succeeds or reports a format error, and
 * never reads out of bounds (this runs under ASan in `make test`). */
START_TEST(rewrite_survives_mutations)
{
    size_t len;
    uint8_t *img = (uint8_t *)unit_read_file(model_path, &len);
    uint8_t *work = malloc(len);
    uint64_t rng = 42;
    ck_assert_ptr_nonnull(work);
    for (int iter = 0; iter < 300; iter++) {
        size_t n = len;
        memcpy(work, img, len);
        for (int k = 0; k < 1 + iter % 8; k++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t at = (size_t)(rng >> 33) % len;
            work[at] = (uint8_t)(rng >> 13);
        }
        if (iter % 5 == 0) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            n = (size_t)(rng >> 33) % len;
        }
        struct seen s = {.share = iter % 2 == 0};
        tetris_error err = {0};
        uint8_t *out = NULL;
        size_t out_len = 0;
        int r = onnx_rewrite(work, n, count_tensor, &s, &out, &out_len, &err);
        ck_assert_msg(r == 0 || r == -TETRIS_E_FORMAT, "iteration %d: %d %s", iter, r, err.msg);
        ck_assert(r == 0 ? out != NULL : out == NULL);
        free(out);
    }
    free(work);
    free(img);
}
END_TEST

static void unit_tests(Suite *s)
{
    log_init("test_agent");
    log_set_level(LOG_LEVEL_ERROR);
    TCase *load_case = unit_tcase(s, "load", 120);
    tcase_add_checked_fixture(load_case, setup, teardown);
    tcase_add_test(load_case, private_load_reads_everything);
    tcase_add_test(load_case, direct_load_shares_and_reuses);
    tcase_add_test(load_case, direct_load_records_references_until_freed);
    tcase_add_test(load_case, full_store_falls_back_with_every_tensor_served);
    tcase_add_test(load_case, missing_store_falls_back);
    tcase_add_test(load_case, store_mode_without_daemon_falls_back);
    tcase_add_test(load_case, tenants_have_their_own_stores);
    tcase_add_test(load_case, map_budget_maps_the_largest_tensors);
    tcase_add_test(load_case, bad_model_is_a_format_error);
    TCase *rw = unit_tcase(s, "onnx_rewrite", 120);
    tcase_add_checked_fixture(rw, setup, teardown);
    tcase_add_test(rw, rewrite_without_sharing_is_identity);
    tcase_add_test(rw, rewrite_with_sharing_strips_payloads);
    tcase_add_test(rw, rewrite_rejects_garbage);
    tcase_add_test(rw, rewrite_survives_mutations);
    tcase_add_test(rw, rewrite_fuzz_regressions);
}

UNIT_MAIN("agent")
