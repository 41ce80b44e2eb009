/* fn_replies.c - what every inference handler of tetris-function does
 * first and last (function.h): a 503 while the model loads, the request
 * in the metrics, and the accounting of replies that draining waits for,
 * because stopping the HTTP server drops what it has not written. Below
 * the handlers' files, so that they and the main file depend on it and
 * not on each other. */
#include <stdlib.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "function/function.h"

static void reply_begin(struct fn *f);
static void reply_guard(struct fn *f, http_response *resp);

bool fn_inference_begin(struct fn *f, http_response *resp)
{
    if (!atomic_load(&f->loaded)) {
        http_response_error(resp, 503, "the model is loading");
        return false;
    }
    reply_begin(f);
    fn_metrics_request_begin(f->metrics);
    return true;
}

void fn_inference_end(struct fn *f, http_response *resp, int status, double start_ms)
{
    reply_guard(f, resp);
    fn_metrics_request_end(f->metrics, status, (clock_now_ms() - start_ms) / 1e3);
}

/* Wraps a reply's release so that the function learns when it was sent. */
struct reply_guard {
    struct fn *f;
    void (*release)(void *ctx);
    void *release_ctx;
};

static void reply_begin(struct fn *f)
{
    pthread_mutex_lock(&f->replies_lock);
    f->replies_pending++;
    pthread_mutex_unlock(&f->replies_lock);
}

static void reply_end(struct fn *f)
{
    pthread_mutex_lock(&f->replies_lock);
    f->replies_pending--;
    pthread_cond_broadcast(&f->replies_sent);
    pthread_mutex_unlock(&f->replies_lock);
}

static void reply_released(void *ctx)
{
    struct reply_guard *g = ctx;
    if (g->release != NULL)
        g->release(g->release_ctx);
    reply_end(g->f);
    free(g);
}

static void reply_guard(struct fn *f, http_response *resp)
{
    struct reply_guard *g = malloc(sizeof(*g));
    if (g == NULL) {
        reply_end(f); /* untracked: draining may cut this one reply short */
        return;
    }
    g->f = f;
    g->release = resp->release;
    g->release_ctx = resp->release_ctx;
    resp->release = reply_released;
    resp->release_ctx = g;
}

void fn_wait_replies_sent(struct fn *f, int timeout_s)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_s;
    pthread_mutex_lock(&f->replies_lock);
    while (f->replies_pending > 0 &&
           pthread_cond_timedwait(&f->replies_sent, &f->replies_lock, &deadline) == 0)
        ;
    if (f->replies_pending > 0)
        log_warn("event=drain-timeout unsent_replies=%u", f->replies_pending);
    pthread_mutex_unlock(&f->replies_lock);
}
