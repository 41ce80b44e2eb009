/* derived_form.h - an instance's side of derived forms (protocol/derived.h),
 * shared by the ONNX Runtime adapter (ort_adapter.c: a session in this
 * process) and the model view (view.c: a runtime in another process, of
 * the version the view is written for): find the form of a share image
 * made for a runtime and this CPU, hold its tensors while it is used,
 * rewrite its graph so that its data is the store's file (or map its
 * ORT-format part), and ask the node daemon to make a form that is
 * missing.
 *
 * Nothing here calls ONNX Runtime: the view's writer (tetris-agent) links
 * none, and the runtime a form is for is named by the caller (the
 * adapter: the one it runs; a view: the one its reader says it runs).
 *
 * Private to the agent module. */
#ifndef TETRIS_DERIVED_FORM_H
#define TETRIS_DERIVED_FORM_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/ingest_client.h"
#include "common/error.h"
#include "model/model.h"
#include "protocol/derived.h"

/* How long a start waits for the daemon to make a form it asked for
 * (a waiting ask only: --derived make; BERT-base takes about a minute). */
#define DERIVED_FORM_WAIT_MS (15 * 60 * 1000)

/* A form found, and while held, the references to its tensors. The
 * references' connection reads descs and refs_model for as long as it is
 * open (ingest_client_keep_registered), so a held form stays where it is
 * until derived_form_release. */
struct derived_form {
    derived_entry entry;
    ingest_client *refs;
    tensor_desc descs[DERIVED_PARTS]; /* enum derived_part_index */
    char paths[DERIVED_PARTS][PATH_MAX];
    model refs_model;
    const uint8_t *ort; /* derived_form_hold_ort: the ORT-format part, mapped */
    size_t ort_len;
};

/* Looks up the form of the share image named source (derived_source_digest)
 * made for runtime ("onnxruntime 1.29.0") on this node's CPU, in the store
 * whose public directory is root. 1 when there is one (f->entry); else 0,
 * the caller using the plain weights, said in one log line naming label:
 * event=derived-none when there is no entry for this identity (*absent
 * true: asking the daemon may make one), event=derived-ignored when the
 * entry there does not check (its file's owner or mode, its fields, its
 * identity). */
int derived_form_find(const char *label, const char *root, const tensor_digest *source,
                      const char *runtime, struct derived_form *f, bool *absent);

/* References f's tensors through a connection of its own, kept
 * registered across daemon restarts, then reads the form's graph from the
 * store and rewrites every initializer in its data file to the data
 * tensor's store name "tensors/XX/<hex>" (offsets and pre-packed blobs
 * kept): *graph (malloc'd) opens with external data resolved in root, or
 * in a view whose links bear those names. TETRIS_E_NOTFOUND when the
 * daemon no longer holds a tensor of it (reclaimed: asking again may make
 * it). On failure nothing is held. */
int derived_form_hold(struct derived_form *f, const char *root, uint8_t **graph, size_t *len,
                      tetris_error *err);
/* References f's tensors as derived_form_hold does and maps its
 * ORT-format part read-only (f->ort, f->ort_len: the bytes a session reads
 * in place, until derived_form_release). f->entry must have one
 * (has_ort). TETRIS_E_NOTFOUND as for derived_form_hold; on failure
 * nothing is held. */
int derived_form_hold_ort(struct derived_form *f, const char *root, tetris_error *err);
/* Drops f's references and its mapping (a no-op when not held). */
void derived_form_release(struct derived_form *f);

/* "tensors/XX/<hex>": the store name of a part's tensor. */
void derived_form_store_name(const struct derived_part *p, char *out, size_t cap);

/* A waiting ask that another thread may end (a server stopping). */
struct derived_wait {
    pthread_mutex_t lock;
    pthread_cond_t woken;  /* cancelled: ends a pause between tries */
    ingest_client *asking; /* the connection waited on, while there is one */
    bool cancelled;
};

void derived_wait_init(struct derived_wait *w);
/* Ends the ask waiting on w, now or as soon as it connects: its
 * derived_form_request returns -TETRIS_E_UNAVAILABLE. */
void derived_wait_cancel(struct derived_wait *w);
void derived_wait_destroy(struct derived_wait *w);

/* Asks the daemon serving root to make the form of the share image for
 * runtime (NULL: the daemon's own). With wait or w, waits for it (at most
 * DERIVED_FORM_WAIT_MS, or until w is cancelled) and returns 0 once it is
 * made, else <0; without, a detached thread of its own connection asks
 * (no start waits for it; the daemon goes on deriving if this process ends
 * first) and 0 is returned. With w (a server's wait), a daemon that goes
 * away after it took the ask (a restart: a DaemonSet's rolling update) is
 * asked again, with backoff, until one answers or the wait's time is up;
 * a node where no daemon answered at all is not (direct mode). The
 * outcome is one log line naming label (event=derive-requested,
 * derive-request-failed, or derive-request-skipped without a daemon),
 * plus one per try again (event=derive-request-retry), none for a
 * cancelled wait. */
int derived_form_request(const char *label, const char *root, const uint8_t *image, size_t len,
                         const char *runtime, bool wait, struct derived_wait *w);

#endif
