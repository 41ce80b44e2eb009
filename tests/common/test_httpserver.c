/* test_httpserver.c - common/httpserver: routing, 404/405/413,
 * JSON bodies, headers, shared bodies, listen-address parsing, HTTPS. A
 * real server on a loopback port, driven by libcurl. */
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "common/httpserver.h"
#include "scheduler-ext/webhook/webhook.h"
#include "tests/lib/unit.h"

struct reply {
    long status;
    char *body;
    size_t len;
    char etag[64];
};

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    struct reply *r = ctx;
    size_t len = size * n;
    char *b = realloc(r->body, r->len + len + 1);
    if (b == NULL)
        return 0;
    memcpy(b + r->len, data, len);
    r->body = b;
    r->len += len;
    r->body[r->len] = '\0';
    return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *ctx)
{
    struct reply *r = ctx;
    size_t len = size * n;
    if (len > 6 && strncasecmp(data, "ETag: ", 6) == 0) {
        size_t vl = len - 6;
        while (vl > 0 && (data[6 + vl - 1] == '\r' || data[6 + vl - 1] == '\n'))
            vl--;
        if (vl < sizeof(r->etag)) {
            memcpy(r->etag, data + 6, vl);
            r->etag[vl] = '\0';
        }
    }
    return len;
}

static struct reply request(uint16_t port, const char *method, const char *path,
                            const char *body, size_t body_len, const char *header)
{
    struct reply r = {0};
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
    CURL *c = curl_easy_init();
    ck_assert_ptr_nonnull(c);
    struct curl_slist *hdrs = NULL;
    if (header != NULL)
        hdrs = curl_slist_append(hdrs, header);
    curl_easy_setopt(c, CURLOPT_URL, url);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    if (body != NULL) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body_len);
    }
    CURLcode cc = curl_easy_perform(c);
    ck_assert_msg(cc == CURLE_OK, "curl: %s", curl_easy_strerror(cc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return r;
}

static void handle_hello(void *ctx, const http_request *req, http_response *resp)
{
    (void)ctx;
    const char *who = http_request_query(req, "who");
    json_t *j = json_pack("{s:s}", "hello", who ? who : "world");
    http_response_json(resp, 200, j);
    json_decref(j);
}

static void handle_echo(void *ctx, const http_request *req, http_response *resp)
{
    (void)ctx;
    json_t *j;
    tetris_error err;
    if (http_request_json(req, &j, &err) < 0) {
        http_response_error(resp, 400, "%s", err.msg);
        return;
    }
    http_response_json(resp, 200, j);
    json_decref(j);
}

static int shared_released;
static void release_shared(void *ctx)
{
    (void)ctx;
    __atomic_add_fetch(&shared_released, 1, __ATOMIC_SEQ_CST);
}

static void handle_cached(void *ctx, const http_request *req, http_response *resp)
{
    (void)ctx;
    const char *inm = http_request_header(req, "If-None-Match");
    if (inm != NULL && strcmp(inm, "\"7\"") == 0) {
        http_response_empty(resp, 304);
    } else {
        static const char text[] = "cached body\n";
        http_response_set_shared(resp, 200, "text/plain", text, strlen(text), release_shared,
                                 NULL);
    }
    http_response_add_header(resp, "ETag", "\"7\"");
}

static void handle_nothing(void *ctx, const http_request *req, http_response *resp)
{
    (void)ctx;
    (void)req;
    (void)resp;
}

static void handle_prefix(void *ctx, const http_request *req, http_response *resp)
{
    (void)ctx;
    http_response_set_body(resp, 200, "text/plain", req->path, strlen(req->path));
}

static http_server *start_server(size_t max_body, unsigned threads)
{
    struct http_server_options o;
    http_server_options_init(&o);
    o.listen = "127.0.0.1:0";
    o.max_body_bytes = max_body;
    o.threads = threads;
    http_server *s;
    tetris_error err;
    ck_assert_int_eq(http_server_new(&o, &s, &err), 0);
    ck_assert_int_eq(http_server_route(s, "GET", "/hello", handle_hello, NULL, &err), 0);
    ck_assert_int_eq(http_server_route(s, "POST", "/echo", handle_echo, NULL, &err), 0);
    ck_assert_int_eq(http_server_route(s, "GET", "/cached", handle_cached, NULL, &err), 0);
    ck_assert_int_eq(http_server_route(s, "GET", "/nothing", handle_nothing, NULL, &err), 0);
    ck_assert_int_eq(http_server_route(s, "GET", "/files/*", handle_prefix, NULL, &err), 0);
    ck_assert_int_eq(http_server_start(s, &err), 0);
    ck_assert_uint_ne(http_server_port(s), 0);
    return s;
}

static void check_routing(unsigned threads)
{
    http_server *s = start_server(1024, threads);
    uint16_t port = http_server_port(s);

    struct reply r = request(port, "GET", "/hello?who=tetris", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"hello\":\"tetris\"}");
    free(r.body);

    r = request(port, "GET", "/nope", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 404);
    ck_assert_ptr_nonnull(strstr(r.body, "\"error\""));
    free(r.body);

    r = request(port, "HEAD", "/cached", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, 0);
    ck_assert_str_eq(r.etag, "\"7\"");
    free(r.body);

    r = request(port, "DELETE", "/hello", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 405);
    free(r.body);

    r = request(port, "POST", "/echo", "{\"a\":[1,2]}", 11, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"a\":[1,2]}");
    free(r.body);

    r = request(port, "POST", "/echo", "{not json", 9, NULL);
    ck_assert_int_eq(r.status, 400);
    free(r.body);

    char *big = malloc(4096);
    memset(big, ' ', 4096);
    r = request(port, "POST", "/echo", big, 4096, NULL);
    ck_assert_int_eq(r.status, 413);
    free(r.body);
    free(big);

    r = request(port, "GET", "/nothing", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 500);
    free(r.body);

    r = request(port, "GET", "/files/a/b", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "/files/a/b");
    free(r.body);

    int before = __atomic_load_n(&shared_released, __ATOMIC_SEQ_CST);
    r = request(port, "GET", "/cached", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "cached body\n");
    ck_assert_str_eq(r.etag, "\"7\"");
    free(r.body);
    r = request(port, "GET", "/cached", NULL, 0, "If-None-Match: \"7\"");
    ck_assert_int_eq(r.status, 304);
    ck_assert_uint_eq(r.len, 0);
    free(r.body);

    http_server_free(s);
    ck_assert_int_eq(__atomic_load_n(&shared_released, __ATOMIC_SEQ_CST), before + 1);
}

START_TEST(test_routing_thread_per_connection)
{
    check_routing(0);
}
END_TEST

START_TEST(test_routing_thread_pool)
{
    check_routing(2);
}
END_TEST

START_TEST(test_parse_listen)
{
    char host[64];
    uint16_t port;
    tetris_error err;
    ck_assert_int_eq(http_parse_listen("127.0.0.1:9464", host, sizeof(host), &port, &err), 0);
    ck_assert_str_eq(host, "127.0.0.1");
    ck_assert_uint_eq(port, 9464);
    ck_assert_int_eq(http_parse_listen(":80", host, sizeof(host), &port, &err), 0);
    ck_assert_str_eq(host, "");
    ck_assert_uint_eq(port, 80);
    ck_assert_int_eq(http_parse_listen("[::1]:8080", host, sizeof(host), &port, &err), 0);
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(http_parse_listen("nocolon", host, sizeof(host), &port, &err),
                     -TETRIS_E_INVAL);
    ck_assert_int_eq(http_parse_listen("h:99999", host, sizeof(host), &port, &err),
                     -TETRIS_E_INVAL);
    ck_assert_int_eq(http_parse_listen("h:", host, sizeof(host), &port, &err), -TETRIS_E_INVAL);
    ck_assert_int_eq(http_parse_listen("h:-1", host, sizeof(host), &port, &err), -TETRIS_E_INVAL);
    ck_assert_int_eq(http_parse_listen("::1:80", host, sizeof(host), &port, &err),
                     -TETRIS_E_INVAL);
}
END_TEST

START_TEST(test_bind_conflict)
{
    http_server *a = start_server(1024, 0);
    char listen[64];
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", http_server_port(a));
    struct http_server_options o;
    http_server_options_init(&o);
    o.listen = listen;
    http_server *b;
    tetris_error err;
    ck_assert_int_eq(http_server_new(&o, &b, &err), 0);
    ck_assert_int_eq(http_server_start(b, &err), -TETRIS_E_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, listen));
    http_server_free(b);
    http_server_free(a);
}
END_TEST

/* libmicrohttpd 0.9.75 does not free GnuTLS's certificate objects when
 * its TLS set-up fails (the refused PEM below); the process would exit
 * then anyway, and the leak is not ours to fix. LeakSanitizer reads this. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libgnutls.so\nleak:libtasn1.so\n";
}

/* HTTPS with a certificate made for 127.0.0.1: curl trusting its CA gets
 * the route's answer, plain HTTP to the same port gets none, and a key
 * without a certificate or a PEM that is not one are refused. */
static void check_tls(unsigned threads)
{
    const char *names[] = {"127.0.0.1"};
    webhook_certs certs;
    tetris_error err;
    ck_assert_int_eq(webhook_certs_make(names, 1, 1, &certs, &err), 0);
    struct http_server_options o;
    http_server_options_init(&o);
    o.threads = threads;
    o.tls_cert_pem = certs.cert_pem;
    o.tls_key_pem = certs.key_pem;
    http_server *s;
    ck_assert_int_eq(http_server_new(&o, &s, &err), 0);
    ck_assert_int_eq(http_server_route(s, "GET", "/hello", handle_hello, NULL, &err), 0);
    ck_assert_int_eq(http_server_start(s, &err), 0);
    char url[64];
    snprintf(url, sizeof url, "https://127.0.0.1:%u/hello", http_server_port(s));
    struct reply r = {0};
    struct curl_blob ca = {.data = certs.ca_pem,
                           .len = strlen(certs.ca_pem),
                           .flags = CURL_BLOB_COPY};
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &ca);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    CURLcode cc = curl_easy_perform(c);
    ck_assert_msg(cc == CURLE_OK, "curl: %s", curl_easy_strerror(cc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_easy_cleanup(c);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "world"));
    free(r.body);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/hello", http_server_port(s));
    c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    struct reply plain = {0};
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &plain);
    cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    free(plain.body);
    ck_assert_msg(cc != CURLE_OK || status != 200, "plain HTTP answered over a TLS port");
    http_server_free(s);

    o.tls_cert_pem = NULL;
    ck_assert_int_eq(http_server_new(&o, &s, &err), -TETRIS_E_INVAL);
    o.tls_cert_pem = "-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n";
    ck_assert_int_eq(http_server_new(&o, &s, &err), 0);
    ck_assert_int_eq(http_server_start(s, &err), -TETRIS_E_INVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "HTTPS"));
    http_server_free(s);
    webhook_certs_release(&certs);
}

START_TEST(test_tls)
{
    check_tls(0);
    check_tls(2);
}
END_TEST

static void unit_tests(Suite *s)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    TCase *tc = unit_tcase(s, "core", 60);
    tcase_add_test(tc, test_routing_thread_per_connection);
    tcase_add_test(tc, test_routing_thread_pool);
    tcase_add_test(tc, test_parse_listen);
    tcase_add_test(tc, test_tls);
    tcase_add_test(tc, test_bind_conflict);
}

UNIT_MAIN("httpserver")
