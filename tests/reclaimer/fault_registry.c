/* fault_registry.c - tetris-test-fault-registry: a hostile, flaky or
 * locked OCI registry for the pull and push tests
 * (tests/reclaimer/test-pull-faults.sh, test-pull-retries.sh,
 * tests/agent/test-registry-push.sh), on the fault server
 * (tests/lib/faultserver.h). It serves a copy of a real registry's
 * artifact from a directory (DIR/manifest, DIR/blobs/<hex>): GET of the
 * manifest and of blobs (a "Range: bytes=N-" answered 206 unless
 * --no-range), HEAD of blobs; and takes uploads (POST 202 with a
 * Location, PATCH 202, PUT 201) and manifests (PUT 201), keeping nothing. It
 * does one thing wrong with one blob (--target HEX), the first --times N
 * times it is asked for it (0, the default: always):
 *   none      nothing: a registry that should never be asked (its
 *             requests file says whether it was)
 *   corrupt   the blob with one byte changed, at its length
 *   truncate  Content-Length as declared, half the bytes, then close
 *   oversize  the blob and 4096 bytes more, Content-Length to match
 *   redirect  307 to the same path on 127.0.0.1:--redirect-port
 *   status    --status S (429, 503, ...) with Retry-After: --retry-after
 *             (seconds; with --retry-after-date, as the HTTP-date that
 *             many seconds ahead)
 *             when given; with no --target, the manifest's first --times
 *             requests get it; with --target uploads, the first --times
 *             upload POSTs
 * and may lock everything under /v2/ (--auth):
 *   basic     401 "Basic realm=..." without Authorization: Basic of
 *             --user:--password
 *   bearer    401 "Bearer realm=http://127.0.0.1:PORT/token,service=
 *             fault-registry,scope=repository:REPO:pull" (PORT: this one,
 *             or --realm-port) without a token it issued; a token is good
 *             for --token-uses requests (0: forever)
 * Every fault registry answers GET /token?... with {"token": ...}: to
 * anyone without --user, else only to Basic --user:--password (401).
 * Every request is appended to --requests as "METHOD TARGET" lines, with
 * " range=VALUE" when it had a Range, " auth=SCHEME" when it had an
 * Authorization, and " ms=N" (monotonic milliseconds); the port it listens
 * on is written to --port-file. Runs until SIGTERM. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/lib/faultserver.h"

static const char usage_text[] =
    "usage: tetris-test-fault-registry --dir DIR --port-file F --requests F\n"
    "       [--fault none|corrupt|truncate|oversize|redirect|status] [--target HEX]\n"
    "       [--times N] [--redirect-port P] [--status S] [--retry-after S] [--retry-after-date] "
    "[--no-range]\n"
    "       [--auth basic|bearer] [--user U --password P] [--realm-port P]\n"
    "       [--token-uses N]\n"
    "Serves DIR/manifest and DIR/blobs/<hex> as an OCI registry on 127.0.0.1,\n"
    "spoils the blob --target as --fault says, locks it as --auth says, until\n"
    "SIGTERM.\n";

#define MAX_TOKENS 64

struct registry {
    const char *dir, *fault, *target, *requests, *auth, *user, *password;
    int redirect_port, realm_port, port, status, retry_after, times, token_uses;
    bool retry_after_date; /* Retry-After as an HTTP-date */
    bool no_range;
    int spoiled;     /* times the fault was played */
    char basic[512]; /* the Authorization value --user:--password make */
    struct {
        char value[32];
        int uses;
    } tokens[MAX_TOKENS];
    int n_tokens;
    char *body; /* the last reply's, freed on the next */
    char headers[1024];
};

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    struct stat st;
    char *buf = NULL;
    if (fstat(fileno(f), &st) == 0 && (buf = malloc((size_t)st.st_size + 4096 + 1)) != NULL &&
        fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf != NULL)
        *len = (size_t)st.st_size;
    return buf;
}

static void base64(const char *in, char *out, size_t cap)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in), o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < n)
            v |= (unsigned char)in[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)in[i + 2];
        out[o++] = a[(v >> 18) & 63];
        out[o++] = a[(v >> 12) & 63];
        out[o++] = i + 1 < n ? a[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? a[v & 63] : '=';
    }
    out[o] = '\0';
}

static void log_request(const struct registry *r, const fault_request *rq)
{
    FILE *f = fopen(r->requests, "a");
    if (f == NULL)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    fprintf(f, "%s %s", rq->method, rq->target);
    if (rq->range != NULL)
        fprintf(f, " range=%s", rq->range);
    if (rq->authorization != NULL)
        fprintf(f, " auth=%.*s", (int)strcspn(rq->authorization, " "), rq->authorization);
    fprintf(f, " ms=%lld\n", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    fclose(f);
}

static int unauthorized(struct registry *r, const fault_request *rq, fault_reply *out)
{
    if (strcmp(r->auth, "basic") == 0) {
        snprintf(r->headers, sizeof r->headers,
                 "WWW-Authenticate: Basic realm=\"fault-registry\"\r\n");
    } else {
        /* The repository: what is between /v2/ and /manifests/ or /blobs/. */
        const char *repo = rq->target + strlen("/v2/");
        const char *end = strstr(repo, "/manifests/");
        if (end == NULL)
            end = strstr(repo, "/blobs/");
        int len = end != NULL ? (int)(end - repo) : 0;
        snprintf(r->headers, sizeof r->headers,
                 "WWW-Authenticate: Bearer realm=\"http://127.0.0.1:%d/token\","
                 "service=\"fault-registry\",scope=\"repository:%.*s:pull\"\r\n",
                 r->realm_port != 0 ? r->realm_port : r->port, len, repo);
    }
    *out = (fault_reply){.status = 401,
                         .body = "{\"errors\":[{\"code\":\"UNAUTHORIZED\"}]}",
                         .headers = r->headers};
    return 0;
}

/* Whether rq may see /v2/: its credentials are the ones --auth wants. */
static bool admitted(struct registry *r, const fault_request *rq)
{
    const char *a = rq->authorization;
    if (r->auth == NULL)
        return true;
    if (a == NULL)
        return false;
    if (strcmp(r->auth, "basic") == 0)
        return strncmp(a, "Basic ", 6) == 0 && strcmp(a + 6, r->basic) == 0;
    if (strncmp(a, "Bearer ", 7) != 0)
        return false;
    for (int i = 0; i < r->n_tokens; i++)
        if (strcmp(r->tokens[i].value, a + 7) == 0) {
            if (r->token_uses > 0 && r->tokens[i].uses >= r->token_uses)
                return false; /* expired */
            r->tokens[i].uses++;
            return true;
        }
    return false;
}

static int token(struct registry *r, const fault_request *rq, fault_reply *out)
{
    if (r->user != NULL &&
        (rq->authorization == NULL || strncmp(rq->authorization, "Basic ", 6) != 0 ||
         strcmp(rq->authorization + 6, r->basic) != 0)) {
        *out = (fault_reply){.status = 401, .body = "{\"details\":\"bad credentials\"}"};
        return 0;
    }
    int slot = r->n_tokens < MAX_TOKENS ? r->n_tokens++ : MAX_TOKENS - 1;
    snprintf(r->tokens[slot].value, sizeof r->tokens[slot].value, "t0k3n.%d.%d", r->port, slot);
    r->tokens[slot].uses = 0;
    if (asprintf(&r->body, "{\"token\":\"%s\",\"expires_in\":60}", r->tokens[slot].value) < 0)
        r->body = NULL;
    *out = (fault_reply){.status = 200, .body = r->body != NULL ? r->body : "{}"};
    return 0;
}

/* r->headers: the Retry-After of a status fault, if it has one. */
static void retry_after_header(struct registry *r)
{
    r->headers[0] = '\0';
    if (r->retry_after < 0)
        return;
    if (r->retry_after_date)
        fault_retry_after_date(r->headers, sizeof r->headers, r->retry_after);
    else
        snprintf(r->headers, sizeof r->headers, "Retry-After: %d\r\n", r->retry_after);
}

/* The fault, if this request is one it is played on. */
static bool play_fault(struct registry *r)
{
    if (r->times > 0 && r->spoiled >= r->times)
        return false;
    r->spoiled++;
    return true;
}

/* A "Range: bytes=N-" of a blob of len bytes: 206 from N (sets *from). */
static bool ranged(const struct registry *r, const fault_request *rq, size_t len, size_t *from)
{
    unsigned long long n;
    if (r->no_range || rq->range == NULL || sscanf(rq->range, "bytes=%llu-", &n) != 1 || n >= len)
        return false;
    *from = (size_t)n;
    return true;
}

static int blob(struct registry *r, const fault_request *rq, const char *hex, fault_reply *out)
{
    char path[4096];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/blobs/%.64s", r->dir, hex);
    if ((r->body = read_file(path, &len)) == NULL || len == 0)
        return 0;
    if (strcmp(rq->method, "HEAD") == 0) {
        *out = (fault_reply){.status = 200, .body = "", .content_length = (long long)len};
        return 0;
    }
    *out = (fault_reply){.status = 200, .body = r->body, .body_len = len};
    bool target = r->target != NULL && strncmp(hex, r->target, 64) == 0;
    if (!target || strcmp(r->fault, "none") == 0 || !play_fault(r)) {
        size_t from = 0;
        if (ranged(r, rq, len, &from)) {
            snprintf(r->headers, sizeof r->headers, "Content-Range: bytes %zu-%zu/%zu\r\n", from,
                     len - 1, len);
            *out = (fault_reply){.status = 206,
                                 .body = r->body + from,
                                 .body_len = len - from,
                                 .headers = r->headers};
        }
        return 0;
    }
    if (strcmp(r->fault, "corrupt") == 0) {
        r->body[len / 2] ^= 0x5a;
    } else if (strcmp(r->fault, "truncate") == 0) {
        out->body_len = len / 2;
        out->content_length = (long long)len;
    } else if (strcmp(r->fault, "oversize") == 0) {
        memset(r->body + len, 0x42, 4096);
        out->body_len = len + 4096;
    } else if (strcmp(r->fault, "redirect") == 0) {
        snprintf(r->headers, sizeof r->headers, "Location: http://127.0.0.1:%d%s\r\n",
                 r->redirect_port, rq->target);
        *out = (fault_reply){.status = 307, .body = "", .headers = r->headers};
    } else if (strcmp(r->fault, "status") == 0) {
        retry_after_header(r);
        *out = (fault_reply){.status = r->status, .body = "{\"errors\":[]}", .headers = r->headers};
    }
    return 0;
}

/* An upload's steps: taken, the bytes dropped (the registry's digest
 * check is not what a push test asks of this one). */
static int upload(struct registry *r, const fault_request *rq, fault_reply *out)
{
    bool spoil = r->target != NULL && strcmp(r->target, "uploads") == 0 &&
                 strcmp(r->fault, "status") == 0 && strcmp(rq->method, "POST") == 0;
    if (spoil && play_fault(r)) {
        retry_after_header(r);
        *out = (fault_reply){.status = r->status, .body = "{\"errors\":[]}", .headers = r->headers};
        return 0;
    }
    if (strcmp(rq->method, "PUT") == 0) {
        *out = (fault_reply){.status = 201, .body = ""};
        return 0;
    }
    /* POST opens a session, PATCH goes on with it: both name where next. */
    int len = (int)(strstr(rq->target, "/blobs/uploads/") - rq->target);
    snprintf(r->headers, sizeof r->headers, "Location: %.*s/blobs/uploads/session-%d\r\n", len,
             rq->target, r->spoiled);
    *out = (fault_reply){.status = 202, .body = "", .headers = r->headers};
    return 0;
}

static int answer(void *ctx, const fault_request *rq, fault_reply *out)
{
    struct registry *r = ctx;
    char path[4096];
    size_t len = 0;
    log_request(r, rq);
    free(r->body);
    r->body = NULL;
    r->headers[0] = '\0';
    *out = (fault_reply){.status = 404, .body = "{\"errors\":[{\"code\":\"NOT_FOUND\"}]}"};
    if (strncmp(rq->target, "/token", 6) == 0 && strcmp(rq->method, "GET") == 0)
        return token(r, rq, out);
    if (strncmp(rq->target, "/v2/", 4) != 0)
        return 0;
    if (!admitted(r, rq))
        return unauthorized(r, rq, out);
    const char *hex = strstr(rq->target, "/blobs/sha256:");
    if (strstr(rq->target, "/blobs/uploads/") != NULL)
        return upload(r, rq, out);
    if (strstr(rq->target, "/manifests/") != NULL) {
        if (strcmp(rq->method, "PUT") == 0) {
            *out = (fault_reply){.status = 201, .body = ""};
            return 0;
        }
        if (r->target == NULL && strcmp(r->fault, "status") == 0 && play_fault(r)) {
            retry_after_header(r);
            *out = (fault_reply){.status = r->status,
                                 .body = "{\"errors\":[]}",
                                 .headers = r->headers};
            return 0;
        }
        snprintf(path, sizeof path, "%s/manifest", r->dir);
        if ((r->body = read_file(path, &len)) == NULL)
            return 0;
        *out = (fault_reply){.status = 200, .body = r->body, .body_len = len};
        return 0;
    }
    if (hex == NULL || (strcmp(rq->method, "GET") != 0 && strcmp(rq->method, "HEAD") != 0))
        return 0;
    return blob(r, rq, hex + strlen("/blobs/sha256:"), out);
}

int main(int argc, char **argv)
{
    struct registry r = {.fault = "none", .retry_after = -1, .status = 503};
    const char *port_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            printf("tetris-test-fault-registry %s\n", TETRIS_VERSION);
            return 0;
        }
        if (strcmp(a, "--no-range") == 0) {
            r.no_range = true;
            continue;
        }
        if (strcmp(a, "--retry-after-date") == 0) {
            r.retry_after_date = true;
            continue;
        }
        if (v == NULL)
            goto usage;
        if (strcmp(a, "--dir") == 0)
            r.dir = v;
        else if (strcmp(a, "--fault") == 0)
            r.fault = v;
        else if (strcmp(a, "--target") == 0)
            r.target = v;
        else if (strcmp(a, "--requests") == 0)
            r.requests = v;
        else if (strcmp(a, "--port-file") == 0)
            port_file = v;
        else if (strcmp(a, "--redirect-port") == 0)
            r.redirect_port = atoi(v);
        else if (strcmp(a, "--times") == 0)
            r.times = atoi(v);
        else if (strcmp(a, "--status") == 0)
            r.status = atoi(v);
        else if (strcmp(a, "--retry-after") == 0)
            r.retry_after = atoi(v);
        else if (strcmp(a, "--auth") == 0 && (strcmp(v, "basic") == 0 || strcmp(v, "bearer") == 0))
            r.auth = v;
        else if (strcmp(a, "--user") == 0)
            r.user = v;
        else if (strcmp(a, "--password") == 0)
            r.password = v;
        else if (strcmp(a, "--realm-port") == 0)
            r.realm_port = atoi(v);
        else if (strcmp(a, "--token-uses") == 0)
            r.token_uses = atoi(v);
        else
            goto usage;
        i++;
    }
    if (r.dir == NULL || r.requests == NULL || port_file == NULL ||
        (r.user != NULL) != (r.password != NULL) ||
        (r.auth != NULL && strcmp(r.auth, "basic") == 0 && r.user == NULL))
        goto usage;
    if (r.user != NULL) {
        char plain[512];
        snprintf(plain, sizeof plain, "%s:%s", r.user, r.password);
        base64(plain, r.basic, sizeof r.basic);
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* the server's thread inherits it */
    fault_server *fs = fault_server_start();
    if (fs == NULL)
        return 1;
    r.port = fault_server_port(fs);
    fault_server_set_reply_handler(fs, answer, &r);
    FILE *f = fopen(port_file, "w");
    if (f == NULL || fprintf(f, "%d\n", r.port) < 0 || fclose(f) != 0) {
        perror(port_file);
        return 1;
    }
    int sig;
    sigwait(&set, &sig);
    fault_server_stop(fs);
    free(r.body);
    return 0;
usage:
    fprintf(stderr, "tetris-test-fault-registry: bad usage\n%s", usage_text);
    return 2;
}
