/* fn_upgrade.c - moves a running function from the model's plain weights
 * to the store's derived form once the node daemon has made it
 * (--derived auto).
 *
 * Without a form, an instance starts on the plain weights (no start waits
 * for one) and asks the daemon for it. A short-lived process leaves the
 * form to the next instance; a function serves for hours, so it waits for
 * the form in a thread of its own, opens a second session on it (the
 * plain weights still mapped: the first session reads them), checks that
 * it takes and gives the same tensors, and hands it to the batcher between
 * batches (batcher_replace_model: a batch running finishes on the plain
 * session, every later one runs on the form). The plain session is then
 * freed and the plain weights unmapped; /metrics and the log say so
 * (event=session-upgraded). Answers from then on are stock ONNX Runtime's
 * at `all` with pre-packing, which is what --derived auto asks for.
 * Anything that goes wrong leaves the function on the plain session, said
 * in one log line. */
#include <pthread.h>
#include <stdatomic.h>

#include "function/function.h"
#include "common/clock.h"
#include "common/log.h"

/* The session on the form, checked against the one serving. */
static int open_form(struct fn *f, ort_model **out, tetris_error *err)
{
    ort_model *next = NULL;
    ort_io *io = NULL;
    int r = ort_upgrade_run(f->upgrade, &next, err);
    if (r == 0)
        r = ort_io_describe(next, f->o.dynamic_dim, &io, err);
    if (r == 0 && !ort_io_equal(f->io, io))
        r = tetris_fail(err, TETRIS_E_FORMAT, 0,
                        "the derived form's inputs or outputs differ from the model's");
    ort_io_free(io);
    if (r < 0) {
        ort_model_free(next);
        return r;
    }
    *out = next;
    return 0;
}

static void *upgrade_main(void *arg)
{
    struct fn *f = arg;
    tetris_error err = {0};
    ort_model *next = NULL;
    double start = clock_now_ms();
    int r = open_form(f, &next, &err);
    if (r == -TETRIS_E_UNAVAILABLE) {
        log_debug("event=session-upgrade-skipped model=%s msg=%s", LOG_Q(f->model_path),
                  LOG_Q(err.msg));
        return NULL;
    }
    if (r < 0) {
        log_warn("event=session-upgrade-failed model=%s code=%s msg=%s action=plain-weights",
                 LOG_Q(f->model_path), tetris_code_name(r), LOG_Q(err.msg));
        return NULL;
    }
    if (!atomic_load(&f->ready)) {
        /* Draining: the plain session answers what is left. */
        ort_model_free(next);
        return NULL;
    }
    ort_model *plain = f->m;
    batcher_replace_model(f->batcher, next);
    f->m = next;
    ort_model_free(plain);
    agent_model_unmap(f->am);
    fn_metrics_session(f->metrics, next->shared_bytes, true);
    log_info("event=session-upgraded model=%s derived=1 derived_ort=%d shared_bytes=%llu "
             "upgrade_ms=%.3f",
             LOG_Q(f->model_path), next->derived_ort, (unsigned long long)next->shared_bytes,
             clock_now_ms() - start);
    return NULL;
}

int fn_upgrade_start(struct fn *f, tetris_error *err)
{
    f->upgrade = ort_model_take_upgrade(f->m);
    if (f->upgrade == NULL)
        return 0;
    int r = pthread_create(&f->upgrade_thread, NULL, upgrade_main, f);
    if (r != 0) {
        ort_upgrade_free(f->upgrade);
        f->upgrade = NULL;
        return tetris_fail(err, TETRIS_E_IO, r, "cannot start the session's upgrade");
    }
    return 0;
}

void fn_upgrade_stop(struct fn *f)
{
    if (f->upgrade == NULL)
        return;
    ort_upgrade_cancel(f->upgrade);
    pthread_join(f->upgrade_thread, NULL);
    ort_upgrade_free(f->upgrade);
    f->upgrade = NULL;
}
