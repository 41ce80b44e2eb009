/* ext_request.h - reads an ExtenderArgs request body without building a
 * JSON tree of it.
 *
 * kube-scheduler sends every node of the cycle in each request; in the full
 * Nodes form that is megabytes of Node objects of which the extender needs
 * one field. A tree of them costs more than the decision itself, so the
 * body is checked in one pass (strict RFC 8259, as jansson would), the node
 * names are copied out, each Node's text is remembered as a span of the
 * body (so the filter's reply echoes the passing Nodes verbatim), and only
 * the Pod is parsed into a tree. Keys are matched as Go's decoder does: an
 * exact match first, else a case-insensitive one; the last duplicate
 * wins. */
#ifndef TETRIS_EXT_REQUEST_H
#define TETRIS_EXT_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/error.h"
#include "common/textbuf.h"

typedef struct ext_span {
    const char *text; /* into the body */
    size_t len;
} ext_span;

typedef struct ext_request {
    json_t *pod;        /* the Pod object */
    bool by_name;       /* NodeNames form; else Nodes */
    size_t n;           /* nodes */
    const char **names; /* n non-empty names (in arena) */
    ext_span *items;    /* Nodes form: each Node's text; else NULL */
    char *arena;
} ext_request;

/* Reads body (len bytes; need not be NUL-terminated). TETRIS_E_FORMAT with
 * the reason for anything that is not an ExtenderArgs with a Pod object and
 * named nodes; TETRIS_E_NOMEM. The spans point into body, which must
 * outlive r. */
int ext_request_parse(const char *body, size_t len, ext_request *r, tetris_error *err);
void ext_request_clear(ext_request *r);

/* Appends s to t as a JSON string (quoted, escaped). */
void ext_json_string(textbuf *t, const char *s);

#endif
