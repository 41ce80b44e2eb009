/* test_kubeconfig.c - kubeconfig parsing: current-context resolution, token,
 * inline (base64) and file credentials, insecure-skip-tls-verify, namespace,
 * and clear errors for broken or hostile files. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/kubeconfig.h"

static const char two_contexts[] =
    "apiVersion: v1\n"
    "kind: Config\n"
    "current-context: b\n"
    "clusters:\n"
    "- name: c1\n"
    "  cluster: {server: 'https://one.example:6443'}\n"
    "- name: c2\n"
    "  cluster:\n"
    "    server: https://127.0.0.1:6443\n"
    "    certificate-authority-data: LS0tQ0EtLS0K\n" /* "---CA---\n" */
    "contexts:\n"
    "- name: a\n"
    "  context: {cluster: c1, user: u1}\n"
    "- name: b\n"
    "  context:\n"
    "    cluster: c2\n"
    "    user: u2\n"
    "    namespace: models\n"
    "users:\n"
    "- name: u1\n"
    "  user: {token: wrong}\n"
    "- name: u2\n"
    "  user:\n"
    "    client-certificate-data: Q0VSVA==\n" /* "CERT" */
    "    client-key-data: S0VZ\n"             /* "KEY" */
    "    token: abc\n";

START_TEST(resolves_current_context)
{
    kube_config cfg;
    tetris_error err = {0};
    ck_assert_msg(kubeconfig_parse(two_contexts, strlen(two_contexts), NULL, &cfg, &err) == 0,
                  "%s", err.msg);
    ck_assert_str_eq(cfg.server, "https://127.0.0.1:6443");
    ck_assert_str_eq(cfg.token, "abc");
    ck_assert_str_eq(cfg.ca.data, "---CA---\n");
    ck_assert_uint_eq(cfg.ca.len, 9);
    ck_assert_str_eq(cfg.cert.data, "CERT");
    ck_assert_str_eq(cfg.key.data, "KEY");
    ck_assert_str_eq(cfg.ns, "models");
    ck_assert(!cfg.insecure);
    kubeconfig_clear(&cfg);
}
END_TEST

START_TEST(files_relative_to_kubeconfig_and_insecure)
{
    char dir[] = "/tmp/tetris-kubeconfig.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/client.crt", dir);
    FILE *f = fopen(path, "w");
    fputs("PEM-CERT", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/client.key", dir);
    f = fopen(path, "w");
    fputs("PEM-KEY", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/config", dir);
    f = fopen(path, "w");
    fputs("{\"current-context\":\"x\",\"clusters\":[{\"name\":\"k\",\"cluster\":{\"server\":"
          "\"https://h:1\",\"insecure-skip-tls-verify\":true}}],\"contexts\":[{\"name\":\"x\","
          "\"context\":{\"cluster\":\"k\",\"user\":\"u\"}}],\"users\":[{\"name\":\"u\",\"user\":"
          "{\"client-certificate\":\"client.crt\",\"client-key\":\"client.key\"}}]}",
          f);
    fclose(f);
    kube_config cfg;
    tetris_error err = {0};
    ck_assert_msg(kubeconfig_load(path, &cfg, &err) == 0, "%s", err.msg);
    ck_assert(cfg.insecure);
    ck_assert_str_eq(cfg.cert.data, "PEM-CERT");
    ck_assert_str_eq(cfg.key.data, "PEM-KEY");
    ck_assert_ptr_null(cfg.token);
    ck_assert_str_eq(cfg.ns, "default");
    kubeconfig_clear(&cfg);
    char cmd[PATH_MAX];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static void expect_error(const char *text, int code, const char *needle)
{
    kube_config cfg;
    tetris_error err = {0};
    ck_assert_int_eq(kubeconfig_parse(text, strlen(text), NULL, &cfg, &err), -code);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
}

START_TEST(broken_files_give_clear_errors)
{
    expect_error("clusters: []\n", TETRIS_E_FORMAT, "no current-context");
    expect_error("current-context: nope\ncontexts: []\n", TETRIS_E_FORMAT,
                 "context nope not found");
    expect_error("current-context: a\ncontexts:\n- {name: a, context: {cluster: c}}\n",
                 TETRIS_E_FORMAT, "cluster of context a not found");
    expect_error("current-context: a\ncontexts:\n- {name: a, context: {cluster: c}}\n"
                 "clusters:\n- {name: c, cluster: {server: 'ftp://x'}}\n",
                 TETRIS_E_FORMAT, "no http(s) server URL");
    expect_error("current-context: a\ncontexts:\n- {name: a, context: {cluster: c, user: u}}\n"
                 "clusters:\n- {name: c, cluster: {server: 'https://x'}}\n"
                 "users:\n- {name: u, user: {client-certificate-data: QQ==}}\n",
                 TETRIS_E_FORMAT, "without a key");
    expect_error("current-context: a\ncontexts:\n- {name: a, context: {cluster: c}}\n"
                 "clusters:\n- {name: c, cluster: {server: 'https://x', "
                 "certificate-authority-data: '!!'}}\n",
                 TETRIS_E_FORMAT, "not base64");
    expect_error("a: &x [1]\nb: *x\n", TETRIS_E_FORMAT, "not supported");
    expect_error("key: [unclosed\n", TETRIS_E_FORMAT, "line");
    expect_error("- just\n- a list\n", TETRIS_E_FORMAT, "not a mapping");
    expect_error("", TETRIS_E_FORMAT, "not a mapping");
    /* Deep nesting is refused, not recursed into until the stack ends. */
    char deep[4096] = "";
    for (int i = 0; i < 200; i++)
        strcat(deep, "[");
    expect_error(deep, TETRIS_E_FORMAT, "line");
}
END_TEST

START_TEST(missing_file_is_notfound)
{
    kube_config cfg;
    tetris_error err = {0};
    ck_assert_int_eq(kubeconfig_load("/nonexistent/kubeconfig", &cfg, &err), -TETRIS_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/kubeconfig"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kubeconfig");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, resolves_current_context);
    tcase_add_test(tc, files_relative_to_kubeconfig_and_insecure);
    tcase_add_test(tc, broken_files_give_clear_errors);
    tcase_add_test(tc, missing_file_is_notfound);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
