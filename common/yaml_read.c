/* yaml_read.c - YAML text to a jansson tree with libyaml's event parser
 * (see yaml_read.h for the tree and its limits).
 *
 * The tree is built by recursive descent over the events, one call per
 * collection, so YAML_READ_MAX_DEPTH bounds the recursion. libyaml is run
 * to its stream end even after the document, so a syntax error or a second
 * document anywhere in the text is found. Positions are recorded as nodes
 * are made and sorted by node address once the tree is complete, so a
 * lookup is a binary search. */
#include "common/yaml_read.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "common/utf8.h"

/* One node's place: where it starts and, for a mapping's value, where its
 * key starts. */
struct mark {
    const json_t *node;
    yaml_read_pos at, key_at;
};

struct yaml_read_marks {
    struct mark *v;
    size_t n, cap;
};

/* What one read needs: the parser, the text for reader errors (which come
 * with a byte offset, not a line), the name and the marks being built
 * (NULL when the caller wants none). */
typedef struct reader {
    yaml_parser_t parser;
    const char *text;
    size_t len;
    const char *what;
    yaml_read_marks *marks;
    tetris_error *err;
} reader;

static int read_stream(reader *r, json_t **out);
static int read_node(reader *r, yaml_event_t *ev, int depth, const yaml_mark_t *key_at,
                     json_t **out);
static int read_collection(reader *r, bool mapping, int depth, json_t *node);
static int read_entry(reader *r, json_t *map, yaml_event_t *key_ev, int depth);
static int next_event(reader *r, yaml_event_t *ev);
static int fail_at(reader *r, yaml_mark_t mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_nomem(reader *r);
static int add_mark(reader *r, const json_t *node, yaml_mark_t at, const yaml_mark_t *key_at);
static const struct mark *find_mark(const yaml_read_marks *marks, const json_t *node);
static int compare_marks(const void *a, const void *b);

int yaml_read_json(const char *text, size_t len, const char *what, json_t **out,
                   yaml_read_marks **marks, tetris_error *err)
{
    reader r = {.text = text, .len = len, .what = what, .err = err};
    if (marks != NULL) {
        r.marks = calloc(1, sizeof *r.marks);
        if (r.marks == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: YAML", what);
    }
    if (!yaml_parser_initialize(&r.parser)) {
        yaml_read_marks_free(r.marks);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: YAML parser", what);
    }
    yaml_parser_set_input_string(&r.parser, (const unsigned char *)text, len);
    json_t *root = NULL;
    int rc = read_stream(&r, &root);
    yaml_parser_delete(&r.parser);
    if (rc < 0) {
        json_decref(root);
        yaml_read_marks_free(r.marks);
        return rc;
    }
    if (r.marks != NULL) {
        if (r.marks->n > 0) /* no nodes: v is NULL, which qsort may not take */
            qsort(r.marks->v, r.marks->n, sizeof *r.marks->v, compare_marks);
        *marks = r.marks;
    }
    *out = root;
    return 0;
}

yaml_read_pos yaml_read_pos_of(const yaml_read_marks *marks, const json_t *node)
{
    const struct mark *m = find_mark(marks, node);
    return m != NULL ? m->at : (yaml_read_pos){0, 0};
}

yaml_read_pos yaml_read_key_pos_of(const yaml_read_marks *marks, const json_t *value)
{
    const struct mark *m = find_mark(marks, value);
    return m != NULL ? m->key_at : (yaml_read_pos){0, 0};
}

void yaml_read_marks_free(yaml_read_marks *marks)
{
    if (marks == NULL)
        return;
    free(marks->v);
    free(marks);
}

/* The whole stream: at most one document, whose root lands in *out (left
 * for the caller to release on failure). */
static int read_stream(reader *r, json_t **out)
{
    int documents = 0;
    for (;;) {
        yaml_event_t ev;
        int rc = next_event(r, &ev);
        if (rc < 0)
            return rc;
        if (ev.type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            return 0;
        }
        if (ev.type == YAML_DOCUMENT_START_EVENT && ++documents > 1) {
            rc = fail_at(r, ev.start_mark, "more than one document");
            yaml_event_delete(&ev);
            return rc;
        }
        if (ev.type == YAML_SCALAR_EVENT || ev.type == YAML_SEQUENCE_START_EVENT ||
            ev.type == YAML_MAPPING_START_EVENT || ev.type == YAML_ALIAS_EVENT) {
            /* The parser gives one root per document, one document. */
            rc = read_node(r, &ev, 0, NULL, out);
            if (rc < 0)
                return rc;
        } else { /* stream start, document start and end */
            yaml_event_delete(&ev);
        }
    }
}

/* The node that starts with ev (taken here) inside depth collections;
 * key_at: where its key starts when it is a mapping's value, else NULL. */
static int read_node(reader *r, yaml_event_t *ev, int depth, const yaml_mark_t *key_at,
                     json_t **out)
{
    int rc = 0;
    json_t *node = NULL;
    const yaml_char_t *anchor = NULL;
    if (ev->type == YAML_SCALAR_EVENT)
        anchor = ev->data.scalar.anchor;
    else if (ev->type == YAML_SEQUENCE_START_EVENT)
        anchor = ev->data.sequence_start.anchor;
    else if (ev->type == YAML_MAPPING_START_EVENT)
        anchor = ev->data.mapping_start.anchor;

    if (ev->type == YAML_ALIAS_EVENT || anchor != NULL) {
        rc = fail_at(r, ev->start_mark, "anchors and aliases are not supported");
    } else if (ev->type == YAML_SCALAR_EVENT) {
        const char *s = (const char *)ev->data.scalar.value;
        size_t n = ev->data.scalar.length;
        if (memchr(s, '\0', n) != NULL)
            rc = fail_at(r, ev->start_mark, "a scalar holds a NUL character");
        else if (!utf8_valid(s, n))
            rc = fail_at(r, ev->start_mark, "a scalar is not valid UTF-8");
        else if ((node = json_stringn(s, n)) == NULL)
            rc = fail_nomem(r);
    } else if (depth >= YAML_READ_MAX_DEPTH) {
        rc = fail_at(r, ev->start_mark, "nested more than %d deep", YAML_READ_MAX_DEPTH);
    } else {
        bool mapping = ev->type == YAML_MAPPING_START_EVENT;
        node = mapping ? json_object() : json_array();
        if (node == NULL)
            rc = fail_nomem(r);
    }
    if (rc == 0)
        rc = add_mark(r, node, ev->start_mark, key_at);
    if (rc == 0 && !json_is_string(node))
        rc = read_collection(r, json_is_object(node), depth + 1, node);
    yaml_event_delete(ev);
    if (rc < 0) {
        json_decref(node);
        return rc;
    }
    *out = node;
    return 0;
}

/* The entries of node (an empty object or array, made for a collection's
 * start event) up to the collection's end event. */
static int read_collection(reader *r, bool mapping, int depth, json_t *node)
{
    for (;;) {
        yaml_event_t ev;
        int rc = next_event(r, &ev);
        if (rc < 0)
            return rc;
        if (ev.type == YAML_MAPPING_END_EVENT || ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return 0;
        }
        if (mapping) {
            rc = read_entry(r, node, &ev, depth);
        } else {
            json_t *item = NULL;
            rc = read_node(r, &ev, depth, NULL, &item);
            if (rc == 0 && json_array_append_new(node, item) < 0)
                rc = fail_nomem(r);
        }
        if (rc < 0)
            return rc;
    }
}

/* One mapping entry: key_ev (taken here) and the value that follows. */
static int read_entry(reader *r, json_t *map, yaml_event_t *key_ev, int depth)
{
    yaml_mark_t key_at = key_ev->start_mark;
    int rc = 0;
    char *key = NULL;
    if (key_ev->type == YAML_ALIAS_EVENT ||
        (key_ev->type == YAML_SCALAR_EVENT && key_ev->data.scalar.anchor != NULL)) {
        rc = fail_at(r, key_at, "anchors and aliases are not supported");
    } else if (key_ev->type != YAML_SCALAR_EVENT) {
        rc = fail_at(r, key_at, "a mapping key is not a scalar");
    } else {
        const char *s = (const char *)key_ev->data.scalar.value;
        size_t n = key_ev->data.scalar.length;
        if (memchr(s, '\0', n) != NULL)
            rc = fail_at(r, key_at, "a key holds a NUL character");
        else if (!utf8_valid(s, n))
            rc = fail_at(r, key_at, "a key is not valid UTF-8");
        else if (json_object_get(map, s) != NULL)
            rc = fail_at(r, key_at, "duplicate key '%.100s'", s);
        else if ((key = strdup(s)) == NULL)
            rc = fail_nomem(r);
    }
    yaml_event_delete(key_ev);
    json_t *value = NULL;
    yaml_event_t ev;
    if (rc == 0)
        rc = next_event(r, &ev);
    if (rc == 0)
        rc = read_node(r, &ev, depth, &key_at, &value);
    if (rc == 0 && json_object_set_new(map, key, value) < 0)
        rc = fail_nomem(r);
    free(key);
    return rc;
}

static int next_event(reader *r, yaml_event_t *ev)
{
    if (yaml_parser_parse(&r->parser, ev))
        return 0;
    const yaml_parser_t *p = &r->parser;
    if (p->error == YAML_MEMORY_ERROR)
        return fail_nomem(r);
    const char *problem = p->problem != NULL ? p->problem : "syntax error";
    if (p->error != YAML_READER_ERROR)
        return fail_at(r, p->problem_mark, "%s", problem);
    /* The reader reports a byte offset: count the lines up to it. */
    yaml_mark_t at = {.index = p->problem_offset};
    size_t end = p->problem_offset < r->len ? p->problem_offset : r->len;
    for (size_t i = 0; i < end; i++) {
        if (r->text[i] == '\n') {
            at.line++;
            at.column = 0;
        } else {
            at.column++;
        }
    }
    return fail_at(r, at, "%s", problem);
}

static int fail_at(reader *r, yaml_mark_t mark, const char *fmt, ...)
{
    char problem[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
    return tetris_fail(r->err, TETRIS_E_FORMAT, 0, "%s: YAML: %s at line %zu, column %zu", r->what,
                       problem, mark.line + 1, mark.column + 1);
}

static int fail_nomem(reader *r)
{
    return tetris_fail(r->err, TETRIS_E_NOMEM, ENOMEM, "%s: YAML", r->what);
}

/* Records where node starts and, for a mapping's value, its key. */
static int add_mark(reader *r, const json_t *node, yaml_mark_t at, const yaml_mark_t *key_at)
{
    yaml_read_marks *m = r->marks;
    if (m == NULL)
        return 0;
    if (m->n == m->cap) {
        size_t cap = m->cap != 0 ? 2 * m->cap : 64;
        struct mark *v = realloc(m->v, cap * sizeof *v);
        if (v == NULL)
            return fail_nomem(r);
        m->v = v;
        m->cap = cap;
    }
    m->v[m->n++] = (struct mark){
        .node = node,
        .at = {at.line + 1, at.column + 1},
        .key_at = key_at != NULL ? (yaml_read_pos){key_at->line + 1, key_at->column + 1}
                                 : (yaml_read_pos){0, 0},
    };
    return 0;
}

static const struct mark *find_mark(const yaml_read_marks *marks, const json_t *node)
{
    if (marks->n == 0)
        return NULL;
    struct mark key = {.node = node};
    return bsearch(&key, marks->v, marks->n, sizeof *marks->v, compare_marks);
}

static int compare_marks(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct mark *)a)->node;
    uintptr_t y = (uintptr_t)((const struct mark *)b)->node;
    return (x > y) - (x < y);
}
