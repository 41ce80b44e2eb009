/* oip_response.c - the Open Inference Protocol answers (see
 * oip_response.h). */
#include "function/oip_response.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/textbuf.h"

int oip_response_infer(const char *model_name, const char *model_version, const oip_request *req,
                       const oip_tensor *outputs, struct oip_response *out, tetris_error *err)
{
    textbuf t = {0};
    bool first = true;
    int r = 0;

    memset(out, 0, sizeof(*out));
    textbuf_puts(&t, "{\"model_name\":");
    r = oip_write_json_string(&t, model_name, strlen(model_name), err);
    if (r == 0 && model_version != NULL) {
        textbuf_puts(&t, ",\"model_version\":");
        r = oip_write_json_string(&t, model_version, strlen(model_version), err);
    }
    if (r == 0 && req->id != NULL) {
        textbuf_puts(&t, ",\"id\":");
        r = oip_write_json_string(&t, req->id, req->id_len, err);
    }
    textbuf_puts(&t, ",\"outputs\":[");
    for (size_t i = 0; r == 0 && i < req->n_outputs; i++) {
        if (!req->output_wanted[i])
            continue;
        if (!first)
            textbuf_puts(&t, ",");
        first = false;
        r = oip_write_tensor(&t, &outputs[i], req->output_binary[i], err);
        out->binary |= req->output_binary[i];
    }
    textbuf_puts(&t, "]}");
    out->header_len = t.len;
    for (size_t i = 0; r == 0 && i < req->n_outputs; i++)
        if (req->output_wanted[i] && req->output_binary[i])
            textbuf_append(&t, outputs[i].data, outputs[i].data_bytes);
    if (r < 0) {
        char why[sizeof(err->msg)];
        textbuf_free(&t);
        snprintf(why, sizeof(why), "%s", err->msg);
        return tetris_fail(err, err->code, 0,
                           "output %.400s (JSON cannot carry it: ask for the output as binary "
                           "data)",
                           why);
    }
    if ((out->body = textbuf_take(&t, &out->body_len)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory for the response");
    return 0;
}

static void write_specs(textbuf *t, const char *key, const oip_tensor_spec *specs, size_t n,
                        tetris_error *err)
{
    textbuf_printf(t, ",\"%s\":[", key);
    for (size_t i = 0; i < n; i++) {
        textbuf_puts(t, i > 0 ? ",{\"name\":" : "{\"name\":");
        if (oip_write_json_string(t, specs[i].name, strlen(specs[i].name), err) < 0)
            t->failed = true;
        textbuf_printf(t, ",\"datatype\":\"%s\",\"shape\":[", oip_datatype_name(specs[i].datatype));
        for (size_t k = 0; k < specs[i].ndim; k++)
            textbuf_printf(t, "%s%" PRId64, k > 0 ? "," : "", specs[i].shape[k]);
        textbuf_puts(t, "]}");
    }
    textbuf_puts(t, "]");
}

char *oip_response_model_metadata(const char *name, const char *version, const oip_signature *sig,
                                  size_t *len)
{
    textbuf t = {0};
    tetris_error err;
    textbuf_puts(&t, "{\"name\":");
    if (oip_write_json_string(&t, name, strlen(name), &err) < 0)
        t.failed = true;
    if (version != NULL) {
        textbuf_puts(&t, ",\"versions\":[");
        if (oip_write_json_string(&t, version, strlen(version), &err) < 0)
            t.failed = true;
        textbuf_puts(&t, "]");
    }
    textbuf_puts(&t, ",\"platform\":\"" OIP_PLATFORM "\"");
    write_specs(&t, "inputs", sig->inputs, sig->n_inputs, &err);
    write_specs(&t, "outputs", sig->outputs, sig->n_outputs, &err);
    textbuf_puts(&t, "}");
    return textbuf_take(&t, len);
}

char *oip_response_server_metadata(const char *version, size_t *len)
{
    textbuf t = {0};
    tetris_error err;
    textbuf_puts(&t, "{\"name\":\"" OIP_SERVER_NAME "\",\"version\":");
    if (oip_write_json_string(&t, version, strlen(version), &err) < 0)
        t.failed = true;
    textbuf_puts(&t, ",\"extensions\":[\"" OIP_EXTENSION_BINARY "\"]}");
    return textbuf_take(&t, len);
}
