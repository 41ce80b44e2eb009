/* kube_client_test.c - the Kubernetes client against the fault-injecting
 * server: retries and backoff (429 storms, Retry-After, 5xx, dropped
 * connections), timeouts on slow replies, Status-object errors, paging with
 * expired continue tokens, watches with bookmarks, 410 as HTTP status and as
 * an ERROR event mid-stream, list+watch re-listing, the three PATCH content
 * types, bindings, scale, and service-account token rotation. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/lib/faultserver.h"
#include "tests/lib/unit.h"
#include "common/clock.h"
#include "common/kube.h"
#include "reclaimer/node-pins/node_pods.h"

static fault_server *fs;
static kube_client *kc;
static const char *tmpdir;

static void setup(void)
{
    fs = fault_server_start();
    ck_assert_ptr_nonnull(fs);
    tmpdir = unit_scratch_dir("kube-test");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/kubeconfig", tmpdir);
    fault_server_write_kubeconfig(fs, path, "fns");
    tetris_error err = {0};
    ck_assert_msg(kube_client_from_kubeconfig(path, &kc, &err) == 0, "%s", err.msg);
    kube_client_set_timeouts(kc, 1000, 2000);
    kube_client_set_retries(kc, 5, 1, 4);
}

static void teardown(void)
{
    kube_client_free(kc);
    fault_server_stop(fs);
    unit_remove_tree(tmpdir);
}

static void push(int status, const char *body)
{
    fault_server_push(fs, &(fault_reply){.status = status, .body = body});
}

static const char *status_body(int code, const char *reason, const char *message)
{
    static char buf[512];
    snprintf(buf, sizeof buf,
             "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
             "\"message\":\"%s\",\"reason\":\"%s\",\"code\":%d}",
             message, reason, code);
    return buf;
}

START_TEST(get_sends_token_and_decodes)
{
    push(200, "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"}}");
    json_t *obj = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(kube_get(kc, "/api/v1/namespaces/fns/pods/p", &obj, &err), 0);
    ck_assert_str_eq(json_string_value(json_object_get(obj, "kind")), "Pod");
    json_decref(obj);
    const fault_request *rq = fault_server_request(fs, 0);
    ck_assert_str_eq(rq->method, "GET");
    ck_assert_str_eq(rq->target, "/api/v1/namespaces/fns/pods/p");
    ck_assert_str_eq(rq->authorization, "Bearer t0k3n");
    ck_assert_str_eq(kube_client_namespace(kc), "fns");
}
END_TEST

START_TEST(status_object_becomes_the_error)
{
    push(404, status_body(404, "NotFound", "pods \\\"p\\\" not found"));
    json_t *obj = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(kube_get(kc, "/api/v1/namespaces/fns/pods/p", &obj, &err),
                     -TETRIS_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "HTTP 404"));
    ck_assert_ptr_nonnull(strstr(err.msg, "NotFound: pods \"p\" not found"));
    ck_assert_uint_eq(fault_server_count(fs), 1); /* 404 is not retried */

    push(403, status_body(403, "Forbidden", "no"));
    ck_assert_int_eq(kube_delete(kc, "/api/v1/namespaces/fns/pods/p", &err), -TETRIS_E_DENIED);
    push(409, status_body(409, "AlreadyExists", "exists"));
    json_t *o = json_object();
    ck_assert_int_eq(kube_create(kc, "/api/v1/namespaces/fns/pods", o, NULL, &err),
                     -TETRIS_E_CONFLICT);
    json_decref(o);
    push(200, "not json");
    ck_assert_int_eq(kube_get(kc, "/x", &obj, &err), -TETRIS_E_PROTOCOL);
    ck_assert_int_eq(kube_get(kc, "no-slash", &obj, &err), -TETRIS_E_INVAL);
}
END_TEST

START_TEST(retries_429_storm_then_succeeds)
{
    fault_server_push(fs, &(fault_reply){.status = 429, .headers = "Retry-After: 0\r\n",
                                         .body = status_body(429, "TooManyRequests", "slow"),
                                         .repeat = 4});
    push(201, "{\"kind\":\"ConfigMap\"}");
    json_t *o = json_pack("{s:s}", "kind", "ConfigMap");
    tetris_error err = {0};
    /* Even a POST is retried on 429: the server did not act on it. */
    ck_assert_msg(kube_create(kc, "/api/v1/namespaces/fns/configmaps", o, NULL, &err) == 0,
                  "%s", err.msg);
    json_decref(o);
    ck_assert_uint_eq(fault_server_count(fs), 5);
    ck_assert_str_eq(fault_server_request(fs, 4)->body, "{\"kind\":\"ConfigMap\"}");
}
END_TEST

START_TEST(endless_429_gives_up_after_max_attempts)
{
    fault_server_push(fs, &(fault_reply){.status = 429,
                                         .body = status_body(429, "TooManyRequests", "slow"),
                                         .repeat = 100});
    json_t *obj = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(kube_get(kc, "/api/v1/nodes", &obj, &err), -TETRIS_E_UNAVAILABLE);
    ck_assert_uint_eq(fault_server_count(fs), 5);
    ck_assert_ptr_nonnull(strstr(err.msg, "TooManyRequests"));
}
END_TEST

/* The ms a GET took whose first answer is status with headers, the
 * second a 200: how long the client waited in between. */
static int64_t ms_to_retry(int status, const char *headers)
{
    fault_server_push(fs, &(fault_reply){.status = status, .headers = headers});
    push(200, "{}");
    int64_t start_ms = clock_mono_ms();
    json_t *obj = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(kube_get(kc, "/api/v1/nodes", &obj, &err), 0);
    json_decref(obj);
    return clock_mono_ms() - start_ms;
}

START_TEST(retry_after_is_honoured)
{
    /* The client's own backoff is at most 4 ms here: only Retry-After explains a second. */
    ck_assert_int_ge(ms_to_retry(503, "Retry-After: 1\r\n"), 1000);
}
END_TEST

/* The HTTP-date form too: a date three seconds ahead when the answer is
 * queued is at least one second of waiting when it arrives (a date has
 * whole seconds; a slow machine may take a moment in between). */
START_TEST(retry_after_date_is_honoured)
{
    char headers[96];
    fault_retry_after_date(headers, sizeof headers, 3);
    ck_assert_int_ge(ms_to_retry(429, headers), 1000);
}
END_TEST

START_TEST(dropped_connection_retried_only_when_idempotent)
{
    fault_server_push(fs, &(fault_reply){.status = 0});
    push(200, "{\"ok\":true}");
    json_t *obj = NULL;
    tetris_error err = {0};
    ck_assert_msg(kube_get(kc, "/api/v1/nodes/n", &obj, &err) == 0, "%s", err.msg);
    json_decref(obj);
    ck_assert_uint_eq(fault_server_count(fs), 2);

    fault_server_reset(fs);
    fault_server_push(fs, &(fault_reply){.status = 0});
    push(201, "{}");
    json_t *o = json_object();
    ck_assert_int_eq(kube_create(kc, "/api/v1/namespaces/fns/pods", o, NULL, &err),
                     -TETRIS_E_UNAVAILABLE);
    json_decref(o);
    ck_assert_uint_eq(fault_server_count(fs), 1);
}
END_TEST

START_TEST(server_errors_retried_for_get_not_for_patch)
{
    push(500, status_body(500, "InternalError", "boom"));
    push(200, "{}");
    json_t *obj = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(kube_get(kc, "/api/v1/nodes", &obj, &err), 0);
    json_decref(obj);

    fault_server_reset(fs);
    push(500, status_body(500, "InternalError", "boom"));
    json_t *p = json_pack("{s:s}", "a", "b");
    ck_assert_int_eq(kube_patch(kc, "/api/v1/nodes/n", KUBE_PATCH_MERGE, p, NULL, &err),
                     -TETRIS_E_UNAVAILABLE);
    json_decref(p);
    ck_assert_uint_eq(fault_server_count(fs), 1);
    ck_assert_ptr_nonnull(strstr(err.msg, "InternalError: boom"));
}
END_TEST

START_TEST(slow_reply_times_out)
{
    kube_client_set_retries(kc, 1, 1, 1);
    kube_client_set_timeouts(kc, 1000, 300);
    fault_server_push(fs, &(fault_reply){.status = 200, .body = "{}", .delay_ms = 1500});
    json_t *obj = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(kube_get(kc, "/api/v1/nodes", &obj, &err), -TETRIS_E_TIMEOUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "GET /api/v1/nodes"));
}
END_TEST

START_TEST(connection_refused_is_unavailable)
{
    fault_server_stop(fs);
    fs = fault_server_start(); /* a different port: nobody listens on the old one */
    kube_client_set_retries(kc, 2, 1, 1);
    json_t *obj = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(kube_get(kc, "/api/v1/nodes", &obj, &err), -TETRIS_E_UNAVAILABLE);
}
END_TEST

START_TEST(list_follows_continue_tokens)
{
    push(200, "{\"metadata\":{\"resourceVersion\":\"10\",\"continue\":\"tok1\"},"
              "\"items\":[{\"n\":1},{\"n\":2}]}");
    push(200, "{\"metadata\":{\"resourceVersion\":\"11\"},\"items\":[{\"n\":3}]}");
    json_t *items = NULL;
    char *rv = NULL;
    tetris_error err = {0};
    kube_list_opts o = {.label_selector = "tetris.io/model", .field_selector = "spec.nodeName=n 1",
                        .page_size = 2};
    ck_assert_msg(kube_list(kc, "/api/v1/pods", &o, &items, &rv, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(json_array_size(items), 3);
    ck_assert_str_eq(rv, "11");
    ck_assert_str_eq(fault_server_request(fs, 0)->target,
                     "/api/v1/pods?labelSelector=tetris.io%2Fmodel&fieldSelector=spec.nodeName"
                     "%3Dn%201&limit=2");
    ck_assert_ptr_nonnull(strstr(fault_server_request(fs, 1)->target, "&continue=tok1"));
    json_decref(items);
    free(rv);
}
END_TEST

START_TEST(list_restarts_when_continue_expired)
{
    push(200, "{\"metadata\":{\"resourceVersion\":\"10\",\"continue\":\"old\"},\"items\":[{}]}");
    push(410, status_body(410, "Expired", "continue token expired"));
    push(200, "{\"metadata\":{\"resourceVersion\":\"20\",\"continue\":\"new\"},\"items\":[{}]}");
    push(200, "{\"metadata\":{\"resourceVersion\":\"21\"},\"items\":[{},{}]}");
    json_t *items = NULL;
    char *rv = NULL;
    tetris_error err = {0};
    ck_assert_msg(kube_list(kc, "/api/v1/pods", NULL, &items, &rv, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(json_array_size(items), 3); /* nothing from the abandoned pass */
    ck_assert_str_eq(rv, "21");
    ck_assert_uint_eq(fault_server_count(fs), 4);
    json_decref(items);
    free(rv);
}
END_TEST

typedef struct seen {
    int n;
    char types[8][16];
    int stop_after;
} seen;

static int record_event(const char *type, json_t *object, void *user)
{
    (void)object;
    seen *s = user;
    if (s->n < 8)
        snprintf(s->types[s->n], sizeof s->types[0], "%s", type);
    s->n++;
    return s->stop_after > 0 && s->n >= s->stop_after;
}

#define EV(type, rv) "{\"type\":\"" type "\",\"object\":{\"metadata\":{\"resourceVersion\":\"" rv "\"}}}\n"

START_TEST(watch_streams_events_and_bookmarks)
{
    /* An event split over two chunks must still arrive whole. */
    static const char *const chunks[] = {EV("ADDED", "5"), "{\"type\":\"BOOKMARK\",\"object\"",
                                         ":{\"metadata\":{\"resourceVersion\":\"7\"}}}\n",
                                         EV("MODIFIED", "9"), NULL};
    fault_server_push(fs, &(fault_reply){.status = 200, .chunks = chunks, .chunk_delay_ms = 5});
    char *rv = strdup("3");
    seen s = {0};
    tetris_error err = {0};
    ck_assert_msg(kube_watch(kc, "/api/v1/pods", NULL, &rv, 60, record_event, &s, &err) == 0,
                  "%s", err.msg);
    ck_assert_int_eq(s.n, 2);
    ck_assert_str_eq(s.types[0], "ADDED");
    ck_assert_str_eq(s.types[1], "MODIFIED");
    ck_assert_str_eq(rv, "9");
    const char *target = fault_server_request(fs, 0)->target;
    ck_assert_ptr_nonnull(strstr(target, "watch=1"));
    ck_assert_ptr_nonnull(strstr(target, "allowWatchBookmarks=true"));
    ck_assert_ptr_nonnull(strstr(target, "resourceVersion=3"));
    free(rv);
}
END_TEST

START_TEST(watch_410_error_event_mid_stream)
{
    static const char *const chunks[] = {
        EV("ADDED", "5"),
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,"
        "\"reason\":\"Expired\",\"message\":\"too old resource version: 5 (8)\"}}\n",
        EV("ADDED", "6"), NULL};
    fault_server_push(fs, &(fault_reply){.status = 200, .chunks = chunks});
    char *rv = strdup("4");
    seen s = {0};
    tetris_error err = {0};
    ck_assert_int_eq(kube_watch(kc, "/api/v1/pods", NULL, &rv, 60, record_event, &s, &err),
                     -TETRIS_E_CONFLICT);
    ck_assert_int_eq(s.n, 1);
    ck_assert_ptr_nonnull(strstr(err.msg, "too old resource version"));
    free(rv);
}
END_TEST

START_TEST(watch_410_http_status)
{
    push(410, status_body(410, "Gone", "too old"));
    char *rv = strdup("1");
    seen s = {0};
    tetris_error err = {0};
    ck_assert_int_eq(kube_watch(kc, "/api/v1/pods", NULL, &rv, 60, record_event, &s, &err),
                     -TETRIS_E_CONFLICT);
    ck_assert_int_eq(s.n, 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "Gone: too old"));
    free(rv);
}
END_TEST

START_TEST(watch_dropped_mid_stream_keeps_resource_version)
{
    static const char *const chunks[] = {EV("ADDED", "5"), "{\"type\":\"ADD", NULL};
    fault_server_push(fs, &(fault_reply){.status = 200, .chunks = chunks, .truncate = true});
    char *rv = strdup("1");
    seen s = {0};
    tetris_error err = {0};
    ck_assert_int_eq(kube_watch(kc, "/api/v1/pods", NULL, &rv, 60, record_event, &s, &err),
                     -TETRIS_E_UNAVAILABLE);
    ck_assert_int_eq(s.n, 1);
    ck_assert_str_eq(rv, "5"); /* the caller resumes from here */
    free(rv);
}
END_TEST

typedef struct lw {
    int lists;
    size_t last_list_size;
    seen events;
} lw;

static int on_list(json_t *items, void *user)
{
    lw *l = user;
    l->lists++;
    l->last_list_size = json_array_size(items);
    return 0;
}

static int on_lw_event(const char *type, json_t *object, void *user)
{
    lw *l = user;
    return record_event(type, object, &l->events);
}

START_TEST(list_watch_relists_after_gone)
{
    static const char *const first[] = {
        EV("ADDED", "11"),
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,\"message\":\"gone\"}}\n",
        NULL};
    static const char *const second[] = {EV("MODIFIED", "31"), EV("DELETED", "32"), NULL};
    push(200, "{\"metadata\":{\"resourceVersion\":\"10\"},\"items\":[{}]}");
    fault_server_push(fs, &(fault_reply){.status = 200, .chunks = first});
    push(200, "{\"metadata\":{\"resourceVersion\":\"30\"},\"items\":[{},{}]}");
    fault_server_push(fs, &(fault_reply){.status = 200, .chunks = second});
    lw l = {.events = {.stop_after = 3}};
    volatile bool stop = false;
    tetris_error err = {0};
    ck_assert_int_eq(kube_list_watch(kc, "/api/v1/configmaps", NULL, on_list, on_lw_event, &l,
                                     &stop, &err),
                     0);
    ck_assert_int_eq(l.lists, 2);
    ck_assert_uint_eq(l.last_list_size, 2);
    ck_assert_int_eq(l.events.n, 3);
    ck_assert_str_eq(l.events.types[2], "DELETED");
    ck_assert_ptr_nonnull(strstr(fault_server_request(fs, 3)->target, "resourceVersion=30"));
}
END_TEST

START_TEST(patch_content_types)
{
    static const struct {
        enum kube_patch_type type;
        const char *ct;
    } cases[] = {{KUBE_PATCH_JSON, "application/json-patch+json"},
                 {KUBE_PATCH_MERGE, "application/merge-patch+json"},
                 {KUBE_PATCH_STRATEGIC, "application/strategic-merge-patch+json"}};
    tetris_error err = {0};
    for (size_t i = 0; i < 3; i++) {
        push(200, "{}");
        json_t *p = json_pack("{s:s}", "k", "v");
        json_t *out = NULL;
        ck_assert_int_eq(kube_patch(kc, "/api/v1/nodes/n", cases[i].type, p, &out, &err), 0);
        json_decref(p);
        json_decref(out);
        const fault_request *rq = fault_server_request(fs, i);
        ck_assert_str_eq(rq->method, "PATCH");
        ck_assert_str_eq(rq->content_type, cases[i].ct);
        ck_assert_str_eq(rq->body, "{\"k\":\"v\"}");
    }
    ck_assert_int_eq(kube_patch(kc, "/x", (enum kube_patch_type)7, NULL, NULL, &err),
                     -TETRIS_E_INVAL);
}
END_TEST

START_TEST(binding_and_scale)
{
    tetris_error err = {0};
    push(201, "{}");
    ck_assert_int_eq(kube_bind_pod(kc, "fns", "p1", "node-a", &err), 0);
    const fault_request *rq = fault_server_request(fs, 0);
    ck_assert_str_eq(rq->method, "POST");
    ck_assert_str_eq(rq->target, "/api/v1/namespaces/fns/pods/p1/binding");
    json_t *b = json_loads(rq->body, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(b, "target"), "name")),
                     "node-a");
    json_decref(b);

    push(200, "{\"kind\":\"Scale\",\"spec\":{\"replicas\":3}}");
    long replicas = -1;
    ck_assert_int_eq(kube_get_scale(kc, "fns", "d", &replicas, &err), 0);
    ck_assert_int_eq(replicas, 3);
    push(200, "{}");
    ck_assert_int_eq(kube_scale_deployment(kc, "fns", "d", 5, &err), 0);
    rq = fault_server_request(fs, 2);
    ck_assert_str_eq(rq->method, "PATCH");
    ck_assert_str_eq(rq->target, "/apis/apps/v1/namespaces/fns/deployments/d/scale");
    ck_assert_str_eq(rq->body, "{\"spec\":{\"replicas\":5}}");
}
END_TEST

START_TEST(in_cluster_token_is_reread_when_rotated)
{
    char sa[PATH_MAX + 8], path[PATH_MAX + 48], url[64];
    snprintf(sa, sizeof sa, "%s/sa", tmpdir);
    ck_assert_int_eq(mkdir(sa, 0700), 0);
    snprintf(path, sizeof path, "%s/token", sa);
    unit_write_text(path, "first\n");
    snprintf(path, sizeof path, "%s/ca.crt", sa);
    unit_write_text(path, "");
    snprintf(path, sizeof path, "%s/namespace", sa);
    unit_write_text(path, "tenant-a\n");
    snprintf(url, sizeof url, "http://127.0.0.1:%d", fault_server_port(fs));
    kube_client *ic = NULL;
    tetris_error err = {0};
    ck_assert_msg(kube_client_in_cluster(sa, url, &ic, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(kube_client_namespace(ic), "tenant-a");
    push(200, "{}");
    push(200, "{}");
    json_t *o = NULL;
    ck_assert_int_eq(kube_get(ic, "/version", &o, &err), 0);
    json_decref(o);
    /* Rotation replaces the file (new inode), as the kubelet does. */
    char tmp[PATH_MAX + 48];
    snprintf(tmp, sizeof tmp, "%s/token.new", sa);
    unit_write_text(tmp, "second");
    snprintf(path, sizeof path, "%s/token", sa);
    ck_assert_int_eq(rename(tmp, path), 0);
    ck_assert_int_eq(kube_get(ic, "/version", &o, &err), 0);
    json_decref(o);
    ck_assert_str_eq(fault_server_request(fs, 0)->authorization, "Bearer first");
    ck_assert_str_eq(fault_server_request(fs, 1)->authorization, "Bearer second");
    kube_client_free(ic);

    ck_assert_int_eq(kube_client_in_cluster(tmpdir, url, &ic, &err), -TETRIS_E_NOTFOUND);
}
END_TEST

#define HEX_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HEX_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define POD(name, model, phase)                                                                    \
    "{\"metadata\":{\"name\":\"" name                                                              \
    "\",\"namespace\":\"fn\",\"labels\":{\"tetris.io/model\":\"" model                             \
    "\"}},\"status\":{\"phase\":\"" phase "\"}}"

START_TEST(node_pods_lists_models_and_digests)
{
    push(200, "{\"metadata\":{\"resourceVersion\":\"5\"},\"items\":[" POD("p1", "bert", "Running")
              "," POD("p2", "bert", "Pending") "," POD("p3", "gpt", "Running") ","
              POD("p4", "old", "Succeeded") "]}");
    push(200, "{\"metadata\":{\"name\":\"fn\"}}"); /* no tenant: the shared store */
    /* bert's ConfigMap: a manifest whose tensors repeat a digest. */
    push(200, "{\"metadata\":{},\"items\":[{\"metadata\":{\"name\":\"tetris-manifest-bert\"},"
              "\"data\":{\"manifest.json\":\"{\\\"format\\\":\\\"tetris-manifest/1\\\","
              "\\\"tensors\\\":[{\\\"digest\\\":\\\"sha256:" HEX_A "\\\"},"
              "{\\\"digest\\\":\\\"sha256:" HEX_B "\\\"},"
              "{\\\"digest\\\":\\\"sha256:" HEX_A "\\\"}]}\"}}]}");
    push(200, "{\"metadata\":{},\"items\":[]}"); /* gpt: no manifest */
    node_models *m = NULL;
    tetris_error err = {0};
    ck_assert_msg(node_pods_models(kc, "node-a", "tetris", &m, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(m->n_models, 2);
    ck_assert_str_eq(m->models[0].name, "bert");
    ck_assert_str_eq(m->models[1].name, "gpt");
    ck_assert_str_eq(m->models[0].tenant, "");
    ck_assert_uint_eq(m->n_missing, 1);
    ck_assert_uint_eq(m->n_pins, 2);
    ck_assert_uint_eq(m->pins[0].digest.bytes[0], 0xaa);
    ck_assert_uint_eq(m->pins[1].digest.bytes[0], 0xbb);
    ck_assert_str_eq(m->pins[0].tenant, "");
    node_models_free(m);
    ck_assert_str_eq(fault_server_request(fs, 0)->target,
                     "/api/v1/pods?labelSelector=tetris.io%2Fmodel&fieldSelector=spec.nodeName"
                     "%3Dnode-a&limit=500");
    ck_assert_str_eq(fault_server_request(fs, 1)->target, "/api/v1/namespaces/fn");
    ck_assert_str_eq(fault_server_request(fs, 2)->target,
                     "/api/v1/namespaces/tetris/configmaps?labelSelector=tetris.io%2Fmodel%3Dbert"
                     "&limit=500");
    ck_assert_uint_eq(fault_server_count(fs), 4);

    fault_server_reset(fs);
    push(403, status_body(403, "Forbidden", "pods is forbidden"));
    ck_assert_int_eq(node_pods_models(kc, "node-a", "tetris", &m, &err), -TETRIS_E_DENIED);
    ck_assert_ptr_nonnull(strstr(err.msg, "pods on node node-a"));
}
END_TEST

static Suite *kube_suite(void)
{
    Suite *s = suite_create("kube-client");
    TCase *tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, get_sends_token_and_decodes);
    tcase_add_test(tc, status_object_becomes_the_error);
    tcase_add_test(tc, retries_429_storm_then_succeeds);
    tcase_add_test(tc, endless_429_gives_up_after_max_attempts);
    tcase_add_test(tc, retry_after_is_honoured);
    tcase_add_test(tc, retry_after_date_is_honoured);
    tcase_add_test(tc, dropped_connection_retried_only_when_idempotent);
    tcase_add_test(tc, server_errors_retried_for_get_not_for_patch);
    tcase_add_test(tc, slow_reply_times_out);
    tcase_add_test(tc, connection_refused_is_unavailable);
    tcase_add_test(tc, list_follows_continue_tokens);
    tcase_add_test(tc, list_restarts_when_continue_expired);
    tcase_add_test(tc, watch_streams_events_and_bookmarks);
    tcase_add_test(tc, watch_410_error_event_mid_stream);
    tcase_add_test(tc, watch_410_http_status);
    tcase_add_test(tc, watch_dropped_mid_stream_keeps_resource_version);
    tcase_add_test(tc, list_watch_relists_after_gone);
    tcase_add_test(tc, patch_content_types);
    tcase_add_test(tc, binding_and_scale);
    tcase_add_test(tc, in_cluster_token_is_reread_when_rotated);
    tcase_add_test(tc, node_pods_lists_models_and_digests);
    suite_add_tcase(s, tc);
    return s;
}

static const char usage_text[] =
    "usage: kube-client-test [-h | --help | --version]\n"
    "\n"
    "Runs the Kubernetes client's Check suite against the fault-injecting\n"
    "server. CK_RUN_CASE and CK_RUN_SUITE select a part (Check's variables).\n"
    "\n"
    "Exit status: 0 every test passed; 1 a test failed; 2 usage.\n";

int main(int argc, char **argv)
{
    int status = fault_test_args(argc, argv, "kube-client-test", usage_text);
    if (status >= 0)
        return status;
    SRunner *sr = srunner_create(kube_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
