/* kube_yaml.c - Kubernetes objects (jansson) as a YAML stream for
 * `kubectl apply -f -` (see kube.h). The objects are built once, as the API
 * takes them; this only changes their spelling. */
#include "common/kube.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <yaml.h>

static int emit(yaml_emitter_t *e, yaml_event_t *ev, tetris_error *err)
{
    if (!yaml_emitter_emit(e, ev))
        return tetris_fail(err, TETRIS_E_IO, errno, "write YAML: %s",
                           e->problem ? e->problem : "emitter error");
    return 0;
}

static int emit_scalar(yaml_emitter_t *e, const char *s, yaml_scalar_style_t style,
                       tetris_error *err)
{
    yaml_event_t ev;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1,
                                      style))
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "write YAML");
    return emit(e, &ev, err);
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
        if ((rc = emit(e, &ev, err)) < 0)
            return rc;
        json_object_foreach(v, key, item) {
            if ((rc = emit_scalar(e, key, YAML_PLAIN_SCALAR_STYLE, err)) < 0 ||
                (rc = emit_value(e, item, err)) < 0)
                return rc;
        }
        yaml_mapping_end_event_initialize(&ev);
        return emit(e, &ev, err);
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *item;
        yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
        if ((rc = emit(e, &ev, err)) < 0)
            return rc;
        json_array_foreach(v, i, item) {
            if ((rc = emit_value(e, item, err)) < 0)
                return rc;
        }
        yaml_sequence_end_event_initialize(&ev);
        return emit(e, &ev, err);
    }
    case JSON_STRING: {
        const char *s = json_string_value(v);
        return emit_scalar(e, s,
                           plain_is_string(s) ? YAML_PLAIN_SCALAR_STYLE
                                              : YAML_DOUBLE_QUOTED_SCALAR_STYLE,
                           err);
    }
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return emit_scalar(e, num, YAML_PLAIN_SCALAR_STYLE, err);
    case JSON_REAL:
        snprintf(num, sizeof num, "%.17g", json_real_value(v));
        return emit_scalar(e, num, YAML_PLAIN_SCALAR_STYLE, err);
    case JSON_TRUE:
        return emit_scalar(e, "true", YAML_PLAIN_SCALAR_STYLE, err);
    case JSON_FALSE:
        return emit_scalar(e, "false", YAML_PLAIN_SCALAR_STYLE, err);
    case JSON_NULL:
        return emit_scalar(e, "null", YAML_PLAIN_SCALAR_STYLE, err);
    }
    return tetris_fail(err, TETRIS_E_INVAL, 0, "write YAML: unknown JSON type");
}

static int emit_stream(yaml_emitter_t *e, json_t *objects, tetris_error *err)
{
    yaml_event_t ev;
    size_t i;
    json_t *obj;
    int rc;
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    if ((rc = emit(e, &ev, err)) < 0)
        return rc;
    json_array_foreach(objects, i, obj) {
        /* "---" between documents, not before the first. */
        yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, i == 0);
        if ((rc = emit(e, &ev, err)) < 0 || (rc = emit_value(e, obj, err)) < 0)
            return rc;
        yaml_document_end_event_initialize(&ev, 1);
        if ((rc = emit(e, &ev, err)) < 0)
            return rc;
    }
    yaml_stream_end_event_initialize(&ev);
    return emit(e, &ev, err);
}

int kube_write_yaml(FILE *out, json_t *objects, tetris_error *err)
{
    if (!json_is_array(objects))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "write YAML: not an array of objects");
    yaml_emitter_t e;
    if (!yaml_emitter_initialize(&e))
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "write YAML");
    yaml_emitter_set_output_file(&e, out);
    yaml_emitter_set_unicode(&e, 1);
    yaml_emitter_set_width(&e, -1);
    int rc = emit_stream(&e, objects, err);
    if (rc == 0 && !yaml_emitter_flush(&e))
        rc = tetris_fail(err, TETRIS_E_IO, errno, "write YAML");
    yaml_emitter_delete(&e);
    if (rc == 0 && (fflush(out) != 0 || ferror(out)))
        rc = tetris_fail(err, TETRIS_E_IO, errno, "write YAML");
    return rc;
}
