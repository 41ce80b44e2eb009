/* fuzz_oci_auth.c - libFuzzer harness for what a registry is trusted with
 * (protocol/oci.h, "credentials and trust"): the credentials file's
 * decoder, the WWW-Authenticate challenge parser and the token reply's
 * decoder, each given the input. An accepted credentials document holds
 * only entries that keep the promises of the header (a non-empty username
 * without ':', nothing that could break a header line, each registry
 * found again by its own host and port); an accepted challenge is Basic or
 * Bearer with a realm; an accepted token is visible ASCII within its cap;
 * every refusal is the kind of error the header names. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_common.h"
#include "protocol/oci.h"

static bool header_safe(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
            return false;
    return true;
}

static void check_credentials(const uint8_t *data, size_t size)
{
    oci_credentials *c = NULL;
    tetris_error err;
    if (oci_credentials_parse((const char *)data, size, "fuzz", &c, &err) < 0) {
        if (c != NULL)
            abort();
        fuzz_check_error(&err, "fuzz");
        return;
    }
    for (size_t i = 0; i < c->n; i++) {
        const oci_credential *e = &c->entries[i];
        if (e->username[0] == '\0' || strchr(e->username, ':') != NULL ||
            strlen(e->username) > OCI_USERNAME_MAX || strlen(e->password) > OCI_PASSWORD_MAX ||
            !header_safe(e->username) || !header_safe(e->password))
            abort();
        if (oci_credentials_find(c, e->host, e->port) != e)
            abort();
    }
    oci_credentials_free(c);
}

static void check_challenge(const uint8_t *data, size_t size)
{
    char text[8192];
    fuzz_text(data, size, text, sizeof text);
    oci_challenge ch;
    tetris_error err;
    if (oci_challenge_parse(text, &ch, &err) < 0) {
        if (err.code != TETRIS_E_PROTOCOL || strstr(err.msg, "WWW-Authenticate") == NULL)
            abort();
        return;
    }
    if ((ch.scheme != OCI_AUTH_BASIC && ch.scheme != OCI_AUTH_BEARER) ||
        (ch.scheme == OCI_AUTH_BEARER && ch.realm[0] == '\0') ||
        strlen(ch.realm) >= sizeof ch.realm || !header_safe(ch.realm) || !header_safe(ch.service) ||
        !header_safe(ch.scope))
        abort();
}

static void check_token(const uint8_t *data, size_t size)
{
    char *token = NULL;
    tetris_error err;
    if (oci_token_parse((const char *)data, size, &token, &err) < 0) {
        if (token != NULL || err.code != TETRIS_E_PROTOCOL || strstr(err.msg, "token") == NULL)
            abort();
        return;
    }
    size_t len = strlen(token);
    if (len == 0 || len > OCI_TOKEN_MAX)
        abort();
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)token[i] <= 0x20 || (unsigned char)token[i] >= 0x7f)
            abort();
    free(token);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_credentials(data, size);
    check_challenge(data, size);
    check_token(data, size);
    return 0;
}
