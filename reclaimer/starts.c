/* starts.c - the registrations a store served, by what it held of the
 * model (hit, partial, miss), per holder label (see struct store_starts in
 * daemon.h): the node's side of an instance's start, which /metrics shows
 * as tetris_model_starts_total and tetris_start_register_seconds. An
 * instance's own report of its start (tetris-function's /metrics) is the
 * pod's word; this is what the daemon answered it. */
#include "reclaimer/daemon.h"

#include <assert.h>
#include <string.h>

#include "common/prom.h"

const char *start_result_name(enum start_result r)
{
    static const char *const names[START_RESULTS] =
        {[START_HIT] = "hit", [START_PARTIAL] = "partial", [START_MISS] = "miss"};
    assert((unsigned)r < START_RESULTS);
    return names[r];
}

/* The row of a label (under s->lock), or the "other" row once
 * MODEL_LABELS_MAX labels have one. */
static struct start_row *start_row(struct store_starts *s, const char *label)
{
    char name[sizeof(s->rows[0].label)];
    /* The label is the client's: as a metric label it must stay UTF-8 when
     * cut to fit. */
    prom_copy_label(name, sizeof(name), label != NULL && label[0] != '\0' ? label : "unlabelled");
    for (size_t i = 0; i < s->n_rows; i++)
        if (strcmp(s->rows[i].label, name) == 0)
            return &s->rows[i];
    if (s->n_rows == MODEL_LABELS_MAX) {
        struct start_row *other = &s->rows[MODEL_LABELS_MAX];
        strcpy(other->label, "other");
        return other;
    }
    struct start_row *row = &s->rows[s->n_rows++];
    memcpy(row->label, name, sizeof(name));
    return row;
}

void starts_record(struct served_store *ss, const char *label, size_t resident, size_t shareable,
                   int64_t us)
{
    assert(resident <= shareable);
    enum start_result r = resident == shareable ? START_HIT
                          : resident == 0       ? START_MISS
                                                : START_PARTIAL;
    double seconds = (double)us / 1e6;
    size_t b = prom_bucket(ingest_duration_bounds, INGEST_DURATION_BUCKETS, seconds);
    struct store_starts *s = &ss->starts;
    pthread_mutex_lock(&s->lock);
    start_row(s, label)->count[r]++;
    s->duration_bucket[r][b]++;
    s->duration_us[r] += us > 0 ? (uint64_t)us : 0;
    pthread_mutex_unlock(&s->lock);
}
