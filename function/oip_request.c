/* oip_request.c - the inference request decoder (see oip_request.h).
 *
 * Two steps. First the JSON header is walked once (json_scan.h): fields
 * are checked and kept, but each input's "data" is only passed over, its
 * span and its number of elements noted, because the input's datatype and
 * shape may come after it. Then each input is resolved against the
 * signature and decoded, from the noted span or from the binary part,
 * straight into the tensor's bytes. A tensor's buffer is allocated only
 * once its size is known to match what the body holds, so a shape can
 * never make the decoder allocate more than the body justifies. */
#include "function/oip_request.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/json_scan.h"
#include "model/model.h"

#define KEY_MAX 64
#define NAME_SHOWN 64 /* bytes of a client's name quoted in a message */

/* An input as the header gives it, before it is checked against the model. */
struct raw_input {
    char *name;
    size_t name_len;
    enum oip_datatype datatype;
    bool has_datatype, has_shape, has_data, has_parameters, has_binary_size;
    char datatype_text[16];
    size_t ndim;
    int64_t shape[OIP_MAX_DIMS];
    const char *data; /* the "data" value's text */
    size_t data_len;
    size_t data_elements; /* scalars in it */
    uint64_t binary_size;
};

struct raw_output {
    char *name;
    size_t name_len;
    int binary; /* -1: not said */
    bool has_parameters;
};

struct parse {
    const oip_signature *sig;
    json_scan s;
    tetris_error *err;
    struct raw_input *in; /* at most sig->n_inputs */
    size_t n_in;
    struct raw_output *out; /* at most sig->n_outputs */
    size_t n_out;
    bool has_inputs, has_outputs, has_parameters;
    int binary_output; /* -1: not said */
    const uint8_t *binary;
    size_t binary_len, binary_used;
    oip_request *req;
};

static bool key_is(const char *key, size_t key_len, const char *name)
{
    return key_len == strlen(name) && memcmp(key, name, key_len) == 0;
}

/* Shown names are cut (at a character's boundary), and their NULs shown
 * as '?', for messages. */
static const char *shown(const char *name, size_t len, char buf[NAME_SHOWN + 4])
{
    size_t n = len < NAME_SHOWN ? len : NAME_SHOWN;
    while (n > 0 && n < len && ((unsigned char)name[n] & 0xc0) == 0x80)
        n--;
    for (size_t i = 0; i < n; i++)
        buf[i] = name[i] != '\0' ? name[i] : '?';
    strcpy(buf + n, len > n ? "..." : "");
    return buf;
}

static int fail_input(struct parse *p, const struct raw_input *in, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* TETRIS_E_FORMAT "input NAME: ..." */
static int fail_input(struct parse *p, const struct raw_input *in, const char *fmt, ...)
{
    char buf[NAME_SHOWN + 4], what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "input \"%s\": %s",
                       in->name != NULL ? shown(in->name, in->name_len, buf) : "?", what);
}

/* A JSON integer token's sign and magnitude; -1 when it does not fit 64
 * bits. */
static int integer_value(const char *tok, size_t len, bool *negative, uint64_t *magnitude)
{
    *negative = tok[0] == '-';
    json_span digits = {tok + *negative, len - *negative};
    return json_span_uint(digits, magnitude) > 0 ? 0 : -1;
}

/* A non-negative JSON integer (a dimension, a size) up to max. */
static int read_count(struct parse *p, const char *what, uint64_t max, uint64_t *out)
{
    const char *tok;
    size_t len;
    bool integer, negative;
    size_t at = json_scan_offset(&p->s);
    if (json_scan_peek(&p->s) != JSON_KIND_NUMBER)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "%s must be an integer (offset %zu)", what,
                           at);
    int r = json_scan_number(&p->s, &tok, &len, &integer, p->err);
    if (r < 0)
        return r;
    if (!integer || integer_value(tok, len, &negative, out) < 0 || (negative && *out != 0) ||
        *out > max)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0,
                           "%s must be an integer from 0 to %" PRIu64 ", not %.*s", what, max,
                           (int)(len < 40 ? len : 40), tok);
    return 0;
}

static int read_bool(struct parse *p, const char *what, int *out)
{
    int v = -1;
    if (json_scan_peek(&p->s) != JSON_KIND_LITERAL || json_scan_literal(&p->s, &v, p->err) < 0 ||
        v < 0)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "%s must be true or false", what);
    *out = v;
    return 0;
}

/* A "parameters" object: the one parameter this place knows (known, read
 * by read_known) and any others, which must be scalars and are ignored. */
static int parse_parameters(struct parse *p, const char *where, const char *known,
                            int (*read_known)(struct parse *p, void *ctx), void *ctx)
{
    char key[KEY_MAX];
    size_t i = 0, key_len;
    int r;
    if (json_scan_peek(&p->s) != JSON_KIND_OBJECT)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "%s parameters must be an object", where);
    if ((r = json_scan_object_begin(&p->s, p->err)) < 0)
        return r;
    while ((r = json_scan_object_next(&p->s, &i, key, sizeof(key), &key_len, p->err)) > 0) {
        if (key_is(key, key_len, known)) {
            r = read_known(p, ctx);
        } else {
            enum json_kind k = json_scan_peek(&p->s);
            int v = 0;
            if (k == JSON_KIND_LITERAL && (r = json_scan_literal(&p->s, &v, p->err)) < 0)
                return r;
            if (k == JSON_KIND_OBJECT || k == JSON_KIND_ARRAY || v < 0)
                return tetris_fail(p->err, TETRIS_E_FORMAT, 0,
                                   "%s parameter \"%s\" must be a string, number or boolean", where,
                                   key);
            r = k == JSON_KIND_LITERAL ? 0 : json_scan_skip(&p->s, NULL, p->err);
        }
        if (r < 0)
            return r;
    }
    return r;
}

/* ---- step 1: the header ---- */

static int read_binary_output(struct parse *p, void *ctx)
{
    (void)ctx;
    return read_bool(p, "parameter binary_data_output", &p->binary_output);
}

static int read_binary_size(struct parse *p, void *ctx)
{
    struct raw_input *in = ctx;
    in->has_binary_size = true;
    return read_count(p, "parameter binary_data_size", UINT64_MAX, &in->binary_size);
}

static int read_binary_data(struct parse *p, void *ctx)
{
    struct raw_output *out = ctx;
    return read_bool(p, "parameter binary_data", &out->binary);
}

static int read_name(struct parse *p, const char *where, char **name, size_t *len)
{
    if (*name != NULL)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "%s has two names", where);
    if (json_scan_peek(&p->s) != JSON_KIND_STRING)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "%s name must be a string", where);
    return json_scan_string_dup(&p->s, name, len, p->err);
}

static int parse_shape(struct parse *p, struct raw_input *in)
{
    size_t i = 0;
    int r;
    if (json_scan_peek(&p->s) != JSON_KIND_ARRAY)
        return fail_input(p, in, "shape must be an array of integers");
    if ((r = json_scan_array_begin(&p->s, p->err)) < 0)
        return r;
    while ((r = json_scan_array_next(&p->s, &i, p->err)) > 0) {
        uint64_t dim;
        if (i > OIP_MAX_DIMS)
            return fail_input(p, in, "shape has more than %d dimensions", OIP_MAX_DIMS);
        if (json_scan_peek(&p->s) == JSON_KIND_NUMBER && *p->s.p == '-')
            return fail_input(p, in, "shape dimension %zu is negative", i - 1);
        if ((r = read_count(p, "a shape dimension", INT64_MAX, &dim)) < 0)
            return tetris_wrap(p->err, "input \"%.*s\"", NAME_SHOWN, in->name ? in->name : "?");
        in->shape[i - 1] = (int64_t)dim;
    }
    in->ndim = i;
    in->has_shape = true;
    return r;
}

static int parse_input(struct parse *p, struct raw_input *in)
{
    char key[KEY_MAX];
    size_t i = 0, key_len, len;
    int r;
    if (json_scan_peek(&p->s) != JSON_KIND_OBJECT)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "inputs[%zu] must be an object",
                           p->n_in - 1);
    if ((r = json_scan_object_begin(&p->s, p->err)) < 0)
        return r;
    while ((r = json_scan_object_next(&p->s, &i, key, sizeof(key), &key_len, p->err)) > 0) {
        if (key_is(key, key_len, "name")) {
            r = read_name(p, "an input", &in->name, &in->name_len);
        } else if (key_is(key, key_len, "datatype") && !in->has_datatype) {
            if (json_scan_peek(&p->s) != JSON_KIND_STRING)
                return fail_input(p, in, "datatype must be a string");
            size_t cap = sizeof(in->datatype_text) - 1;
            r = json_scan_string(&p->s, in->datatype_text, cap, &len, p->err);
            in->datatype_text[len < cap ? len : cap] = '\0';
            in->datatype = oip_datatype_parse(in->datatype_text, len);
            in->has_datatype = true;
        } else if (key_is(key, key_len, "shape") && !in->has_shape) {
            r = parse_shape(p, in);
        } else if (key_is(key, key_len, "data") && !in->has_data) {
            if (json_scan_peek(&p->s) != JSON_KIND_ARRAY)
                return fail_input(p, in, "data must be an array");
            in->data = p->s.p;
            r = json_scan_skip(&p->s, &in->data_elements, p->err);
            in->data_len = (size_t)(p->s.p - in->data);
            in->has_data = true;
        } else if (key_is(key, key_len, "parameters") && !in->has_parameters) {
            in->has_parameters = true;
            r = parse_parameters(p, "input", "binary_data_size", read_binary_size, in);
        } else {
            return fail_input(p, in, "unknown or repeated field \"%s\"", key);
        }
        if (r < 0)
            return r;
    }
    if (r < 0)
        return r;
    if (in->name == NULL)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "inputs[%zu] has no name", p->n_in - 1);
    if (!in->has_datatype || !in->has_shape)
        return fail_input(p, in, "needs %s", !in->has_datatype ? "a datatype" : "a shape");
    if (in->has_data == in->has_binary_size)
        return fail_input(p, in,
                          in->has_data ? "has both data and binary_data_size"
                                       : "has neither data nor binary_data_size");
    return 0;
}

static int parse_output(struct parse *p, struct raw_output *out)
{
    char key[KEY_MAX];
    size_t i = 0, key_len;
    int r;
    out->binary = -1;
    if (json_scan_peek(&p->s) != JSON_KIND_OBJECT)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "outputs[%zu] must be an object",
                           p->n_out - 1);
    if ((r = json_scan_object_begin(&p->s, p->err)) < 0)
        return r;
    while ((r = json_scan_object_next(&p->s, &i, key, sizeof(key), &key_len, p->err)) > 0) {
        if (key_is(key, key_len, "name"))
            r = read_name(p, "an output", &out->name, &out->name_len);
        else if (key_is(key, key_len, "parameters") && !out->has_parameters)
            out->has_parameters = true,
            r = parse_parameters(p, "output", "binary_data", read_binary_data, out);
        else
            return tetris_fail(p->err, TETRIS_E_FORMAT, 0,
                               "outputs[%zu]: unknown or repeated field \"%s\"", p->n_out - 1, key);
        if (r < 0)
            return r;
    }
    if (r == 0 && out->name == NULL)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "outputs[%zu] has no name", p->n_out - 1);
    return r;
}

static int parse_inputs(struct parse *p)
{
    size_t i = 0;
    int r;
    if (json_scan_peek(&p->s) != JSON_KIND_ARRAY)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "inputs must be an array");
    if ((r = json_scan_array_begin(&p->s, p->err)) < 0)
        return r;
    while ((r = json_scan_array_next(&p->s, &i, p->err)) > 0) {
        /* Each must be a distinct input of the model: more cannot be right. */
        if (p->n_in == p->sig->n_inputs)
            return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "more inputs than the model's %zu",
                               p->sig->n_inputs);
        if ((r = parse_input(p, &p->in[p->n_in++])) < 0)
            return r;
    }
    p->has_inputs = true;
    return r;
}

static int parse_outputs(struct parse *p)
{
    size_t i = 0;
    int r;
    if (json_scan_peek(&p->s) != JSON_KIND_ARRAY)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "outputs must be an array");
    if ((r = json_scan_array_begin(&p->s, p->err)) < 0)
        return r;
    while ((r = json_scan_array_next(&p->s, &i, p->err)) > 0) {
        if (p->n_out == p->sig->n_outputs)
            return tetris_fail(p->err, TETRIS_E_FORMAT, 0,
                               "more outputs asked for than the model's %zu", p->sig->n_outputs);
        if ((r = parse_output(p, &p->out[p->n_out++])) < 0)
            return r;
    }
    p->has_outputs = true;
    return r;
}

static int parse_header(struct parse *p)
{
    char key[KEY_MAX];
    size_t i = 0, key_len;
    int r;
    if (json_scan_peek(&p->s) != JSON_KIND_OBJECT)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0,
                           "the request must be a JSON object (offset %zu)",
                           json_scan_offset(&p->s));
    if ((r = json_scan_object_begin(&p->s, p->err)) < 0)
        return r;
    while ((r = json_scan_object_next(&p->s, &i, key, sizeof(key), &key_len, p->err)) > 0) {
        if (key_is(key, key_len, "id") && p->req->id == NULL) {
            if (json_scan_peek(&p->s) != JSON_KIND_STRING)
                return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "id must be a string");
            r = json_scan_string_dup(&p->s, &p->req->id, &p->req->id_len, p->err);
        } else if (key_is(key, key_len, "parameters") && !p->has_parameters) {
            p->has_parameters = true;
            r = parse_parameters(p, "request", "binary_data_output", read_binary_output, NULL);
        } else if (key_is(key, key_len, "inputs") && !p->has_inputs) {
            r = parse_inputs(p);
        } else if (key_is(key, key_len, "outputs") && !p->has_outputs) {
            r = parse_outputs(p);
        } else {
            return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "unknown or repeated field \"%s\"", key);
        }
        if (r < 0)
            return r;
    }
    if (r == 0)
        r = json_scan_end(&p->s, p->err);
    if (r == 0 && !p->has_inputs)
        r = tetris_fail(p->err, TETRIS_E_FORMAT, 0, "the request has no inputs");
    return r;
}

/* ---- step 2: the tensors ---- */

/* The signature's input of this name, or -1. */
static ssize_t find_input(const oip_signature *sig, const char *name, size_t len)
{
    for (size_t i = 0; i < sig->n_inputs; i++)
        if (strlen(sig->inputs[i].name) == len && memcmp(sig->inputs[i].name, name, len) == 0)
            return (ssize_t)i;
    return -1;
}

/* The input's datatype and shape against the model's; its element count. */
static int check_against_model(struct parse *p, const struct raw_input *in,
                               const oip_tensor_spec *spec, size_t *count)
{
    char want[160], got[160];
    size_t size = oip_datatype_size(spec->datatype);
    if (spec->datatype == OIP_DATATYPE_NONE)
        return fail_input(p, in, "the model's type for it has no protocol datatype");
    if (in->datatype == OIP_DATATYPE_NONE)
        return fail_input(p, in, "unknown datatype \"%s\"", in->datatype_text);
    if (in->datatype != spec->datatype)
        return fail_input(p, in, "datatype %s, the model takes %s", oip_datatype_name(in->datatype),
                          oip_datatype_name(spec->datatype));
    tensor_shape_format(spec->shape, spec->ndim, want, sizeof(want));
    tensor_shape_format(in->shape, in->ndim, got, sizeof(got));
    if (in->ndim != spec->ndim)
        return fail_input(p, in, "shape %s has %zu dimensions, the model takes %s", got, in->ndim,
                          want);
    *count = 1;
    for (size_t k = 0; k < in->ndim; k++) {
        if (spec->shape[k] >= 0 && in->shape[k] != spec->shape[k])
            return fail_input(p, in, "shape %s, the model takes %s (-1: any size)", got, want);
        if (__builtin_mul_overflow(*count, (size_t)in->shape[k], count))
            return fail_input(p, in, "shape %s has too many elements", got);
    }
    size_t bytes;
    if (__builtin_mul_overflow(*count, size != 0 ? size : 1, &bytes))
        return fail_input(p, in, "shape %s has too many elements", got);
    return 0;
}

/* One JSON element into element k of t. */
static int decode_element(struct parse *p, const struct raw_input *in, oip_tensor *t, size_t k,
                          size_t *bytes_off, size_t cap)
{
    enum oip_datatype dt = t->datatype;
    enum json_kind kind = json_scan_peek(&p->s);
    uint8_t *dst = t->data + k * oip_datatype_size(dt);
    const char *tok;
    size_t len;
    bool integer;
    int r;

    if (dt == OIP_BOOL) {
        int v = -1;
        if (kind != JSON_KIND_LITERAL || json_scan_literal(&p->s, &v, p->err) < 0 || v < 0)
            return fail_input(p, in, "element %zu: BOOL takes true or false", k);
        *dst = (uint8_t)v;
        return 0;
    }
    if (dt == OIP_BYTES) {
        if (kind != JSON_KIND_STRING)
            return fail_input(p, in, "element %zu: BYTES takes strings", k);
        uint8_t *at = t->data + *bytes_off;
        size_t room = cap - *bytes_off - 4;
        if ((r = json_scan_string(&p->s, (char *)at + 4, room, &len, p->err)) < 0)
            return r;
        if (len > room) /* the capacity bounds every string's JSON text: cannot happen */
            return fail_input(p, in, "element %zu does not fit", k);
        if (len > UINT32_MAX)
            return fail_input(p, in, "element %zu is longer than 4 GiB", k);
        for (int b = 0; b < 4; b++)
            at[b] = (uint8_t)(len >> (8 * b));
        *bytes_off += 4 + len;
        return 0;
    }
    if (kind != JSON_KIND_NUMBER)
        return fail_input(p, in, "element %zu: %s takes numbers", k, oip_datatype_name(dt));
    if ((r = json_scan_number(&p->s, &tok, &len, &integer, p->err)) < 0)
        return r;
    if (oip_datatype_is_float(dt)) {
        char text[OIP_MAX_NUMBER_CHARS + 1], *end;
        if (len > OIP_MAX_NUMBER_CHARS)
            return fail_input(p, in, "element %zu has more than %d characters", k,
                              OIP_MAX_NUMBER_CHARS);
        memcpy(text, tok, len);
        text[len] = '\0';
        float f = 0;
        double d = dt == OIP_FP32 ? (f = strtof(text, &end)) : strtod(text, &end);
        uint16_t h = 0;
        if (dt == OIP_FP16)
            h = oip_fp16_from_double(d);
        else if (dt == OIP_BF16)
            h = oip_bf16_from_double(d);
        if (isinf(d) || (dt == OIP_FP16 && isinf(oip_fp16_to_float(h))) ||
            (dt == OIP_BF16 && isinf(oip_bf16_to_float(h))))
            return fail_input(p, in, "element %zu: %.*s is out of range for %s", k, (int)len, tok,
                              oip_datatype_name(dt));
        if (dt == OIP_FP32)
            memcpy(dst, &f, sizeof(f));
        else if (dt == OIP_FP64)
            memcpy(dst, &d, sizeof(d));
        else
            memcpy(dst, &h, sizeof(h));
        return 0;
    }
    bool negative;
    uint64_t mag;
    if (!integer)
        return fail_input(p, in, "element %zu: %s takes integers, not %.*s", k,
                          oip_datatype_name(dt), (int)(len < 40 ? len : 40), tok);
    static const struct {
        uint64_t max_positive, max_negative; /* magnitudes */
    } range[OIP_DATATYPE_COUNT] = {
        [OIP_UINT8] = {UINT8_MAX, 0},          [OIP_UINT16] = {UINT16_MAX, 0},
        [OIP_UINT32] = {UINT32_MAX, 0},        [OIP_UINT64] = {UINT64_MAX, 0},
        [OIP_INT8] = {INT8_MAX, 128},          [OIP_INT16] = {INT16_MAX, 32768},
        [OIP_INT32] = {INT32_MAX, 1ULL << 31}, [OIP_INT64] = {INT64_MAX, 1ULL << 63},
    };
    if (integer_value(tok, len, &negative, &mag) < 0 ||
        mag > (negative ? range[dt].max_negative : range[dt].max_positive))
        return fail_input(p, in, "element %zu: %.*s is out of range for %s", k,
                          (int)(len < 40 ? len : 40), tok, oip_datatype_name(dt));
    uint64_t bits = negative ? (uint64_t)0 - mag : mag; /* two's complement */
    switch (oip_datatype_size(dt)) {
    case 1: *dst = (uint8_t)bits; break;
    case 2: memcpy(dst, &(uint16_t){(uint16_t)bits}, 2); break;
    case 4: memcpy(dst, &(uint32_t){(uint32_t)bits}, 4); break;
    default: memcpy(dst, &bits, 8); break;
    }
    return 0;
}

struct data_walk {
    oip_tensor *t;
    const struct raw_input *in;
    size_t next;      /* elements written */
    size_t bytes_off; /* BYTES: where the next element goes */
    size_t cap;
};

/* One array of the nested form at this level (its '[' next). */
static int decode_level(struct parse *p, struct data_walk *w, size_t level)
{
    size_t i = 0;
    int r = json_scan_array_begin(&p->s, p->err);
    bool last = level + 1 == w->t->ndim;
    while (r == 0 && (r = json_scan_array_next(&p->s, &i, p->err)) > 0) {
        if (i > (size_t)w->t->shape[level])
            break;
        if (last && w->next == w->t->count) /* the levels multiply to it: cannot happen */
            return fail_input(p, w->in, "more data than the shape holds");
        if (last)
            r = decode_element(p, w->in, w->t, w->next++, &w->bytes_off, w->cap);
        else if (json_scan_peek(&p->s) != JSON_KIND_ARRAY)
            return fail_input(p, w->in, "data is nested at depth %zu but not at %zu", level + 1,
                              level + 2);
        else
            r = decode_level(p, w, level + 1);
        r = r < 0 ? r : 0;
    }
    if (r < 0)
        return r;
    if (i != (size_t)w->t->shape[level])
        return fail_input(p, w->in, "nested data has %s elements at depth %zu, the shape %" PRId64,
                          i > (size_t)w->t->shape[level] ? "more" : "fewer", level + 1,
                          w->t->shape[level]);
    return 0;
}

/* The flat form: one array of scalars. */
static int decode_flat(struct parse *p, struct data_walk *w)
{
    size_t i = 0;
    int r = json_scan_array_begin(&p->s, p->err);
    while (r == 0 && (r = json_scan_array_next(&p->s, &i, p->err)) > 0) {
        if (json_scan_peek(&p->s) == JSON_KIND_ARRAY)
            return fail_input(p, w->in, "data mixes arrays and elements at depth 1");
        if (w->next == w->t->count) /* the count was checked: cannot happen */
            return fail_input(p, w->in, "more data than the shape holds");
        r = decode_element(p, w->in, w->t, w->next++, &w->bytes_off, w->cap);
        r = r < 0 ? r : 0;
    }
    return r;
}

static int allocate(struct parse *p, oip_tensor *t, size_t bytes)
{
    t->data = malloc(bytes > 0 ? bytes : 1);
    if (t->data == NULL)
        return tetris_fail(p->err, TETRIS_E_NOMEM, 0, "out of memory for %zu bytes", bytes);
    t->data_bytes = bytes;
    return 0;
}

static int decode_json_data(struct parse *p, const struct raw_input *in, oip_tensor *t)
{
    char shape[160];
    int r;
    if (in->data_elements != t->count) {
        tensor_shape_format(t->shape, t->ndim, shape, sizeof(shape));
        return fail_input(p, in, "data has %zu elements, shape %s holds %zu", in->data_elements,
                          shape, t->count);
    }
    /* Decoded strings are never longer than their JSON text. */
    size_t cap = t->datatype == OIP_BYTES ? in->data_len + 4 * t->count
                                          : t->count * oip_datatype_size(t->datatype);
    if ((r = allocate(p, t, cap)) < 0)
        return r;
    struct data_walk w = {.t = t, .in = in, .cap = cap};
    json_scan outer = p->s;
    json_scan_init(&p->s, in->data, in->data_len, OIP_MAX_JSON_DEPTH);
    json_scan_array_begin(&p->s, p->err);
    size_t first = 0;
    bool nested = json_scan_array_next(&p->s, &first, p->err) > 0 &&
                  json_scan_peek(&p->s) == JSON_KIND_ARRAY;
    json_scan_init(&p->s, in->data, in->data_len, OIP_MAX_JSON_DEPTH);
    if (nested && t->ndim < 2)
        r = fail_input(p, in, "data is nested deeper than its %zu dimensions", t->ndim);
    else if (nested)
        r = decode_level(p, &w, 0);
    else
        r = decode_flat(p, &w);
    p->s = outer;
    if (r == 0 && t->datatype == OIP_BYTES)
        t->data_bytes = w.bytes_off;
    return r;
}

/* A binary element a model must not be handed: a BOOL byte other than 0
 * or 1, a NaN or an infinity. */
static int check_binary_values(struct parse *p, const struct raw_input *in, const oip_tensor *t)
{
    for (size_t k = 0; k < t->count; k++) {
        const uint8_t *e = t->data + k * oip_datatype_size(t->datatype);
        bool bad;
        uint16_t h;
        float f;
        double d;
        switch (t->datatype) {
        case OIP_BOOL: bad = *e > 1; break;
        case OIP_FP16: memcpy(&h, e, 2), bad = (h & 0x7c00) == 0x7c00; break;
        case OIP_BF16: memcpy(&h, e, 2), bad = (h & 0x7f80) == 0x7f80; break;
        case OIP_FP32: memcpy(&f, e, 4), bad = !isfinite(f); break;
        case OIP_FP64: memcpy(&d, e, 8), bad = !isfinite(d); break;
        default: return 0;
        }
        if (bad)
            return t->datatype == OIP_BOOL
                       ? fail_input(p, in, "element %zu is %u, BOOL takes 0 or 1", k, *e)
                       : fail_input(p, in, "element %zu is NaN or infinite", k);
    }
    return 0;
}

static int take_binary_data(struct parse *p, const struct raw_input *in, oip_tensor *t)
{
    char shape[160];
    size_t left = p->binary_len - p->binary_used;
    int r;
    if (p->binary == NULL)
        return fail_input(p, in,
                          "binary_data_size without the " OIP_HEADER_LENGTH_HEADER " header");
    if (in->binary_size > left)
        return fail_input(p, in, "binary_data_size %" PRIu64 " is more than the %zu bytes left",
                          in->binary_size, left);
    if (t->datatype != OIP_BYTES &&
        in->binary_size != (uint64_t)t->count * oip_datatype_size(t->datatype)) {
        tensor_shape_format(t->shape, t->ndim, shape, sizeof(shape));
        return fail_input(p, in, "binary_data_size %" PRIu64 ", shape %s of %s takes %zu bytes",
                          in->binary_size, shape, oip_datatype_name(t->datatype),
                          t->count * oip_datatype_size(t->datatype));
    }
    const uint8_t *bytes = p->binary + p->binary_used;
    if (t->datatype == OIP_BYTES &&
        oip_bytes_check(bytes, (size_t)in->binary_size, t->count, p->err) < 0)
        return tetris_wrap(p->err, "input \"%.*s\"", NAME_SHOWN, in->name);
    if ((r = allocate(p, t, (size_t)in->binary_size)) < 0)
        return r;
    memcpy(t->data, bytes, (size_t)in->binary_size);
    p->binary_used += (size_t)in->binary_size;
    return check_binary_values(p, in, t);
}

static int decode_inputs(struct parse *p)
{
    oip_request *req = p->req;
    int r;
    for (size_t j = 0; j < p->n_in; j++) {
        const struct raw_input *in = &p->in[j];
        ssize_t i = find_input(p->sig, in->name, in->name_len);
        if (i < 0) {
            char names[300] = "";
            for (size_t k = 0, used = 0; k < p->sig->n_inputs && used < sizeof(names); k++)
                used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", k ? ", " : "",
                                         p->sig->inputs[k].name);
            return fail_input(p, in, "the model has no such input (it takes %s)", names);
        }
        oip_tensor *t = &req->inputs[i];
        if (t->name != NULL)
            return fail_input(p, in, "given twice");
        size_t count = 0;
        if ((r = check_against_model(p, in, &p->sig->inputs[i], &count)) < 0)
            return r;
        if ((t->name = strdup(p->sig->inputs[i].name)) == NULL)
            return tetris_fail(p->err, TETRIS_E_NOMEM, 0, "out of memory");
        t->datatype = in->datatype;
        t->ndim = in->ndim;
        memcpy(t->shape, in->shape, sizeof(t->shape));
        t->count = count;
        r = in->has_data ? decode_json_data(p, in, t) : take_binary_data(p, in, t);
        if (r < 0)
            return r;
    }
    for (size_t i = 0; i < p->sig->n_inputs; i++)
        if (req->inputs[i].name == NULL)
            return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "input \"%s\" is missing",
                               p->sig->inputs[i].name);
    if (p->binary != NULL && p->binary_used != p->binary_len)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0,
                           "the body has %zu bytes after the JSON header, its inputs' "
                           "binary_data_size add up to %zu",
                           p->binary_len, p->binary_used);
    return 0;
}

static int select_outputs(struct parse *p)
{
    oip_request *req = p->req;
    char buf[NAME_SHOWN + 4];
    bool all_binary = p->binary_output == 1;
    for (size_t i = 0; i < req->n_outputs; i++) {
        req->output_wanted[i] = !p->has_outputs;
        req->output_binary[i] = all_binary;
    }
    for (size_t j = 0; j < p->n_out; j++) {
        const struct raw_output *o = &p->out[j];
        size_t i = 0;
        while (i < p->sig->n_outputs &&
               !(strlen(p->sig->outputs[i].name) == o->name_len &&
                 memcmp(p->sig->outputs[i].name, o->name, o->name_len) == 0))
            i++;
        if (i == p->sig->n_outputs)
            return tetris_fail(p->err, TETRIS_E_FORMAT, 0,
                               "output \"%s\": the model has no such output",
                               shown(o->name, o->name_len, buf));
        if (req->output_wanted[i])
            return tetris_fail(p->err, TETRIS_E_FORMAT, 0, "output \"%s\" asked for twice",
                               p->sig->outputs[i].name);
        req->output_wanted[i] = true;
        req->output_binary[i] = o->binary >= 0 ? o->binary == 1 : all_binary;
    }
    return 0;
}

/* The Inference-Header-Content-Length value: the JSON header's length. */
static int split_body(struct parse *p, const char *body, size_t body_len, const char *header_length,
                      size_t *json_len)
{
    *json_len = body_len;
    if (header_length == NULL)
        return 0;
    uint64_t n = 0;
    const char *c = header_length;
    for (; *c >= '0' && *c <= '9' && n <= UINT64_MAX / 10; c++)
        n = n * 10 + (uint64_t)(*c - '0');
    if (c == header_length || *c != '\0')
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0,
                           OIP_HEADER_LENGTH_HEADER " \"%.32s\" is not a number", header_length);
    if (n > body_len)
        return tetris_fail(p->err, TETRIS_E_FORMAT, 0,
                           OIP_HEADER_LENGTH_HEADER " %" PRIu64
                                                    " is more than the body's %zu bytes",
                           n, body_len);
    *json_len = (size_t)n;
    p->binary = (const uint8_t *)body + n;
    p->binary_len = body_len - (size_t)n;
    return 0;
}

static void free_raw(struct parse *p)
{
    for (size_t i = 0; i < p->n_in; i++)
        free(p->in[i].name);
    for (size_t i = 0; i < p->n_out; i++)
        free(p->out[i].name);
    free(p->in);
    free(p->out);
}

static oip_request *request_new(const oip_signature *sig)
{
    oip_request *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->n_inputs = sig->n_inputs;
    r->n_outputs = sig->n_outputs;
    r->inputs = calloc(sig->n_inputs + 1, sizeof(*r->inputs));
    r->output_wanted = calloc(sig->n_outputs + 1, sizeof(bool));
    r->output_binary = calloc(sig->n_outputs + 1, sizeof(bool));
    if (r->inputs == NULL || r->output_wanted == NULL || r->output_binary == NULL) {
        oip_request_free(r);
        return NULL;
    }
    return r;
}

int oip_request_decode(const oip_signature *sig, const char *body, size_t body_len,
                       const char *header_length, oip_request **out, tetris_error *err)
{
    struct parse p = {.sig = sig, .err = err, .binary_output = -1};
    size_t json_len;
    int r;

    *out = NULL;
    p.req = request_new(sig);
    p.in = calloc(sig->n_inputs + 1, sizeof(*p.in));
    p.out = calloc(sig->n_outputs + 1, sizeof(*p.out));
    if (p.req == NULL || p.in == NULL || p.out == NULL)
        r = tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    else if ((r = split_body(&p, body, body_len, header_length, &json_len)) == 0) {
        json_scan_init(&p.s, body, json_len, OIP_MAX_JSON_DEPTH);
        if ((r = parse_header(&p)) == 0 && (r = decode_inputs(&p)) == 0)
            r = select_outputs(&p);
    }
    free_raw(&p);
    if (r < 0) {
        oip_request_free(p.req);
        return r;
    }
    *out = p.req;
    return 0;
}

void oip_request_free(oip_request *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; r->inputs != NULL && i < r->n_inputs; i++)
        oip_tensor_clear(&r->inputs[i]);
    free(r->inputs);
    free(r->output_wanted);
    free(r->output_binary);
    free(r->id);
    free(r);
}
