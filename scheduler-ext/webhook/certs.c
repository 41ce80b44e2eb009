/* certs.c - the webhook's own certificates (OpenSSL): a CA made at every
 * start and a serving certificate it signs for the Service's DNS names.
 *
 * Why a CA of our own: the apiserver only calls a webhook over TLS it can
 * verify against the caBundle of the MutatingWebhookConfiguration. Making
 * both at start and writing the CA into that caBundle through the API
 * (tetris-webhook.c) works on a fresh cluster with no cert-manager and no
 * Secret to rotate; the CA's key never leaves the process, and a restart
 * simply makes a new pair. The CA signs the serving certificate only, so
 * that a key in memory could sign nothing else it did not make. */
#include "scheduler-ext/webhook/webhook.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

static int ssl_fail(tetris_error *err, const char *what)
{
    char buf[256];
    unsigned long e = ERR_get_error();
    ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return tetris_fail(err, TETRIS_E_IO, 0, "%s: %s", what, e != 0 ? buf : "failed");
}

static EVP_PKEY *new_key(void)
{
    return EVP_EC_gen("P-256");
}

static bool add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    bool ok = ext != NULL && X509_add_ext(cert, ext, -1) == 1;
    X509_EXTENSION_free(ext);
    return ok;
}

/* A certificate for key with subject CN=cn, valid from an hour ago (clock
 * skew between nodes) for days, without extensions or signature yet. */
static X509 *new_cert(EVP_PKEY *key, const char *cn, int days)
{
    X509 *cert = X509_new();
    BIGNUM *serial = BN_new();
    bool ok = cert != NULL && serial != NULL &&
              BN_rand(serial, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1 &&
              BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(cert)) != NULL &&
              X509_set_version(cert, 2) == 1 &&
              X509_gmtime_adj(X509_getm_notBefore(cert), -3600) != NULL &&
              X509_gmtime_adj(X509_getm_notAfter(cert), (long)days * 86400) != NULL &&
              X509_set_pubkey(cert, key) == 1 &&
              X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_UTF8,
                                         (const unsigned char *)cn, -1, -1, 0) == 1;
    BN_free(serial);
    if (!ok) {
        X509_free(cert);
        return NULL;
    }
    return cert;
}

/* subjectAltName value: DNS:a,DNS:b,IP:127.0.0.1 */
static char *san_value(const char *const *names, size_t n)
{
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(names[i]) + 5;
    char *s = malloc(len);
    if (s == NULL)
        return NULL;
    s[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        unsigned char addr[16];
        bool ip = inet_pton(AF_INET, names[i], addr) == 1 ||
                  inet_pton(AF_INET6, names[i], addr) == 1;
        if (i > 0)
            strcat(s, ",");
        strcat(s, ip ? "IP:" : "DNS:");
        strcat(s, names[i]);
    }
    return s;
}

static char *pem_of(int (*write)(BIO *, void *), void *obj)
{
    BIO *bio = BIO_new(BIO_s_mem());
    char *out = NULL;
    if (bio != NULL && write(bio, obj) == 1) {
        char *data;
        long n = BIO_get_mem_data(bio, &data);
        out = n >= 0 ? strndup(data, (size_t)n) : NULL;
    }
    BIO_free(bio);
    return out;
}

static int write_cert(BIO *bio, void *cert)
{
    return PEM_write_bio_X509(bio, cert);
}

static int write_key(BIO *bio, void *key)
{
    return PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL);
}

static bool valid_names(const char *const *names, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (names[i][0] == '\0' || strlen(names[i]) > 253)
            return false;
        /* The names go into an OpenSSL configuration value, where ','
         * separates entries. */
        for (const char *p = names[i]; *p != '\0'; p++)
            if (*p == ',' || (unsigned char)*p <= ' ' || *p == 0x7f)
                return false;
    }
    return true;
}

int webhook_certs_make(const char *const *names, size_t n, int days, webhook_certs *out,
                       tetris_error *err)
{
    memset(out, 0, sizeof *out);
    if (!valid_names(names, n))
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "certificate names: want one or more names without spaces or commas");
    EVP_PKEY *ca_key = new_key(), *key = new_key();
    X509 *ca = ca_key != NULL ? new_cert(ca_key, "tetris-webhook-ca", days) : NULL;
    X509 *cert = key != NULL ? new_cert(key, names[0], days) : NULL;
    char *san = san_value(names, n);
    int r = 0;
    if (ca == NULL || cert == NULL || san == NULL)
        r = ssl_fail(err, "new certificate");
    if (r == 0 && (X509_set_issuer_name(ca, X509_get_subject_name(ca)) != 1 ||
                   !add_ext(ca, ca, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
                   !add_ext(ca, ca, NID_key_usage, "critical,keyCertSign") ||
                   !add_ext(ca, ca, NID_subject_key_identifier, "hash") ||
                   X509_sign(ca, ca_key, EVP_sha256()) == 0))
        r = ssl_fail(err, "CA certificate");
    if (r == 0 && (X509_set_issuer_name(cert, X509_get_subject_name(ca)) != 1 ||
                   !add_ext(cert, ca, NID_basic_constraints, "critical,CA:FALSE") ||
                   !add_ext(cert, ca, NID_key_usage, "critical,digitalSignature") ||
                   !add_ext(cert, ca, NID_ext_key_usage, "serverAuth") ||
                   !add_ext(cert, ca, NID_authority_key_identifier, "keyid") ||
                   !add_ext(cert, ca, NID_subject_alt_name, san) ||
                   X509_sign(cert, ca_key, EVP_sha256()) == 0))
        r = ssl_fail(err, "serving certificate");
    if (r == 0) {
        out->ca_pem = pem_of(write_cert, ca);
        out->cert_pem = pem_of(write_cert, cert);
        out->key_pem = pem_of(write_key, key);
        if (out->ca_pem == NULL || out->cert_pem == NULL || out->key_pem == NULL) {
            webhook_certs_release(out);
            r = ssl_fail(err, "PEM encoding");
        }
    }
    free(san);
    X509_free(ca);
    X509_free(cert);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(key);
    return r;
}

void webhook_certs_release(webhook_certs *c)
{
    free(c->ca_pem);
    if (c->key_pem != NULL)
        OPENSSL_cleanse(c->key_pem, strlen(c->key_pem));
    free(c->key_pem);
    free(c->cert_pem);
    memset(c, 0, sizeof *c);
}
