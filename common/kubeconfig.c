/* kubeconfig.c - reading a kubeconfig or the in-cluster service-account
 * files into a kube_config.
 *
 * The YAML document is read into a JSON tree by common/yaml_read.h (every
 * scalar a string; anchors and aliases refused) so that resolving
 * current-context -> context -> cluster/user is plain jansson navigation. */
#include "common/kubeconfig.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/yaml_read.h"

#define KUBECONFIG_MAX_BYTES (16u << 20)
#define SA_DIR_DEFAULT "/var/run/secrets/kubernetes.io/serviceaccount"

/* ---- resolving the current context ---- */

/* The "NAME" entry of a kubeconfig list (clusters, users, contexts): its
 * inner object (cluster, user, context), or NULL. */
static json_t *named_entry(json_t *root, const char *list, const char *inner, const char *name)
{
    json_t *arr = json_object_get(root, list);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n != NULL && strcmp(n, name) == 0)
            return json_object_get(e, inner);
    }
    return NULL;
}

static const char *str_field(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

static int dup_string(const char *s, char **out, tetris_error *err)
{
    if (s == NULL)
        return 0;
    *out = strdup(s);
    if (*out == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "kubeconfig");
    return 0;
}

static int b64_value(int ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

/* Standard base64 (whitespace ignored, padding optional). */
static int base64_decode(const char *in, const char *what, kube_blob *out, tetris_error *err)
{
    size_t n = strlen(in);
    cleanup_free char *buf = malloc(n / 4 * 3 + 4);
    if (buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "kubeconfig");
    size_t len = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = in[i];
        if (ch == '=' || ch == '\n' || ch == '\r' || ch == ' ' || ch == '\t')
            continue;
        int v = b64_value((unsigned char)ch);
        if (v < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "kubeconfig: %s is not base64", what);
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[len++] = (char)((acc >> bits) & 0xff);
        }
    }
    buf[len] = '\0';
    out->len = len;
    out->data = steal_pointer(&buf);
    return 0;
}

static int resolve_path(const char *base_dir, const char *path, char *out, size_t size,
                        tetris_error *err)
{
    int n = (path[0] == '/' || base_dir == NULL) ? snprintf(out, size, "%s", path)
                                                 : snprintf(out, size, "%s/%s", base_dir, path);
    if (n < 0 || (size_t)n >= size)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "kubeconfig: path too long: %s", path);
    return 0;
}

/* obj's "<key>-data" (base64) or "<key>" (a file) into blob. */
static int load_blob(json_t *obj, const char *key, const char *base_dir, kube_blob *blob,
                     tetris_error *err)
{
    char data_key[64];
    snprintf(data_key, sizeof data_key, "%s-data", key);
    const char *data = str_field(obj, data_key);
    if (data != NULL)
        return base64_decode(data, data_key, blob, err);
    const char *file = str_field(obj, key);
    if (file == NULL)
        return 0;
    char path[PATH_MAX];
    int r = resolve_path(base_dir, file, path, sizeof path, err);
    if (r < 0)
        return r;
    r = file_read_all(path, KUBECONFIG_MAX_BYTES, &blob->data, &blob->len, err);
    if (r < 0)
        return tetris_wrap(err, "kubeconfig %s", key);
    return 0;
}

static int fill_from_context(json_t *root, const char *base_dir, kube_config *cfg,
                             tetris_error *err)
{
    const char *ctx_name = str_field(root, "current-context");
    if (ctx_name == NULL || ctx_name[0] == '\0')
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "kubeconfig: no current-context");
    json_t *ctx = named_entry(root, "contexts", "context", ctx_name);
    if (ctx == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "kubeconfig: context %s not found",
                           ctx_name);
    const char *cluster_name = str_field(ctx, "cluster");
    json_t *cluster = cluster_name != NULL
                          ? named_entry(root, "clusters", "cluster", cluster_name)
                          : NULL;
    if (cluster == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "kubeconfig: cluster of context %s not found",
                           ctx_name);
    const char *server = str_field(cluster, "server");
    if (server == NULL || (strncmp(server, "https://", 8) != 0 &&
                           strncmp(server, "http://", 7) != 0))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "kubeconfig: cluster %s has no http(s) server URL", cluster_name);
    int r = dup_string(server, &cfg->server, err);
    if (r == 0)
        r = load_blob(cluster, "certificate-authority", base_dir, &cfg->ca, err);
    if (r < 0)
        return r;
    const char *insecure = str_field(cluster, "insecure-skip-tls-verify");
    cfg->insecure = insecure != NULL && strcmp(insecure, "true") == 0;

    const char *user_name = str_field(ctx, "user");
    json_t *user = user_name != NULL ? named_entry(root, "users", "user", user_name) : NULL;
    if (user_name != NULL && user == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "kubeconfig: user %s not found", user_name);
    if (user != NULL) {
        r = dup_string(str_field(user, "token"), &cfg->token, err);
        const char *token_file = str_field(user, "tokenFile");
        if (r == 0 && token_file != NULL) {
            char path[PATH_MAX];
            r = resolve_path(base_dir, token_file, path, sizeof path, err);
            if (r == 0)
                r = dup_string(path, &cfg->token_file, err);
        }
        if (r == 0)
            r = load_blob(user, "client-certificate", base_dir, &cfg->cert, err);
        if (r == 0)
            r = load_blob(user, "client-key", base_dir, &cfg->key, err);
        if (r < 0)
            return r;
        if ((cfg->cert.data == NULL) != (cfg->key.data == NULL))
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "kubeconfig: user %s has a client certificate without a key "
                               "or a key without a certificate", user_name);
    }
    const char *ns = str_field(ctx, "namespace");
    return dup_string(ns != NULL && ns[0] != '\0' ? ns : "default", &cfg->ns, err);
}

/* Whether a URL's host is a loopback address: 127.0.0.0/8, ::1 or
 * localhost (no user info). */
static bool url_host_is_loopback(const char *url)
{
    const char *h = strstr(url, "://");
    if (h == NULL)
        return false;
    h += 3;
    size_t n = strcspn(h, "/?#");
    if (memchr(h, '@', n) != NULL)
        return false;
    char host[64];
    if (*h == '[') {
        const char *end = memchr(h, ']', n);
        if (end == NULL || (size_t)(end - h - 1) >= sizeof host)
            return false;
        memcpy(host, h + 1, (size_t)(end - h - 1));
        host[end - h - 1] = '\0';
        struct in6_addr a6;
        return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
    }
    size_t hn = strcspn(h, ":/?#");
    if (hn >= sizeof host)
        return false;
    memcpy(host, h, hn);
    host[hn] = '\0';
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    return strcmp(host, "localhost") == 0;
}

/* A bearer token sent over plain http:// is anyone's on the path; allowed
 * only to a loopback address (a local test apiserver). */
static int check_token_transport(const kube_config *cfg, tetris_error *err)
{
    bool token = cfg->token != NULL || cfg->token_file != NULL;
    if (!token || strncmp(cfg->server, "http://", 7) != 0 || url_host_is_loopback(cfg->server))
        return 0;
    return tetris_fail(err, TETRIS_E_DENIED, 0,
                       "refusing to send a bearer token over plain HTTP to %s: use https:// "
                       "(http:// is allowed only to a loopback address)",
                       cfg->server);
}

int kubeconfig_parse(const char *text, size_t len, const char *base_dir, kube_config *cfg,
                     tetris_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    json_t *root = NULL;
    int r = yaml_read_json(text, len, "kubeconfig", &root, NULL, err);
    if (r < 0)
        return r;
    if (!json_is_object(root))
        r = tetris_fail(err, TETRIS_E_FORMAT, 0, "kubeconfig: not a mapping");
    else
        r = fill_from_context(root, base_dir, cfg, err);
    json_decref(root);
    if (r == 0)
        r = check_token_transport(cfg, err);
    if (r < 0)
        kubeconfig_clear(cfg);
    return r;
}

int kubeconfig_load(const char *path, kube_config *cfg, tetris_error *err)
{
    char default_path[PATH_MAX];
    if (path == NULL || path[0] == '\0') {
        const char *env = getenv("KUBECONFIG");
        const char *home = getenv("HOME");
        if (env != NULL && env[0] != '\0') {
            /* A KUBECONFIG list: the first file wins (no merging). */
            snprintf(default_path, sizeof default_path, "%.*s", (int)strcspn(env, ":"), env);
        } else if (home != NULL) {
            snprintf(default_path, sizeof default_path, "%s/.kube/config", home);
        } else {
            return tetris_fail(err, TETRIS_E_INVAL, 0, "no kubeconfig: set KUBECONFIG or HOME");
        }
        path = default_path;
    }
    cleanup_free char *text = NULL;
    size_t len = 0;
    int r = file_read_all(path, KUBECONFIG_MAX_BYTES, &text, &len, err);
    if (r < 0)
        return tetris_wrap(err, "kubeconfig");
    cleanup_free char *dir = strdup(path);
    if (dir == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "kubeconfig");
    char *slash = strrchr(dir, '/');
    if (slash != NULL)
        *slash = '\0';
    r = kubeconfig_parse(text, len, slash != NULL ? dir : ".", cfg, err);
    if (r < 0)
        return tetris_wrap(err, "%s", path);
    return 0;
}

static void strip_trailing_space(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
        s[--n] = '\0';
}

int kubeconfig_in_cluster(const char *sa_dir, const char *server, kube_config *cfg,
                          tetris_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (sa_dir == NULL)
        sa_dir = SA_DIR_DEFAULT;
    char url[512];
    if (server == NULL) {
        const char *host = getenv("KUBERNETES_SERVICE_HOST");
        const char *port = getenv("KUBERNETES_SERVICE_PORT");
        if (host == NULL || port == NULL)
            return tetris_fail(err, TETRIS_E_INVAL, 0,
                               "not in a cluster: KUBERNETES_SERVICE_HOST/PORT unset and no "
                               "--kubeconfig given");
        /* An IPv6 service address needs brackets in a URL. */
        snprintf(url, sizeof url, strchr(host, ':') != NULL ? "https://[%s]:%s" : "https://%s:%s",
                 host, port);
        server = url;
    }
    char path[PATH_MAX];
    int r = dup_string(server, &cfg->server, err);
    if (r == 0) {
        snprintf(path, sizeof path, "%s/token", sa_dir);
        if (access(path, R_OK) < 0)
            r = tetris_fail(err, TETRIS_E_NOTFOUND, errno, "service account token %s", path);
        else
            r = dup_string(path, &cfg->token_file, err);
    }
    if (r == 0) {
        snprintf(path, sizeof path, "%s/ca.crt", sa_dir);
        r = file_read_all(path, KUBECONFIG_MAX_BYTES, &cfg->ca.data, &cfg->ca.len, err);
    }
    if (r == 0) {
        snprintf(path, sizeof path, "%s/namespace", sa_dir);
        r = file_read_all(path, KUBECONFIG_MAX_BYTES, &cfg->ns, &(size_t){0}, err);
        if (r == -TETRIS_E_NOTFOUND)
            r = dup_string("default", &cfg->ns, err);
        else if (r == 0)
            strip_trailing_space(cfg->ns);
    }
    if (r == 0)
        r = check_token_transport(cfg, err);
    if (r < 0)
        kubeconfig_clear(cfg);
    return r;
}

void kubeconfig_clear(kube_config *cfg)
{
    free(cfg->server);
    free(cfg->token);
    free(cfg->token_file);
    free(cfg->ca.data);
    free(cfg->cert.data);
    free(cfg->key.data);
    free(cfg->ns);
    memset(cfg, 0, sizeof *cfg);
}
