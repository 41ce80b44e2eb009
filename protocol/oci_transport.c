/* oci_transport.c - how every request to a registry is made (oci.h, "a
 * registry's calls"): where it may go and over which scheme, with which
 * credentials, and how often it is tried. oci_client.c (a push) and
 * oci_fetch.c (a pull) build the requests; this file is the one place
 * that admits a target, falls back to plain HTTP, answers a 401 and
 * retries, so push and pull cannot differ in what they trust.
 *
 * A registry's session (the scheme found for its host, the credentials,
 * the current Authorization) is shared by the copies of its oci_registry
 * that a pull's threads use: `lock` guards the Authorization and scheme,
 * `refresh` lets one thread at a time ask for new credentials while the
 * others go on with what they have. An Authorization line is a secret: it
 * is copied out under the lock, sent, and overwritten before it is freed;
 * no message or log carries it, nor a token, nor a password. */
#include "protocol/oci.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/log.h"

#define MAX_HEADERS 8 /* a call's own, and the Authorization */
#define AUTH_ROUNDS 2 /* 401s answered per request */
#define URL_MAX (16u << 10)
/* A registry that may be plain HTTP gets this long to complete a TLS
 * handshake when it is probed: a plain HTTP server that waits for a
 * request line instead of answering the ClientHello is found out in
 * seconds. */
#define TLS_PROBE_MS 5000L
/* Registries (host:port) a probe found plain, remembered for the process's
 * life so that each later session (a daemon's pull) starts plain instead
 * of probing again; one is forgotten when a plain request to it fails at
 * the transport or is answered 400 (restarted with TLS, say), so the next
 * session probes it again. Beyond this many the oldest is forgotten. */
#define PLAIN_REMEMBERED 32

struct oci_session {
    pthread_mutex_t lock;
    pthread_mutex_t refresh;
    char *authorization; /* "Authorization: ..." for the registry; NULL: none yet */
    /* The registry answered a request sent `authorization` with something
     * other than 401: a 401 on it later is an expiry, not a refusal. */
    bool authorization_accepted;
    bool plain;          /* the registry turned out not to speak TLS */
    bool tls;            /* it did complete a TLS handshake */
    char *ca_file;
    const oci_credentials *credentials;
    bool insecure;
};

static void secret_free(char *s)
{
    if (s != NULL) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

int oci_registry_open(oci_registry *r, const oci_ref *ref, const oci_options *o, tetris_error *err)
{
    memset(r, 0, sizeof *r);
    r->port = ref->port != 0 ? ref->port : 443u;
    snprintf(r->host, sizeof r->host, "%s", ref->host);
    snprintf(r->base, sizeof r->base, "https://%s:%u", ref->host, r->port);
    snprintf(r->repo, sizeof r->repo, "%s", ref->repo);
    r->timeout_ms = o->timeout_ms;
    r->admit = o->admit;
    r->admit_ctx = o->admit_ctx;
    oci_session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "registry session");
    if (o->ca_file != NULL && (s->ca_file = strdup(o->ca_file)) == NULL) {
        free(s);
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "registry session");
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->refresh, NULL);
    s->credentials = o->credentials;
    s->insecure = o->insecure;
    r->session = s;
    return 0;
}

void oci_registry_close(oci_registry *r)
{
    oci_session *s = r->session;
    if (s == NULL)
        return;
    secret_free(s->authorization);
    free(s->ca_file);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->refresh);
    free(s);
    r->session = NULL;
}

/* ---- what this process learnt of registries' schemes ---- */

static pthread_mutex_t plain_lock = PTHREAD_MUTEX_INITIALIZER;
static struct plain_registry {
    char host[OCI_HOST_MAX + 1];
    unsigned port;
} plain_known[PLAIN_REMEMBERED];
static size_t n_plain_known;

/* plain_lock held. */
static size_t plain_find(const char *host, unsigned port)
{
    size_t i = 0;
    while (i < n_plain_known &&
           (plain_known[i].port != port || strcasecmp(plain_known[i].host, host) != 0))
        i++;
    return i;
}

static bool plain_remembered(const char *host, unsigned port)
{
    pthread_mutex_lock(&plain_lock);
    bool known = plain_find(host, port) < n_plain_known;
    pthread_mutex_unlock(&plain_lock);
    return known;
}

static void plain_remember(const char *host, unsigned port)
{
    pthread_mutex_lock(&plain_lock);
    if (plain_find(host, port) == n_plain_known) {
        if (n_plain_known == PLAIN_REMEMBERED)
            memmove(plain_known, plain_known + 1, --n_plain_known * sizeof(plain_known[0]));
        struct plain_registry *p = &plain_known[n_plain_known++];
        snprintf(p->host, sizeof p->host, "%s", host);
        p->port = port;
    }
    pthread_mutex_unlock(&plain_lock);
}

static void plain_forget(const char *host, unsigned port)
{
    pthread_mutex_lock(&plain_lock);
    size_t i = plain_find(host, port);
    if (i < n_plain_known) {
        memmove(plain_known + i, plain_known + i + 1,
                (n_plain_known - i - 1) * sizeof(plain_known[0]));
        n_plain_known--;
    }
    pthread_mutex_unlock(&plain_lock);
}

/* ---- where a request goes ---- */

struct target {
    bool tls;
    char host[OCI_HOST_MAX + 1];
    unsigned port;
    bool own; /* the registry's host:port: gets its credentials */
};

static int target_of(const oci_registry *r, const char *url, struct target *t, tetris_error *err)
{
    const char *rest;
    if (strncmp(url, "https://", 8) == 0)
        t->tls = true, rest = url + 8;
    else if (strncmp(url, "http://", 7) == 0)
        t->tls = false, rest = url + 7;
    else
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "refusing '%.100s': only http:// and https:// are followed", url);
    if (oci_authority_parse(rest, strcspn(rest, "/?#"), t->host, &t->port, err) < 0)
        return tetris_wrap(err, "'%.100s'", url);
    if (t->port == 0)
        t->port = t->tls ? 443u : 80u;
    t->own = strcasecmp(t->host, r->host) == 0 && t->port == r->port;
    return 0;
}

/* Loopback by its name: "localhost", 127.0.0.0/8, [::1]. */
static bool loopback_host(const char *host)
{
    struct in_addr v4;
    struct in6_addr v6;
    char bare[OCI_HOST_MAX + 1];
    size_t len = strlen(host);
    if (strcasecmp(host, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, host, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    if (len > 2 && host[0] == '[' && host[len - 1] == ']') {
        snprintf(bare, sizeof bare, "%.*s", (int)(len - 2), host + 1);
        return inet_pton(AF_INET6, bare, &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
    }
    return false;
}

/* The admit function's answer, or (none: a push) the default: TLS, with
 * the fall-back to plain HTTP for loopback and an --insecure registry. */
static int admit(oci_registry *r, const struct target *t, char *resolve, size_t cap,
                 enum oci_scheme *scheme, tetris_error *err)
{
    resolve[0] = '\0';
    if (r->admit != NULL)
        return r->admit(r->admit_ctx, t->host, t->port, resolve, cap, scheme, err);
    *scheme = loopback_host(t->host) || (t->own && r->session->insecure) ? OCI_SCHEME_HTTPS_OR_HTTP
                                                                         : OCI_SCHEME_HTTPS;
    return 0;
}

/* url with "https://" made "http://", malloc'd. */
static char *plain_url(const char *url)
{
    char *out = NULL;
    return asprintf(&out, "http://%s", url + strlen("https://")) < 0 ? NULL : out;
}

static void registry_goes_plain(oci_registry *r)
{
    snprintf(r->base, sizeof r->base, "http://%s:%u", r->host, r->port);
    pthread_mutex_lock(&r->session->lock);
    r->session->plain = true;
    pthread_mutex_unlock(&r->session->lock);
}

static bool registry_is_plain(oci_registry *r)
{
    pthread_mutex_lock(&r->session->lock);
    bool plain = r->session->plain;
    pthread_mutex_unlock(&r->session->lock);
    return plain;
}

/* Whether the registry's scheme is still to be found (TLS not seen yet). */
static bool registry_tls_unknown(oci_registry *r)
{
    pthread_mutex_lock(&r->session->lock);
    bool unknown = !r->session->tls && !r->session->plain;
    pthread_mutex_unlock(&r->session->lock);
    return unknown;
}

static void registry_speaks_tls(oci_registry *r)
{
    pthread_mutex_lock(&r->session->lock);
    r->session->tls = true;
    pthread_mutex_unlock(&r->session->lock);
}

/* ---- credentials ---- */

static char *authorization_copy(oci_registry *r)
{
    pthread_mutex_lock(&r->session->lock);
    char *copy = r->session->authorization != NULL ? strdup(r->session->authorization) : NULL;
    pthread_mutex_unlock(&r->session->lock);
    return copy;
}

static bool same_secret(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* The registry answered a request sent `sent` with something other than
 * 401: if that is still the session's authorization, it was accepted. */
static void authorization_was_accepted(oci_registry *r, const char *sent)
{
    pthread_mutex_lock(&r->session->lock);
    if (same_secret(r->session->authorization, sent))
        r->session->authorization_accepted = true;
    pthread_mutex_unlock(&r->session->lock);
}

/* "Authorization: Basic base64(user:password)", malloc'd. */
static char *basic_line(const oci_credential *c)
{
    static const char prefix[] = "Authorization: Basic ";
    size_t plain_len = strlen(c->username) + 1 + strlen(c->password);
    char *plain = malloc(plain_len + 1);
    char *line = malloc(sizeof prefix + (plain_len + 2) / 3 * 4 + 1);
    if (plain == NULL || line == NULL) {
        free(plain);
        free(line);
        return NULL;
    }
    snprintf(plain, plain_len + 1, "%s:%s", c->username, c->password);
    memcpy(line, prefix, sizeof prefix - 1);
    EVP_EncodeBlock((unsigned char *)line + sizeof prefix - 1, (const unsigned char *)plain,
                    (int)plain_len);
    secret_free(plain);
    return line;
}

/* Appends to out "&name=" and value, percent-encoded. */
static void query_param(char *out, size_t cap, const char *name, const char *value, size_t vlen)
{
    size_t n = strlen(out);
    n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%c%s=", strchr(out, '?') ? '&' : '?',
                          name);
    for (size_t i = 0; i < vlen && n + 4 < cap; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            strchr("-._~", c) != NULL)
            out[n++] = (char)c;
        else
            n += (size_t)snprintf(out + n, cap - n, "%%%02X", c);
    }
    out[n < cap ? n : cap - 1] = '\0';
}

/* A token for the challenge, from its realm (admitted like any target,
 * sent the registry's credentials when there are some), as an
 * Authorization line in *line. */
static int fetch_token(oci_registry *r, const oci_challenge *ch, const oci_credential *cred,
                       char **line, tetris_error *err)
{
    for (const char *c = ch->realm; *c != '\0'; c++)
        if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f || *c == '#')
            return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                               "registry %s:%u: its token realm is not a URL", r->host, r->port);
    cleanup_free char *url = malloc(URL_MAX);
    if (url == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "token request");
    snprintf(url, URL_MAX, "%s", ch->realm);
    if (ch->service[0] != '\0')
        query_param(url, URL_MAX, "service", ch->service, strlen(ch->service));
    /* Several scopes are one parameter each. */
    for (const char *sc = ch->scope; *sc != '\0';) {
        size_t n = strcspn(sc, " ");
        if (n > 0)
            query_param(url, URL_MAX, "scope", sc, n);
        sc += n;
        sc += strspn(sc, " ");
    }
    if (cred != NULL)
        query_param(url, URL_MAX, "account", cred->username, strlen(cred->username));
    char *basic = cred != NULL ? basic_line(cred) : NULL;
    if (cred != NULL && basic == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "token request");
    const char *headers[] = {basic, NULL};
    httpclient_request rq = {.url = url, .headers = headers, .max_body = OCI_TOKEN_REPLY_MAX};
    int rc = oci_call(r, &rq, OCI_SEND_ANONYMOUS, err);
    secret_free(basic);
    if (rc < 0)
        rc = tetris_wrap(err, "registry %s:%u: its token realm", r->host, r->port);
    else if ((rq.status == 401 || rq.status == 403) && cred != NULL)
        rc = tetris_fail(err, TETRIS_E_DENIED, 0,
                         "registry %s:%u: its token server refused the credentials of user "
                         "\"%.100s\" (HTTP %ld)",
                         r->host, r->port, cred->username, rq.status);
    else if (rq.status == 401 || rq.status == 403)
        rc = tetris_fail(err, TETRIS_E_DENIED, 0,
                         "registry %s:%u: its token server asks for credentials, and there are "
                         "none for it (--registry-auth)",
                         r->host, r->port);
    else if (rq.status != 200)
        rc = tetris_fail(err, TETRIS_E_HTTP, 0, "registry %s:%u: its token realm: HTTP %ld",
                         r->host, r->port, rq.status);
    char *token = NULL;
    if (rc == 0 && (rc = oci_token_parse(rq.body, rq.len, &token, err)) < 0)
        rc = tetris_wrap(err, "registry %s:%u", r->host, r->port);
    if (rq.body != NULL)
        explicit_bzero(rq.body, rq.len);
    httpclient_request_clear(&rq);
    if (rc < 0)
        return rc;
    if (asprintf(line, "Authorization: Bearer %s", token) < 0)
        rc = tetris_fail(err, TETRIS_E_NOMEM, errno, "token");
    secret_free(token);
    return rc;
}

/* Answers a 401 whose challenge is ch, to a request that was sent
 * Authorization `sent` (NULL: none): new credentials in the session, or
 * TETRIS_E_DENIED saying why there are none. fetched: this request was
 * already given a token and the registry still refused it; that is a
 * refusal only if the registry never accepted that token: with parallel
 * requests another one can use up a token with few uses between its
 * fetch and this request's use of it. */
static int authenticate(oci_registry *r, const oci_challenge *ch, const char *sent, bool fetched,
                        tetris_error *err)
{
    oci_session *s = r->session;
    pthread_mutex_lock(&s->refresh);
    pthread_mutex_lock(&s->lock);
    bool changed = !same_secret(s->authorization, sent);
    bool expired = !changed && s->authorization_accepted;
    pthread_mutex_unlock(&s->lock);
    int rc = 0;
    char *line = NULL;
    const oci_credential *cred = oci_credentials_find(s->credentials, r->host, r->port);
    if (changed) {
        /* Another thread authenticated meanwhile: try with what it got. */
    } else if (ch->scheme == OCI_AUTH_BASIC && cred == NULL) {
        rc = tetris_fail(err, TETRIS_E_DENIED, 0,
                         "registry %s:%u asks for credentials (Basic realm \"%.100s\"), and there "
                         "are none for it (--registry-auth)",
                         r->host, r->port, ch->realm);
    } else if (ch->scheme == OCI_AUTH_BASIC && sent != NULL &&
               strncmp(sent, "Authorization: Basic ", 21) == 0) {
        rc = tetris_fail(err, TETRIS_E_DENIED, 0,
                         "registry %s:%u refused the credentials of user \"%.100s\"", r->host,
                         r->port, cred->username);
    } else if (ch->scheme == OCI_AUTH_BASIC) {
        if ((line = basic_line(cred)) == NULL)
            rc = tetris_fail(err, TETRIS_E_NOMEM, errno, "credentials");
    } else if (fetched && !expired) {
        rc = tetris_fail(err, TETRIS_E_DENIED, 0,
                         "registry %s:%u refused the token its realm gave%s%.100s%s for scope "
                         "\"%.200s\"",
                         r->host, r->port, cred != NULL ? " user \"" : "",
                         cred != NULL ? cred->username : "", cred != NULL ? "\"" : "", ch->scope);
    } else {
        rc = fetch_token(r, ch, cred, &line, err);
    }
    if (line != NULL) {
        pthread_mutex_lock(&s->lock);
        secret_free(s->authorization);
        s->authorization = line;
        s->authorization_accepted = false;
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&s->refresh);
    return rc;
}

/* ---- sending ---- */

/* Whether a registry that may be plain speaks TLS, found once per session
 * (or remembered, plain_known) by a handshake that verifies nothing and
 * sends nothing: a plain HTTP server answers the ClientHello with an HTTP
 * error, or with nothing until TLS_PROBE_MS. Verifying is left to the
 * requests themselves, so a certificate that does not verify is never a
 * reason to go plain, and a CA bundle this host lacks (an image without
 * one) is not taken for a peer that does not speak TLS. 0 with the
 * session's scheme known, or a failure to reach it (rq->failure says
 * which, for oci_call's retries). */
static int probe_tls(oci_registry *r, httpclient_request *rq, const char *url, const char *resolve,
                     tetris_error *err)
{
    if (plain_remembered(r->host, r->port)) {
        registry_goes_plain(r);
        return 0;
    }
    httpclient_request p = {
        .url = url,
        .tls_probe = true,
        .resolve = resolve[0] != '\0' ? resolve : NULL,
        .timeout_ms = r->timeout_ms,
        .connect_timeout_ms = r->timeout_ms <= 0 || r->timeout_ms > TLS_PROBE_MS ? TLS_PROBE_MS : 0,
    };
    int rc = httpclient_get(&p, err);
    enum httpclient_failure failure = p.failure;
    httpclient_request_clear(&p);
    if (rc == 0) {
        registry_speaks_tls(r);
        return 0;
    }
    if (failure != HTTPCLIENT_FAIL_TLS_HANDSHAKE) {
        rq->failure = failure;
        return rc;
    }
    /* It does not speak TLS: plain HTTP from now on, as docker does with
     * a loopback or insecure registry. */
    registry_goes_plain(r);
    plain_remember(r->host, r->port);
    log_info("event=registry-plain-http registry=%s:%u msg=\"no TLS handshake: plain HTTP, as "
             "allowed for this host\"",
             r->host, r->port);
    return 0;
}

/* One exchange with url, given the extra header authorization (may be
 * NULL); rq's own fields are as the caller left them afterwards. */
static int exchange(oci_registry *r, httpclient_request *rq, const char *url, const char *resolve,
                    const char *authorization, tetris_error *err)
{
    const char *headers[MAX_HEADERS + 2];
    size_t n = 0;
    for (const char *const *h = rq->headers; h != NULL && *h != NULL; h++) {
        assert(n < MAX_HEADERS); /* the calls' own: at most three */
        headers[n++] = *h;
    }
    if (authorization != NULL)
        headers[n++] = authorization;
    headers[n] = NULL;
    const char *caller_url = rq->url;
    const char *const *caller_headers = rq->headers;
    rq->url = url;
    rq->headers = headers;
    rq->resolve = resolve[0] != '\0' ? resolve : NULL;
    rq->timeout_ms = r->timeout_ms;
    rq->user_agent = "tetris/" TETRIS_VERSION;
    rq->ca_file = r->session->ca_file;
    r->requests++;
    int rc = httpclient_get(rq, err);
    rq->url = caller_url;
    rq->headers = caller_headers;
    rq->resolve = NULL;
    return rc;
}

int oci_send(oci_registry *r, httpclient_request *rq, unsigned flags, tetris_error *err)
{
    httpclient_request_clear(rq);
    struct target t;
    int rc = target_of(r, rq->url, &t, err);
    if (rc < 0)
        return rc;
    char resolve[OCI_RESOLVE_MAX];
    enum oci_scheme scheme;
    if ((rc = admit(r, &t, resolve, sizeof resolve, &scheme, err)) < 0)
        return rc;
    if (!t.tls && scheme == OCI_SCHEME_HTTPS)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "refusing plain http:// to %s:%u: it is reached over TLS only (the "
                           "operator lists a plain HTTP registry as http://HOST:PORT)",
                           t.host, t.port);
    cleanup_free char *url = strdup(rq->url);
    if (url == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", rq->url);
    if (t.own && t.tls && scheme == OCI_SCHEME_HTTPS_OR_HTTP && registry_tls_unknown(r) &&
        (rc = probe_tls(r, rq, url, resolve, err)) < 0)
        return rc;
    if (t.own && t.tls &&
        (scheme == OCI_SCHEME_HTTP ||
         (scheme == OCI_SCHEME_HTTPS_OR_HTTP && registry_is_plain(r)))) {
        char *plain = plain_url(url);
        if (plain == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", rq->url);
        free(url);
        url = plain;
        t.tls = false;
        registry_goes_plain(r);
    }
    bool credentials = t.own && !(flags & OCI_SEND_ANONYMOUS);
    bool fetched = false;
    for (int round = 0;;) {
        char *sent = credentials ? authorization_copy(r) : NULL;
        rc = exchange(r, rq, url, resolve, sent, err);
        if (t.own && !t.tls && scheme == OCI_SCHEME_HTTPS_OR_HTTP &&
            ((rc < 0 && rq->failure != HTTPCLIENT_FAIL_NONE) || (rc == 0 && rq->status == 400)))
            plain_forget(r->host, r->port);
        if (rc < 0 || !credentials || rq->status != 401) {
            if (rc == 0 && sent != NULL)
                authorization_was_accepted(r, sent);
            secret_free(sent);
            return rc;
        }
        oci_challenge ch;
        if (round == AUTH_ROUNDS)
            rc = tetris_fail(err, TETRIS_E_DENIED, 0,
                             "registry %s:%u: still HTTP 401 after %d "
                             "authentications",
                             r->host, r->port, AUTH_ROUNDS);
        else if ((rc = oci_challenge_parse(rq->www_authenticate, &ch, err)) < 0)
            rc = tetris_wrap(err, "registry %s:%u", r->host, r->port);
        else
            rc = authenticate(r, &ch, sent,
                              fetched && sent != NULL &&
                                  strncmp(sent, "Authorization: Bearer ", 22) == 0,
                              err);
        if (rc == 0 && ch.scheme == OCI_AUTH_BEARER)
            fetched = true;
        secret_free(sent);
        if (rc < 0)
            return rc;
        round++;
    }
}

/* ---- retries ---- */

bool oci_retryable(const httpclient_request *rq, int rc)
{
    if (rc < 0)
        return rq->failure == HTTPCLIENT_FAIL_CONNECT || rq->failure == HTTPCLIENT_FAIL_DROPPED ||
               rq->failure == HTTPCLIENT_FAIL_TIMEOUT;
    return rq->status == 429 || rq->status == 500 || rq->status == 502 || rq->status == 503 ||
           rq->status == 504;
}

long oci_retry_delay_ms(const httpclient_request *rq, int attempt)
{
    if ((rq->status == 429 || rq->status == 503) && rq->retry_after_s >= 0)
        return (rq->retry_after_s < OCI_RETRY_AFTER_MAX_S ? rq->retry_after_s
                                                          : OCI_RETRY_AFTER_MAX_S) *
               1000L;
    return clock_backoff_ms(OCI_BACKOFF_BASE_MS, OCI_BACKOFF_MAX_MS, attempt);
}

int oci_call(oci_registry *r, httpclient_request *rq, unsigned flags, tetris_error *err)
{
    const char *method = rq->method != NULL ? rq->method : "GET";
    for (int attempt = 1;; attempt++) {
        int rc = oci_send(r, rq, flags, err);
        if (!oci_retryable(rq, rc))
            return rc;
        if (attempt == OCI_MAX_ATTEMPTS) {
            if (rc < 0)
                return tetris_wrap(err, "%d attempts", attempt);
            return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0,
                               "%s %s: HTTP %ld after %d attempts: %.200s", method, rq->url,
                               rq->status, attempt, rq->body != NULL ? rq->body : "");
        }
        long delay = oci_retry_delay_ms(rq, attempt);
        log_info("event=registry-retry method=%s url=%s status=%ld attempt=%d delay_ms=%ld%s%s",
                 method, LOG_Q(rq->url), rq->status, attempt, delay, rc < 0 ? " msg=" : "",
                 rc < 0 ? LOG_Q(err->msg) : "");
        clock_sleep_ms(delay);
    }
}
