/* test_profile.c - profile YAML: a valid profile reads back field by field,
 * writing and re-reading round-trips, and every kind of bad input gives a
 * format error that names the line and the key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/profile.h"
#include "tests/lib/unit.h"

static const char valid[] =
    "tetris_profile: 1\n"
    "model: vad\n"
    "model_file: silero_vad_v5.onnx\n"
    "measured: false\n"
    "source: \"illustrative: 2 cores\"\n"
    "configs:\n"
    "  - {c: 1, m_mib: 96, b: 1, p: 1, latency_ms: {mean: 4, p95: 5, p99: 6.5},\n"
    "     throughput_rps: 200, private_bytes: 52428800, shared_bytes: 2327524}\n"
    "  - c: 0.5\n"
    "    m_mib: 120.5\n"
    "    b: 4\n"
    "    p: 2\n"
    "    latency_ms:\n"
    "      mean: 10\n"
    "      p95: 12\n"
    "      p99: 15\n";

static profile *parse_ok(const char *text)
{
    profile *p = NULL;
    tetris_error err = {0};
    int rc = profile_parse(text, strlen(text), "t.yaml", &p, &err);
    ck_assert_msg(rc == 0, "parse failed: %s", err.msg);
    return p;
}

/* Parses text expecting a format error whose message contains want. */
static void parse_bad(const char *text, const char *want)
{
    profile *p = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(profile_parse(text, strlen(text), "t.yaml", &p, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(err.msg, want) != NULL, "error '%s' lacks '%s'", err.msg, want);
}

START_TEST(reads_every_field)
{
    profile *p = parse_ok(valid);
    ck_assert_str_eq(p->model, "vad");
    ck_assert_str_eq(p->model_file, "silero_vad_v5.onnx");
    ck_assert_str_eq(p->source, "illustrative: 2 cores");
    ck_assert(!p->measured);
    ck_assert_uint_eq(p->n_configs, 2);
    const profile_config *a = &p->configs[0], *b = &p->configs[1];
    ck_assert_double_eq(a->c, 1);
    ck_assert_double_eq(a->m_mib, 96);
    ck_assert_int_eq(a->b, 1);
    ck_assert_int_eq(a->p, 1);
    ck_assert_double_eq(a->latency_ms.mean, 4);
    ck_assert_double_eq(a->latency_ms.p95, 5);
    ck_assert_double_eq(a->latency_ms.p99, 6.5);
    ck_assert_double_eq(a->throughput_rps, 200);
    ck_assert_uint_eq(a->private_bytes, 52428800);
    ck_assert_uint_eq(a->shared_bytes, 2327524);
    ck_assert_double_eq(b->c, 0.5);
    ck_assert_double_eq(b->m_mib, 120.5);
    ck_assert_int_eq(b->b, 4);
    ck_assert_int_eq(b->p, 2);
    ck_assert_double_eq(b->latency_ms.p99, 15);
    ck_assert_double_eq(b->throughput_rps, 0); /* optional, absent */
    ck_assert_uint_eq(b->private_bytes, 0);
    ck_assert_double_eq(profile_config_latency(b, PROFILE_STAT_MEAN), 10);
    ck_assert_double_eq(profile_config_latency(b, PROFILE_STAT_P95), 12);
    profile_free(p);
}
END_TEST

START_TEST(write_then_read_round_trips)
{
    profile *p = parse_ok(valid);
    char path[] = "/tmp/test_profile_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    tetris_error err = {0};
    ck_assert_int_eq(profile_save(path, p, &err), 0);
    profile *q = NULL;
    int rc = profile_load(path, &q, &err);
    ck_assert_msg(rc == 0, "reload: %s", err.msg);
    unlink(path);
    ck_assert_str_eq(q->model, p->model);
    ck_assert_str_eq(q->model_file, p->model_file);
    ck_assert_str_eq(q->source, p->source);
    ck_assert_int_eq(q->measured, p->measured);
    ck_assert_uint_eq(q->n_configs, p->n_configs);
    ck_assert_mem_eq(q->configs, p->configs, p->n_configs * sizeof *p->configs);
    profile_free(q);
    profile_free(p);
}
END_TEST

START_TEST(strings_that_need_quoting_survive)
{
    profile *p = parse_ok(valid);
    free(p->model);
    p->model = strdup("a: \"b\" # c\n- d");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tetris_error err = {0};
    ck_assert_int_eq(profile_write(f, p, &err), 0);
    fclose(f);
    profile *q = parse_ok(buf);
    ck_assert_str_eq(q->model, p->model);
    free(buf);
    profile_free(q);
    profile_free(p);
}
END_TEST

START_TEST(missing_file_is_an_io_error)
{
    profile *p = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(profile_load("/nonexistent/profile.yaml", &p, &err), -TETRIS_E_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/profile.yaml"));
}
END_TEST

START_TEST(bad_input_names_line_and_key)
{
    parse_bad("tetris_profile: 1\nmodel: [unclosed\n", "YAML");
    parse_bad("", "empty document");
    parse_bad("- a\n- b\n", "must be a mapping");
    parse_bad("model: x\nconfigs: []\n", "configs: the list is empty");
    parse_bad("tetris_profile: 1\nmeasured: true\n", "missing 'model'");
    parse_bad("tetris_profile: 1\nmodel: x\n", "missing 'configs'");
    parse_bad("model: x\nconfigs:\n  - {c: 1, m_mib: 1, b: 1, p: 1, "
              "latency_ms: {mean: 1, p95: 1, p99: 1}}\n",
              "missing 'tetris_profile: 1'");
    parse_bad("tetris_profile: 2\nmodel: x\n", "version 2 is not supported");
    parse_bad("tetris_profile: 1\nmodel: x\nmodle: y\n", "t.yaml:3: unknown key 'modle'");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {c: 1, b: 1, p: 1, "
              "latency_ms: {mean: 1, p95: 1, p99: 1}}\n",
              "t.yaml:4: config: missing 'm_mib'");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {c: 1, m_mib: 9, b: 1, p: 1, "
              "latency_ms: {mean: 1, p99: 1}}\n",
              "missing 'latency_ms.p95'");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {c: -1}\n", "c: -1 must be > 0");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {c: 0}\n", "c: 0 must be > 0");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {c: fast}\n",
              "c: 'fast' is not a number");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {c: nan}\n", "is not a number");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {b: 2.5}\n",
              "b: '2.5' is not a positive integer");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {p: 0}\n", "p: '0' is not a positive");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {private_bytes: -5}\n",
              "not a non-negative integer");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {latency_ms: 5}\n",
              "latency_ms: expected a mapping");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {latency_ms: {median: 5}}\n",
              "unknown key 'median'");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs:\n  - {c: [1]}\n", "c: expected a number");
    parse_bad("tetris_profile: 1\nmodel: x\nmeasured: maybe\n", "expected true or false");
    parse_bad("tetris_profile: 1\nmodel: {a: b}\n", "model: expected a string");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs: {c: 1}\n", "configs: expected a list");
    parse_bad("tetris_profile: 1\nmodel: x\nconfigs: [5]\n", "each entry must be a mapping");
    parse_bad("tetris_profile: 1\nmodel: x\nmodel: y\n", "duplicate key 'model' at line 3");
    parse_bad("tetris_profile: 1\nmodel: &m x\n", "anchors and aliases are not supported");
}
END_TEST

START_TEST(latency_statistic_names)
{
    enum profile_stat s;
    tetris_error err = {0};
    ck_assert_int_eq(profile_stat_parse("p99", &s, &err), 0);
    ck_assert_int_eq(s, PROFILE_STAT_P99);
    ck_assert_str_eq(profile_stat_name(s), "p99");
    ck_assert_int_eq(profile_stat_parse("p50", &s, &err), -TETRIS_E_INVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "expected mean, p95 or p99"));
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, reads_every_field);
    tcase_add_test(tc, write_then_read_round_trips);
    tcase_add_test(tc, strings_that_need_quoting_survive);
    tcase_add_test(tc, missing_file_is_an_io_error);
    tcase_add_test(tc, bad_input_names_line_and_key);
    tcase_add_test(tc, latency_statistic_names);
}

UNIT_MAIN("profile")
