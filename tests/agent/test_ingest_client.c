/* test_ingest_client.c - agent/ingest_client against fake
 * daemons on a real Unix socket: absent daemon (no socket, refused),
 * stalled daemon (timeout), a daemon that refuses (store full, bad
 * request), a well-formed reply, the framing limits, and staying
 * registered across a daemon restart. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/ingest_client.h"
#include "common/clock.h"
#include "tests/lib/unit.h"

static const char *dir;
static char sock_path[108]; /* sun_path */
static char model_path[4096];

static void setup(void)
{
    dir = unit_scratch_dir("ic");
    ck_assert_int_lt(snprintf(sock_path, sizeof(sock_path), "%s/ingest.sock", dir),
                     (int)sizeof(sock_path));
    snprintf(model_path, sizeof(model_path), "%s/model.bin", dir);
    unit_write_text(model_path, "0123456789abcdef");
}

static void teardown(void)
{
    unit_remove_tree(dir);
}

/* A one-tensor model whose bytes are in model_path. */
static model *one_tensor_model(void)
{
    model *m = calloc(1, sizeof(*m));
    m->path = strdup(model_path);
    m->n_tensors = 1;
    m->tensors = calloc(1, sizeof(*m->tensors));
    tensor_desc *t = &m->tensors[0];
    t->name = strdup("w");
    strcpy(t->meta.dtype, "uint8");
    t->meta.ndim = 1;
    t->meta.shape[0] = 16;
    t->meta.nbytes = 16;
    t->has_digest = true;
    t->source = strdup(model_path);
    t->length = 16;
    return m;
}

static void free_model(model *m)
{
    free(m->tensors[0].name);
    free(m->tensors[0].source);
    free(m->tensors);
    free(m->path);
    free(m);
}

static int listen_socket(void)
{
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, sock_path);
    ck_assert_int_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(s, 4), 0);
    return s;
}

/* A fake daemon: accepts one client, reads one request (checking that one
 * descriptor came with it), then answers `reply` (NULL: never answers). */
struct fake {
    int listen_fd;
    const char *reply;
    size_t fds_seen;
    char *request;
};

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    int c = accept(f->listen_fd, NULL, NULL);
    if (c < 0)
        return NULL;
    int fds[8];
    size_t n_fds = 0, len = 0;
    tetris_error err;
    if (ingest_recv_message(c, 1 << 20, &f->request, &len, fds, 8, &n_fds,
                            clock_mono_ms() + 5000, &err) == 0) {
        f->fds_seen = n_fds;
        for (size_t i = 0; i < n_fds; i++)
            close(fds[i]);
        if (f->reply != NULL)
            ingest_send_message(c, f->reply, strlen(f->reply), NULL, 0, 0, &err);
    }
    if (f->reply == NULL) {
        char b;
        while (read(c, &b, 1) > 0) /* stall until the client gives up */
            ;
    }
    close(c);
    return NULL;
}

static int run_against(const char *reply, int timeout_ms, struct ingest_tensor_result *res,
                       struct ingest_summary *sum, tetris_error *err, struct fake *f)
{
    f->listen_fd = listen_socket();
    f->reply = reply;
    pthread_t t;
    pthread_create(&t, NULL, fake_main, f);
    model *m = one_tensor_model();
    ingest_client *c;
    int rc = ingest_client_connect(sock_path, timeout_ms, &c, err);
    ck_assert_int_eq(rc, 0);
    rc = ingest_client_ingest(c, "label", m, res, sum, err);
    ingest_client_close(c);
    pthread_join(t, NULL);
    close(f->listen_fd);
    unlink(sock_path);
    free_model(m);
    return rc;
}

START_TEST(test_absent_daemon)
{
    ingest_client *c;
    tetris_error err;
    ck_assert_int_eq(ingest_client_connect(sock_path, 1000, &c, &err), -TETRIS_E_UNAVAILABLE);
    /* A socket file nobody listens on (a dead daemon's). */
    int s = listen_socket();
    close(s);
    ck_assert_int_eq(ingest_client_connect(sock_path, 1000, &c, &err), -TETRIS_E_UNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err.msg, sock_path));
    ck_assert_int_eq(ingest_report_fallback(sock_path, "m", "why", 1000, &err),
                     -TETRIS_E_UNAVAILABLE);
}
END_TEST

START_TEST(test_stalled_daemon)
{
    struct fake f = {0};
    struct ingest_tensor_result res[1];
    tetris_error err;
    ck_assert_int_eq(run_against(NULL, 300, res, NULL, &err, &f), -TETRIS_E_TIMEOUT);
    ck_assert_uint_eq(f.fds_seen, 1);
    free(f.request);
}
END_TEST

START_TEST(test_refusals)
{
    struct fake f = {0};
    struct ingest_tensor_result res[1];
    tetris_error err;
    ck_assert_int_eq(run_against("{\"ok\":false,\"error\":\"format\",\"message\":\"bad\"}", 2000,
                                 res, NULL, &err, &f),
                     -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad"));
    free(f.request);
    memset(&f, 0, sizeof(f));
    ck_assert_int_eq(run_against("not json", 2000, res, NULL, &err, &f), -TETRIS_E_PROTOCOL);
    free(f.request);
    memset(&f, 0, sizeof(f));
    ck_assert_int_eq(run_against("{\"ok\":true,\"tensors\":[]}", 2000, res, NULL, &err, &f),
                     -TETRIS_E_PROTOCOL);
    free(f.request);
}
END_TEST

START_TEST(test_reply_and_request)
{
    struct fake f = {0};
    struct ingest_tensor_result res[1];
    struct ingest_summary sum;
    tetris_error err;
    const char *reply = "{\"ok\":true,\"holder\":\"h1\",\"ingested_bytes\":0,\"tensors\":"
                        "[{\"status\":\"rejected\",\"error\":\"full\",\"reason\":\"store full\"}]}";
    ck_assert_int_eq(run_against(reply, 2000, res, &sum, &err, &f), 0);
    ck_assert_int_eq(res[0].status, INGEST_REJECTED);
    ck_assert_int_eq(res[0].code, TETRIS_E_FULL);
    ck_assert_str_eq(res[0].reason, "store full");
    ck_assert_uint_eq(sum.rejected, 1);
    ck_assert_uint_eq(sum.rejected_full, 1);
    /* The request carries what the daemon needs to read the tensor itself. */
    json_t *rq = json_loads(f.request, 0, NULL);
    ck_assert_ptr_nonnull(rq);
    ck_assert_str_eq(json_string_value(json_object_get(rq, "op")), "ingest");
    json_t *t = json_array_get(json_object_get(rq, "tensors"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(t, "dtype")), "uint8");
    ck_assert_int_eq(json_integer_value(json_object_get(t, "nbytes")), 16);
    ck_assert_int_eq(json_integer_value(json_object_get(t, "source_index")), 0);
    ck_assert_str_eq(json_string_value(json_object_get(t, "encoding")), "raw");
    ck_assert_int_eq(strncmp(json_string_value(json_object_get(t, "digest")), "sha256:", 7), 0);
    json_decref(rq);
    free(f.request);
}
END_TEST

START_TEST(test_framing_limits)
{
    tetris_error err;
    char *text;
    size_t len;
    int sv[2];

    /* A message past the receiver's limit. */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(ingest_send_message(sv[0], "{\"op\":\"x\"}", 10, NULL, 0, 0, &err), 0);
    ck_assert_int_eq(ingest_recv_message(sv[1], 4, &text, &len, NULL, 0, NULL, 0, &err),
                     -TETRIS_E_PROTOCOL);
    close(sv[0]);
    close(sv[1]);

    /* Descriptors to a receiver that takes none: closed and refused. */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int fd = dup(0);
    ck_assert_int_eq(ingest_send_message(sv[0], "{}", 2, &fd, 1, 0, &err), 0);
    close(fd);
    size_t n_got = 9;
    ck_assert_int_eq(ingest_recv_message(sv[1], 1024, &text, &len, NULL, 0, &n_got, 0, &err),
                     -TETRIS_E_PROTOCOL);
    ck_assert_uint_eq(n_got, 0);
    close(sv[0]);
    close(sv[1]);

    /* Orderly close before a message vs in the middle of one. */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    close(sv[0]);
    ck_assert_int_eq(ingest_recv_message(sv[1], 1024, &text, &len, NULL, 0, NULL, 0, &err),
                     -TETRIS_E_UNAVAILABLE);
    close(sv[1]);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(write(sv[0], "\144\0\0\0abc", 7), 7);
    close(sv[0]);
    ck_assert_int_eq(ingest_recv_message(sv[1], 1024, &text, &len, NULL, 0, NULL, 0, &err),
                     -TETRIS_E_PROTOCOL);
    close(sv[1]);

    /* Sender-side limits. */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int many[INGEST_MAX_SOURCES + 1] = {0};
    ck_assert_int_eq(ingest_send_message(sv[0], "{}", 2, many, INGEST_MAX_SOURCES + 1, 0, &err),
                     -TETRIS_E_INVAL);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

/* A daemon that serves one ingest, dies (connection and socket gone),
 * comes back a moment later and serves the client's re-registration. */
struct restarting_fake {
    char *requests[2];
    size_t fds_seen[2];
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int served;         /* requests answered */
    bool client_closed; /* the second connection ended */
    bool stall_second;  /* the second daemon never answers */
};

static const char resident_reply[] =
    "{\"ok\":true,\"holder\":\"h\",\"ingested_bytes\":0,\"tensors\":[{\"status\":\"resident\"}]}";

static int serve_one(struct restarting_fake *f, int ls, bool answer)
{
    int c = accept(ls, NULL, NULL);
    int fds[8];
    size_t n_fds = 0, len = 0;
    tetris_error err;
    char *request = NULL;
    if (c < 0 || ingest_recv_message(c, 1 << 20, &request, &len, fds, 8, &n_fds,
                                     clock_mono_ms() + 5000, &err) < 0)
        return -1;
    for (size_t i = 0; i < n_fds; i++)
        close(fds[i]);
    if (answer)
        ingest_send_message(c, resident_reply, strlen(resident_reply), NULL, 0, 0, &err);
    pthread_mutex_lock(&f->lock);
    f->requests[f->served] = request;
    f->fds_seen[f->served] = n_fds;
    f->served++;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->lock);
    return c;
}

static void *restarting_main(void *arg)
{
    struct restarting_fake *f = arg;
    int ls = listen_socket();
    int c = serve_one(f, ls, true);
    /* The daemon dies: its end of the connection and its socket go. */
    close(ls);
    unlink(sock_path);
    if (c >= 0)
        close(c);
    usleep(300 * 1000); /* the client finds no daemon for a while */
    ls = listen_socket();
    c = serve_one(f, ls, !f->stall_second);
    close(ls);
    char b;
    while (c >= 0 && read(c, &b, 1) > 0) /* held until the client closes */
        ;
    if (c >= 0)
        close(c);
    pthread_mutex_lock(&f->lock);
    f->client_closed = true;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* Waits (at most 20 s: a hang, not a measurement) until f->served >= n. */
static bool wait_served(struct restarting_fake *f, int n)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&f->lock);
    while (f->served < n && pthread_cond_timedwait(&f->changed, &f->lock, &until) == 0)
        ;
    bool ok = f->served >= n;
    pthread_mutex_unlock(&f->lock);
    return ok;
}

START_TEST(test_reregisters_after_daemon_restart)
{
    struct restarting_fake f = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                .changed = PTHREAD_COND_INITIALIZER};
    struct ingest_tensor_result res[1];
    tetris_error err;
    ingest_client *c;
    model *m = one_tensor_model();
    pthread_t t;

    pthread_create(&t, NULL, restarting_main, &f);
    for (int i = 0; ingest_client_connect(sock_path, 2000, &c, &err) < 0; i++) {
        ck_assert_int_lt(i, 2000); /* the fake is still starting */
        usleep(1000);
    }
    ck_assert_int_eq(ingest_client_keep_registered(c, &err), -TETRIS_E_INVAL);
    ck_assert_int_eq(ingest_client_ingest(c, "label", m, res, NULL, &err), 0);
    ck_assert_int_eq(ingest_client_keep_registered(c, &err), 0);

    ck_assert_msg(wait_served(&f, 2), "no re-registration after the daemon came back");
    /* The same request again, descriptors included, so the new daemon can
     * ingest anything it lost. */
    ck_assert_str_eq(f.requests[1], f.requests[0]);
    ck_assert_uint_eq(f.fds_seen[1], 1);
    ck_assert(!f.client_closed);
    ingest_client_close(c); /* stops the watcher; the references go */
    pthread_join(t, NULL);
    ck_assert(f.client_closed);
    free(f.requests[0]);
    free(f.requests[1]);
    free_model(m);
}
END_TEST

/* Closing while the watcher waits on a restarted daemon that stalls: the
 * close does not wait out the request timeout (a minute here, past the
 * test's own timeout). */
START_TEST(test_close_while_daemon_stalls)
{
    struct restarting_fake f = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                .changed = PTHREAD_COND_INITIALIZER,
                                .stall_second = true};
    struct ingest_tensor_result res[1];
    tetris_error err;
    ingest_client *c;
    model *m = one_tensor_model();
    pthread_t t;

    pthread_create(&t, NULL, restarting_main, &f);
    for (int i = 0; ingest_client_connect(sock_path, 60000, &c, &err) < 0; i++) {
        ck_assert_int_lt(i, 2000);
        usleep(1000);
    }
    ck_assert_int_eq(ingest_client_ingest(c, "label", m, res, NULL, &err), 0);
    ck_assert_int_eq(ingest_client_keep_registered(c, &err), 0);
    ck_assert(wait_served(&f, 2)); /* the re-registration is waiting for its reply */
    ingest_client_close(c);
    pthread_join(t, NULL);
    ck_assert(f.client_closed);
    free(f.requests[0]);
    free(f.requests[1]);
    free_model(m);
}
END_TEST

/* Closing while the watcher waits for a daemon that never comes back. */
START_TEST(test_close_while_reconnecting)
{
    struct fake f = {.reply = resident_reply};
    struct ingest_tensor_result res[1];
    tetris_error err;
    ingest_client *c;
    model *m = one_tensor_model();
    pthread_t t;

    f.listen_fd = listen_socket();
    pthread_create(&t, NULL, fake_main, &f);
    ck_assert_int_eq(ingest_client_connect(sock_path, 2000, &c, &err), 0);
    ck_assert_int_eq(ingest_client_ingest(c, "label", m, res, NULL, &err), 0);
    ck_assert_int_eq(ingest_client_keep_registered(c, &err), 0);
    pthread_join(t, NULL); /* the fake answered and closed: the daemon is gone */
    close(f.listen_fd);
    unlink(sock_path);
    usleep(300 * 1000);
    ingest_client_close(c); /* returns (the test's timeout catches a hang) */
    free(f.request);
    free_model(m);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "fake daemons", 30);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_absent_daemon);
    tcase_add_test(tc, test_stalled_daemon);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_reply_and_request);
    tcase_add_test(tc, test_framing_limits);
    tcase_add_test(tc, test_reregisters_after_daemon_restart);
    tcase_add_test(tc, test_close_while_reconnecting);
    tcase_add_test(tc, test_close_while_daemon_stalls);
}

UNIT_MAIN("ingest_client")
