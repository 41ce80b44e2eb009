/* fuzz_ingest.c - libFuzzer harness for the ingest protocol's decoders
 * (protocol/ingest.h): the daemon's request decoder, which reads whatever
 * any local process sends, and the agent's reply decoder. A request that
 * decodes must be JSON to jansson too (the decoder reads it with
 * common/json_scan.h, never loading it whole; json_scan.h says where the
 * two differ), and must encode again and decode to the same tensors (a
 * pull: to the same reference). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz/fuzz_common.h"
#include "common/log.h"
#include "model/model.h"
#include "protocol/ingest.h"
#include "protocol/oci.h"

static void same_tensor(const tensor_desc *a, const tensor_desc *b)
{
    if (strcmp(a->name, b->name) != 0 || strcmp(a->meta.dtype, b->meta.dtype) != 0 ||
        a->meta.ndim != b->meta.ndim ||
        memcmp(a->meta.shape, b->meta.shape, sizeof a->meta.shape) != 0 || a->offset != b->offset ||
        a->length != b->length || a->meta.nbytes != b->meta.nbytes || a->encoding != b->encoding ||
        a->has_digest != b->has_digest || a->meta.crc32 != b->meta.crc32 ||
        !tensor_digest_equal(&a->meta.digest, &b->meta.digest))
        abort();
}

/* The request's tensors as a model, encoded and decoded again. */
static void round_trip(const ingest_request *rq)
{
    tetris_error err;
    model *m = model_new("fuzz", "onnx", &err);
    if (m == NULL)
        abort();
    for (size_t i = 0; i < rq->n_tensors; i++) {
        tensor_desc t = rq->tensors[i].desc;
        t.name = strdup(t.name);
        t.source = strdup(rq->sources[rq->tensors[i].source_index]);
        if (model_add_tensor(m, &t, &err) < 0)
            abort();
    }
    const char *sources[INGEST_MAX_SOURCES];
    size_t n_sources;
    char *json = NULL;
    if (ingest_request_encode(rq->label, m, &json, sources, &n_sources, &err) < 0) {
        fprintf(stderr, "re-encoding failed: %s\n", err.msg);
        abort();
    }
    ingest_request *back = NULL;
    if (ingest_request_decode(json, strlen(json), n_sources, &back, &err) < 0) {
        fprintf(stderr, "round trip failed: %s\n", err.msg);
        abort();
    }
    if (back->n_tensors != rq->n_tensors || strcmp(back->label, rq->label) != 0)
        abort();
    for (size_t i = 0; i < rq->n_tensors; i++) {
        same_tensor(&rq->tensors[i].desc, &back->tensors[i].desc);
        if (strcmp(back->sources[back->tensors[i].source_index],
                   rq->sources[rq->tensors[i].source_index]) != 0)
            abort();
    }
    ingest_request_free(back);
    free(json);
    model_free(m);
}

/* A decoded pull names a reference oci.h parses, and encodes again to
 * the same request. */
static void round_trip_pull(const ingest_request *rq)
{
    tetris_error err;
    oci_ref ref;
    if (strlen(rq->ref) > INGEST_MAX_REF || oci_ref_parse(rq->ref, &ref, &err) < 0)
        abort();
    char *json = ingest_pull_encode(rq->label, rq->ref);
    ingest_request *back = NULL;
    if (json == NULL || ingest_request_decode(json, strlen(json), 0, &back, &err) < 0 ||
        back->op != INGEST_OP_PULL || strcmp(back->ref, rq->ref) != 0 ||
        strcmp(back->label, rq->label) != 0)
        abort();
    ingest_request_free(back);
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    /* How many descriptors came along is out of band; most requests carry
     * one or two. */
    for (size_t n_fds = 0; n_fds <= 2; n_fds++) {
        ingest_request *rq = NULL;
        tetris_error err;
        if (ingest_request_decode(text, size, n_fds, &rq, &err) < 0) {
            if (err.code != TETRIS_E_FORMAT || err.msg[0] == '\0')
                abort();
            continue;
        }
        /* But for json_scan.h's differences, in members the decoder
         * ignores (what it reads, jansson decodes): a number of any size,
         * \u0000 in a key. */
        json_error_t jerr;
        json_t *whole = json_loadb(text, size, JSON_ALLOW_NUL, &jerr);
        if (whole == NULL && json_error_code(&jerr) != json_error_numeric_overflow &&
            json_error_code(&jerr) != json_error_null_byte_in_key) {
            fprintf(stderr, "decoded a request jansson refuses: %s\n", jerr.text);
            abort();
        }
        json_decref(whole);
        if (rq->op == INGEST_OP_INGEST)
            round_trip(rq);
        if (rq->op == INGEST_OP_PULL)
            round_trip_pull(rq);
        ingest_request_free(rq);
    }
    struct ingest_tensor_result results[2];
    struct ingest_summary sum;
    tetris_error err;
    if (ingest_reply_decode(text, size, 2, results, &sum, &err) == 0 &&
        sum.resident + sum.ingested + sum.rejected != 2)
        abort();
    struct ingest_pull_result pulled;
    if (ingest_pull_reply_decode(text, size, 2, &pulled, &err) == 0 &&
        memchr(pulled.holder, '\0', sizeof pulled.holder) == NULL)
        abort();
    return 0;
}
