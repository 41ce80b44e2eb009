/* test_view.c - model views (agent/view.h): the tensors.json writer
 * escapes whatever a name holds and refuses what JSON cannot hold;
 * view_write lays a view out over a real model and store and view_remove
 * takes away only what it made, following no link; view_check refuses
 * views a reader must not trust. Needs the real models (.deps/models, or
 * TETRIS_MODELS). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/view.h"
#include "common/log.h"
#include "tests/lib/unit.h"

static char model_path[4096];
static const char *scratch;

static void setup(void)
{
    const char *dir = getenv("TETRIS_MODELS");
    snprintf(model_path, sizeof(model_path), "%s/silero_vad_v5.onnx",
             dir != NULL ? dir : ".deps/models");
    ck_assert_msg(access(model_path, R_OK) == 0, "missing real model %s", model_path);
    scratch = unit_scratch_dir("test-view");
}

static void teardown(void)
{
    unit_remove_tree(scratch);
}

static void path_in(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", scratch, name);
}

/* ---- the index writer ---- */

START_TEST(index_escapes_names)
{
    static const char *const names[] = {"with \"quotes\"",
                                        "new\nline\tand tab",
                                        "back\\slash",
                                        "ctrl\x01\x1f",
                                        "unicode \xc3\xa9\xe2\x82\xac",
                                        "/"};
    tensor_meta meta = {.dtype = "float32", .ndim = 2, .shape = {3, 4}, .nbytes = 48};
    struct view_index_tensor t[6];
    for (size_t i = 0; i < 6; i++)
        t[i] = (struct view_index_tensor){.name = names[i],
                                          .meta = &meta,
                                          .file = i % 2 ? "/m \"x\".onnx" : NULL,
                                          .offset = i,
                                          .length = 48,
                                          .shared = false};
    struct view_index ix = {.model = "/models/a \"b\"\n.onnx",
                            .model_format = "onnx",
                            .graph = "model.onnx",
                            .store = NULL,
                            .external_data_folder = "/models",
                            .shared = false,
                            .fallback = "private",
                            .tensors = t,
                            .n_tensors = 6};
    tetris_error err = {0};
    char *text = view_index_json(&ix, &err);
    ck_assert_msg(text != NULL, "%s", err.msg);
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    ck_assert_msg(j != NULL, "not JSON: %s", jerr.text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "model")), ix.model);
    ck_assert_str_eq(json_string_value(json_object_get(j, "format")), VIEW_FORMAT);
    ck_assert(json_is_null(json_object_get(j, "store")));
    json_t *arr = json_object_get(j, "tensors");
    ck_assert_int_eq(json_array_size(arr), 6);
    for (size_t i = 0; i < 6; i++) {
        json_t *e = json_array_get(arr, i);
        ck_assert_str_eq(json_string_value(json_object_get(e, "name")), names[i]);
        ck_assert(json_is_null(json_object_get(e, "digest")));
        if (i % 2)
            ck_assert_str_eq(json_string_value(json_object_get(e, "file")), "/m \"x\".onnx");
        else
            ck_assert(json_is_null(json_object_get(e, "file")));
        ck_assert_int_eq(json_integer_value(json_object_get(e, "offset")), (json_int_t)i);
        ck_assert_int_eq(json_array_size(json_object_get(e, "shape")), 2);
    }
    json_decref(j);
    free(text);
}
END_TEST

START_TEST(index_refuses_invalid_utf8)
{
    tensor_meta meta = {.dtype = "int8", .ndim = 0, .nbytes = 1};
    struct view_index_tensor t = {.name = "bad \xff name", .meta = &meta, .length = 1};
    struct view_index ix = {.model = "/m.onnx",
                            .model_format = "onnx",
                            .tensors = &t,
                            .n_tensors = 1};
    tetris_error err = {0};
    ck_assert_ptr_null(view_index_json(&ix, &err));
    ck_assert_int_eq(err.code, TETRIS_E_FORMAT);
    ck_assert_msg(strstr(err.msg, "UTF-8") != NULL, "%s", err.msg);

    t.name = "fine";
    ix.model = "/bad \xc3.onnx";
    ck_assert_ptr_null(view_index_json(&ix, &err));
    ck_assert_int_eq(err.code, TETRIS_E_FORMAT);
}
END_TEST

/* ---- writing, removing and checking a view ---- */

static agent_model *load(enum agent_mode mode, const char *store_dir)
{
    struct agent_options o;
    agent_options_init(&o);
    o.mode = mode;
    o.store_dir = store_dir;
    o.populate = STORE_POPULATE_NONE;
    o.map_only = true;
    agent_model *am = NULL;
    tetris_error err = {0};
    ck_assert_msg(agent_load(model_path, &o, &am, &err) == 0, "%s", err.msg);
    return am;
}

START_TEST(write_and_remove_only_our_own)
{
    char store_dir[4200], dir[4200], victim[4200], path[4400];
    path_in(store_dir, sizeof(store_dir), "store");
    path_in(dir, sizeof(dir), "view");
    path_in(victim, sizeof(victim), "victim");
    ck_assert_int_eq(mkdir(store_dir, 0700), 0);
    agent_model *am = load(AGENT_MODE_DIRECT, store_dir);
    ck_assert_uint_eq(am->stats.private_bytes, 0); /* map_only: no copies */
    model_view *v = NULL;
    tetris_error err = {0};
    ck_assert_msg(view_write(am, model_path, dir, NULL, &v, &err) == 0, "%s", err.msg);
    const struct view_stats *s = view_stats(v);
    ck_assert(s->shared);
    ck_assert_ptr_null(s->fallback);
    ck_assert_uint_eq(s->shared_tensors, s->tensors);
    struct stat st;
    ck_assert_int_eq(stat(dir, &st), 0);
    ck_assert_int_eq(st.st_mode & 07777, 0700);
    snprintf(path, sizeof(path), "%s/%s", dir, VIEW_INDEX_NAME);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 07777, 0444);
    struct view_check_result res;
    ck_assert_msg(view_check(dir, &res, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(res.shared_files, res.tensors);

    /* Someone else's file and a link to a file outside, put into the view
     * (and into its tensors/) after it was written: neither is ours. */
    unit_write_text(victim, "keep me");
    snprintf(path, sizeof(path), "%s/stranger", dir);
    ck_assert_int_eq(symlink(victim, path), 0);
    snprintf(path, sizeof(path), "%s/tensors/zz", dir);
    ck_assert_int_eq(symlink(scratch, path), 0);
    view_remove(v);
    ck_assert_int_eq(stat(victim, &st), 0);
    ck_assert_int_eq(st.st_size, 7);
    snprintf(path, sizeof(path), "%s/stranger", dir);
    ck_assert_int_eq(lstat(path, &st), 0);
    snprintf(path, sizeof(path), "%s/tensors/zz", dir);
    ck_assert_int_eq(lstat(path, &st), 0);
    snprintf(path, sizeof(path), "%s/%s", dir, VIEW_INDEX_NAME);
    ck_assert_int_ne(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/%s", dir, VIEW_GRAPH_NAME);
    ck_assert_int_ne(access(path, F_OK), 0);
    ck_assert_int_eq(stat(store_dir, &st), 0); /* the store is not the view's */
    agent_model_free(am);
}
END_TEST

START_TEST(refuses_a_directory_not_empty)
{
    char dir[4200], path[4400];
    path_in(dir, sizeof(dir), "full");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(path, sizeof(path), "%s/x", dir);
    unit_write_text(path, "");
    agent_model *am = load(AGENT_MODE_PRIVATE, NULL);
    model_view *v = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(view_write(am, model_path, dir, NULL, &v, &err), -TETRIS_E_DENIED);
    ck_assert_msg(strstr(err.msg, "not empty") != NULL, "%s", err.msg);
    ck_assert_int_eq(access(path, F_OK), 0);
    /* A new directory under a missing parent: an error, nothing made. */
    snprintf(path, sizeof(path), "%s/missing/view", scratch);
    ck_assert_int_eq(view_write(am, model_path, path, NULL, &v, &err), -TETRIS_E_IO);
    agent_model_free(am);
}
END_TEST

START_TEST(check_refuses_untrusted_views)
{
    char dir[4200], path[4400];
    path_in(dir, sizeof(dir), "view");
    agent_model *am = load(AGENT_MODE_PRIVATE, NULL);
    model_view *v = NULL;
    tetris_error err = {0};
    ck_assert_msg(view_write(am, model_path, dir, NULL, &v, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(view_stats(v)->fallback, "private");
    struct view_check_result res;
    ck_assert_msg(view_check(dir, &res, &err) == 0, "%s", err.msg);
    ck_assert(!res.shared);
    ck_assert_str_eq(res.fallback, "private");

    ck_assert_int_eq(chmod(dir, 0770), 0);
    ck_assert_int_eq(view_check(dir, &res, &err), -TETRIS_E_DENIED);
    ck_assert_int_eq(chmod(dir, 0700), 0);

    /* An index rewritten to point a tensor outside the model's folder. */
    snprintf(path, sizeof(path), "%s/%s", dir, VIEW_INDEX_NAME);
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    ck_assert_ptr_nonnull(j);
    json_object_set_new(json_array_get(json_object_get(j, "tensors"), 0), "file",
                        json_string("/etc/passwd"));
    ck_assert_int_eq(chmod(path, 0644), 0);
    ck_assert_int_eq(json_dump_file(j, path, 0), 0);
    ck_assert_int_eq(view_check(dir, &res, &err), -TETRIS_E_NOTFOUND);
    ck_assert_msg(strstr(err.msg, "outside") != NULL, "%s", err.msg);
    /* ... or past the end of its file. */
    char abs[4096];
    ck_assert_ptr_nonnull(realpath(model_path, abs));
    json_object_set_new(json_array_get(json_object_get(j, "tensors"), 0), "file", json_string(abs));
    json_object_set_new(json_array_get(json_object_get(j, "tensors"), 0), "offset",
                        json_integer(1 << 30));
    ck_assert_int_eq(json_dump_file(j, path, 0), 0);
    ck_assert_int_eq(view_check(dir, &res, &err), -TETRIS_E_NOTFOUND);
    /* ... or an index of another format. */
    json_object_set_new(j, "format", json_string("other/1"));
    ck_assert_int_eq(json_dump_file(j, path, 0), 0);
    ck_assert_int_eq(view_check(dir, &res, &err), -TETRIS_E_FORMAT);
    json_decref(j);
    view_remove(v);
    ck_assert_int_ne(access(dir, F_OK), 0); /* we made it: it goes */
    agent_model_free(am);
}
END_TEST

static void unit_tests(Suite *s)
{
    log_init("test_view");
    TCase *tc = unit_tcase(s, "view", 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, index_escapes_names);
    tcase_add_test(tc, index_refuses_invalid_utf8);
    tcase_add_test(tc, write_and_remove_only_our_own);
    tcase_add_test(tc, refuses_a_directory_not_empty);
    tcase_add_test(tc, check_refuses_untrusted_views);
}

UNIT_MAIN("view")
