/* faultserver.h - a scripted HTTP/1.1 server on 127.0.0.1 for tests: it
 * answers each request with the next reply queued by the test, and can do
 * what a real apiserver or node daemon will not do on demand: drop the
 * connection, answer slowly, stream watch events and fail in the middle of
 * the stream, answer 429 storms. Behind the queue a handler may answer
 * the rest (tests/lib/fake_apiserver.c serves objects that way).
 *
 * One connection at a time, one request per connection (Connection: close).
 * Requests are recorded so tests can assert what the client sent.
 *
 * The Check programs that drive it (kube-client-test, extender-test,
 * autoscaler-test) also share here what they would each write again: a
 * kubeconfig for the server and the front of their main(). */
#ifndef TETRIS_TESTS_FAULTSERVER_H
#define TETRIS_TESTS_FAULTSERVER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct fault_server fault_server;

typedef struct fault_reply {
    int status;           /* 0: close the connection without answering */
    const char *headers;  /* extra header lines, each ending in "\r\n" */
    const char *body;     /* sent with Content-Length (unless chunks) */
    size_t body_len;      /* its bytes; 0: strlen(body) (a reply handler's
                             body may be binary) */
    long long content_length; /* > 0: the Content-Length to claim instead of
                                 the body's (a truncated or overlong reply) */
    int delay_ms;         /* wait this long before answering */
    const char *const *chunks; /* NULL-terminated: sent chunked, one by one */
    int chunk_delay_ms;   /* between chunks */
    bool truncate;        /* after the chunks, close without the last chunk */
    int repeat;           /* answer this many requests (0 counts as 1) */
} fault_reply;

typedef struct fault_request {
    char method[16];
    char *target;         /* path and query */
    char *content_type;   /* NULL when absent */
    char *authorization;  /* NULL when absent */
    char *if_none_match;  /* NULL when absent */
    char *range;          /* NULL when absent */
    char *body;           /* "" when none */
} fault_request;

/* Answers a request no queued reply is left for: returns the status and
 * sets *body to a malloc'd JSON text (NULL: none), which the server frees.
 * Runs on the server's thread. */
typedef int (*fault_handler)(void *ctx, const fault_request *rq, char **body);

/* Answers a request no queued reply is left for with a whole reply: fills
 * *out (its strings stay the handler's, valid until its next call) and
 * returns 0. Runs on the server's thread. */
typedef int (*fault_reply_handler)(void *ctx, const fault_request *rq, fault_reply *out);

/* Starts serving on 127.0.0.1 on a free port. NULL on failure (perror). */
fault_server *fault_server_start(void);
int fault_server_port(const fault_server *fs);
/* Queues a reply (copied). With an empty queue the server answers with
 * its handler, or 500 when it has none. */
void fault_server_push(fault_server *fs, const fault_reply *r);
/* Sets the handler that answers once the queue is empty (a fake
 * apiserver's objects, tests/lib/fake_apiserver.c). */
void fault_server_set_handler(fault_server *fs, fault_handler h, void *ctx);
/* The same with a reply handler (binary bodies, headers, lying lengths):
 * it replaces a handler set before. */
void fault_server_set_reply_handler(fault_server *fs, fault_reply_handler h, void *ctx);
/* Requests received so far; fault_server_request(i) stays valid until stop. */
size_t fault_server_count(fault_server *fs);
const fault_request *fault_server_request(fault_server *fs, size_t i);
/* Forgets queued replies and recorded requests. */
void fault_server_reset(fault_server *fs);
void fault_server_stop(fault_server *fs);

/* Writes into out (cap bytes) the header line "Retry-After: <HTTP-date>"
 * (RFC 9110's preferred format) for seconds from now, CRLF-ended: a
 * server's advice in its date form, which clients must honour too. */
void fault_retry_after_date(char *out, size_t cap, int seconds);

/* Writes a kubeconfig at path whose one cluster is fs over plain HTTP
 * (user token t0k3n) and whose context's namespace is ns (NULL: none);
 * fails the test on error. */
void fault_server_write_kubeconfig(const fault_server *fs, const char *path, const char *ns);

/* The front of a test program's main(): --help (or -h) prints usage on
 * stdout, --version "<name> <version>", any other argument is a usage
 * error on stderr. Returns -1 when there is none (run the suite), else the
 * exit status: 0, or 2 for a usage error. */
int fault_test_args(int argc, char **argv, const char *name, const char *usage);

#endif
