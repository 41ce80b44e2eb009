/* test_kubeconfig.c - kubeconfig parsing: current-context resolution, token,
 * inline (base64) and file credentials, insecure-skip-tls-verify, namespace,
 * and clear errors for broken or hostile files. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/kubeconfig.h"
#include "tests/lib/unit.h"

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
    const char *dir = unit_scratch_dir("kubeconfig");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/client.crt", dir);
    unit_write_text(path, "PEM-CERT");
    snprintf(path, sizeof path, "%s/client.key", dir);
    unit_write_text(path, "PEM-KEY");
    snprintf(path, sizeof path, "%s/config", dir);
    unit_write_text(
        path,
        "{\"current-context\":\"x\",\"clusters\":[{\"name\":\"k\",\"cluster\":{\"server\":"
        "\"https://h:1\",\"insecure-skip-tls-verify\":true}}],\"contexts\":[{\"name\":\"x\","
        "\"context\":{\"cluster\":\"k\",\"user\":\"u\"}}],\"users\":[{\"name\":\"u\",\"user\":"
        "{\"client-certificate\":\"client.crt\",\"client-key\":\"client.key\"}}]}");
    kube_config cfg;
    tetris_error err = {0};
    ck_assert_msg(kubeconfig_load(path, &cfg, &err) == 0, "%s", err.msg);
    ck_assert(cfg.insecure);
    ck_assert_str_eq(cfg.cert.data, "PEM-CERT");
    ck_assert_str_eq(cfg.key.data, "PEM-KEY");
    ck_assert_ptr_null(cfg.token);
    ck_assert_str_eq(cfg.ns, "default");
    kubeconfig_clear(&cfg);
    unit_remove_tree(dir);
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

static const char *token_over(const char *server, const char *user)
{
    static char text[512];
    snprintf(text, sizeof text,
             "current-context: a\ncontexts:\n- {name: a, context: {cluster: c, user: u}}\n"
             "clusters:\n- {name: c, cluster: {server: '%s'}}\nusers:\n- {name: u, user: %s}\n",
             server, user);
    return text;
}

/* A bearer token over plain http:// is anyone's on the path: refused but
 * to a loopback address; without a token http:// stays allowed. */
START_TEST(no_bearer_token_over_plain_http)
{
    static const char *const refused[] = {
        "http://10.0.0.1:6443",  "http://apiserver.example",         "http://127.0.0.1@evil:80",
        "http://[fd00::1]:6443", "http://localhost.evil.example:80",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        expect_error(token_over(refused[i], "{token: secret}"), TETRIS_E_DENIED,
                     "refusing to send a bearer token over plain HTTP");
        expect_error(token_over(refused[i], "{tokenFile: /var/run/token}"), TETRIS_E_DENIED,
                     "use https://");
    }
    static const char *const allowed[] = {
        "http://127.0.0.1:8080", "http://127.9.9.9",      "http://[::1]:8080",
        "http://localhost:80",   "https://10.0.0.1:6443",
    };
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        kube_config cfg;
        tetris_error err = {0};
        const char *text = token_over(allowed[i], "{token: secret}");
        ck_assert_msg(kubeconfig_parse(text, strlen(text), NULL, &cfg, &err) == 0, "%s: %s",
                      allowed[i], err.msg);
        kubeconfig_clear(&cfg);
    }
    kube_config cfg;
    tetris_error err = {0};
    const char *text = token_over("http://10.0.0.1:6443", "{}");
    ck_assert_msg(kubeconfig_parse(text, strlen(text), NULL, &cfg, &err) == 0, "%s", err.msg);
    kubeconfig_clear(&cfg);

    /* In-cluster files with an explicit http:// server. */
    const char *dir = unit_scratch_dir("sa");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/token", dir);
    unit_write_text(path, "secret\n");
    snprintf(path, sizeof path, "%s/ca.crt", dir);
    unit_write_text(path, "");
    ck_assert_int_eq(kubeconfig_in_cluster(dir, "http://10.0.0.1:6443", &cfg, &err),
                     -TETRIS_E_DENIED);
    ck_assert_int_eq(kubeconfig_in_cluster(dir, "http://127.0.0.1:8080", &cfg, &err), 0);
    kubeconfig_clear(&cfg);
    unit_remove_tree(dir);
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

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "parse", 0);
    tcase_add_test(tc, resolves_current_context);
    tcase_add_test(tc, files_relative_to_kubeconfig_and_insecure);
    tcase_add_test(tc, broken_files_give_clear_errors);
    tcase_add_test(tc, no_bearer_token_over_plain_http);
    tcase_add_test(tc, missing_file_is_notfound);
}

UNIT_MAIN("kubeconfig")
