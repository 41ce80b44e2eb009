/* oci_ref.c - references to a model in a registry,
 * oci://HOST[:PORT]/REPO[:TAG|@sha256:HEX] (grammar in oci.h: the
 * distribution spec's repository names and tags, one registry host). */
#include "protocol/oci.h"

#include <stdio.h>
#include <string.h>

#define REF_SCHEME "oci://"

bool oci_ref_is(const char *s)
{
    return s != NULL && strncmp(s, REF_SCHEME, strlen(REF_SCHEME)) == 0;
}

static bool is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* A repository name: components of [a-z0-9]+ joined by '.', '_', '__' or
 * runs of '-', components joined by '/'. */
static bool repo_valid(const char *s, size_t len)
{
    size_t i = 0;
    if (len == 0 || len > OCI_REPO_MAX)
        return false;
    for (;;) {
        if (i >= len || !is_lower_alnum(s[i]))
            return false;
        while (i < len && is_lower_alnum(s[i]))
            i++;
        if (i == len)
            return true;
        if (s[i] == '/') {
            i++;
            continue;
        }
        size_t sep = i;
        if (s[i] == '.')
            i++;
        else if (s[i] == '_')
            i += i + 1 < len && s[i + 1] == '_' ? 2 : 1;
        else if (s[i] == '-')
            while (i < len && s[i] == '-')
                i++;
        if (i == sep)
            return false;
    }
}

static bool tag_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > OCI_TAG_MAX)
        return false;
    if (!(is_lower_alnum(s[0]) || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
        return false;
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* HOST: a DNS name or IPv4 address ([A-Za-z0-9.-]) or [IPv6]. */
static bool host_valid(const char *s, size_t len)
{
    if (len == 0 || len > OCI_HOST_MAX)
        return false;
    if (s[0] == '[')
        return len > 2 && s[len - 1] == ']' && strspn(s + 1, "0123456789abcdefABCDEF:.") == len - 2;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '-'))
            return false;
    return s[0] != '-' && s[0] != '.';
}

int oci_ref_parse(const char *s, oci_ref *out, tetris_error *err)
{
    memset(out, 0, sizeof *out);
    if (!oci_ref_is(s))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "reference '%.200s' does not start with %s", s,
                           REF_SCHEME);
    const char *authority = s + strlen(REF_SCHEME);
    const char *slash = strchr(authority, '/');
    if (slash == NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "reference '%.200s' names no repository", s);
    int rc = oci_authority_parse(authority, (size_t)(slash - authority), out->host, &out->port,
                                 err);
    if (rc < 0)
        return tetris_wrap(err, "reference '%.200s'", s);
    const char *path = slash + 1;
    const char *at = strchr(path, '@');
    const char *repo_end = at != NULL ? at : path + strlen(path);
    /* A tag's colon is after the last '/' of the repository. */
    const char *last_slash = memrchr(path, '/', (size_t)(repo_end - path));
    const char *colon = memchr(last_slash != NULL ? last_slash : path, ':',
                               (size_t)(repo_end - (last_slash != NULL ? last_slash : path)));
    const char *name_end = colon != NULL ? colon : repo_end;
    if (!repo_valid(path, (size_t)(name_end - path)))
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "reference '%.200s': bad repository (lowercase [a-z0-9] components "
                           "joined by '.', '_', '__', '-' or '/')",
                           s);
    memcpy(out->repo, path, (size_t)(name_end - path));
    if (at != NULL) {
        if (colon != NULL)
            return tetris_fail(err, TETRIS_E_INVAL, 0,
                               "reference '%.200s': a tag and a digest; give one", s);
        tetris_error derr = {0};
        if (oci_digest_parse(at + 1, &out->digest, &derr) < 0)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "reference '%.200s': %s", s, derr.msg);
        out->has_digest = true;
        return 0;
    }
    const char *tag = colon != NULL ? colon + 1 : "latest";
    if (!tag_valid(tag))
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "reference '%.200s': bad tag (at most 128 of [A-Za-z0-9._-], not "
                           "starting with '.' or '-')",
                           s);
    snprintf(out->tag, sizeof out->tag, "%s", tag);
    return 0;
}

int oci_authority_parse(const char *s, size_t len, char host[OCI_HOST_MAX + 1], unsigned *port,
                        tetris_error *err)
{
    const char *end = s + len;
    const char *host_end = end;
    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        host_end = close != NULL ? close + 1 : end;
    } else {
        const char *colon = memchr(s, ':', len);
        if (colon != NULL)
            host_end = colon;
    }
    if (!host_valid(s, (size_t)(host_end - s)))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "bad host '%.*s'", (int)(len > 255 ? 255 : len),
                           s);
    memcpy(host, s, (size_t)(host_end - s));
    host[host_end - s] = '\0';
    *port = 0;
    if (host_end == end)
        return 0;
    size_t digits = (size_t)(end - host_end - 1);
    if (*host_end != ':' || digits == 0 || digits > 5 ||
        strspn(host_end + 1, "0123456789") < digits)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "bad port in '%.*s'",
                           (int)(len > 255 ? 255 : len), s);
    unsigned p = 0;
    for (const char *c = host_end + 1; c < end; c++)
        p = p * 10 + (unsigned)(*c - '0');
    if (p == 0 || p > 65535)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "bad port in '%.*s'",
                           (int)(len > 255 ? 255 : len), s);
    *port = p;
    return 0;
}

void oci_ref_authority(const oci_ref *r, char *out, size_t cap)
{
    snprintf(out, cap, "%s:%u", r->host, r->port != 0 ? r->port : 443u);
}
