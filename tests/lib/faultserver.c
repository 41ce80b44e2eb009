/* faultserver.c - the scripted fault-injecting HTTP server (see
 * faultserver.h). A thread accepts connections one by one, reads a request,
 * records it and plays the next queued reply. Last, what the programs that
 * drive it share: their kubeconfig and their main()'s front. */
#include "tests/lib/faultserver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/lib/unit.h"

#define MAX_REQUEST (1u << 20)

typedef struct queued_reply {
    fault_reply r;
    char *headers;
    char *body;
    char **chunks;
    int left; /* requests still to answer with it */
} queued_reply;

struct fault_server {
    int listen_fd;
    int stop_pipe[2];
    int port;
    pthread_t thread;
    pthread_mutex_t lock;
    queued_reply *queue;
    size_t n_queue, queue_head, queue_cap;
    fault_request **requests;
    size_t n_requests, requests_cap;
    fault_handler handler;
    fault_reply_handler reply_handler;
    void *handler_ctx;
};

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

static int send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A header's value from the raw header block, or NULL (malloc'd). */
static char *header_value(const char *head, const char *name)
{
    size_t nlen = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line != NULL; line = strstr(line, "\r\n")) {
        line += 2;
        if (strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
            const char *v = line + nlen + 1;
            while (*v == ' ')
                v++;
            return strndup(v, strcspn(v, "\r\n"));
        }
    }
    return NULL;
}

/* Reads one request; NULL when the client went away or sent garbage. */
static fault_request *read_request(int fd)
{
    char *buf = malloc(MAX_REQUEST + 1);
    if (buf == NULL)
        return NULL;
    size_t len = 0;
    char *end = NULL;
    size_t need = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + len, MAX_REQUEST - len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            goto fail;
        len += (size_t)n;
        buf[len] = '\0';
        if (buf[0] < 'A' || buf[0] > 'Z') {
            /* Not HTTP (a TLS ClientHello, say): a 400, as any HTTP
             * server answers, so the client learns it at once. */
            static const char bad[] = "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"
                                      "Content-Length: 0\r\n\r\n";
            send_all(fd, bad, sizeof bad - 1);
            goto fail;
        }
        if (end == NULL && (end = strstr(buf, "\r\n\r\n")) != NULL) {
            *end = '\0';
            char *cl = header_value(buf, "Content-Length");
            need = (size_t)(end + 4 - buf) + (cl != NULL ? strtoul(cl, NULL, 10) : 0);
            free(cl);
        }
        if (end != NULL && len >= need)
            break;
        if (len == MAX_REQUEST)
            goto fail;
    }
    fault_request *rq = calloc(1, sizeof *rq);
    if (rq == NULL)
        goto fail;
    char target[8192] = "";
    sscanf(buf, "%15s %8191s", rq->method, target);
    rq->target = strdup(target);
    rq->content_type = header_value(buf, "Content-Type");
    rq->authorization = header_value(buf, "Authorization");
    rq->if_none_match = header_value(buf, "If-None-Match");
    rq->range = header_value(buf, "Range");
    rq->body = strndup(end + 4, len - (size_t)(end + 4 - buf));
    free(buf);
    return rq;
fail:
    free(buf);
    return NULL;
}

static void free_request(fault_request *rq)
{
    if (rq == NULL)
        return;
    free(rq->target);
    free(rq->content_type);
    free(rq->authorization);
    free(rq->if_none_match);
    free(rq->range);
    free(rq->body);
    free(rq);
}

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 304: return "Not Modified";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 410: return "Gone";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
    }
}

/* Takes the reply for the next request (copied out under the lock). */
static bool next_reply(fault_server *fs, queued_reply *out)
{
    pthread_mutex_lock(&fs->lock);
    bool have = fs->queue_head < fs->n_queue;
    if (have) {
        queued_reply *q = &fs->queue[fs->queue_head];
        *out = *q;
        if (--q->left <= 0)
            fs->queue_head++;
    }
    pthread_mutex_unlock(&fs->lock);
    return have;
}

static void play(int fd, const queued_reply *q)
{
    const fault_reply *r = &q->r;
    if (r->delay_ms > 0)
        clock_sleep_ms(r->delay_ms);
    if (r->status == 0)
        return; /* dropped: the caller closes */
    char head[4096];
    if (q->chunks != NULL) {
        snprintf(head, sizeof head,
                 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                 "Transfer-Encoding: chunked\r\nConnection: close\r\n%s\r\n",
                 r->status, reason_phrase(r->status), q->headers != NULL ? q->headers : "");
        if (send_all(fd, head, strlen(head)) < 0)
            return;
        for (char **c = q->chunks; *c != NULL; c++) {
            char size[32];
            snprintf(size, sizeof size, "%zx\r\n", strlen(*c));
            if (send_all(fd, size, strlen(size)) < 0 || send_all(fd, *c, strlen(*c)) < 0 ||
                send_all(fd, "\r\n", 2) < 0)
                return;
            if (r->chunk_delay_ms > 0)
                clock_sleep_ms(r->chunk_delay_ms);
        }
        if (!r->truncate)
            send_all(fd, "0\r\n\r\n", 5);
        return;
    }
    const char *body = q->body != NULL ? q->body : "";
    size_t len = r->body_len > 0 ? r->body_len : strlen(body);
    unsigned long long claimed = r->content_length > 0 ? (unsigned long long)r->content_length
                                                       : (unsigned long long)len;
    snprintf(head, sizeof head,
             "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %llu\r\n"
             "Connection: close\r\n%s\r\n",
             r->status, reason_phrase(r->status), claimed, q->headers != NULL ? q->headers : "");
    if (send_all(fd, head, strlen(head)) == 0)
        send_all(fd, body, len);
}

static void serve_one(fault_server *fs, int fd)
{
    fault_request *rq = read_request(fd);
    if (rq == NULL)
        return;
    pthread_mutex_lock(&fs->lock);
    if (fs->n_requests == fs->requests_cap) {
        size_t cap = fs->requests_cap ? fs->requests_cap * 2 : 16;
        fault_request **n = realloc(fs->requests, cap * sizeof *n);
        if (n != NULL) {
            fs->requests = n;
            fs->requests_cap = cap;
        }
    }
    bool recorded = fs->n_requests < fs->requests_cap;
    if (recorded)
        fs->requests[fs->n_requests++] = rq;
    fault_handler handler = fs->handler;
    fault_reply_handler reply_handler = fs->reply_handler;
    void *handler_ctx = fs->handler_ctx;
    pthread_mutex_unlock(&fs->lock);

    queued_reply q;
    fault_reply whole = {0};
    if (next_reply(fs, &q)) {
        play(fd, &q);
    } else if (reply_handler != NULL && reply_handler(handler_ctx, rq, &whole) == 0) {
        queued_reply answer = {.r = whole,
                               .headers = (char *)whole.headers,
                               .body = (char *)whole.body};
        play(fd, &answer);
    } else if (handler != NULL) {
        char *body = NULL;
        queued_reply answer = {.r = {.status = handler(handler_ctx, rq, &body)}};
        answer.body = body;
        play(fd, &answer);
        free(body);
    } else {
        queued_reply none = {.r = {.status = 500}, .body = "{\"error\":\"no scripted reply\"}"};
        play(fd, &none);
    }
    if (!recorded)
        free_request(rq);
}

static void *serve(void *arg)
{
    fault_server *fs = arg;
    for (;;) {
        struct pollfd p[2] = {{fs->listen_fd, POLLIN, 0}, {fs->stop_pipe[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        int fd = accept(fs->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        serve_one(fs, fd);
        shutdown(fd, SHUT_RDWR);
        close(fd);
    }
    return NULL;
}

fault_server *fault_server_start(void)
{
    fault_server *fs = calloc(1, sizeof *fs);
    if (fs == NULL)
        return NULL;
    pthread_mutex_init(&fs->lock, NULL);
    fs->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (fs->listen_fd < 0 || bind(fs->listen_fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(fs->listen_fd, 16) < 0 ||
        getsockname(fs->listen_fd, (struct sockaddr *)&a, &alen) < 0 ||
        pipe2(fs->stop_pipe, O_CLOEXEC) < 0) {
        perror("faultserver");
        if (fs->listen_fd >= 0)
            close(fs->listen_fd);
        free(fs);
        return NULL;
    }
    fs->port = ntohs(a.sin_port);
    if (pthread_create(&fs->thread, NULL, serve, fs) != 0) {
        perror("faultserver thread");
        close(fs->listen_fd);
        close(fs->stop_pipe[0]);
        close(fs->stop_pipe[1]);
        free(fs);
        return NULL;
    }
    return fs;
}

int fault_server_port(const fault_server *fs)
{
    return fs->port;
}

void fault_server_push(fault_server *fs, const fault_reply *r)
{
    queued_reply q = {.r = *r, .headers = dup_or_null(r->headers), .body = dup_or_null(r->body),
                      .left = r->repeat > 0 ? r->repeat : 1};
    if (r->chunks != NULL) {
        size_t n = 0;
        while (r->chunks[n] != NULL)
            n++;
        q.chunks = calloc(n + 1, sizeof *q.chunks);
        for (size_t i = 0; q.chunks != NULL && i < n; i++)
            q.chunks[i] = strdup(r->chunks[i]);
    }
    pthread_mutex_lock(&fs->lock);
    if (fs->n_queue == fs->queue_cap) {
        size_t cap = fs->queue_cap ? fs->queue_cap * 2 : 16;
        queued_reply *n = realloc(fs->queue, cap * sizeof *n);
        if (n == NULL) {
            pthread_mutex_unlock(&fs->lock);
            abort();
        }
        fs->queue = n;
        fs->queue_cap = cap;
    }
    fs->queue[fs->n_queue++] = q;
    pthread_mutex_unlock(&fs->lock);
}

void fault_server_set_reply_handler(fault_server *fs, fault_reply_handler h, void *ctx)
{
    pthread_mutex_lock(&fs->lock);
    fs->handler = NULL;
    fs->reply_handler = h;
    fs->handler_ctx = ctx;
    pthread_mutex_unlock(&fs->lock);
}

void fault_server_set_handler(fault_server *fs, fault_handler h, void *ctx)
{
    pthread_mutex_lock(&fs->lock);
    fs->handler = h;
    fs->handler_ctx = ctx;
    pthread_mutex_unlock(&fs->lock);
}

size_t fault_server_count(fault_server *fs)
{
    pthread_mutex_lock(&fs->lock);
    size_t n = fs->n_requests;
    pthread_mutex_unlock(&fs->lock);
    return n;
}

const fault_request *fault_server_request(fault_server *fs, size_t i)
{
    pthread_mutex_lock(&fs->lock);
    const fault_request *rq = i < fs->n_requests ? fs->requests[i] : NULL;
    pthread_mutex_unlock(&fs->lock);
    return rq;
}

static void free_queue(fault_server *fs)
{
    for (size_t i = 0; i < fs->n_queue; i++) {
        free(fs->queue[i].headers);
        free(fs->queue[i].body);
        for (char **c = fs->queue[i].chunks; c != NULL && *c != NULL; c++)
            free(*c);
        free(fs->queue[i].chunks);
    }
    fs->n_queue = fs->queue_head = 0;
}

/* Queued replies are only skipped here, not freed: the server thread may
 * still be playing one (a slow reply the client gave up on). */
void fault_server_reset(fault_server *fs)
{
    pthread_mutex_lock(&fs->lock);
    fs->queue_head = fs->n_queue;
    for (size_t i = 0; i < fs->n_requests; i++)
        free_request(fs->requests[i]);
    fs->n_requests = 0;
    pthread_mutex_unlock(&fs->lock);
}

void fault_server_stop(fault_server *fs)
{
    if (fs == NULL)
        return;
    if (write(fs->stop_pipe[1], "x", 1) < 0)
        perror("faultserver stop");
    pthread_join(fs->thread, NULL);
    fault_server_reset(fs);
    free_queue(fs);
    free(fs->queue);
    free(fs->requests);
    close(fs->listen_fd);
    close(fs->stop_pipe[0]);
    close(fs->stop_pipe[1]);
    pthread_mutex_destroy(&fs->lock);
    free(fs);
}

void fault_retry_after_date(char *out, size_t cap, int seconds)
{
    time_t at = time(NULL) + seconds;
    struct tm tm;
    gmtime_r(&at, &tm);
    strftime(out, cap, "Retry-After: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
}

void fault_server_write_kubeconfig(const fault_server *fs, const char *path, const char *ns)
{
    char text[2048];
    snprintf(text, sizeof text,
             "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
             "clusters:\n- name: fault\n  cluster:\n    server: http://127.0.0.1:%d\n"
             "contexts:\n- name: test\n  context:\n    cluster: fault\n    user: me\n"
             "%s%s%s"
             "users:\n- name: me\n  user:\n    token: t0k3n\n",
             fs->port, ns != NULL ? "    namespace: " : "", ns != NULL ? ns : "",
             ns != NULL ? "\n" : "");
    unit_write_text(path, text);
}

int fault_test_args(int argc, char **argv, const char *name, const char *usage)
{
    if (argc == 1)
        return -1;
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("%s %s\n", name, TETRIS_VERSION);
        return 0;
    }
    fprintf(stderr, "%s: unexpected argument '%s'\nTry '%s --help'.\n", name, argv[1], name);
    return 2;
}
