/* digest.c - tensor identity (SHA-256 over a typed header plus the bytes)
 * and the CRC32 integrity checksum, computed together in one pass.
 *
 * SHA-256 goes through OpenSSL's EVP interface with the algorithm fetched
 * once: EVP dispatches to the SHA-NI / AVX2 code paths the CPU offers, which
 * the low-level SHA256_* calls (deprecated) and a per-call implicit fetch
 * would not do as cheaply. Bytes are fed in chunks small enough to stay in
 * L2 so the CRC pass reads what the SHA pass just pulled in. */
#include "tensorstore/digest.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/textbuf.h"
#include "tensorstore/crc32.h"

#define DIGEST_DOMAIN_TAG "tetris-tensor-v1"
_Static_assert(sizeof DIGEST_DOMAIN_TAG + TENSOR_DTYPE_MAX + 4 + 8 * TENSOR_MAX_DIMS <=
                   TENSOR_DIGEST_HEADER_MAX,
               "the digest header fits TENSOR_DIGEST_HEADER_MAX");
/* Chunk of the combined SHA-256 + CRC32 pass; fits the L2 of any x86 core. */
#define HASH_CHUNK_BYTES (128u * 1024u)

struct tensor_hasher {
    EVP_MD_CTX *ctx;
    uint32_t crc;
};

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
    {"float32", 4}, {"float16", 2}, {"bfloat16", 2}, {"float64", 8},
    {"int8", 1},    {"uint8", 1},   {"int16", 2},    {"uint16", 2},
    {"int32", 4},   {"uint32", 4},  {"int64", 8},    {"uint64", 8},
    {"bool", 1},    {"float8e4m3fn", 1}, {"float8e5m2", 1},
};

size_t tensor_dtype_size(const char *dtype)
{
    if (dtype == NULL)
        return 0;
    for (size_t i = 0; i < sizeof dtype_table / sizeof dtype_table[0]; i++)
        if (strcmp(dtype, dtype_table[i].name) == 0)
            return dtype_table[i].size;
    return 0;
}

int tensor_meta_validate(const tensor_meta *meta, tetris_error *err)
{
    if (memchr(meta->dtype, '\0', sizeof meta->dtype) == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "dtype name is not terminated");
    size_t elem = tensor_dtype_size(meta->dtype);
    if (elem == 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "unknown dtype '%s'", meta->dtype);
    if (meta->ndim < 0 || meta->ndim > TENSOR_MAX_DIMS)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "ndim %d outside 0..%d", meta->ndim,
                           TENSOR_MAX_DIMS);
    uint64_t count = 1;
    for (int i = 0; i < meta->ndim; i++) {
        if (meta->shape[i] < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "dimension %d is negative (%lld)", i,
                               (long long)meta->shape[i]);
        if (__builtin_mul_overflow(count, (uint64_t)meta->shape[i], &count))
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "shape element count overflows 64 bits");
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(count, (uint64_t)elem, &bytes))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "tensor byte size overflows 64 bits");
    if (bytes != meta->nbytes)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "%s shape needs %llu bytes but the tensor has %llu", meta->dtype,
                           (unsigned long long)bytes, (unsigned long long)meta->nbytes);
    return 0;
}

static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

size_t tensor_digest_header(const tensor_meta *meta, uint8_t buf[TENSOR_DIGEST_HEADER_MAX])
{
    size_t n = 0;
    size_t tag_len = sizeof DIGEST_DOMAIN_TAG; /* includes the NUL */
    memcpy(buf, DIGEST_DOMAIN_TAG, tag_len);
    n += tag_len;
    size_t dtype_len = strlen(meta->dtype) + 1;
    memcpy(buf + n, meta->dtype, dtype_len);
    n += dtype_len;
    uint32_t ndim = (uint32_t)meta->ndim;
    for (int b = 0; b < 4; b++)
        buf[n++] = (uint8_t)(ndim >> (8 * b));
    for (int i = 0; i < meta->ndim; i++) {
        uint64_t dim = (uint64_t)meta->shape[i];
        for (int b = 0; b < 8; b++)
            buf[n++] = (uint8_t)(dim >> (8 * b));
    }
    return n;
}

int tensor_hasher_prepare(tetris_error *err)
{
    pthread_once(&sha256_once, sha256_fetch);
    if (sha256_md == NULL)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "OpenSSL has no SHA-256 implementation");
    return 0;
}

int tensor_hasher_new(const tensor_meta *meta, tensor_hasher **out, tetris_error *err)
{
    int rc = tensor_meta_validate(meta, err);
    if (rc < 0)
        return rc;
    rc = tensor_hasher_prepare(err);
    if (rc < 0)
        return rc;

    tensor_hasher *h = calloc(1, sizeof *h);
    if (h == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "allocating a hasher");
    h->ctx = EVP_MD_CTX_new();
    if (h->ctx == NULL || EVP_DigestInit_ex(h->ctx, sha256_md, NULL) != 1) {
        tensor_hasher_free(h);
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "initialising SHA-256 failed");
    }
    uint8_t header[TENSOR_DIGEST_HEADER_MAX];
    size_t header_len = tensor_digest_header(meta, header);
    EVP_DigestUpdate(h->ctx, header, header_len);
    h->crc = crc32_update(0, NULL, 0);
    *out = h;
    return 0;
}

void tensor_hasher_update(tensor_hasher *h, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len > 0) {
        size_t n = len < HASH_CHUNK_BYTES ? len : HASH_CHUNK_BYTES;
        EVP_DigestUpdate(h->ctx, p, n);
        h->crc = crc32_update(h->crc, p, n);
        p += n;
        len -= n;
    }
}

void tensor_hasher_finish(tensor_hasher *h, tensor_digest *digest, uint32_t *crc32)
{
    unsigned int len = 0;
    EVP_DigestFinal_ex(h->ctx, digest->bytes, &len);
    *crc32 = h->crc;
    tensor_hasher_free(h);
}

void tensor_hasher_free(tensor_hasher *h)
{
    if (h == NULL)
        return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

int tensor_digest_compute(tensor_meta *meta, const void *bytes, tetris_error *err)
{
    tensor_hasher *h = NULL;
    int rc = tensor_hasher_new(meta, &h, err);
    if (rc < 0)
        return rc;
    tensor_hasher_update(h, bytes, meta->nbytes);
    tensor_hasher_finish(h, &meta->digest, &meta->crc32);
    return 0;
}

void tensor_digest_to_hex(const tensor_digest *d, char out[TENSOR_DIGEST_HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < TENSOR_DIGEST_BYTES; i++) {
        out[2 * i] = hex[d->bytes[i] >> 4];
        out[2 * i + 1] = hex[d->bytes[i] & 0xf];
    }
    out[TENSOR_DIGEST_HEX_LEN] = '\0';
}

int tensor_digest_from_hex(const char *hex, tensor_digest *out, tetris_error *err)
{
    if (hex == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "missing digest");
    const char *p = hex;
    if (strncmp(p, "sha256:", 7) == 0)
        p += 7;
    tensor_digest d;
    for (int i = 0; i < TENSOR_DIGEST_BYTES; i++) {
        int hi = text_hex_value(p[2 * i]);
        int lo = hi < 0 ? -1 : text_hex_value(p[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "digest '%.80s' is not 64 hex characters", hex);
        d.bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    if (p[TENSOR_DIGEST_HEX_LEN] != '\0')
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "digest '%.80s' is longer than 64 hex characters",
                           hex);
    *out = d;
    return 0;
}

int tensor_digest_equal(const tensor_digest *a, const tensor_digest *b)
{
    return memcmp(a->bytes, b->bytes, TENSOR_DIGEST_BYTES) == 0;
}
