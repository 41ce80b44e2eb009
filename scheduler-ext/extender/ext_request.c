/* ext_request.c - a one-pass, tree-less reader of ExtenderArgs (see
 * ext_request.h): a strict JSON scanner that keeps spans of the values it
 * needs. */
#include "scheduler-ext/extender/ext_request.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/textbuf.h"

/* Deeper than any Pod; jansson's own limit is 2048. */
#define MAX_DEPTH 512
#define KEY_CAP 16 /* longer keys match none of ours */

typedef struct scan {
    const char *p, *end;
} scan;

static void skip_ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Length of the well-formed UTF-8 sequence at p (no overlongs, surrogates
 * or code points past U+10FFFF); 0 when there is none. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : 2;
    if (p[0] < 0xc2 || p[0] > 0xf4 || (size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
        return 0;
    return n;
}

static void put(char *out, size_t cap, size_t *len, const char *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++, (*len)++)
        if (out != NULL && *len < cap)
            out[*len] = bytes[i];
}

/* A string at s->p ('"'): checked, and decoded into out (up to cap bytes;
 * out may be NULL); *len is the whole decoded length. A NUL (\u0000) is
 * refused, as jansson does. */
static bool scan_string(scan *s, char *out, size_t cap, size_t *len)
{
    *len = 0;
    s->p++;
    while (s->p < s->end) {
        /* Most text is plain ASCII: take it a run at a time. */
        const char *run = s->p;
        while (s->p < s->end && (unsigned char)*s->p >= 0x20 && (unsigned char)*s->p < 0x80 &&
               *s->p != '"' && *s->p != '\\')
            s->p++;
        if (out != NULL && *len < cap)
            memcpy(out + *len, run,
                   (size_t)(s->p - run) < cap - *len ? (size_t)(s->p - run) : cap - *len);
        *len += (size_t)(s->p - run);
        if (s->p == s->end)
            break;
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c >= 0x80) {
            size_t n = utf8_len((const unsigned char *)s->p, (const unsigned char *)s->end);
            if (n == 0)
                return false;
            put(out, cap, len, s->p, n);
            s->p += n;
            continue;
        }
        if (s->end - s->p < 2)
            return false;
        char e = s->p[1], b;
        s->p += 2;
        switch (e) {
        case '"': b = '"'; break;
        case '\\': b = '\\'; break;
        case '/': b = '/'; break;
        case 'b': b = '\b'; break;
        case 'f': b = '\f'; break;
        case 'n': b = '\n'; break;
        case 'r': b = '\r'; break;
        case 't': b = '\t'; break;
        case 'u': b = 0; break;
        default: return false;
        }
        if (e != 'u') {
            put(out, cap, len, &b, 1);
            continue;
        }
        int u = s->end - s->p >= 4 ? hex4(s->p) : -1;
        if (u <= 0 || (u >= 0xdc00 && u <= 0xdfff))
            return false;
        s->p += 4;
        uint32_t cp = (uint32_t)u;
        if (u >= 0xd800 && u <= 0xdbff) {
            int lo = s->end - s->p >= 6 && s->p[0] == '\\' && s->p[1] == 'u' ? hex4(s->p + 2) : -1;
            if (lo < 0xdc00 || lo > 0xdfff)
                return false;
            s->p += 6;
            cp = 0x10000 + (((uint32_t)u - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
        }
        char enc[4];
        size_t n;
        if (cp < 0x80) {
            enc[0] = (char)cp;
            n = 1;
        } else if (cp < 0x800) {
            enc[0] = (char)(0xc0 | cp >> 6);
            enc[1] = (char)(0x80 | (cp & 0x3f));
            n = 2;
        } else if (cp < 0x10000) {
            enc[0] = (char)(0xe0 | cp >> 12);
            enc[1] = (char)(0x80 | (cp >> 6 & 0x3f));
            enc[2] = (char)(0x80 | (cp & 0x3f));
            n = 3;
        } else {
            enc[0] = (char)(0xf0 | cp >> 18);
            enc[1] = (char)(0x80 | (cp >> 12 & 0x3f));
            enc[2] = (char)(0x80 | (cp >> 6 & 0x3f));
            enc[3] = (char)(0x80 | (cp & 0x3f));
            n = 4;
        }
        put(out, cap, len, enc, n);
    }
    return false;
}

static bool is_digit(const scan *s)
{
    return s->p < s->end && *s->p >= '0' && *s->p <= '9';
}

static bool scan_number(scan *s)
{
    if (s->p < s->end && *s->p == '-')
        s->p++;
    if (!is_digit(s))
        return false;
    if (*s->p++ != '0')
        while (is_digit(s))
            s->p++;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!is_digit(s))
            return false;
        while (is_digit(s))
            s->p++;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (!is_digit(s))
            return false;
        while (is_digit(s))
            s->p++;
    }
    return true;
}

static bool scan_literal(scan *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return false;
    s->p += n;
    return true;
}

static bool scan_value(scan *s, int depth);

/* A callback that reads an object member's value (key given) or an array
 * element at s->p, checking it as scan_value does; false when malformed. */
typedef bool (*member_fn)(void *user, scan *s, int depth, const char *key, size_t key_len);
typedef bool (*element_fn)(void *user, scan *s, int depth);

static bool scan_object(scan *s, int depth, member_fn fn, void *user)
{
    if (depth > MAX_DEPTH)
        return false;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return true;
    }
    for (;;) {
        char key[KEY_CAP];
        size_t key_len;
        if (s->p >= s->end || *s->p != '"' || !scan_string(s, key, sizeof key, &key_len))
            return false;
        skip_ws(s);
        if (s->p >= s->end || *s->p++ != ':')
            return false;
        skip_ws(s);
        if (!(fn != NULL ? fn(user, s, depth + 1, key, key_len) : scan_value(s, depth + 1)))
            return false;
        skip_ws(s);
        if (s->p >= s->end)
            return false;
        if (*s->p == '}') {
            s->p++;
            return true;
        }
        if (*s->p++ != ',')
            return false;
        skip_ws(s);
    }
}

static bool scan_array(scan *s, int depth, element_fn fn, void *user)
{
    if (depth > MAX_DEPTH)
        return false;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return true;
    }
    for (;;) {
        if (!(fn != NULL ? fn(user, s, depth + 1) : scan_value(s, depth + 1)))
            return false;
        skip_ws(s);
        if (s->p >= s->end)
            return false;
        if (*s->p == ']') {
            s->p++;
            return true;
        }
        if (*s->p++ != ',')
            return false;
        skip_ws(s);
    }
}

static bool scan_value(scan *s, int depth)
{
    size_t len;
    if (s->p >= s->end)
        return false;
    switch (*s->p) {
    case '{': return scan_object(s, depth, NULL, NULL);
    case '[': return scan_array(s, depth, NULL, NULL);
    case '"': return scan_string(s, NULL, 0, &len);
    case 't': return scan_literal(s, "true");
    case 'f': return scan_literal(s, "false");
    case 'n': return scan_literal(s, "null");
    default: return scan_number(s);
    }
}

/* ---- ExtenderArgs, in the one pass that checks it ----
 * A key the decoder would take may occur more than once: an exact match
 * beats a case-insensitive one and the last of either kind wins, so each
 * is kept per kind until the end. */

enum { MATCH_NONE, MATCH_FOLDED, MATCH_EXACT };

static int key_match(const char *key, size_t key_len, const char *want, bool fold)
{
    size_t n = strlen(want);
    if (key_len != n || key_len >= KEY_CAP)
        return MATCH_NONE;
    if (memcmp(key, want, n) == 0)
        return MATCH_EXACT;
    return fold && strncasecmp(key, want, n) == 0 ? MATCH_FOLDED : MATCH_NONE;
}

/* The nodes of one list: each element's text and its name's (a JSON value,
 * text NULL when it has none). */
typedef struct node_list {
    ext_span *items, *names;
    size_t n, cap;
    bool nomem;
} node_list;

static void list_free(node_list *l)
{
    free(l->items);
    free(l->names);
    memset(l, 0, sizeof *l);
}

/* One occurrence of a key: its value, and the list read from it. */
typedef struct occurrence {
    bool seen;
    ext_span value;
    bool list_ok; /* Nodes: an object whose items are an array; NodeNames: an array */
    node_list list;
} occurrence;

/* Keeps o as the kind's latest occurrence. */
static void keep(occurrence by_kind[2], int match, occurrence *o)
{
    occurrence *slot = &by_kind[match == MATCH_EXACT ? 0 : 1];
    list_free(&slot->list);
    *slot = *o;
    slot->seen = true;
}

static occurrence *chosen(occurrence by_kind[2])
{
    return by_kind[0].seen ? &by_kind[0] : by_kind[1].seen ? &by_kind[1] : NULL;
}

static void drop(occurrence by_kind[2])
{
    list_free(&by_kind[0].list);
    list_free(&by_kind[1].list);
}

static bool list_push(node_list *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        ext_span *items = realloc(l->items, cap * sizeof *items);
        if (items != NULL)
            l->items = items;
        ext_span *names = items != NULL ? realloc(l->names, cap * sizeof *names) : NULL;
        if (names != NULL)
            l->names = names;
        if (items == NULL || names == NULL) {
            l->nomem = true;
            return false;
        }
        l->cap = cap;
    }
    l->items[l->n] = l->names[l->n] = (ext_span){0};
    l->n++;
    return true;
}

/* The element being read: metadata.name of a Node. */
typedef struct item_ctx {
    node_list *l;
    size_t i;
} item_ctx;

static bool meta_member(void *user, scan *s, int depth, const char *key, size_t key_len)
{
    item_ctx *c = user;
    ext_span v = {s->p, 0};
    if (!scan_value(s, depth))
        return false;
    v.len = (size_t)(s->p - v.text);
    if (key_match(key, key_len, "name", false) == MATCH_EXACT)
        c->l->names[c->i] = v;
    return true;
}

static bool item_member(void *user, scan *s, int depth, const char *key, size_t key_len)
{
    item_ctx *c = user;
    if (key_match(key, key_len, "metadata", false) != MATCH_EXACT)
        return scan_value(s, depth);
    c->l->names[c->i] = (ext_span){0}; /* the last metadata counts */
    return *s->p == '{' ? scan_object(s, depth, meta_member, c) : scan_value(s, depth);
}

static bool node_element(void *user, scan *s, int depth)
{
    node_list *l = user;
    if (!list_push(l))
        return scan_value(s, depth);
    item_ctx c = {l, l->n - 1};
    const char *start = s->p;
    bool ok = *s->p == '{' ? scan_object(s, depth, item_member, &c) : scan_value(s, depth);
    l->items[c.i] = (ext_span){start, (size_t)(s->p - start)};
    return ok;
}

static bool name_element(void *user, scan *s, int depth)
{
    node_list *l = user;
    const char *start = s->p;
    if (!scan_value(s, depth))
        return false;
    if (list_push(l))
        l->names[l->n - 1] = (ext_span){start, (size_t)(s->p - start)};
    return true;
}

/* A NodeList's items, of each kind. */
typedef struct nodes_ctx {
    occurrence items[2];
} nodes_ctx;

static bool nodes_member(void *user, scan *s, int depth, const char *key, size_t key_len)
{
    nodes_ctx *c = user;
    int m = key_match(key, key_len, "items", true);
    if (m == MATCH_NONE)
        return scan_value(s, depth);
    occurrence o = {.value = {s->p, 0}, .list_ok = *s->p == '['};
    bool ok = o.list_ok ? scan_array(s, depth, node_element, &o.list) : scan_value(s, depth);
    keep(c->items, m, &o);
    return ok;
}

typedef struct args_ctx {
    occurrence pod[2], nodes[2], names[2];
} args_ctx;

static bool args_member(void *user, scan *s, int depth, const char *key, size_t key_len)
{
    args_ctx *c = user;
    occurrence o = {.value = {s->p, 0}};
    bool ok;
    int m;
    if ((m = key_match(key, key_len, "Nodes", true)) != MATCH_NONE) {
        nodes_ctx n = {0};
        ok = *s->p == '{' ? scan_object(s, depth, nodes_member, &n) : scan_value(s, depth);
        occurrence *items = chosen(n.items);
        if (items != NULL && items->list_ok) {
            o.list_ok = true;
            o.list = items->list;
            items->list = (node_list){0};
        }
        drop(n.items);
        o.value.len = (size_t)(s->p - o.value.text);
        keep(c->nodes, m, &o);
    } else if ((m = key_match(key, key_len, "NodeNames", true)) != MATCH_NONE) {
        o.list_ok = *s->p == '[';
        ok = o.list_ok ? scan_array(s, depth, name_element, &o.list) : scan_value(s, depth);
        o.value.len = (size_t)(s->p - o.value.text);
        keep(c->names, m, &o);
    } else {
        m = key_match(key, key_len, "Pod", true);
        ok = scan_value(s, depth);
        o.value.len = (size_t)(s->p - o.value.text);
        if (m != MATCH_NONE)
            keep(c->pod, m, &o);
    }
    return ok;
}

static bool is_null(const occurrence *o)
{
    return o == NULL || (o->value.len == 4 && memcmp(o->value.text, "null", 4) == 0);
}

static int nomem(ext_request *r, tetris_error *err)
{
    ext_request_clear(r);
    return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "extender request");
}

/* Takes list's nodes into r: names decoded into the arena. */
static int take_nodes(ext_request *r, node_list *l, size_t body_len, tetris_error *err)
{
    r->n = l->n;
    r->names = calloc(l->n ? l->n : 1, sizeof *r->names);
    r->arena = malloc(body_len + 1);
    if (r->names == NULL || r->arena == NULL)
        return nomem(r, err);
    if (!r->by_name) {
        r->items = l->items;
        l->items = NULL;
    }
    size_t used = 0;
    for (size_t i = 0; i < l->n; i++) {
        ext_span name = l->names[i];
        if (name.text == NULL || name.text[0] != '"' || name.len <= 2) {
            ext_request_clear(r);
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "node %zu has no name", i);
        }
        /* A decoded name is shorter than its quoted text: the arena, as
         * long as the body, holds them all. */
        char *out = r->arena + used;
        size_t len;
        scan s = {name.text, name.text + name.len};
        scan_string(&s, out, name.len, &len);
        out[len] = '\0';
        used += len + 1;
        r->names[i] = out;
    }
    return 0;
}

int ext_request_parse(const char *body, size_t len, ext_request *r, tetris_error *err)
{
    memset(r, 0, sizeof *r);
    args_ctx c = {0};
    scan s = {body, body + len};
    skip_ws(&s);
    bool is_object = s.p < s.end && *s.p == '{';
    bool ok = is_object ? scan_object(&s, 0, args_member, &c) : scan_value(&s, 0);
    skip_ws(&s);
    occurrence *pod = chosen(c.pod), *nodes = chosen(c.nodes), *names = chosen(c.names);
    int rc = 0;
    if (!ok || s.p != s.end)
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "request is not JSON (at byte %zu)",
                         (size_t)(s.p - body));
    else if (!is_object)
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "ExtenderArgs must be a JSON object");
    else if (pod == NULL || pod->value.text[0] != '{')
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "ExtenderArgs.Pod must be a Pod object");
    else if (!is_null(nodes) && !nodes->list_ok)
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0,
                         "ExtenderArgs.Nodes must be a NodeList with items");
    else if (is_null(nodes) && !is_null(names) && !names->list_ok)
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0,
                         "ExtenderArgs.NodeNames must be an array of strings");
    else if (is_null(nodes) && is_null(names))
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "ExtenderArgs needs Nodes or NodeNames");
    node_list *list = rc < 0 ? NULL : !is_null(nodes) ? &nodes->list : &names->list;
    if (list != NULL && list->nomem)
        rc = nomem(r, err);
    if (rc == 0) {
        r->by_name = is_null(nodes);
        json_error_t jerr;
        r->pod = json_loadb(pod->value.text, pod->value.len, 0, &jerr);
        rc = r->pod != NULL ? take_nodes(r, list, len, err) : nomem(r, err);
    }
    drop(c.nodes);
    drop(c.names);
    return rc;
}

void ext_request_clear(ext_request *r)
{
    json_decref(r->pod);
    free(r->names);
    free(r->items);
    free(r->arena);
    memset(r, 0, sizeof *r);
}

void ext_json_string(textbuf *t, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    textbuf_append(t, "\"", 1);
    const char *run = s;
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        textbuf_append(t, run, (size_t)(s - run));
        char esc[6] = {'\\', (char)c, 0, 0, 0, 0};
        size_t n = 2;
        if (c < 0x20) {
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            n = 6;
        }
        textbuf_append(t, esc, n);
        run = s + 1;
    }
    textbuf_append(t, run, (size_t)(s - run));
    textbuf_append(t, "\"", 1);
}
