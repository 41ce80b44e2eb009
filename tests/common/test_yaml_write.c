/* test_yaml_write.c - Kubernetes objects (JSON values) printed as YAML: one document per
 * object, block style, and every string that YAML would read as a boolean,
 * number or null quoted so that it reads back as the same string. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/yaml_write.h"
#include "tests/lib/unit.h"

static char *write_yaml(json_t *objects)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    tetris_error err = {0};
    ck_assert_msg(yaml_write_json_documents(f, objects, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(fclose(f), 0);
    json_decref(objects);
    return text;
}

START_TEST(documents_in_block_style)
{
    char *text = write_yaml(
        json_pack("[{s:s, s:s, s:{s:s, s:{s:s}}}, {s:s, s:{s:i, s:b, s:[s, s], s:{}, s:[]}}]",
                  "apiVersion", "v1", "kind", "ServiceAccount", "metadata", "name",
                  "tetris-profiler", "labels", "tetris.io/model", "silero_vad_v5", "kind", "Job",
                  "spec", "backoffLimit", 0, "hostNetwork", 1, "args", "profile", "/models/m.onnx",
                  "empty", "none"));
    ck_assert_str_eq(text, "apiVersion: v1\n"
                           "kind: ServiceAccount\n"
                           "metadata:\n"
                           "  name: tetris-profiler\n"
                           "  labels:\n"
                           "    tetris.io/model: silero_vad_v5\n"
                           "---\n"
                           "kind: Job\n"
                           "spec:\n"
                           "  backoffLimit: 0\n"
                           "  hostNetwork: true\n"
                           "  args:\n"
                           "  - profile\n"
                           "  - /models/m.onnx\n"
                           "  empty: {}\n"
                           "  none: []\n");
    free(text);
}
END_TEST

START_TEST(ambiguous_strings_are_quoted)
{
    char *text = write_yaml(json_pack("[{s:[s, s, s, s, s, s, s, s, s, s]}]", "args", "true", "no",
                                      "null", "1", "0755", "-o", "", ".5", "a: b", "~"));
    ck_assert_str_eq(text, "args:\n"
                           "- \"true\"\n"
                           "- \"no\"\n"
                           "- \"null\"\n"
                           "- \"1\"\n"
                           "- \"0755\"\n"
                           "- \"-o\"\n"
                           "- \"\"\n"
                           "- \".5\"\n"
                           "- \"a: b\"\n"
                           "- \"~\"\n");
    free(text);
}
END_TEST

START_TEST(not_an_array_is_refused)
{
    tetris_error err = {0};
    json_t *obj = json_object();
    ck_assert_int_eq(yaml_write_json_documents(stdout, obj, &err), -TETRIS_E_INVAL);
    json_decref(obj);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, documents_in_block_style);
    tcase_add_test(tc, ambiguous_strings_are_quoted);
    tcase_add_test(tc, not_an_array_is_refused);
}

UNIT_MAIN("yaml_write")
