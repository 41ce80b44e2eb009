/* fault_registry.c - tetris-test-fault-registry: a hostile OCI registry
 * for the pull tests (tests/reclaimer/test-pull-faults.sh), on the fault
 * server (tests/lib/faultserver.h). It serves a copy of a real
 * registry's artifact from a directory (DIR/manifest, DIR/blobs/<hex>)
 * and does one thing wrong with one blob (--target HEX):
 *   none      nothing: a registry that should never be asked (its
 *             requests file says whether it was)
 *   corrupt   the blob with one byte changed, at its length
 *   truncate  Content-Length as declared, half the bytes, then close
 *   oversize  the blob and 4096 bytes more, Content-Length to match
 *   redirect  307 to the same path on 127.0.0.1:--redirect-port
 * Every request is appended to --requests as "METHOD TARGET" lines; the
 * port it listens on is written to --port-file. Runs until SIGTERM. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/lib/faultserver.h"

static const char usage_text[] =
    "usage: tetris-test-fault-registry --dir DIR --port-file F --requests F\n"
    "       [--fault none|corrupt|truncate|oversize|redirect] [--target HEX]\n"
    "       [--redirect-port P]\n"
    "Serves DIR/manifest and DIR/blobs/<hex> as an OCI registry on 127.0.0.1 and\n"
    "spoils the blob --target as --fault says, until SIGTERM.\n";

struct registry {
    const char *dir, *fault, *target, *requests;
    int redirect_port;
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

static void log_request(const struct registry *r, const fault_request *rq)
{
    FILE *f = fopen(r->requests, "a");
    if (f != NULL) {
        fprintf(f, "%s %s\n", rq->method, rq->target);
        fclose(f);
    }
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
    const char *blob = strstr(rq->target, "/blobs/sha256:");
    if (strstr(rq->target, "/manifests/") != NULL) {
        snprintf(path, sizeof path, "%s/manifest", r->dir);
        if ((r->body = read_file(path, &len)) == NULL)
            return 0;
        *out = (fault_reply){.status = 200, .body = r->body, .body_len = len};
        return 0;
    }
    if (blob == NULL || strcmp(rq->method, "GET") != 0)
        return 0;
    const char *hex = blob + strlen("/blobs/sha256:");
    snprintf(path, sizeof path, "%s/blobs/%.64s", r->dir, hex);
    if ((r->body = read_file(path, &len)) == NULL || len == 0)
        return 0;
    *out = (fault_reply){.status = 200, .body = r->body, .body_len = len};
    if (r->target == NULL || strncmp(hex, r->target, 64) != 0)
        return 0;
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
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct registry r = {.fault = "none"};
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
        else
            goto usage;
        i++;
    }
    if (r.dir == NULL || r.requests == NULL || port_file == NULL)
        goto usage;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* the server's thread inherits it */
    fault_server *fs = fault_server_start();
    if (fs == NULL)
        return 1;
    fault_server_set_reply_handler(fs, answer, &r);
    FILE *f = fopen(port_file, "w");
    if (f == NULL || fprintf(f, "%d\n", fault_server_port(fs)) < 0 || fclose(f) != 0) {
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
