/* pin_file.c - reads the pin file (pin_file.h): lines of a digest and an
 * optional tenant, checked one by one, all or nothing. */
#include "reclaimer/pin_file.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/textbuf.h"
#include "common/fileio.h"

/* The digest and the tenant of one line (comment already cut, not blank),
 * checked; line is modified in place. */
static int parse_fields(char *line, struct pin *out, tetris_error *err)
{
    char *digest = line + strspn(line, " \t");
    char *rest = digest + strcspn(digest, " \t");
    if (*rest != '\0')
        *rest++ = '\0';
    char *tenant = rest + strspn(rest, " \t");
    char *after = tenant + strcspn(tenant, " \t");
    if (after[strspn(after, " \t")] != '\0')
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "more than a digest and a tenant");
    *after = '\0';
    int r = tensor_digest_from_hex(digest, &out->digest, err);
    if (r < 0)
        return r;
    out->tenant[0] = '\0';
    if (tenant[0] == '\0')
        return 0;
    r = store_tenant_check(tenant, err);
    if (r < 0)
        return r;
    if (strlen(tenant) >= sizeof(out->tenant))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "tenant name too long");
    memcpy(out->tenant, tenant, strlen(tenant) + 1);
    return 0;
}

/* Whatever is wrong with a line is a format error of the file, whichever
 * checker said so. */
static int parse_line(char *line, struct pin *out, tetris_error *err)
{
    if (parse_fields(line, out, err) == 0)
        return 0;
    err->code = TETRIS_E_FORMAT;
    return -TETRIS_E_FORMAT;
}

static int grow(struct pin **list, size_t n, size_t *cap, tetris_error *err)
{
    if (n < *cap)
        return 0;
    size_t want = *cap ? *cap * 2 : 64;
    struct pin *l = realloc(*list, want * sizeof(*l));
    if (l == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "pin list of %zu entries", want);
    *list = l;
    *cap = want;
    return 0;
}

int pin_file_parse(const char *text, size_t len, const char *name, struct pin **out, size_t *n_out,
                   tetris_error *err)
{
    cleanup_free struct pin *list = NULL;
    size_t n = 0, cap = 0;
    int lineno = 0;
    size_t at = 0;
    char line[PIN_LINE_MAX + 1];
    int got;
    while ((got = text_next_line(text, len, &at, &lineno, line, PIN_LINE_MAX, name, err)) > 0) {
        if (grow(&list, n, &cap, err) < 0)
            return tetris_wrap(err, "%s", name);
        if (parse_line(line, &list[n], err) < 0)
            return tetris_wrap(err, "%s:%d", name, lineno);
        n++;
    }
    if (got < 0)
        return got;
    /* What the daemon's pin lookup relies on: a named tenant is a valid
     * one, so its store path stays under the store's root. */
    for (size_t i = 0; i < n; i++)
        assert(list[i].tenant[0] == '\0' || store_tenant_check(list[i].tenant, NULL) == 0);
    *out = steal_pointer(&list);
    *n_out = n;
    return 0;
}

int pin_file_read(const char *path, struct pin **out, size_t *n, tetris_error *err)
{
    cleanup_free char *text = NULL;
    size_t len = 0;
    int r = file_read_all(path, PIN_FILE_MAX_BYTES, &text, &len, err);
    if (r == -TETRIS_E_NOTFOUND) {
        *out = NULL;
        *n = 0;
        return 0;
    }
    if (r < 0)
        return r;
    return pin_file_parse(text, len, path, out, n, err);
}
