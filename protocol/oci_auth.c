/* oci_auth.c - what a registry is trusted with, and what it must show:
 * the credentials file (a Kubernetes dockerconfigjson Secret's document),
 * a registry's WWW-Authenticate challenge, a token server's reply, and a
 * CA bundle (oci.h, "credentials and trust").
 *
 * Everything here reads text an operator or a registry wrote, so each
 * reader is strict and bounded (fuzz/fuzz_oci_auth.c): a document is read
 * by common/json_scan.h without a tree, every string has a cap, every
 * error names where it is and never what a secret is. Secrets live in
 * malloc'd strings that are overwritten before they are freed. */
#include "protocol/oci.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/json_scan.h"

#define DOC_MAX_DEPTH 8
#define KEY_MAX 512 /* a registry's key: scheme, HOST:PORT, a path */
/* The base64 of the longest "user:password". */
#define AUTH_B64_MAX (((OCI_USERNAME_MAX + 1 + OCI_PASSWORD_MAX) + 2) / 3 * 4)

/* ---- the credentials file ---- */

static void secret_free(char *s)
{
    if (s != NULL) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

void oci_credentials_free(oci_credentials *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n; i++) {
        secret_free(c->entries[i].username);
        secret_free(c->entries[i].password);
    }
    free(c->entries);
    free(c);
}

static bool has_control(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f)
            return true;
    return false;
}

/* A registry's key: [http[s]://]HOST[:PORT][/path]. */
static int key_parse(const char *key, size_t len, oci_credential *e, tetris_error *err)
{
    const char *p = key;
    size_t n = len;
    static const char *const schemes[] = {"https://", "http://"};
    for (size_t i = 0; i < 2; i++) {
        size_t sl = strlen(schemes[i]);
        if (n >= sl && strncasecmp(p, schemes[i], sl) == 0) {
            p += sl;
            n -= sl;
            break;
        }
    }
    const char *slash = memchr(p, '/', n);
    if (slash != NULL)
        n = (size_t)(slash - p);
    if (oci_authority_parse(p, n, e->host, &e->port, err) < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "not a registry's HOST[:PORT]");
    for (char *c = e->host; *c != '\0'; c++)
        *c = (char)tolower((unsigned char)*c);
    return 0;
}

/* Standard base64, padded or not, into a malloc'd NUL-terminated string. */
static int base64_decode(const char *in, size_t len, char **out, size_t *out_len)
{
    size_t pad = 0;
    while (pad < 2 && len > pad && in[len - 1 - pad] == '=')
        pad++;
    size_t body = len - pad;
    for (size_t i = 0; i < body; i++)
        if (!isalnum((unsigned char)in[i]) && in[i] != '+' && in[i] != '/')
            return -1;
    if (body % 4 == 1 || (pad > 0 && (body + pad) % 4 != 0))
        return -1;
    size_t padded = (body + 3) / 4 * 4;
    cleanup_free char *text = malloc(padded + 1);
    char *bytes = malloc(padded / 4 * 3 + 1);
    if (text == NULL || bytes == NULL) {
        free(bytes);
        return -1;
    }
    memcpy(text, in, body);
    memset(text + body, '=', padded - body);
    int n = EVP_DecodeBlock((unsigned char *)bytes, (const unsigned char *)text, (int)padded);
    explicit_bzero(text, padded);
    if (n < 0) {
        secret_free(bytes);
        return -1;
    }
    *out_len = (size_t)n - (padded - body);
    bytes[*out_len] = '\0';
    *out = bytes;
    return 0;
}

/* One string member's value, at most cap bytes, into a malloc'd copy. */
static int secret_string(json_scan *s, size_t cap, const char *what, const char *field,
                         const char *key, char **out, tetris_error *err)
{
    size_t len = 0;
    json_scan probe = *s;
    if (json_scan_string(&probe, NULL, 0, &len, err) < 0)
        return tetris_wrap(err, "%s: auths[\"%.100s\"].%s", what, key, field);
    if (len > cap)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: auths[\"%.100s\"].%s: longer than %zu",
                           what, key, field, cap);
    if (json_scan_string_dup(s, out, &len, err) < 0)
        return -err->code;
    if (strlen(*out) != len)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: auths[\"%.100s\"].%s holds a NUL", what,
                           key, field);
    return 0;
}

/* Fills e from "auth" (base64 of user:password) and/or username and
 * password, which must agree when both are given. */
static int entry_credentials(oci_credential *e, const char *auth, const char *username,
                             const char *password, const char *what, const char *key,
                             tetris_error *err)
{
    if (auth == NULL && (username == NULL || password == NULL))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: auths[\"%.100s\"]: needs auth, or username and password", what,
                           key);
    if (auth == NULL) {
        e->username = strdup(username);
        e->password = strdup(password);
    } else {
        char *plain = NULL;
        size_t plain_len = 0;
        if (base64_decode(auth, strlen(auth), &plain, &plain_len) < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: auths[\"%.100s\"].auth is not base64",
                               what, key);
        char *colon = memchr(plain, ':', plain_len);
        if (colon == NULL || strlen(plain) != plain_len) {
            secret_free(plain);
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s: auths[\"%.100s\"].auth is not base64 of user:password", what,
                               key);
        }
        *colon = '\0';
        e->username = strdup(plain);
        e->password = strdup(colon + 1);
        *colon = ':';
        secret_free(plain);
    }
    if (e->username == NULL || e->password == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", what);
    if ((username != NULL && strcmp(username, e->username) != 0) ||
        (password != NULL && strcmp(password, e->password) != 0))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: auths[\"%.100s\"]: auth and username/password disagree", what, key);
    if (e->username[0] == '\0' || strchr(e->username, ':') != NULL ||
        strlen(e->username) > OCI_USERNAME_MAX || has_control(e->username, strlen(e->username)))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: auths[\"%.100s\"]: the username is empty, too long, or holds ':' "
                           "or a control character",
                           what, key);
    if (e->password[0] == '\0' || strlen(e->password) > OCI_PASSWORD_MAX ||
        has_control(e->password, strlen(e->password)))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s: auths[\"%.100s\"]: the password is empty, too long, or holds a "
                           "control character",
                           what, key);
    return 0;
}

/* One entry's object: "auth", "username", "password", "email". */
static int entry_parse(json_scan *s, oci_credential *e, const char *what, const char *key,
                       tetris_error *err)
{
    static const char *const fields[3] = {"auth", "username", "password"};
    static const size_t caps[3] = {AUTH_B64_MAX, OCI_USERNAME_MAX, OCI_PASSWORD_MAX};
    char *values[3] = {NULL, NULL, NULL};
    char name[32];
    size_t name_len, i = 0;
    int rc = json_scan_object_begin(s, err), r = 0;
    while (rc == 0 && (r = json_scan_object_next(s, &i, name, sizeof name, &name_len, err)) > 0) {
        bool fits = name_len < sizeof name;
        int k = -1;
        for (int f = 0; f < 3 && fits; f++)
            if (strcmp(name, fields[f]) == 0)
                k = f;
        if (k >= 0 && values[k] != NULL)
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: auths[\"%.100s\"]: \"%s\" twice", what,
                             key, name);
        else if (k >= 0)
            rc = secret_string(s, caps[k], what, name, key, &values[k], err);
        else if (fits && strcmp(name, "email") == 0)
            rc = json_scan_skip(s, NULL, err);
        else if (fits && (strcmp(name, "identitytoken") == 0 || strcmp(name, "registrytoken") == 0))
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0,
                             "%s: auths[\"%.100s\"]: \"%s\" (an OAuth token) is not supported: "
                             "give auth, or username and password",
                             what, key, name);
        else
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: auths[\"%.100s\"]: unknown key \"%.*s\"",
                             what, key, (int)(name_len < 31 ? name_len : 31), name);
    }
    if (rc == 0 && r < 0)
        rc = r;
    if (rc < 0 && err->code == TETRIS_E_FORMAT && strstr(err->msg, "auths[") == NULL)
        tetris_wrap(err, "%s: auths[\"%.100s\"]", what, key);
    if (rc == 0)
        rc = entry_credentials(e, values[0], values[1], values[2], what, key, err);
    for (int f = 0; f < 3; f++)
        secret_free(values[f]);
    return rc;
}

static int auths_parse(json_scan *s, oci_credentials *c, const char *what, tetris_error *err)
{
    char key[KEY_MAX + 1];
    size_t key_len, i = 0;
    int rc = json_scan_object_begin(s, err), r;
    if (rc < 0)
        return tetris_wrap(err, "%s: auths", what);
    while ((r = json_scan_object_next(s, &i, key, sizeof key, &key_len, err)) > 0) {
        if (key_len > KEY_MAX || strlen(key) != key_len)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: auths: a key longer than %d bytes",
                               what, KEY_MAX);
        if (c->n == OCI_CREDENTIALS_MAX)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: more than %d registries", what,
                               OCI_CREDENTIALS_MAX);
        oci_credential *e = &c->entries[c->n];
        memset(e, 0, sizeof *e);
        if (key_parse(key, key_len, e, err) < 0)
            return tetris_wrap(err, "%s: auths[\"%.100s\"]", what, key);
        for (size_t k = 0; k < c->n; k++)
            if (strcmp(c->entries[k].host, e->host) == 0 &&
                (c->entries[k].port != 0 ? c->entries[k].port : 443u) ==
                    (e->port != 0 ? e->port : 443u))
                return tetris_fail(err, TETRIS_E_FORMAT, 0,
                                   "%s: auths[\"%.100s\"]: that registry is named twice", what,
                                   key);
        /* Counted before the fields are read, so a failure frees them. */
        c->n++;
        if ((rc = entry_parse(s, e, what, key, err)) < 0)
            return rc;
    }
    return r < 0 ? tetris_wrap(err, "%s: auths", what) : 0;
}

int oci_credentials_parse(const char *json, size_t len, const char *what, oci_credentials **out,
                          tetris_error *err)
{
    *out = NULL;
    if (len > OCI_CREDENTIALS_FILE_MAX)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: larger than %u bytes", what,
                           OCI_CREDENTIALS_FILE_MAX);
    oci_credentials *c = calloc(1, sizeof *c);
    if (c == NULL || (c->entries = calloc(OCI_CREDENTIALS_MAX, sizeof *c->entries)) == NULL) {
        free(c);
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", what);
    }
    json_scan s;
    json_scan_init(&s, json, len, DOC_MAX_DEPTH);
    char key[16];
    size_t key_len, i = 0;
    bool seen = false;
    int rc = json_scan_object_begin(&s, err), r = 0;
    while (rc == 0 && (r = json_scan_object_next(&s, &i, key, sizeof key, &key_len, err)) > 0) {
        if (key_len == 5 && strcmp(key, "auths") == 0) {
            rc = seen ? tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: \"auths\" twice", what)
                      : auths_parse(&s, c, what, err);
            seen = true;
        } else {
            rc = json_scan_skip(&s, NULL, err); /* credsStore, credHelpers, ...: not ours */
        }
    }
    if (rc == 0 && r < 0)
        rc = r;
    if (rc == 0)
        rc = json_scan_end(&s, err);
    if (rc == 0 && !seen)
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: no \"auths\" object", what);
    /* Every message names the file (json_scan's name a byte offset only). */
    if (rc < 0 && strncmp(err->msg, what, strlen(what)) != 0)
        rc = tetris_wrap(err, "%s", what);
    if (rc < 0) {
        oci_credentials_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int oci_credentials_read(const char *path, oci_credentials **out, tetris_error *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = file_read_all(path, OCI_CREDENTIALS_FILE_MAX, &text, &len, err);
    if (rc < 0)
        return tetris_wrap(err, "registry credentials");
    rc = oci_credentials_parse(text, len, path, out, err);
    explicit_bzero(text, len);
    free(text);
    return rc;
}

const oci_credential *oci_credentials_find(const oci_credentials *c, const char *host,
                                           unsigned port)
{
    if (c == NULL)
        return NULL;
    unsigned want = port != 0 ? port : 443u;
    for (size_t i = 0; i < c->n; i++)
        if (strcasecmp(c->entries[i].host, host) == 0 &&
            (c->entries[i].port != 0 ? c->entries[i].port : 443u) == want)
            return &c->entries[i];
    return NULL;
}

/* ---- a WWW-Authenticate challenge ---- */

static bool tchar(char c)
{
    return isalnum((unsigned char)c) || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* A parameter's value, a token or a quoted string, into out (cap bytes). */
static int param_value(const char **pp, char *out, size_t cap, const char *name, tetris_error *err)
{
    const char *p = *pp;
    size_t n = 0;
    if (*p == '"') {
        for (p++; *p != '"'; p++) {
            if (*p == '\\' && p[1] != '\0')
                p++;
            if (*p == '\0' || (unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
                return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                                   "WWW-Authenticate: %s: an unterminated or bad quoted string",
                                   name);
            if (n + 1 >= cap)
                return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                                   "WWW-Authenticate: %s longer than %zu bytes", name, cap - 1);
            out[n++] = *p;
        }
        p++;
    } else {
        while (tchar(*p) || *p == '/') {
            if (n + 1 >= cap)
                return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                                   "WWW-Authenticate: %s longer than %zu bytes", name, cap - 1);
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    *pp = p;
    return 0;
}

int oci_challenge_parse(const char *header, oci_challenge *out, tetris_error *err)
{
    memset(out, 0, sizeof *out);
    if (header == NULL)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "HTTP 401 without a WWW-Authenticate");
    const char *p = skip_ows(header);
    const char *scheme = p;
    while (tchar(*p))
        p++;
    size_t scheme_len = (size_t)(p - scheme);
    if (scheme_len == 5 && strncasecmp(scheme, "Basic", 5) == 0)
        out->scheme = OCI_AUTH_BASIC;
    else if (scheme_len == 6 && strncasecmp(scheme, "Bearer", 6) == 0)
        out->scheme = OCI_AUTH_BEARER;
    else
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                           "WWW-Authenticate: scheme '%.*s' is not Basic or Bearer",
                           (int)(scheme_len < 40 ? scheme_len : 40), scheme);
    bool seen[3] = {false, false, false};
    for (bool first = true;; first = false) {
        p = skip_ows(p);
        if (!first) {
            if (*p == '\0')
                break;
            if (*p != ',')
                return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                                   "WWW-Authenticate: expected ',' at byte %zu",
                                   (size_t)(p - header));
            p = skip_ows(p + 1);
        }
        if (*p == '\0')
            break;
        const char *name = p;
        while (tchar(*p))
            p++;
        size_t name_len = (size_t)(p - name);
        p = skip_ows(p);
        if (name_len == 0 || *p != '=')
            return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                               "WWW-Authenticate: expected name=value at byte %zu",
                               (size_t)(name - header));
        p = skip_ows(p + 1);
        static const char *const names[3] = {"realm", "service", "scope"};
        char *slots[3] = {out->realm, out->service, out->scope};
        char ignored[OCI_CHALLENGE_PARAM_MAX];
        char *dst = ignored;
        const char *label = "a parameter";
        for (int k = 0; k < 3; k++)
            if (name_len == strlen(names[k]) && strncasecmp(name, names[k], name_len) == 0) {
                if (seen[k])
                    return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "WWW-Authenticate: %s twice",
                                       names[k]);
                seen[k] = true;
                dst = slots[k];
                label = names[k];
            }
        if (param_value(&p, dst, OCI_CHALLENGE_PARAM_MAX, label, err) < 0)
            return -err->code;
    }
    if (out->scheme == OCI_AUTH_BEARER && out->realm[0] == '\0')
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "WWW-Authenticate: Bearer without a realm");
    return 0;
}

/* ---- a token server's reply ---- */

int oci_token_parse(const char *json, size_t len, char **token, tetris_error *err)
{
    *token = NULL;
    if (len > OCI_TOKEN_REPLY_MAX)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "the token reply is larger than %u bytes",
                           OCI_TOKEN_REPLY_MAX);
    json_scan s;
    json_scan_init(&s, json, len, DOC_MAX_DEPTH);
    char *found[2] = {NULL, NULL}; /* "token", "access_token" */
    char key[16];
    size_t key_len, i = 0;
    int rc = json_scan_object_begin(&s, err), r = 0;
    while (rc == 0 && (r = json_scan_object_next(&s, &i, key, sizeof key, &key_len, err)) > 0) {
        int k = key_len == 5 && strcmp(key, "token") == 0           ? 0
                : key_len == 12 && strcmp(key, "access_token") == 0 ? 1
                                                                    : -1;
        if (k < 0) {
            rc = json_scan_skip(&s, NULL, err);
            continue;
        }
        size_t n = 0;
        json_scan probe = s;
        if (found[k] != NULL)
            rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "the token reply has \"%s\" twice", key);
        else if ((rc = json_scan_string(&probe, NULL, 0, &n, err)) == 0 && n > OCI_TOKEN_MAX)
            rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                             "the token reply's %s is longer than %u bytes", key, OCI_TOKEN_MAX);
        else if (rc == 0)
            rc = json_scan_string_dup(&s, &found[k], &n, err);
    }
    if (rc == 0 && r < 0)
        rc = r;
    if (rc == 0)
        rc = json_scan_end(&s, err);
    if (rc < 0 && err->code == TETRIS_E_FORMAT)
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "the token reply is not a JSON object: %s",
                         err->msg);
    char *t = found[0] != NULL && found[0][0] != '\0' ? found[0] : found[1];
    if (rc == 0 && (t == NULL || t[0] == '\0'))
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                         "the token reply has neither \"token\" nor \"access_token\"");
    for (const char *c = t; rc == 0 && *c != '\0'; c++)
        if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
            rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                             "the token server's token is not visible ASCII");
    if (rc == 0) {
        *token = t;
        secret_free(t == found[0] ? found[1] : found[0]);
        return 0;
    }
    secret_free(found[0]);
    secret_free(found[1]);
    return rc;
}

/* ---- a CA bundle ---- */

int oci_ca_file_check(const char *path, tetris_error *err)
{
    cleanup_free char *text = NULL;
    size_t len = 0;
    int rc = file_read_all(path, OCI_CA_FILE_MAX, &text, &len, err);
    if (rc < 0)
        return tetris_wrap(err, "CA bundle");
    BIO *bio = BIO_new_mem_buf(text, (int)len);
    if (bio == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "CA bundle %s", path);
    X509 *cert = PEM_read_bio_X509(bio, NULL, NULL, NULL);
    BIO_free(bio);
    if (cert == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "CA bundle %s: no PEM certificate in it", path);
    X509_free(cert);
    return 0;
}
