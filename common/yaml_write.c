/* yaml_write.c - libyaml's emitter with tetris_errors, and JSON values as
 * YAML documents (see yaml_write.h). Kubernetes objects are built once, as
 * jansson values the API takes; this only changes their spelling. */
#include "common/yaml_write.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

int yaml_write_event(yaml_emitter_t *e, yaml_event_t *ev, tetris_error *err)
{
    if (!yaml_emitter_emit(e, ev))
        return tetris_fail(err, TETRIS_E_IO, errno, "write YAML: %s",
                           e->problem ? e->problem : "emitter error");
    return 0;
}

int yaml_write_scalar(yaml_emitter_t *e, const char *s, yaml_scalar_style_t style,
                      tetris_error *err)
{
    yaml_event_t ev;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1,
                                      style))
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "write YAML");
    return yaml_write_event(e, &ev, err);
}

/* Whether s reads back as the same string when written plain. YAML 1.1
 * (what kubectl parses) reads yes/no/on/off as booleans and anything
 * starting with a digit, sign or dot may be a number: those are quoted. */
static bool plain_is_string(const char *s)
{
    static const char *const words[] = {"y",     "Y",     "yes",  "Yes",  "YES",  "n",    "N",
                                        "no",    "No",    "NO",   "true", "True", "TRUE", "false",
                                        "False", "FALSE", "on",   "On",   "ON",   "off",  "Off",
                                        "OFF",   "null",  "Null", "NULL"};
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '/'))
        return false;
    for (const char *p = s; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              strchr("_./-", *p) != NULL))
            return false;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcmp(s, words[i]) == 0)
            return false;
    return true;
}

static int emit_value(yaml_emitter_t *e, json_t *v, tetris_error *err)
{
    yaml_event_t ev;
    char num[64];
    int rc;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *item;
        yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
        if ((rc = yaml_write_event(e, &ev, err)) < 0)
            return rc;
        json_object_foreach(v, key, item) {
            if ((rc = yaml_write_scalar(e, key, YAML_PLAIN_SCALAR_STYLE, err)) < 0 ||
                (rc = emit_value(e, item, err)) < 0)
                return rc;
        }
        yaml_mapping_end_event_initialize(&ev);
        return yaml_write_event(e, &ev, err);
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *item;
        yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
        if ((rc = yaml_write_event(e, &ev, err)) < 0)
            return rc;
        json_array_foreach(v, i, item) {
            if ((rc = emit_value(e, item, err)) < 0)
                return rc;
        }
        yaml_sequence_end_event_initialize(&ev);
        return yaml_write_event(e, &ev, err);
    }
    case JSON_STRING: {
        const char *s = json_string_value(v);
        return yaml_write_scalar(e, s,
                                 plain_is_string(s) ? YAML_PLAIN_SCALAR_STYLE
                                                    : YAML_DOUBLE_QUOTED_SCALAR_STYLE,
                                 err);
    }
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return yaml_write_scalar(e, num, YAML_PLAIN_SCALAR_STYLE, err);
    case JSON_REAL:
        snprintf(num, sizeof num, "%.17g", json_real_value(v));
        return yaml_write_scalar(e, num, YAML_PLAIN_SCALAR_STYLE, err);
    case JSON_TRUE: return yaml_write_scalar(e, "true", YAML_PLAIN_SCALAR_STYLE, err);
    case JSON_FALSE: return yaml_write_scalar(e, "false", YAML_PLAIN_SCALAR_STYLE, err);
    case JSON_NULL: return yaml_write_scalar(e, "null", YAML_PLAIN_SCALAR_STYLE, err);
    }
    return tetris_fail(err, TETRIS_E_INVAL, 0, "write YAML: unknown JSON type");
}

int yaml_write_stream(FILE *out, int width, yaml_write_fn body, void *ctx, tetris_error *err)
{
    yaml_emitter_t e;
    yaml_event_t ev;
    if (!yaml_emitter_initialize(&e))
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "write YAML");
    yaml_emitter_set_output_file(&e, out);
    yaml_emitter_set_unicode(&e, 1);
    yaml_emitter_set_width(&e, width);
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    int rc = yaml_write_event(&e, &ev, err);
    if (rc == 0)
        rc = body(&e, ctx, err);
    if (rc == 0) {
        yaml_stream_end_event_initialize(&ev);
        rc = yaml_write_event(&e, &ev, err);
    }
    if (rc == 0 && !yaml_emitter_flush(&e))
        rc = tetris_fail(err, TETRIS_E_IO, errno, "write YAML");
    yaml_emitter_delete(&e);
    if (rc == 0 && (fflush(out) != 0 || ferror(out)))
        rc = tetris_fail(err, TETRIS_E_IO, errno, "write YAML");
    return rc;
}

static int emit_documents(yaml_emitter_t *e, void *ctx, tetris_error *err)
{
    yaml_event_t ev;
    size_t i;
    json_t *value;
    int rc;
    json_array_foreach((json_t *)ctx, i, value) {
        /* "---" between documents, not before the first. */
        yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, i == 0);
        if ((rc = yaml_write_event(e, &ev, err)) < 0 || (rc = emit_value(e, value, err)) < 0)
            return rc;
        yaml_document_end_event_initialize(&ev, 1);
        if ((rc = yaml_write_event(e, &ev, err)) < 0)
            return rc;
    }
    return 0;
}

int yaml_write_json_documents(FILE *out, json_t *values, tetris_error *err)
{
    if (!json_is_array(values))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "write YAML: not an array of values");
    return yaml_write_stream(out, -1, emit_documents, values, err);
}
