/* tenant_map.c - reads the CSI tenant map (tenant_map.h): lines of a
 * namespace, a service account and a store, checked one by one, all or
 * nothing, and answers which store a pod's identity gets; and follows
 * the map's file as it changes. */
#include "reclaimer/csi/tenant_map.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/textbuf.h"
#include "common/fileio.h"
#include "tensorstore/store.h"

/* Kubernetes' limits: a namespace is an RFC 1123 label, a service account
 * an RFC 1123 subdomain. */
#define NAMESPACE_MAX 63
#define SERVICE_ACCOUNT_MAX 253
/* store_tenant_check's bound. */
#define TENANT_MAX 63

struct tenant_rule {
    char ns[NAMESPACE_MAX + 1];       /* or "*" */
    char sa[SERVICE_ACCOUNT_MAX + 1]; /* or "*" */
    char tenant[TENANT_MAX + 1];      /* "" for the shared store */
};

struct tenant_map {
    size_t n;
    struct tenant_rule *rules;
};

/* ---- the fields ---- */

static bool lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* [a-z0-9]([-a-z0-9]*[a-z0-9])?, of 1 to max bytes (dots allowed between
 * labels when subdomain). */
static bool rfc1123(const char *s, size_t max, bool subdomain)
{
    size_t len = strlen(s);
    if (len == 0 || len > max)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool edge = i == 0 || i == len - 1 || (subdomain && (s[i - 1] == '.' || s[i + 1] == '.'));
        if (c == '.' && subdomain && !edge)
            continue;
        if (!lower_alnum(c) && !(c == '-' && !edge))
            return false;
    }
    return true;
}

static int parse_namespace(const char *s, struct tenant_rule *r, tetris_error *err)
{
    if (strcmp(s, TENANT_MAP_ANY) != 0 && !rfc1123(s, NAMESPACE_MAX, false))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "namespace '%.64s' is neither \"*\" nor a namespace name (RFC 1123 "
                           "label: [a-z0-9-], 1 to %d characters)",
                           s, NAMESPACE_MAX);
    strcpy(r->ns, s);
    return 0;
}

static int parse_service_account(const char *s, struct tenant_rule *r, tetris_error *err)
{
    if (strcmp(s, TENANT_MAP_ANY) != 0 && !rfc1123(s, SERVICE_ACCOUNT_MAX, true))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "service account '%.64s' is neither \"*\" nor a service account name "
                           "(RFC 1123 subdomain: [a-z0-9.-], 1 to %d characters)",
                           s, SERVICE_ACCOUNT_MAX);
    if (strcmp(r->ns, TENANT_MAP_ANY) == 0 && strcmp(s, TENANT_MAP_ANY) != 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "service account '%.64s' in any namespace: a service account belongs "
                           "to its namespace, so \"*\" as the namespace takes \"*\" only",
                           s);
    strcpy(r->sa, s);
    return 0;
}

static int parse_store(const char *s, struct tenant_rule *r, tetris_error *err)
{
    size_t prefix = strlen(TENANT_MAP_TENANT_PREFIX);
    r->tenant[0] = '\0';
    if (strcmp(s, TENANT_MAP_SHARED) == 0)
        return 0;
    if (strncmp(s, TENANT_MAP_TENANT_PREFIX, prefix) != 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "store '%.64s' is neither \"" TENANT_MAP_SHARED
                           "\" nor \"" TENANT_MAP_TENANT_PREFIX "NAME\"",
                           s);
    int rc = store_tenant_check(s + prefix, err);
    if (rc < 0)
        return rc;
    strcpy(r->tenant, s + prefix);
    return 0;
}

/* The three fields of one line (comment already cut, not blank), checked;
 * line is modified in place. */
static int parse_fields(char *line, struct tenant_rule *out, tetris_error *err)
{
    char *field[3];
    char *at = line;
    for (int i = 0; i < 3; i++) {
        at += strspn(at, " \t");
        if (*at == '\0')
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "want NAMESPACE SERVICE-ACCOUNT STORE, got %d field%s", i,
                               i == 1 ? "" : "s");
        field[i] = at;
        at += strcspn(at, " \t");
        if (*at != '\0')
            *at++ = '\0';
    }
    if (at[strspn(at, " \t")] != '\0')
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "more than NAMESPACE SERVICE-ACCOUNT STORE on one line");
    int rc = parse_namespace(field[0], out, err);
    if (rc == 0)
        rc = parse_service_account(field[1], out, err);
    if (rc == 0)
        rc = parse_store(field[2], out, err);
    return rc;
}

/* Whatever is wrong with a line is a format error of the file, whichever
 * checker said so. */
static int parse_line(char *line, struct tenant_rule *out, tetris_error *err)
{
    if (parse_fields(line, out, err) == 0)
        return 0;
    err->code = TETRIS_E_FORMAT;
    return -TETRIS_E_FORMAT;
}

static const struct tenant_rule *find_rule(const struct tenant_rule *rules, size_t n,
                                           const char *ns, const char *sa)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rules[i].ns, ns) == 0 && strcmp(rules[i].sa, sa) == 0)
            return &rules[i];
    return NULL;
}

static int grow(struct tenant_rule **list, size_t n, size_t *cap, tetris_error *err)
{
    if (n < *cap)
        return 0;
    size_t want = *cap ? *cap * 2 : 16;
    struct tenant_rule *l = realloc(*list, want * sizeof(*l));
    if (l == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "tenant map of %zu rules", want);
    *list = l;
    *cap = want;
    return 0;
}

/* ---- the map ---- */

int tenant_map_parse(const char *text, size_t len, const char *name, tenant_map **out,
                     tetris_error *err)
{
    cleanup_free struct tenant_rule *rules = NULL;
    size_t n = 0, cap = 0;
    int lineno = 0;
    size_t at = 0;
    char line[TENANT_MAP_LINE_MAX + 1];
    int got;
    while ((got = text_next_line(text, len, &at, &lineno, line, TENANT_MAP_LINE_MAX, name, err)) >
           0) {
        if (n == TENANT_MAP_MAX_RULES)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s:%d: more than %d rules", name, lineno,
                               TENANT_MAP_MAX_RULES);
        if (grow(&rules, n, &cap, err) < 0)
            return tetris_wrap(err, "%s", name);
        if (parse_line(line, &rules[n], err) < 0)
            return tetris_wrap(err, "%s:%d", name, lineno);
        if (find_rule(rules, n, rules[n].ns, rules[n].sa) != NULL)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s:%d: a second rule for namespace %s, service account %s", name,
                               lineno, rules[n].ns, rules[n].sa);
        n++;
    }
    if (got < 0)
        return got;
    /* What tetris-csi relies on: a tenant is a valid name, so its store
     * DIR/tenants/NAME stays under DIR. */
    for (size_t i = 0; i < n; i++)
        assert(rules[i].tenant[0] == '\0' || store_tenant_check(rules[i].tenant, NULL) == 0);
    tenant_map *m = malloc(sizeof(*m));
    if (m == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: out of memory", name);
    m->n = n;
    m->rules = steal_pointer(&rules);
    *out = m;
    return 0;
}

int tenant_map_read(const char *path, tenant_map **out, tetris_error *err)
{
    cleanup_free char *text = NULL;
    size_t len = 0;
    int r = file_read_all(path, TENANT_MAP_MAX_BYTES, &text, &len, err);
    if (r < 0)
        return r;
    return tenant_map_parse(text, len, path, out, err);
}

void tenant_map_free(tenant_map *m)
{
    if (m == NULL)
        return;
    free(m->rules);
    free(m);
}

size_t tenant_map_rules(const tenant_map *m)
{
    return m->n;
}

bool tenant_map_lookup(const tenant_map *m, const char *ns, const char *sa, const char **tenant)
{
    const struct tenant_rule *r = NULL;
    /* An identity the kubelet did not give matches no name: "" is never a
     * rule's namespace or service account. */
    if (ns[0] != '\0' && sa[0] != '\0')
        r = find_rule(m->rules, m->n, ns, sa);
    if (r == NULL && ns[0] != '\0')
        r = find_rule(m->rules, m->n, ns, TENANT_MAP_ANY);
    if (r == NULL)
        r = find_rule(m->rules, m->n, TENANT_MAP_ANY, TENANT_MAP_ANY);
    if (r == NULL)
        return false;
    *tenant = r->tenant[0] != '\0' ? r->tenant : NULL;
    return true;
}

/* ---- the file, followed ---- */

/* What stat(2) says of the file a path names: equal identities are the
 * same text (tenant_map.h says when that does not hold). */
struct file_identity {
    bool exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

struct tenant_map_file {
    char *path;
    tenant_map *map;           /* the map in use: always one that parsed */
    struct file_identity seen; /* the file last looked at, refused or not */
};

static int identify(const char *path, struct file_identity *out, tetris_error *err)
{
    struct stat st;
    memset(out, 0, sizeof(*out));
    if (stat(path, &st) < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", path);
    }
    *out = (struct file_identity){.exists = true,
                                  .dev = st.st_dev,
                                  .ino = st.st_ino,
                                  .size = st.st_size,
                                  .mtime = st.st_mtim};
    return 0;
}

static bool same_file(const struct file_identity *a, const struct file_identity *b)
{
    if (!a->exists || !b->exists)
        return a->exists == b->exists;
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

int tenant_map_file_open(const char *path, tenant_map_file **out, tetris_error *err)
{
    cleanup_free tenant_map_file *f = calloc(1, sizeof(*f));
    if (f == NULL || (f->path = strdup(path)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s: out of memory", path);
    /* Identified first: a change while it is read is then a change the
     * next refresh sees. */
    int rc = identify(path, &f->seen, err);
    if (rc == 0)
        rc = tenant_map_read(path, &f->map, err);
    if (rc < 0) {
        free(f->path);
        return rc;
    }
    *out = steal_pointer(&f);
    return 0;
}

void tenant_map_file_free(tenant_map_file *f)
{
    if (f == NULL)
        return;
    tenant_map_free(f->map);
    free(f->path);
    free(f);
}

int tenant_map_file_refresh(tenant_map_file *f, tetris_error *err)
{
    struct file_identity now;
    int rc = identify(f->path, &now, err);
    if (rc < 0)
        return rc;
    if (same_file(&now, &f->seen))
        return 0;
    f->seen = now;
    if (!now.exists)
        return tetris_fail(err, TETRIS_E_NOTFOUND, ENOENT, "%s: no such file", f->path);
    tenant_map *m = NULL;
    if ((rc = tenant_map_read(f->path, &m, err)) < 0)
        return rc;
    assert(m != NULL);
    tenant_map_free(f->map);
    f->map = m;
    return 1;
}

const tenant_map *tenant_map_file_map(const tenant_map_file *f)
{
    return f->map;
}

const char *tenant_map_file_path(const tenant_map_file *f)
{
    return f->path;
}
