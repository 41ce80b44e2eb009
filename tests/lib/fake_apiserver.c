/* fake_apiserver.c - tetris-test-fake-apiserver, a read-only Kubernetes API
 * for the shell tests that run a real tetris program against a cluster
 * that is not there (tetris-node-pins, tetris-webhook). It is the fault
 * server (faultserver.h) with a handler behind its queue that serves, from
 * a JSON file re-read on every request, the objects
 * {"namespaces": [...], "pods": [...], "configmaps": [...]}:
 *
 *   GET /api/v1/namespaces/NAME                  a namespace, or a 404 Status
 *   GET /api/v1/pods                             pods in all namespaces
 *   GET /api/v1/namespaces/NS/pods|configmaps    the same in one namespace
 *
 * Lists honour labelSelector (key, !key, key=value, key==value, key!=value,
 * comma-joined) and fieldSelector (key=value on a dotted path such as
 * spec.nodeName) as the apiserver does, and come back in one page.
 * Anything but GET is 405: the programs under test only read. The real
 * apiserver is exercised by the E2E tier (tests/k8s/). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/daemon_run.h"
#include "common/log.h"
#include "common/options.h"
#include "tests/lib/faultserver.h"

struct fake_api {
    const char *objects_path;
    const char *port_file;   /* NULL: none */
    const char *request_log; /* NULL: none */
    fault_server *fs;
};

/* Decodes %XX and '+' in place (a query value as curl encodes it). */
static void url_decode(char *s)
{
    char *out = s;
    for (; *s != '\0'; s++) {
        unsigned v;
        if (*s == '%' && sscanf(s + 1, "%2x", &v) == 1) {
            *out++ = (char)v;
            s += 2;
        } else {
            *out++ = *s == '+' ? ' ' : *s;
        }
    }
    *out = '\0';
}

/* The decoded value of key in query (malloc'd), or NULL. */
static char *query_value(const char *query, const char *key)
{
    size_t klen = strlen(key);
    for (const char *p = query; p != NULL && *p != '\0';) {
        size_t len = strcspn(p, "&");
        if (len > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            char *v = strndup(p + klen + 1, len - klen - 1);
            if (v != NULL)
                url_decode(v);
            return v;
        }
        p += len + (p[len] == '&');
    }
    return NULL;
}

/* The string at a dotted path of obj, or "". */
static const char *field_value(json_t *obj, const char *path)
{
    char part[128];
    while (*path != '\0') {
        size_t len = strcspn(path, ".");
        snprintf(part, sizeof part, "%.*s", (int)len, path);
        obj = json_object_get(obj, part);
        path += len + (path[len] == '.');
    }
    return json_is_string(obj) ? json_string_value(obj) : "";
}

/* Whether obj passes every comma-joined term of a selector: labels is
 * true for a labelSelector (terms on metadata.labels), false for a
 * fieldSelector (key=value on a dotted path). */
static bool selected(json_t *obj, const char *selector, bool labels)
{
    json_t *map = json_object_get(json_object_get(obj, "metadata"), "labels");
    char *copy = strdup(selector != NULL ? selector : ""), *save = NULL;
    bool ok = copy != NULL;
    for (char *t = ok ? strtok_r(copy, ",", &save) : NULL; ok && t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        char *ne = strstr(t, "!="), *eq = strchr(t, '=');
        const char *want = NULL;
        bool negate = ne != NULL;
        if (ne != NULL) {
            *ne = '\0';
            want = ne + 2;
        } else if (eq != NULL) {
            *eq = '\0';
            want = eq + 1 + (eq[1] == '=');
        }
        if (!labels) {
            ok = want != NULL && (strcmp(field_value(obj, t), want) == 0) != negate;
            continue;
        }
        if (want == NULL) { /* key or !key: present or absent */
            negate = t[0] == '!';
            ok = (json_object_get(map, t + negate) != NULL) != negate;
            continue;
        }
        json_t *v = json_object_get(map, t);
        ok = (json_is_string(v) && strcmp(json_string_value(v), want) == 0) != negate;
    }
    free(copy);
    return ok;
}

/* doc's text (malloc'd; NULL when doc is); doc is released. */
static char *dump(json_t *doc)
{
    char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    return text;
}

static int status_reply(int code, const char *reason, const char *message, char **body)
{
    *body = dump(json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}", "kind", "Status", "apiVersion", "v1",
                           "status", "Failure", "reason", reason, "message", message, "code",
                           code));
    return code;
}

/* GET path?query against objects. */
static int answer(json_t *objects, char *path, const char *query, char **body)
{
    char *parts[5];
    size_t n = 0;
    for (char *save = NULL, *p = strtok_r(path, "/", &save); p != NULL;
         p = strtok_r(NULL, "/", &save), n++)
        if (n < 5)
            parts[n] = p;
    if (n < 3 || n > 5 || strcmp(parts[0], "api") != 0 || strcmp(parts[1], "v1") != 0)
        return status_reply(404, "NotFound", "no such path", body);
    size_t i;
    json_t *ns_obj;
    if (n == 4 && strcmp(parts[2], "namespaces") == 0) {
        json_array_foreach (json_object_get(objects, "namespaces"), i, ns_obj) {
            if (strcmp(field_value(ns_obj, "metadata.name"), parts[3]) == 0) {
                *body = json_dumps(ns_obj, JSON_COMPACT);
                return 200;
            }
        }
        char msg[512];
        snprintf(msg, sizeof msg, "namespaces \"%s\" not found", parts[3]);
        return status_reply(404, "NotFound", msg, body);
    }
    const char *ns = NULL, *kind = parts[2];
    if (n == 5 && strcmp(parts[2], "namespaces") == 0) {
        ns = parts[3];
        kind = parts[4];
    } else if (n != 3) {
        return status_reply(404, "NotFound", "no such path", body);
    }
    if (strcmp(kind, "pods") != 0 && strcmp(kind, "configmaps") != 0)
        return status_reply(404, "NotFound", "no such path", body);
    char *labels = query_value(query, "labelSelector"),
         *fields = query_value(query, "fieldSelector");
    json_t *items = json_array(), *obj;
    json_array_foreach (json_object_get(objects, kind), i, obj) {
        if ((ns == NULL || strcmp(field_value(obj, "metadata.namespace"), ns) == 0) &&
            selected(obj, labels, true) && selected(obj, fields, false))
            json_array_append(items, obj);
    }
    free(labels);
    free(fields);
    *body = dump(json_pack("{s:s, s:s, s:{s:s}, s:o}", "kind", "List", "apiVersion", "v1",
                           "metadata", "resourceVersion", "1", "items", items));
    return 200;
}

/* The fault server's handler: logs the request, reads the objects anew. */
static int handle(void *ctx, const fault_request *rq, char **body)
{
    const struct fake_api *api = ctx;
    if (api->request_log != NULL) {
        FILE *f = fopen(api->request_log, "a");
        if (f == NULL || fprintf(f, "%s %s\n", rq->method, rq->target) < 0 || fclose(f) != 0)
            log_warn("event=request-log-failed path=%s errno=%d", api->request_log, errno);
    }
    if (strcmp(rq->method, "GET") != 0)
        return status_reply(405, "MethodNotAllowed", "read-only fake", body);
    json_error_t jerr;
    json_t *objects = json_load_file(api->objects_path, 0, &jerr);
    if (objects == NULL)
        return status_reply(500, "InternalError", jerr.text, body);
    char *path = strndup(rq->target, strcspn(rq->target, "?"));
    const char *query = strchr(rq->target, '?');
    int status = path != NULL ? answer(objects, path, query != NULL ? query + 1 : "", body)
                              : status_reply(500, "InternalError", "out of memory", body);
    free(path);
    json_decref(objects);
    return status;
}

static int run_start(void *ctx, tetris_error *err)
{
    struct fake_api *api = ctx;
    if ((api->fs = fault_server_start()) == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "cannot serve");
    fault_server_set_handler(api->fs, handle, api);
    int port = fault_server_port(api->fs);
    if (api->port_file != NULL) {
        /* Whole or not at all: the test waits for the file. */
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", api->port_file);
        FILE *f = fopen(tmp, "w");
        if (f == NULL || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 ||
            rename(tmp, api->port_file) < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "write %s", api->port_file);
    }
    log_info("event=listening port=%d objects=%s", port, api->objects_path);
    return 0;
}

static void run_stop(void *ctx)
{
    fault_server_stop(((struct fake_api *)ctx)->fs);
}

int main(int argc, char **argv)
{
    struct fake_api api = {0};
    const struct opt_spec specs[] = {
        {.name = "objects",
         .type = OPT_TYPE_STRING,
         .dest = &api.objects_path,
         .meta = "FILE",
         .help = "the cluster's objects as JSON, re-read on every request (required)"},
        {.name = "port-file",
         .type = OPT_TYPE_STRING,
         .dest = &api.port_file,
         .meta = "FILE",
         .help = "write the port (a free one on 127.0.0.1) here once serving"},
        {.name = "request-log",
         .type = OPT_TYPE_STRING,
         .dest = &api.request_log,
         .meta = "FILE",
         .help = "append each request to FILE as \"METHOD PATH?QUERY\""},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-test-fake-apiserver",
        .synopsis = "--objects FILE [OPTION]...",
        .about = "A read-only Kubernetes API over plain HTTP on 127.0.0.1 for tests: namespaces,\n"
                 "pods and ConfigMaps from FILE ({\"namespaces\": [...], \"pods\": [...],\n"
                 "\"configmaps\": [...]}), with label and field selectors. Logs\n"
                 "event=listening port=N on stderr once it serves.\n",
        .options = specs,
        .epilogue = "Exit status: 0 stopped by SIGTERM/SIGINT, 1 cannot serve, 2 usage error.\n",
    };
    int first;

    log_init(argv[0]);
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return 2;
    if (first < argc)
        return opt_usage_error(&prog, "unexpected argument '%s'", argv[first]), 2;
    if (api.objects_path == NULL)
        return opt_usage_error(&prog, "--objects is required"), 2;
    return daemon_run(&(struct daemon_run){.ctx = &api, .start = run_start, .stop = run_stop});
}
