/* test_oip.c - the Open Inference Protocol's tensors: datatype tables, the
 * FP16/BF16 conversions (every value round-trips), the request decoder
 * (every datatype in JSON, flat and nested, and in binary; each malformed
 * request refused with a message naming the problem) and the response
 * encoder (JSON and binary; what it writes decodes back to the same
 * bytes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/textbuf.h"
#include "function/oip_request.h"
#include "function/oip_response.h"
#include "protocol/oip.h"
#include "tests/lib/unit.h"

/* Two inputs: x FP32 [-1, 3] and n INT64 [2]; two outputs. */
static const oip_tensor_spec small_inputs[] = {
    {"x", OIP_FP32, 2, {-1, 3}},
    {"n", OIP_INT64, 1, {2}},
};
static const oip_tensor_spec small_outputs[] = {
    {"y", OIP_FP32, 2, {-1, 3}},
    {"z", OIP_INT64, 1, {-1}},
};
static const oip_signature small = {small_inputs, 2, small_outputs, 2};

static const char good_small[] =
    "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2.5,-3]},"
    "{\"name\":\"n\",\"datatype\":\"INT64\",\"shape\":[2],\"data\":[7,-9]}]}";

START_TEST(datatypes)
{
    for (int i = 0; i < OIP_DATATYPE_COUNT; i++) {
        const char *name = oip_datatype_name((enum oip_datatype)i);
        ck_assert_int_eq(oip_datatype_parse(name, strlen(name)), i);
        ck_assert_int_eq(oip_datatype_from_onnx(oip_datatype_to_onnx((enum oip_datatype)i)), i);
    }
    ck_assert_int_eq(oip_datatype_parse("FP3", 3), OIP_DATATYPE_NONE);
    ck_assert_int_eq(oip_datatype_parse("FP32x", 5), OIP_DATATYPE_NONE);
    ck_assert_int_eq(oip_datatype_from_onnx(1), OIP_FP32);
    ck_assert_int_eq(oip_datatype_from_onnx(8), OIP_BYTES);
    ck_assert_int_eq(oip_datatype_from_onnx(14), OIP_DATATYPE_NONE); /* complex64 */
    ck_assert_uint_eq(oip_datatype_size(OIP_FP16), 2);
    ck_assert_uint_eq(oip_datatype_size(OIP_BYTES), 0);
}
END_TEST

START_TEST(narrow_floats)
{
    ck_assert_uint_eq(oip_fp16_from_double(1.0), 0x3c00);
    ck_assert_uint_eq(oip_fp16_from_double(-2.0), 0xc000);
    ck_assert_uint_eq(oip_fp16_from_double(65504.0), 0x7bff);
    ck_assert_uint_eq(oip_fp16_from_double(65519.0), 0x7bff);
    ck_assert_uint_eq(oip_fp16_from_double(65520.0), 0x7c00); /* rounds past the top */
    ck_assert_uint_eq(oip_fp16_from_double(0.1), 0x2e66);
    ck_assert_uint_eq(oip_fp16_from_double(ldexp(1, -24)), 0x0001);
    ck_assert_uint_eq(oip_fp16_from_double(ldexp(1, -25)), 0x0000); /* tie to even */
    ck_assert_uint_eq(oip_fp16_from_double(ldexp(3, -26)), 0x0001);
    ck_assert_uint_eq(oip_fp16_from_double(ldexp(1023, -24)), 0x03ff);
    ck_assert_uint_eq(oip_fp16_from_double(ldexp(2047, -25)), 0x0400); /* up to the normals */
    ck_assert_uint_eq(oip_fp16_from_double(1e-30), 0);
    ck_assert_uint_eq(oip_bf16_from_double(1.0), 0x3f80);
    ck_assert_uint_eq(oip_bf16_from_double(3.14159265), 0x4049);
    ck_assert_uint_eq(oip_bf16_from_double(1e39), 0x7f80);
    /* Every finite value goes to float, to text and back to its bits. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        char text[40];
        float f = oip_fp16_to_float((uint16_t)h);
        if (isfinite(f)) {
            snprintf(text, sizeof(text), "%.9g", f);
            ck_assert_uint_eq(oip_fp16_from_double(strtod(text, NULL)), h);
        }
        f = oip_bf16_to_float((uint16_t)h);
        if (isfinite(f)) {
            snprintf(text, sizeof(text), "%.9g", f);
            ck_assert_uint_eq(oip_bf16_from_double(strtod(text, NULL)), h);
        }
    }
}
END_TEST

START_TEST(decode_small)
{
    oip_request *req;
    tetris_error err;
    ck_assert_int_eq(oip_request_decode(&small, good_small, strlen(good_small), NULL, &req, &err),
                     0);
    ck_assert_ptr_null(req->id);
    ck_assert_uint_eq(req->inputs[0].count, 3);
    float x[3];
    memcpy(x, req->inputs[0].data, sizeof(x));
    ck_assert(x[0] == 1.0f && x[1] == 2.5f && x[2] == -3.0f);
    int64_t n[2];
    memcpy(n, req->inputs[1].data, sizeof(n));
    ck_assert(n[0] == 7 && n[1] == -9);
    ck_assert(req->output_wanted[0] && req->output_wanted[1]);
    ck_assert(!req->output_binary[0] && !req->output_binary[1]);
    oip_request_free(req);

    /* Nested data, the inputs in another order, an id, one output in binary. */
    const char nested[] =
        "{\"id\":\"r\\u00e9q\",\"outputs\":[{\"name\":\"z\",\"parameters\":{\"binary_data\":true}}]"
        ","
        "\"inputs\":[{\"data\":[3,4],\"name\":\"n\",\"shape\":[2],\"datatype\":\"INT64\"},"
        "{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2,3],\"parameters\":{\"note\":\"x\"},"
        "\"data\":[[1,2,3],[4,5,6e0]]}]}";
    ck_assert_int_eq(oip_request_decode(&small, nested, strlen(nested), NULL, &req, &err), 0);
    ck_assert_uint_eq(req->id_len, 4);
    ck_assert_int_eq(memcmp(req->id, "r\xc3\xa9q", 4), 0);
    ck_assert_uint_eq(req->inputs[0].count, 6);
    memcpy(x, req->inputs[0].data + 8, sizeof(float));
    ck_assert(x[0] == 3.0f);
    ck_assert(!req->output_wanted[0] && req->output_wanted[1] && req->output_binary[1]);
    oip_request_free(req);
}
END_TEST

/* Binary input data after the header, with binary_data_output. */
START_TEST(decode_binary)
{
    const char header[] =
        "{\"parameters\":{\"binary_data_output\":true},\"inputs\":["
        "{\"name\":\"n\",\"datatype\":\"INT64\",\"shape\":[2],\"parameters\":{\"binary_data_size\":"
        "16}},"
        "{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[0,0,0]}]}";
    char body[sizeof(header) + 16], hl[32];
    int64_t n[2] = {-1, 1LL << 40};
    memcpy(body, header, sizeof(header) - 1);
    memcpy(body + sizeof(header) - 1, n, sizeof(n));
    snprintf(hl, sizeof(hl), "%zu", sizeof(header) - 1);
    oip_request *req;
    tetris_error err;
    ck_assert_int_eq(oip_request_decode(&small, body, sizeof(body) - 1, hl, &req, &err), 0);
    ck_assert_int_eq(memcmp(req->inputs[1].data, n, sizeof(n)), 0);
    ck_assert(req->output_binary[0] && req->output_binary[1]);
    oip_request_free(req);
}
END_TEST

struct bad_case {
    const char *body;
    const char *header_length;
    const char *phrase;
};

#define X_OK "{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2,3]}"
#define N_OK "{\"name\":\"n\",\"datatype\":\"INT64\",\"shape\":[2],\"data\":[1,2]}"
#define WITH_X(x) "{\"inputs\":[" x "," N_OK "]}"
#define WITH_N(n) "{\"inputs\":[" X_OK "," n "]}"

static const struct bad_case bad_cases[] = {
    {"", NULL, "JSON object"},
    {"[]", NULL, "JSON object"},
    {"{\"inputs\":[" X_OK "]}", NULL, "input \"n\" is missing"},
    {"{\"inputs\":[" X_OK "," X_OK "]}", NULL, "given twice"},
    {"{\"inputs\":[" X_OK "," N_OK "," N_OK "]}", NULL, "more inputs"},
    {"{}", NULL, "no inputs"},
    {"{\"inputs\":[" X_OK "," N_OK "],\"extra\":1}", NULL, "unknown or repeated field \"extra\""},
    {"{\"inputs\":[],\"inputs\":[]}", NULL, "repeated"},
    {WITH_X("{\"name\":\"w\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2,3]}"), NULL,
     "no such input (it takes x, n)"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP64\",\"shape\":[1,3],\"data\":[1,2,3]}"), NULL,
     "datatype FP64, the model takes FP32"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FLOAT\",\"shape\":[1,3],\"data\":[1,2,3]}"), NULL,
     "unknown datatype \"FLOAT\""},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[1,2,3]}"), NULL,
     "has 1 dimensions, the model takes [-1,3]"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[1,2,3,4]}"), NULL,
     "shape [1,4], the model takes [-1,3]"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[-1,3],\"data\":[1,2,3]}"), NULL,
     "negative"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1.5,3],\"data\":[1,2,3]}"), NULL,
     "shape dimension must be an integer"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[4611686018427387904,3],"
            "\"data\":[1,2,3]}"),
     NULL, "too many elements"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[99999999999,3],\"data\":[1,2,3]}"),
     NULL, "data has 3 elements, shape [99999999999,3] holds 299999999997"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2]}"), NULL,
     "data has 2 elements"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2,3,4]}"), NULL,
     "data has 4 elements"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2,3],\"data\":[[1,2,3],[4,5,6],[]]}"),
     NULL, "nested data has more elements at depth 1"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[[1,2],[3]]}"), NULL,
     "nested data has fewer elements"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,[2],3]}"), NULL,
     "mixes arrays"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,\"2\",3]}"), NULL,
     "element 1: FP32 takes numbers"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,null,3]}"), NULL,
     "element 1: FP32 takes numbers"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,true,3]}"), NULL,
     "element 1: FP32 takes numbers"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,\"NaN\",3]}"), NULL,
     "takes numbers"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,1e39,3]}"), NULL,
     "element 1: 1e39 is out of range for FP32"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3]}"), NULL,
     "neither data nor binary_data_size"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"data\":[1,2,3]}"), NULL, "needs a shape"},
    {WITH_X("{\"name\":\"x\",\"shape\":[1,3],\"data\":[1,2,3]}"), NULL, "needs a datatype"},
    {WITH_X("{\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2,3]}"), NULL, "has no name"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2,3],\"foo\":1}"),
     NULL, "unknown or repeated field \"foo\""},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2,3],"
            "\"parameters\":{\"binary_data_size\":12}}"),
     NULL, "both data and binary_data_size"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],"
            "\"parameters\":{\"binary_data_size\":12}}"),
     NULL, "without the Inference-Header-Content-Length header"},
    {WITH_X("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],"
            "\"parameters\":{\"binary_data_size\":12,\"bad\":[1]}}"),
     NULL, "parameter \"bad\" must be a string, number or boolean"},
    {WITH_N("{\"name\":\"n\",\"datatype\":\"INT64\",\"shape\":[2],\"data\":[1,1.5]}"), NULL,
     "element 1: INT64 takes integers, not 1.5"},
    {WITH_N(
         "{\"name\":\"n\",\"datatype\":\"INT64\",\"shape\":[2],\"data\":[1,9223372036854775808]}"),
     NULL, "out of range for INT64"},
    {WITH_N("{\"name\":\"n\",\"datatype\":\"INT64\",\"shape\":[2],\"data\":[1,-"
            "99999999999999999999]}"),
     NULL, "out of range for INT64"},
    {WITH_N("{\"name\":\"n\",\"datatype\":\"INT64\",\"shape\":[2],\"data\":[[1],[2]]}"), NULL,
     "nested deeper than its 1 dimensions"},
    {"{\"inputs\":[" X_OK "," N_OK "],\"outputs\":[{\"name\":\"q\"}]}", NULL,
     "output \"q\": the model has no such output"},
    {"{\"inputs\":[" X_OK "," N_OK "],\"outputs\":[{\"name\":\"y\"},{\"name\":\"y\"}]}", NULL,
     "asked for twice"},
    {"{\"inputs\":[" X_OK "," N_OK "],\"parameters\":{\"binary_data_output\":1}}", NULL,
     "binary_data_output must be true or false"},
    {"{\"inputs\":[" X_OK "," N_OK "],\"id\":7}", NULL, "id must be a string"},
    {"{\"inputs\":[" X_OK "," N_OK "]} x", NULL, "after the value"},
    {"{\"inputs\":[" X_OK "," N_OK "]}", "12a", "is not a number"},
    {"{\"inputs\":[" X_OK "," N_OK "]}", "", "is not a number"},
    {"{\"inputs\":[" X_OK "," N_OK "]}", "-1", "is not a number"},
    {"{\"inputs\":[" X_OK "," N_OK "]}", "100000", "more than the body's"},
    {"{\"inputs\":[{\"data\":[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}]}", NULL,
     "nesting deeper than the limit"},
};

START_TEST(decode_bad)
{
    const struct bad_case *c = &bad_cases[_i];
    oip_request *req = NULL;
    tetris_error err = {0};
    int r = oip_request_decode(&small, c->body, strlen(c->body), c->header_length, &req, &err);
    ck_assert_msg(r == -TETRIS_E_FORMAT, "case %d accepted: %s", _i, c->body);
    ck_assert_ptr_null(req);
    ck_assert_msg(strstr(err.msg, c->phrase) != NULL, "case %d: message \"%s\" lacks \"%s\"", _i,
                  err.msg, c->phrase);
}
END_TEST

/* Binary parts that disagree with the header or carry what a model must
 * not get. */
START_TEST(decode_bad_binary)
{
    static const struct {
        const char *input;
        const char *bytes;
        size_t len;
        const char *phrase;
    } cases[] = {
        {"\"datatype\":\"FP32\",\"shape\":[1,3],\"parameters\":{\"binary_data_size\":8}",
         "\0\0\0\0\0\0\0\0", 8, "binary_data_size 8, shape [1,3] of FP32 takes 12 bytes"},
        {"\"datatype\":\"FP32\",\"shape\":[1,3],\"parameters\":{\"binary_data_size\":16}",
         "\0\0\0\0\0\0\0\0\0\0\0\0", 12, "is more than the 12 bytes left"},
        {"\"datatype\":\"FP32\",\"shape\":[1,3],\"parameters\":{\"binary_data_size\":12}",
         "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16, "has 16 bytes after the JSON header"},
        {"\"datatype\":\"FP32\",\"shape\":[1,3],\"parameters\":{\"binary_data_size\":12}",
         "\0\0\0\0\0\0\xc0\x7f\0\0\0\0", 12, "input \"x\": element 1 is NaN or infinite"},
        {"\"datatype\":\"FP32\",\"shape\":[1,3],\"parameters\":{\"binary_data_size\":12}",
         "\0\0\0\0\0\0\0\0\0\0\x80\xff", 12, "element 2 is NaN or infinite"},
        {"\"datatype\":\"FP32\",\"shape\":[1,3],\"parameters\":{\"binary_data_size\":-12}",
         "\0\0\0\0\0\0\0\0\0\0\0\0", 12, "binary_data_size must be an integer"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char header[512], body[600], hl[16];
        int n = snprintf(header, sizeof(header), "{\"inputs\":[{\"name\":\"x\",%s}," N_OK "]}",
                         cases[i].input);
        memcpy(body, header, (size_t)n);
        memcpy(body + n, cases[i].bytes, cases[i].len);
        snprintf(hl, sizeof(hl), "%d", n);
        oip_request *req = NULL;
        tetris_error err = {0};
        int r = oip_request_decode(&small, body, (size_t)n + cases[i].len, hl, &req, &err);
        ck_assert_msg(r == -TETRIS_E_FORMAT, "case %zu accepted", i);
        ck_assert_msg(strstr(err.msg, cases[i].phrase) != NULL, "case %zu: \"%s\" lacks \"%s\"", i,
                      err.msg, cases[i].phrase);
    }
}
END_TEST

/* One input per datatype, [-1, 2]: the spec, a JSON request with two
 * elements of each, and the bytes they must decode to. */
static oip_tensor_spec every_spec[OIP_DATATYPE_COUNT];
static char every_names[OIP_DATATYPE_COUNT][16];

static oip_signature every_signature(void)
{
    for (int i = 0; i < OIP_DATATYPE_COUNT; i++) {
        snprintf(every_names[i], sizeof(every_names[i]), "in_%s",
                 oip_datatype_name((enum oip_datatype)i));
        every_spec[i] = (oip_tensor_spec){every_names[i], (enum oip_datatype)i, 2, {-1, 2}};
    }
    return (oip_signature){every_spec, OIP_DATATYPE_COUNT, every_spec, OIP_DATATYPE_COUNT};
}

static const char *const every_values[OIP_DATATYPE_COUNT] = {
    [OIP_BOOL] = "true,false",
    [OIP_UINT8] = "255,0",
    [OIP_UINT16] = "65535,1",
    [OIP_UINT32] = "4294967295,2",
    [OIP_UINT64] = "18446744073709551615,3",
    [OIP_INT8] = "-128,127",
    [OIP_INT16] = "-32768,32767",
    [OIP_INT32] = "-2147483648,2147483647",
    [OIP_INT64] = "-9223372036854775808,9223372036854775807",
    [OIP_FP16] = "65504,-5.96046448e-08",
    [OIP_FP32] = "3.40282347e+38,-1.17549435e-38",
    [OIP_FP64] = "1.7976931348623157e+308,-4.9406564584124654e-324",
    [OIP_BF16] = "1.5,-3.38953139e+38",
    [OIP_BYTES] = "\"caf\\u00e9\",\"\"",
};

static char *every_request(void)
{
    textbuf t = {0};
    textbuf_puts(&t, "{\"inputs\":[");
    for (int i = 0; i < OIP_DATATYPE_COUNT; i++)
        textbuf_printf(&t, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[1,2],\"data\":[%s]}",
                       i ? "," : "", every_names[i], oip_datatype_name((enum oip_datatype)i),
                       every_values[i]);
    textbuf_puts(&t, "]}");
    return textbuf_take(&t, NULL);
}

static void check_every(const oip_request *req)
{
    ck_assert_int_eq(req->inputs[OIP_BOOL].data[0], 1);
    ck_assert_int_eq(req->inputs[OIP_BOOL].data[1], 0);
    uint64_t u64;
    memcpy(&u64, req->inputs[OIP_UINT64].data, 8);
    ck_assert(u64 == UINT64_MAX);
    int64_t i64[2];
    memcpy(i64, req->inputs[OIP_INT64].data, 16);
    ck_assert(i64[0] == INT64_MIN && i64[1] == INT64_MAX);
    int8_t i8[2];
    memcpy(i8, req->inputs[OIP_INT8].data, 2);
    ck_assert(i8[0] == -128 && i8[1] == 127);
    uint16_t h[2];
    memcpy(h, req->inputs[OIP_FP16].data, 4);
    ck_assert_uint_eq(h[0], 0x7bff);
    ck_assert_uint_eq(h[1], 0x8001); /* the smallest subnormal, negative */
    float f[2];
    memcpy(f, req->inputs[OIP_FP32].data, 8);
    ck_assert(f[0] == 3.40282347e+38f && f[1] == -1.17549435e-38f);
    double d[2];
    memcpy(d, req->inputs[OIP_FP64].data, 16);
    ck_assert(d[0] == 1.7976931348623157e+308 && d[1] == -4.9406564584124654e-324);
    memcpy(h, req->inputs[OIP_BF16].data, 4);
    ck_assert_uint_eq(h[0], 0x3fc0);
    ck_assert_uint_eq(h[1], 0xff7f);
    const oip_tensor *b = &req->inputs[OIP_BYTES];
    ck_assert_uint_eq(b->data_bytes, 4 + 5 + 4);
    ck_assert_int_eq(memcmp(b->data, "\5\0\0\0caf\xc3\xa9\0\0\0\0", 13), 0);
}

/* Every datatype decodes; written back as a request (JSON, then binary)
 * it decodes to the same bytes. */
START_TEST(every_datatype_round_trip)
{
    oip_signature sig = every_signature();
    char *body = every_request();
    oip_request *req, *again;
    tetris_error err;
    ck_assert_msg(oip_request_decode(&sig, body, strlen(body), NULL, &req, &err) == 0, "%s",
                  err.msg);
    check_every(req);
    for (int binary = 0; binary <= 1; binary++) {
        textbuf t = {0};
        textbuf_puts(&t, "{\"inputs\":[");
        for (int i = 0; i < OIP_DATATYPE_COUNT; i++) {
            if (i > 0)
                textbuf_puts(&t, ",");
            ck_assert_int_eq(oip_write_tensor(&t, &req->inputs[i], binary, &err), 0);
        }
        textbuf_puts(&t, "]}");
        size_t header_len = t.len;
        for (int i = 0; binary && i < OIP_DATATYPE_COUNT; i++)
            textbuf_append(&t, req->inputs[i].data, req->inputs[i].data_bytes);
        char hl[32];
        snprintf(hl, sizeof(hl), "%zu", header_len);
        size_t len;
        char *text = textbuf_take(&t, &len);
        ck_assert_msg(oip_request_decode(&sig, text, len, binary ? hl : NULL, &again, &err) == 0,
                      "%s", err.msg);
        for (int i = 0; i < OIP_DATATYPE_COUNT; i++) {
            ck_assert_uint_eq(again->inputs[i].data_bytes, req->inputs[i].data_bytes);
            ck_assert_int_eq(memcmp(again->inputs[i].data, req->inputs[i].data,
                                    req->inputs[i].data_bytes),
                             0);
        }
        oip_request_free(again);
        free(text);
    }
    oip_request_free(req);
    free(body);
}
END_TEST

/* The response: outputs in the model's order, only those asked for, the
 * binary ones after the header; non-finite floats as strings. */
START_TEST(response)
{
    const char body[] = "{\"id\":\"7\",\"inputs\":[" X_OK "," N_OK "],"
                        "\"outputs\":[{\"name\":\"z\",\"parameters\":{\"binary_data\":true}},"
                        "{\"name\":\"y\"}]}";
    oip_request *req;
    tetris_error err;
    ck_assert_int_eq(oip_request_decode(&small, body, strlen(body), NULL, &req, &err), 0);
    float y[3] = {-0.0f, NAN, -INFINITY};
    int64_t z[2] = {5, -6};
    oip_tensor outs[2] = {
        {.name = "y",
         .datatype = OIP_FP32,
         .ndim = 2,
         .shape = {1, 3},
         .count = 3,
         .data = (uint8_t *)y,
         .data_bytes = sizeof(y)},
        {.name = "z",
         .datatype = OIP_INT64,
         .ndim = 1,
         .shape = {2},
         .count = 2,
         .data = (uint8_t *)z,
         .data_bytes = sizeof(z)},
    };
    struct oip_response resp;
    ck_assert_int_eq(oip_response_infer("m", NULL, req, outs, &resp, &err), 0);
    ck_assert(resp.binary);
    const char want[] = "{\"model_name\":\"m\",\"id\":\"7\",\"outputs\":["
                        "{\"name\":\"y\",\"datatype\":\"FP32\",\"shape\":[1,3],"
                        "\"data\":[-0.0,\"NaN\",\"-Infinity\"]},"
                        "{\"name\":\"z\",\"datatype\":\"INT64\",\"shape\":[2],"
                        "\"parameters\":{\"binary_data_size\":16}}]}";
    ck_assert_uint_eq(resp.header_len, strlen(want));
    ck_assert_int_eq(memcmp(resp.body, want, strlen(want)), 0);
    ck_assert_uint_eq(resp.body_len, strlen(want) + 16);
    ck_assert_int_eq(memcmp(resp.body + strlen(want), z, 16), 0);
    free(resp.body);
    oip_request_free(req);

    size_t len;
    char *meta = oip_response_model_metadata("m", "2", &small, &len);
    ck_assert_str_eq(meta, "{\"name\":\"m\",\"versions\":[\"2\"],\"platform\":\"onnx_onnxv1\","
                           "\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[-1,3]},"
                           "{\"name\":\"n\",\"datatype\":\"INT64\",\"shape\":[2]}],"
                           "\"outputs\":[{\"name\":\"y\",\"datatype\":\"FP32\",\"shape\":[-1,3]},"
                           "{\"name\":\"z\",\"datatype\":\"INT64\",\"shape\":[-1]}]}");
    free(meta);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, datatypes);
    tcase_add_test(tc, narrow_floats);
    tcase_add_test(tc, decode_small);
    tcase_add_test(tc, decode_binary);
    tcase_add_loop_test(tc, decode_bad, 0, (int)(sizeof(bad_cases) / sizeof(bad_cases[0])));
    tcase_add_test(tc, decode_bad_binary);
    tcase_add_test(tc, every_datatype_round_trip);
    tcase_add_test(tc, response);
}

UNIT_MAIN("oip")
