/* test_ingest_protocol.c - protocol/ingest: requests and replies encode to
 * the documented bytes and decode back to what was encoded; every
 * malformed message (not JSON, wrong types, missing fields, limits,
 * duplicate keys, an index past the descriptors) is refused with an error
 * naming what is wrong; a truncated frame or a stalled peer is an error of
 * the framing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "model/model.h"
#include "protocol/derived.h"
#include "protocol/ingest.h"
#include "tests/lib/unit.h"

static tensor_desc tensor(const char *name, const char *source, uint64_t offset, uint8_t fill)
{
    tensor_desc t = {.name = strdup(name), .source = source ? strdup(source) : NULL,
                     .offset = offset, .length = 8, .has_digest = true};
    strcpy(t.meta.dtype, "float32");
    t.meta.ndim = 2;
    t.meta.shape[0] = 1;
    t.meta.shape[1] = 2;
    t.meta.nbytes = 8;
    t.meta.crc32 = 0xdeadbeef;
    memset(t.meta.digest.bytes, fill, sizeof t.meta.digest.bytes);
    return t;
}

/* Three tensors over two files; the last one's source is the model's. */
static model *three_tensors(void)
{
    tetris_error err;
    model *m = model_new("/m/model.onnx", "onnx", &err);
    ck_assert_ptr_nonnull(m);
    tensor_desc t[3] = {tensor("a", "/m/model.onnx", 0, 0xaa), tensor("b", "/m/ext.bin", 0, 0xbb),
                        tensor("c", NULL, 8, 0xcc)};
    t[2].encoding = TENSOR_ENC_VARINT;
    t[2].length = 3;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(model_add_tensor(m, &t[i], &err), 0);
    return m;
}

/* A model of the one tensor t (taken). */
static model *model_of(const char *path, tensor_desc t)
{
    tetris_error err;
    model *m = model_new(path, "safetensors", &err);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(model_add_tensor(m, &t, &err), 0);
    return m;
}

static char *encode_ok(const model *m, const char **sources, size_t *n_sources)
{
    char *json = NULL;
    tetris_error err = {0};
    int rc = ingest_request_encode("fn-1", m, &json, sources, n_sources, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    return json;
}

START_TEST(request_round_trips)
{
    model *m = three_tensors();
    const char *sources[INGEST_MAX_SOURCES];
    size_t n_sources;
    char *json = encode_ok(m, sources, &n_sources);
    ck_assert_uint_eq(n_sources, 2);
    ck_assert_str_eq(sources[0], "/m/model.onnx");
    ck_assert_str_eq(sources[1], "/m/ext.bin");

    ingest_request *rq = NULL;
    tetris_error err = {0};
    ck_assert_msg(ingest_request_decode(json, strlen(json), 2, &rq, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rq->op, INGEST_OP_INGEST);
    ck_assert_str_eq(rq->label, "fn-1");
    ck_assert_uint_eq(rq->n_sources, 2);
    ck_assert_str_eq(rq->sources[1], "/m/ext.bin");
    ck_assert_uint_eq(rq->n_tensors, 3);
    static const size_t want_source[] = {0, 1, 0};
    for (size_t i = 0; i < 3; i++) {
        const tensor_desc *a = &m->tensors[i], *b = &rq->tensors[i].desc;
        ck_assert_str_eq(a->name, b->name);
        ck_assert_str_eq(a->meta.dtype, b->meta.dtype);
        ck_assert_int_eq(a->meta.ndim, b->meta.ndim);
        ck_assert_mem_eq(a->meta.shape, b->meta.shape, sizeof a->meta.shape);
        ck_assert_uint_eq(a->offset, b->offset);
        ck_assert_uint_eq(a->length, b->length);
        ck_assert_uint_eq(a->meta.nbytes, b->meta.nbytes);
        ck_assert_int_eq(a->encoding, b->encoding);
        ck_assert_uint_eq(a->meta.crc32, b->meta.crc32);
        ck_assert(tensor_digest_equal(&a->meta.digest, &b->meta.digest));
        ck_assert(b->has_digest);
        ck_assert_str_eq(b->source, INGEST_SOURCE_DESCRIPTOR);
        ck_assert_uint_eq(rq->tensors[i].source_index, want_source[i]);
    }
    ingest_request_free(rq);
    free(json);
    model_free(m);
}
END_TEST

/* The wire format is a contract with daemons and agents of other builds. */
START_TEST(request_bytes_are_the_documented_ones)
{
    model *m = model_of("/m/x.safetensors", tensor("w", "/m/x.safetensors", 16, 0x01));
    const char *sources[INGEST_MAX_SOURCES];
    size_t n;
    char *json = encode_ok(m, sources, &n);
    ck_assert_str_eq(json, "{\"op\":\"ingest\",\"label\":\"fn-1\","
                           "\"sources\":[\"/m/x.safetensors\"],"
                           "\"tensors\":[{\"name\":\"w\",\"dtype\":\"float32\",\"shape\":[1,2],"
                           "\"source_index\":0,\"offset\":16,\"length\":8,\"nbytes\":8,"
                           "\"encoding\":\"raw\",\"digest\":\"sha256:"
                           "0101010101010101010101010101010101010101010101010101010101010101\","
                           "\"crc32\":3735928559}]}");
    free(json);
    model_free(m);
    char *fb = ingest_fallback_encode("fn-1", "no daemon");
    ck_assert_str_eq(fb,
                     "{\"op\":\"report_fallback\",\"label\":\"fn-1\",\"reason\":\"no daemon\"}");
    free(fb);
}
END_TEST

START_TEST(encoding_refuses_what_cannot_be_sent)
{
    tetris_error err;
    tensor_desc t = tensor("w", "/m/x", 0, 1);
    t.has_digest = false;
    model *m = model_of("/m/x", t);
    const char *sources[INGEST_MAX_SOURCES];
    size_t n;
    char *json = NULL;
    /* Without its identity a tensor goes without one: the daemon hashes. */
    ck_assert_int_eq(ingest_request_encode("l", m, &json, sources, &n, &err), 0);
    ck_assert_ptr_null(strstr(json, "digest"));
    ck_assert_ptr_null(strstr(json, "crc32"));
    ingest_request *rq = NULL;
    ck_assert_msg(ingest_request_decode(json, strlen(json), n, &rq, &err) == 0, "%s", err.msg);
    ck_assert(!rq->tensors[0].desc.has_digest);
    ingest_request_free(rq);
    free(json);
    json = NULL;
    model_free(m);

    m = model_new("/m/x", "onnx", &err);
    for (int i = 0; i <= INGEST_MAX_SOURCES; i++) {
        char name[16], source[32];
        snprintf(name, sizeof name, "t%d", i);
        snprintf(source, sizeof source, "/m/part%d", i);
        tensor_desc u = tensor(name, source, 0, 2);
        ck_assert_int_eq(model_add_tensor(m, &u, &err), 0);
    }
    ck_assert_int_eq(ingest_request_encode("l", m, &json, sources, &n, &err), -TETRIS_E_INVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than 64 source files"));
    model_free(m);
}
END_TEST

START_TEST(fallback_round_trips)
{
    char *json = ingest_fallback_encode("fn", "store full");
    ingest_request *rq = NULL;
    tetris_error err;
    ck_assert_int_eq(ingest_request_decode(json, strlen(json), 0, &rq, &err), 0);
    ck_assert_int_eq(rq->op, INGEST_OP_REPORT_FALLBACK);
    ck_assert_str_eq(rq->label, "fn");
    ck_assert_str_eq(rq->reason, "store full");
    ingest_request_free(rq);
    /* Descriptors have no place in it. */
    ck_assert_int_eq(ingest_request_decode(json, strlen(json), 1, &rq, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "unexpected descriptors"));
    free(json);
}
END_TEST

#define D64 "sha256:0101010101010101010101010101010101010101010101010101010101010101"
#define ENTRY(extra)                                                                           \
    "{\"name\":\"w\",\"dtype\":\"float32\",\"shape\":[1,2],\"offset\":0,\"length\":8,"        \
    "\"nbytes\":8,\"encoding\":\"raw\",\"digest\":\"" D64 "\",\"crc32\":1" extra "}"
#define REQUEST(label, sources, tensors)                                                       \
    "{\"op\":\"ingest\",\"label\":" label ",\"sources\":" sources ",\"tensors\":" tensors "}"

static const struct {
    const char *json;
    size_t n_fds;
    const char *expect;
} bad_requests[] = {
    {"", 0, "not JSON"},
    {"{\"op\":", 0, "not JSON"},
    {"[1,2]", 0, "unknown op (none)"},
    {"{\"op\":\"format-disk\"}", 0, "unknown op format-disk"},
    {"{\"op\":7}", 0, "unknown op (none)"},
    {"{\"op\":\"ingest\",\"op\":\"ingest\",\"sources\":[],\"tensors\":[]}", 0, "duplicate"},
    {"{\"op\":\"ingest\",\"label\":\"x\"}", 0, "ingest needs \"sources\" and \"tensors\""},
    {"{\"op\":\"ingest\",\"sources\":{},\"tensors\":[]}", 0, "needs \"sources\""},
    {REQUEST("\"x\"", "[\"/m\"]", "[]"), 0, "1 sources but 0 descriptors"},
    {REQUEST("\"x\"", "[\"/m\"]", "[]"), 2, "1 sources but 2 descriptors"},
    {REQUEST("\"x\"", "[7]", "[]"), 1, "sources[0] must be a string"},
    {REQUEST("7", "[]", "[]"), 0, "\"label\" must be a string"},
    {REQUEST("\"a\\nb\"", "[]", "[]"), 0, "control characters"},
    {REQUEST("\"x\"", "[\"/m\"]", "[5]"), 1,
     "tensors[0]: field \"tensors\": entry is not an object"},
    {REQUEST("\"x\"", "[\"/m\"]", "[" ENTRY("") "]"), 1,
     "field \"source_index\": missing (an entry needs name, dtype, shape, source_index"},
    {REQUEST("\"x\"", "[\"/m\"]", "[" ENTRY(",\"source_index\":1") "]"), 1,
     "tensors[0] (\"w\"): field \"source_index\": 1 out of range (1 sources)"},
    {REQUEST("\"x\"", "[\"/m\"]", "[" ENTRY(",\"source_index\":\"0\"") "]"), 1,
     "field \"source_index\": must be a non-negative integer"},
    {REQUEST("\"x\"", "[\"/m\"]", "[" ENTRY(",\"source_index\":0,\"offset\":-1") "]"), 1,
     "duplicate"},
    {REQUEST("\"x\"", "[\"/m\"]",
             "[{\"name\":\"w\",\"source_index\":0,\"dtype\":\"float32\",\"shape\":[1,2],"
             "\"offset\":-1,\"length\":8,\"nbytes\":8,\"encoding\":\"raw\",\"digest\":\"" D64
             "\",\"crc32\":1}]"),
     1, "field \"offset\": must be a non-negative integer (an entry needs name"},
    {REQUEST("\"x\"", "[\"/m\"]",
             "[{\"name\":\"w\",\"source_index\":0,\"dtype\":\"float32\",\"shape\":[1,2],"
             "\"offset\":0,\"length\":8,\"nbytes\":8,\"encoding\":\"zstd\",\"digest\":\"" D64
             "\",\"crc32\":1}]"),
     1, "field \"encoding\": must be \"raw\" or \"varint\""},
    {REQUEST("\"x\"", "[\"/m\"]",
             "[{\"name\":\"w\",\"source_index\":0,\"dtype\":\"float32\",\"shape\":[1,2],"
             "\"offset\":0,\"length\":4,\"nbytes\":8,\"encoding\":\"raw\",\"digest\":\"" D64
             "\",\"crc32\":1}]"),
     1, "raw length 4, nbytes 8"},
    {REQUEST("\"x\"", "[\"/m\"]",
             "[{\"name\":\"w\",\"source_index\":0,\"dtype\":\"float32\",\"shape\":[3],"
             "\"offset\":0,\"length\":8,\"nbytes\":8,\"encoding\":\"raw\",\"digest\":\"" D64
             "\",\"crc32\":1}]"),
     1, "field \"nbytes\": does not match dtype and shape"},
    /* A varint region is 1 to 10 bytes an element: a longer one would only
     * make the daemon read (or buffer) more than the tensor holds. */
    {REQUEST("\"x\"", "[\"/m\"]",
             "[{\"name\":\"w\",\"source_index\":0,\"dtype\":\"int64\",\"shape\":[2],"
             "\"offset\":0,\"length\":1099511627776,\"nbytes\":16,\"encoding\":\"varint\","
             "\"digest\":\"" D64 "\",\"crc32\":1}]"),
     1, "1099511627776 bytes of varints cannot encode 2 elements"},
    {REQUEST("\"x\"", "[\"/m\"]",
             "[{\"name\":\"w\",\"source_index\":0,\"dtype\":\"int64\",\"shape\":[2],"
             "\"offset\":0,\"length\":21,\"nbytes\":16,\"encoding\":\"varint\","
             "\"digest\":\"" D64 "\",\"crc32\":1}]"),
     1, "21 bytes of varints cannot encode 2 elements"},
    {REQUEST("\"x\"", "[\"/m\"]",
             "[{\"name\":\"w\",\"source_index\":0,\"dtype\":\"int64\",\"shape\":[2],"
             "\"offset\":0,\"length\":1,\"nbytes\":16,\"encoding\":\"varint\","
             "\"digest\":\"" D64 "\",\"crc32\":1}]"),
     1, "1 bytes of varints cannot encode 2 elements"},
};

START_TEST(malformed_requests_are_refused)
{
    ingest_request *rq = NULL;
    tetris_error err = {0};
    const char *json = bad_requests[_i].json;
    ck_assert_int_eq(ingest_request_decode(json, strlen(json), bad_requests[_i].n_fds, &rq, &err),
                     -TETRIS_E_FORMAT);
    ck_assert_ptr_null(rq);
    ck_assert_msg(strstr(err.msg, bad_requests[_i].expect) != NULL, "case %d: \"%s\" not in: %s",
                  _i, bad_requests[_i].expect, err.msg);
}
END_TEST

START_TEST(request_limits)
{
    /* A label one byte too long. */
    char label[INGEST_MAX_LABEL + 2];
    memset(label, 'l', sizeof label - 1);
    label[sizeof label - 1] = '\0';
    char json[600];
    snprintf(json, sizeof json, REQUEST("\"%s\"", "[]", "[]"), label);
    ingest_request *rq = NULL;
    tetris_error err;
    ck_assert_int_eq(ingest_request_decode(json, strlen(json), 0, &rq, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "label longer than 255 bytes"));
    label[INGEST_MAX_LABEL] = '\0';
    snprintf(json, sizeof json, REQUEST("\"%s\"", "[]", "[]"), label);
    ck_assert_int_eq(ingest_request_decode(json, strlen(json), 0, &rq, &err), 0);
    ck_assert_uint_eq(rq->n_tensors, 0);
    ingest_request_free(rq);

    /* One tensor past the limit is refused before any entry is decoded. */
    size_t n = INGEST_MAX_TENSORS + 1;
    char *big = malloc(64 + 3 * n);
    size_t len = (size_t)sprintf(big, "{\"op\":\"ingest\",\"sources\":[],\"tensors\":[");
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(big + len, "%s{}", i ? "," : "");
    len += (size_t)sprintf(big + len, "]}");
    ck_assert_int_eq(ingest_request_decode(big, len, 0, &rq, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "exceed the limit of 200000"));
    free(big);
}
END_TEST

START_TEST(reply_round_trips)
{
    struct ingest_tensor_result in[4] = {
        {.status = INGEST_RESIDENT},
        {.status = INGEST_INGESTED},
        {.status = INGEST_REJECTED, .code = TETRIS_E_FULL, .reason = "store full"},
        {.status = INGEST_REJECTED, .code = TETRIS_E_CORRUPT, .reason = "digest mismatch"},
    };
    char *json = ingest_reply_encode("h-1", 4096, in, 4);
    ck_assert_str_eq(json, "{\"ok\":true,\"holder\":\"h-1\",\"ingested_bytes\":4096,\"tensors\":["
                           "{\"status\":\"resident\"},{\"status\":\"ingested\"},"
                           "{\"status\":\"rejected\",\"error\":\"full\",\"reason\":\"store full\"},"
                           "{\"status\":\"rejected\",\"error\":\"corrupt\","
                           "\"reason\":\"digest mismatch\"}]}");
    struct ingest_tensor_result out[4];
    struct ingest_summary sum;
    tetris_error err = {0};
    ck_assert_msg(ingest_reply_decode(json, strlen(json), 4, out, &sum, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(out[i].status, in[i].status);
        ck_assert_int_eq(out[i].code, in[i].code);
        ck_assert_str_eq(out[i].reason, in[i].reason);
    }
    ck_assert_uint_eq(sum.resident, 1);
    ck_assert_uint_eq(sum.ingested, 1);
    ck_assert_uint_eq(sum.rejected, 2);
    ck_assert_uint_eq(sum.rejected_full, 1);
    ck_assert_uint_eq(sum.ingested_bytes, 4096);
    free(json);

    json = ingest_ack_encode();
    ck_assert_str_eq(json, "{\"ok\":true}");
    ck_assert_int_eq(ingest_ack_decode(json, strlen(json), &err), 0);
    free(json);
}
END_TEST

START_TEST(reply_carries_computed_identities)
{
    struct ingest_tensor_result in[2] = {
        {.status = INGEST_INGESTED, .has_digest = true, .crc32 = 7},
        {.status = INGEST_REJECTED, .code = TETRIS_E_FULL, .reason = "full", .has_digest = true},
    };
    memset(in[0].digest.bytes, 0x5a, sizeof in[0].digest.bytes);
    char *json = ingest_reply_encode("h", 8, in, 2);
    ck_assert_ptr_nonnull(strstr(json, "{\"status\":\"ingested\",\"digest\":\"sha256:5a5a"));
    ck_assert_ptr_nonnull(strstr(json, "\"crc32\":7}"));
    /* a rejected tensor has no identity to give */
    ck_assert_ptr_null(strstr(strstr(json, "rejected"), "digest"));
    struct ingest_tensor_result out[2];
    tetris_error err = {0};
    ck_assert_msg(ingest_reply_decode(json, strlen(json), 2, out, NULL, &err) == 0, "%s", err.msg);
    ck_assert(out[0].has_digest && !out[1].has_digest);
    ck_assert(tensor_digest_equal(&out[0].digest, &in[0].digest));
    ck_assert_uint_eq(out[0].crc32, 7);
    free(json);
}
END_TEST

START_TEST(error_replies_carry_the_daemons_code)
{
    char *json = ingest_error_encode(TETRIS_E_UNAVAILABLE, "too many connections");
    ck_assert_str_eq(json, "{\"ok\":false,\"error\":\"unavailable\",\"message\":\"too many "
                           "connections\"}");
    struct ingest_tensor_result out[1];
    tetris_error err;
    ck_assert_int_eq(ingest_reply_decode(json, strlen(json), 1, out, NULL, &err),
                     -TETRIS_E_UNAVAILABLE);
    ck_assert_str_eq(err.msg, "node daemon refused: too many connections");
    ck_assert_int_eq(ingest_ack_decode(json, strlen(json), &err), -TETRIS_E_UNAVAILABLE);
    free(json);
    const char *odd = "{\"ok\":false,\"error\":\"martian\"}";
    ck_assert_int_eq(ingest_ack_decode(odd, strlen(odd), &err), -TETRIS_E_PROTOCOL);
    ck_assert_str_eq(err.msg, "node daemon refused: (no message)");
}
END_TEST

static const struct {
    const char *json;
    const char *expect;
} bad_replies[] = {
    {"not json", "daemon reply is not JSON"},
    {"[]", "not a JSON object"},
    {"{\"ok\":true,\"ok\":true}", "not JSON"},
    {"{\"ok\":true,\"holder\":\"h\",\"ingested_bytes\":0,\"tensors\":[]}",
     "has 0 tensor results, want 1"},
    {"{\"ok\":true,\"holder\":\"h\",\"ingested_bytes\":0}", "has 0 tensor results, want 1"},
    {"{\"ok\":true,\"ingested_bytes\":0,\"tensors\":[{\"status\":\"resident\"}]}",
     "\"holder\" must be a string"},
    {"{\"ok\":true,\"holder\":\"h\",\"ingested_bytes\":-1,\"tensors\":[{\"status\":\"resident\"}]}",
     "\"ingested_bytes\" must be a non-negative integer"},
    {"{\"ok\":true,\"holder\":\"h\",\"tensors\":[{\"status\":\"resident\"}]}",
     "\"ingested_bytes\" must be"},
    {"{\"ok\":true,\"holder\":\"h\",\"ingested_bytes\":0,\"tensors\":[{\"status\":\"lost\"}]}",
     "bad status for tensor 0"},
    {"{\"ok\":true,\"holder\":\"h\",\"ingested_bytes\":0,\"tensors\":[7]}",
     "bad status for tensor 0"},
    {"{\"ok\":true,\"holder\":\"h\",\"ingested_bytes\":0,\"tensors\":[{\"status\":\"rejected\"}]}",
     "rejected without error and reason"},
    {"{\"ok\":true,\"holder\":\"h\",\"ingested_bytes\":0,\"tensors\":[{\"status\":\"ingested\","
     "\"digest\":\"sha256:00\",\"crc32\":1}]}",
     "tensor 0: \"digest\" must be"},
    {"{\"ok\":true,\"holder\":\"h\",\"ingested_bytes\":0,\"tensors\":[{\"status\":\"resident\","
     "\"crc32\":1}]}",
     "tensor 0: \"digest\" must be"},
    {"{\"ok\":true,\"holder\":\"h\",\"ingested_bytes\":0,\"tensors\":[{\"status\":\"resident\","
     "\"digest\":\"sha256:0000000000000000000000000000000000000000000000000000000000000000\"}]}",
     "tensor 0: \"crc32\" must be"},
};

START_TEST(malformed_replies_are_protocol_errors)
{
    struct ingest_tensor_result out[1];
    tetris_error err = {0};
    const char *json = bad_replies[_i].json;
    ck_assert_int_eq(ingest_reply_decode(json, strlen(json), 1, out, NULL, &err),
                     -TETRIS_E_PROTOCOL);
    ck_assert_msg(strstr(err.msg, bad_replies[_i].expect) != NULL, "case %d: \"%s\" not in: %s",
                  _i, bad_replies[_i].expect, err.msg);
}
END_TEST

/* The limits and an orderly close are test_ingest_client.c's. */
START_TEST(gpu_attach_round_trips)
{
    tensor_digest d[2];
    memset(&d[0], 0xab, sizeof(d[0]));
    memset(&d[1], 0x01, sizeof(d[1]));
    char *json = ingest_gpu_attach_encode("cuda:1", d, 2);
    ck_assert_ptr_nonnull(json);
    ingest_request *rq = NULL;
    tetris_error err = {0};
    ck_assert_msg(ingest_request_decode(json, strlen(json), 0, &rq, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rq->op, INGEST_OP_GPU_ATTACH);
    ck_assert_str_eq(rq->device, "cuda:1");
    ck_assert_uint_eq(rq->n_digests, 2);
    ck_assert_int_eq(memcmp(rq->digests, d, sizeof(d)), 0);
    ingest_request_free(rq);
    /* Descriptors are not expected with it. */
    ck_assert_int_eq(ingest_request_decode(json, strlen(json), 1, &rq, &err), -TETRIS_E_FORMAT);
    free(json);
    const char *bad[] = {
        "{\"op\":\"gpu_attach\",\"device\":\"cuda:0\"}",
        "{\"op\":\"gpu_attach\",\"device\":\"cuda:0\",\"digests\":[]}",
        "{\"op\":\"gpu_attach\",\"device\":\"cuda:0\",\"digests\":[1]}",
        "{\"op\":\"gpu_attach\",\"device\":\"cuda:0\",\"digests\":[\"sha256:00\"]}",
        "{\"op\":\"gpu_attach\",\"device\":7,\"digests\":[]}",
        "{\"op\":\"gpu_attach\",\"device\":\"cuda:0123456789abcdef\",\"digests\":[]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(ingest_request_decode(bad[i], strlen(bad[i]), 0, &rq, &err) ==
                          -TETRIS_E_FORMAT,
                      "%s", bad[i]);
    /* At most INGEST_MAX_GPU_TENSORS digests. */
    tensor_digest many[INGEST_MAX_GPU_TENSORS + 1] = {0};
    json = ingest_gpu_attach_encode("cuda:0", many, INGEST_MAX_GPU_TENSORS + 1);
    ck_assert_int_eq(ingest_request_decode(json, strlen(json), 0, &rq, &err), -TETRIS_E_FORMAT);
    free(json);
}
END_TEST

START_TEST(derive_round_trips)
{
    ingest_request *rq = NULL;
    tetris_error err = {0};
    /* Without a runtime: the daemon's own. */
    char *json = ingest_derive_encode("fn", DERIVED_TRANSFORM_ORT, NULL);
    ck_assert_msg(ingest_request_decode(json, strlen(json), 1, &rq, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rq->op, INGEST_OP_DERIVE);
    ck_assert_str_eq(rq->transform, DERIVED_TRANSFORM_ORT);
    ck_assert_str_eq(rq->runtime, "");
    ingest_request_free(rq);
    free(json);
    json = ingest_derive_encode("fn", DERIVED_TRANSFORM_ORT, "onnxruntime 1.22.0");
    ck_assert_msg(ingest_request_decode(json, strlen(json), 1, &rq, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(rq->runtime, "onnxruntime 1.22.0");
    ingest_request_free(rq);
    /* The share image rides with it: one descriptor, no fewer. */
    ck_assert_int_eq(ingest_request_decode(json, strlen(json), 0, &rq, &err), -TETRIS_E_FORMAT);
    free(json);
    const char *bad[] = {
        "{\"op\":\"derive\",\"transform\":\"other\"}",
        "{\"op\":\"derive\",\"transform\":\"ort-optimize-all-prepack\",\"runtime\":7}",
        "{\"op\":\"derive\",\"transform\":\"ort-optimize-all-prepack\",\"runtime\":\"\"}",
        "{\"op\":\"derive\",\"transform\":\"ort-optimize-all-prepack\",\"runtime\":\"a/b\"}",
        "{\"op\":\"derive\",\"transform\":\"ort-optimize-all-prepack\",\"runtime\":\"a\\nb\"}",
        "{\"op\":\"derive\",\"transform\":\"ort-optimize-all-prepack\",\"runtime\":\"x\","
        "\"runtime\":\"y\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(ingest_request_decode(bad[i], strlen(bad[i]), 1, &rq, &err) ==
                          -TETRIS_E_FORMAT,
                      "accepted %s", bad[i]);
    char runtime[DERIVED_NAME_MAX + 1];
    memset(runtime, 'r', DERIVED_NAME_MAX);
    runtime[DERIVED_NAME_MAX] = '\0';
    json = ingest_derive_encode("fn", DERIVED_TRANSFORM_ORT, runtime);
    ck_assert_int_eq(ingest_request_decode(json, strlen(json), 1, &rq, &err), -TETRIS_E_FORMAT);
    free(json);
}
END_TEST

START_TEST(pull_round_trips)
{
    char *json = ingest_pull_encode("fn", "oci://registry.example:5000/models/bert:v1");
    ck_assert_ptr_nonnull(json);
    ingest_request *rq = NULL;
    tetris_error err = {0};
    ck_assert_msg(ingest_request_decode(json, strlen(json), 0, &rq, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rq->op, INGEST_OP_PULL);
    ck_assert_str_eq(rq->ref, "oci://registry.example:5000/models/bert:v1");
    ck_assert_str_eq(rq->label, "fn");
    ingest_request_free(rq);
    /* A pull carries no descriptor and names a reference. */
    ck_assert_int_eq(ingest_request_decode(json, strlen(json), 1, &rq, &err), -TETRIS_E_FORMAT);
    free(json);
    const char *bad[] = {
        "{\"op\":\"pull\",\"label\":\"fn\"}",
        "{\"op\":\"pull\",\"ref\":\"/models/bert.onnx\"}",
        "{\"op\":\"pull\",\"ref\":\"oci://h:1/Upper\"}",
        "{\"op\":\"pull\",\"ref\":7}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_int_eq(ingest_request_decode(bad[i], strlen(bad[i]), 0, &rq, &err),
                         -TETRIS_E_FORMAT);

    struct ingest_pull_result in = {.holder = "h1",
                                    .tensors = 12,
                                    .pulled_tensors = 2,
                                    .pulled_bytes = 300,
                                    .skipped_bytes = 66};
    memset(in.digest.bytes, 0xab, sizeof in.digest.bytes);
    json = ingest_pull_reply_encode(&in);
    ck_assert_ptr_nonnull(json);
    struct ingest_pull_result out;
    ck_assert_msg(ingest_pull_reply_decode(json, strlen(json), 2, &out, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(out.holder, "h1");
    ck_assert(tensor_digest_equal(&out.digest, &in.digest));
    ck_assert(out.tensors == 12 && out.pulled_tensors == 2 && out.pulled_bytes == 300 &&
              out.skipped_bytes == 66);
    /* The config and the graph ride with it: two descriptors, no fewer. */
    ck_assert_int_eq(ingest_pull_reply_decode(json, strlen(json), 1, &out, &err),
                     -TETRIS_E_PROTOCOL);
    free(json);
    const char *refused = "{\"ok\":false,\"error\":\"denied\",\"message\":\"not listed\"}";
    ck_assert_int_eq(ingest_pull_reply_decode(refused, strlen(refused), 0, &out, &err),
                     -TETRIS_E_DENIED);
    ck_assert_ptr_nonnull(strstr(err.msg, "not listed"));
}
END_TEST

START_TEST(gpu_reply_round_trips)
{
    struct ingest_gpu_result in[3] = {
        {.attached = true, .size = 2097152, .nbytes = 100},
        {.attached = false, .code = TETRIS_E_FULL, .reason = "GPU cuda:0 full"},
        {.attached = true, .size = 65536, .nbytes = 65536},
    };
    char *json = ingest_gpu_reply_encode("cuda:0", in, 3);
    ck_assert_ptr_nonnull(json);
    struct ingest_gpu_result out[3];
    tetris_error err = {0};
    ck_assert_msg(ingest_gpu_reply_decode(json, strlen(json), 3, 2, out, &err) == 0, "%s", err.msg);
    ck_assert(out[0].attached && out[0].size == 2097152 && out[0].nbytes == 100);
    ck_assert(!out[1].attached && out[1].code == TETRIS_E_FULL);
    ck_assert_str_eq(out[1].reason, "GPU cuda:0 full");
    ck_assert(out[2].attached && out[2].size == 65536);
    /* Descriptors must match the attached results one for one. */
    ck_assert_int_eq(ingest_gpu_reply_decode(json, strlen(json), 3, 1, out, &err),
                     -TETRIS_E_PROTOCOL);
    ck_assert_int_eq(ingest_gpu_reply_decode(json, strlen(json), 2, 2, out, &err),
                     -TETRIS_E_PROTOCOL);
    free(json);
    const char *bad = "{\"ok\":true,\"tensors\":[{\"status\":\"attached\",\"size\":10,"
                      "\"nbytes\":11}]}";
    ck_assert_int_eq(ingest_gpu_reply_decode(bad, strlen(bad), 1, 1, out, &err),
                     -TETRIS_E_PROTOCOL);
    const char *refused = "{\"ok\":false,\"error\":\"unavailable\",\"message\":\"no GPU\"}";
    ck_assert_int_eq(ingest_gpu_reply_decode(refused, strlen(refused), 1, 0, out, &err),
                     -TETRIS_E_UNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err.msg, "no GPU"));
}
END_TEST

START_TEST(framing)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    tetris_error err;
    char *text = NULL;
    size_t len;

    /* The length prefix is little-endian. */
    uint8_t header[INGEST_HEADER_BYTES];
    ingest_frame_header(header, 0x01020304);
    ck_assert_mem_eq(header, "\x04\x03\x02\x01", 4);

    /* A message and its descriptor arrive together. */
    int fd = sv[0];
    ck_assert_int_eq(ingest_send_message(sv[0], "{\"op\":\"x\"}", 10, &fd, 1, 0, &err), 0);
    int got[2];
    size_t n_got = 0;
    ck_assert_int_eq(ingest_recv_message(sv[1], 100, &text, &len, got, 2, &n_got, 0, &err), 0);
    ck_assert_uint_eq(len, 10);
    ck_assert_str_eq(text, "{\"op\":\"x\"}");
    ck_assert_uint_eq(n_got, 1);
    close(got[0]);
    free(text);
    close(sv[0]);
    close(sv[1]);

    /* Cut short: a header promising 100 bytes, then 5, then the end. */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(write(sv[0], "\x64\0\0\0{\"op\"", 9), 9);
    close(sv[0]);
    ck_assert_int_eq(ingest_recv_message(sv[1], 1000, &text, &len, NULL, 0, NULL, 0, &err),
                     -TETRIS_E_PROTOCOL);
    ck_assert_ptr_nonnull(strstr(err.msg, "truncated message (5 of 100 bytes)"));
    close(sv[1]);

    /* Nothing arrives before the deadline. */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(ingest_recv_message(sv[1], 1000, &text, &len, NULL, 0, NULL,
                                         clock_mono_ms() + 20, &err),
                     -TETRIS_E_TIMEOUT);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, request_round_trips);
    tcase_add_test(tc, request_bytes_are_the_documented_ones);
    tcase_add_test(tc, encoding_refuses_what_cannot_be_sent);
    tcase_add_test(tc, fallback_round_trips);
    tcase_add_loop_test(tc, malformed_requests_are_refused, 0,
                        (int)(sizeof bad_requests / sizeof bad_requests[0]));
    tcase_add_test(tc, request_limits);
    tcase_add_test(tc, reply_round_trips);
    tcase_add_test(tc, reply_carries_computed_identities);
    tcase_add_test(tc, error_replies_carry_the_daemons_code);
    tcase_add_loop_test(tc, malformed_replies_are_protocol_errors, 0,
                        (int)(sizeof bad_replies / sizeof bad_replies[0]));
    tcase_add_test(tc, gpu_attach_round_trips);
    tcase_add_test(tc, gpu_reply_round_trips);
    tcase_add_test(tc, pull_round_trips);
    tcase_add_test(tc, derive_round_trips);
    tcase_add_test(tc, framing);
}

UNIT_MAIN("ingest_protocol")
