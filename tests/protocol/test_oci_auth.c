/* test_oci_auth.c - what a registry is trusted with (protocol/oci.h,
 * "credentials and trust"): a dockerconfigjson document decodes in both
 * of its forms, a registry's entry is found by host and port as a
 * reference names it, every malformed entry is refused naming where it is
 * and never quoting a secret; WWW-Authenticate challenges and token
 * replies parse strictly; a CA bundle without a certificate is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/oci.h"
#include "tests/lib/unit.h"

/* "alice:s3cret" and "bob:pa:ss" in base64. */
#define ALICE_B64 "YWxpY2U6czNjcmV0"
#define BOB_B64 "Ym9iOnBhOnNz"

static oci_credentials *parsed(const char *json)
{
    oci_credentials *c = NULL;
    tetris_error err = {0};
    ck_assert_msg(oci_credentials_parse(json, strlen(json), "f", &c, &err) == 0, "%s", err.msg);
    return c;
}

/* The document is refused with a message holding needle and no secret. */
static void refused(const char *json, const char *needle)
{
    oci_credentials *c = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(oci_credentials_parse(json, strlen(json), "f", &c, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "'%s' lacks '%s'", err.msg, needle);
    ck_assert_msg(strstr(err.msg, "s3cret") == NULL && strstr(err.msg, ALICE_B64) == NULL,
                  "a secret in '%s'", err.msg);
}

START_TEST(credentials_in_both_forms)
{
    oci_credentials *c = parsed(
        "{\"auths\": {\"reg.example:5000\": {\"auth\": \"" ALICE_B64 "\"},"
        " \"https://Other.Example/v1/\": {\"username\": \"bob\", \"password\": \"pa:ss\","
        " \"email\": \"b@example\"},"
        " \"both.example:8443\": {\"auth\": \"" BOB_B64 "\", \"username\": \"bob\"}},"
        " \"credsStore\": \"desktop\", \"credHelpers\": {\"x\": \"y\"}}");
    ck_assert_uint_eq(c->n, 3);
    const oci_credential *e = oci_credentials_find(c, "REG.example", 5000);
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->username, "alice");
    ck_assert_str_eq(e->password, "s3cret");
    ck_assert_ptr_null(oci_credentials_find(c, "reg.example", 5001));
    ck_assert_ptr_null(oci_credentials_find(c, "reg.example", 0));
    /* No port written: 443, which a reference without a port means too. */
    e = oci_credentials_find(c, "other.example", 0);
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->password, "pa:ss");
    ck_assert_ptr_eq(oci_credentials_find(c, "other.example", 443), e);
    ck_assert_ptr_null(oci_credentials_find(c, "other.example", 5000));
    ck_assert_str_eq(oci_credentials_find(c, "both.example", 8443)->password, "pa:ss");
    ck_assert_ptr_null(oci_credentials_find(NULL, "reg.example", 5000));
    oci_credentials_free(c);
    /* Unpadded base64 is base64 too. */
    c = parsed("{\"auths\": {\"h:1\": {\"auth\": \"Ym9iOnBhOnNz\"}}}");
    ck_assert_str_eq(c->entries[0].username, "bob");
    oci_credentials_free(c);
    c = parsed("{\"auths\": {}}");
    ck_assert_uint_eq(c->n, 0);
    oci_credentials_free(c);
}
END_TEST

START_TEST(credentials_refused)
{
    refused("", "f");
    refused("[]", "f");
    refused("{}", "no \"auths\"");
    refused("{\"auths\": {}, \"auths\": {}}", "\"auths\" twice");
    refused("{\"auths\": []}", "auths");
    refused("{\"auths\": {\"h:1\": {\"auth\": \"" ALICE_B64 "\", \"auth\": \"" ALICE_B64 "\"}}}",
            "\"auth\" twice");
    refused("{\"auths\": {\"h:1\": {\"auth\": \"" ALICE_B64 "\"}, \"H:1\": {\"auth\": \"" ALICE_B64
            "\"}}}",
            "named twice");
    refused("{\"auths\": {\"h\": {\"auth\": \"" ALICE_B64 "\"}, \"h:443\": {\"auth\": \"" ALICE_B64
            "\"}}}",
            "named twice");
    refused("{\"auths\": {\"h:1\": {\"auth\": \"" ALICE_B64 "\", \"token\": 1}}}",
            "unknown key \"token\"");
    refused("{\"auths\": {\"h:1\": {\"identitytoken\": \"s3cret\"}}}", "not supported");
    refused("{\"auths\": {\"h:1\": {\"auth\": \"!!!!\"}}}", "not base64");
    refused("{\"auths\": {\"h:1\": {\"auth\": \"czNjcmV0\"}}}", "user:password");
    refused("{\"auths\": {\"h:1\": {\"username\": \"alice\"}}}", "needs auth");
    refused("{\"auths\": {\"h:1\": {\"auth\": \"" ALICE_B64 "\", \"password\": \"other\"}}}",
            "disagree");
    refused("{\"auths\": {\"h:1\": {\"username\": \"al:ice\", \"password\": \"s3cret\"}}}",
            "username");
    refused("{\"auths\": {\"h:1\": {\"username\": \"\", \"password\": \"s3cret\"}}}", "username");
    refused("{\"auths\": {\"h:1\": {\"username\": \"a\", \"password\": \"s3\\ncret\"}}}",
            "password");
    refused("{\"auths\": {\"h:1\": {\"username\": \"a\", \"password\": \"s3\\u0000cret\"}}}",
            "NUL");
    refused("{\"auths\": {\"h:1\": {\"username\": \"a\", \"password\": \"\"}}}", "password");
    refused("{\"auths\": {\"bad host:1\": {\"auth\": \"" ALICE_B64 "\"}}}", "HOST[:PORT]");
    refused("{\"auths\": {\"h:1\": {\"auth\": \"" ALICE_B64 "\"}}} x", "f");
    /* Bounded: a password past its cap, a document past the file's. */
    char *big = malloc(OCI_PASSWORD_MAX + 200);
    int n = snprintf(big, 100, "{\"auths\": {\"h:1\": {\"username\": \"a\", \"password\": \"");
    memset(big + n, 'x', OCI_PASSWORD_MAX + 1);
    strcpy(big + n + OCI_PASSWORD_MAX + 1, "\"}}}");
    refused(big, "longer than");
    free(big);
    size_t huge_len = OCI_CREDENTIALS_FILE_MAX + 1;
    char *huge = malloc(huge_len + 1);
    memset(huge, ' ', huge_len);
    huge[huge_len] = '\0';
    oci_credentials *c = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(oci_credentials_parse(huge, huge_len, "f", &c, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "larger than"));
    free(huge);
}
END_TEST

START_TEST(challenges)
{
    oci_challenge ch;
    tetris_error err = {0};
    ck_assert_int_eq(oci_challenge_parse("Basic realm=\"Registry Realm\"", &ch, &err), 0);
    ck_assert_int_eq(ch.scheme, OCI_AUTH_BASIC);
    ck_assert_str_eq(ch.realm, "Registry Realm");
    ck_assert_int_eq(
        oci_challenge_parse("Bearer realm=\"https://auth.example/token\",service=\"reg.example\","
                            "scope=\"repository:models/bert:pull,push\",error=\"invalid_token\"",
                            &ch, &err),
        0);
    ck_assert_int_eq(ch.scheme, OCI_AUTH_BEARER);
    ck_assert_str_eq(ch.realm, "https://auth.example/token");
    ck_assert_str_eq(ch.service, "reg.example");
    ck_assert_str_eq(ch.scope, "repository:models/bert:pull,push");
    /* Case, blanks, tokens unquoted, escapes in a quoted string. */
    ck_assert_int_eq(oci_challenge_parse("  bearer Realm=\"http://a/t\" , service = s-x, "
                                         "scope=\"a\\\"b\"",
                                         &ch, &err),
                     0);
    ck_assert_str_eq(ch.realm, "http://a/t");
    ck_assert_str_eq(ch.service, "s-x");
    ck_assert_str_eq(ch.scope, "a\"b");
    ck_assert_int_eq(oci_challenge_parse("Basic", &ch, &err), 0);
    const char *bad[] = {
        "Digest realm=\"x\"",
        "Bearer service=\"s\"",
        "Bearer realm=\"a\",realm=\"b\"",
        "Bearer realm=\"a",
        "Bearer realm=\"a\" x",
        "Bearer realm",
        "Bearer realm=\"a\r\"",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(oci_challenge_parse(bad[i], &ch, &err) == -TETRIS_E_PROTOCOL, "'%s' taken",
                      bad[i]);
    ck_assert_int_eq(oci_challenge_parse(NULL, &ch, &err), -TETRIS_E_PROTOCOL);
    ck_assert_ptr_nonnull(strstr(err.msg, "without a WWW-Authenticate"));
    char *long_realm = malloc(OCI_CHALLENGE_PARAM_MAX + 64);
    int n = snprintf(long_realm, 64, "Bearer realm=\"");
    memset(long_realm + n, 'a', OCI_CHALLENGE_PARAM_MAX);
    strcpy(long_realm + n + OCI_CHALLENGE_PARAM_MAX, "\"");
    ck_assert_int_eq(oci_challenge_parse(long_realm, &ch, &err), -TETRIS_E_PROTOCOL);
    ck_assert_ptr_nonnull(strstr(err.msg, "longer than"));
    free(long_realm);
}
END_TEST

static void token_refused(const char *json, const char *needle)
{
    char *t = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(oci_token_parse(json, strlen(json), &t, &err), -TETRIS_E_PROTOCOL);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "'%s' lacks '%s'", err.msg, needle);
    ck_assert_msg(strstr(err.msg, "s3cret") == NULL, "a token in '%s'", err.msg);
}

START_TEST(token_replies)
{
    char *t = NULL;
    tetris_error err = {0};
    const char *a = "{\"token\": \"abc.def-ghi_\", \"expires_in\": 300, \"issued_at\": \"x\"}";
    ck_assert_int_eq(oci_token_parse(a, strlen(a), &t, &err), 0);
    ck_assert_str_eq(t, "abc.def-ghi_");
    free(t);
    const char *b = "{\"access_token\": \"A=\"}";
    ck_assert_int_eq(oci_token_parse(b, strlen(b), &t, &err), 0);
    ck_assert_str_eq(t, "A=");
    free(t);
    const char *c = "{\"access_token\": \"A\", \"token\": \"T\"}";
    ck_assert_int_eq(oci_token_parse(c, strlen(c), &t, &err), 0);
    ck_assert_str_eq(t, "T");
    free(t);
    const char *d = "{\"access_token\": \"A\", \"token\": \"\"}";
    ck_assert_int_eq(oci_token_parse(d, strlen(d), &t, &err), 0);
    ck_assert_str_eq(t, "A");
    free(t);
    token_refused("{}", "neither");
    token_refused("{\"token\": \"\"}", "neither");
    token_refused("{\"token\": \"s3cret\", \"token\": \"s3cret\"}", "twice");
    token_refused("{\"token\": \"s3 cret\"}", "visible ASCII");
    token_refused("{\"token\": \"s3cret\\r\\nX: y\"}", "visible ASCII");
    token_refused("{\"token\": 5}", "not a JSON object");
    token_refused("[\"s3cret\"]", "not a JSON object");
    token_refused("{\"token\": \"s3cret\"", "not a JSON object");
    char *big = malloc(OCI_TOKEN_MAX + 64);
    int n = snprintf(big, 32, "{\"token\": \"");
    memset(big + n, 'x', OCI_TOKEN_MAX + 1);
    strcpy(big + n + OCI_TOKEN_MAX + 1, "\"}");
    token_refused(big, "longer than");
    free(big);
}
END_TEST

START_TEST(ca_bundles)
{
    char path[512];
    snprintf(path, sizeof path, "%s/ca.pem", unit_scratch_dir("ca"));
    unit_write_text(path, "not a certificate\n");
    tetris_error err = {0};
    ck_assert_int_eq(oci_ca_file_check(path, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "no PEM certificate"));
    unit_remove_tree(path);
    ck_assert_int_eq(oci_ca_file_check(path, &err), -TETRIS_E_NOTFOUND);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, credentials_in_both_forms);
    tcase_add_test(tc, credentials_refused);
    tcase_add_test(tc, challenges);
    tcase_add_test(tc, token_replies);
    tcase_add_test(tc, ca_bundles);
}

UNIT_MAIN("oci_auth")
