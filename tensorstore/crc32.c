/* crc32.c - CRC-32 by folding 64-byte blocks with carry-less multiplication
 * (the method of Gopal et al., "Fast CRC Computation for Generic Polynomials
 * Using PCLMULQDQ", Intel, 2009), finished by a Barrett reduction; zlib's
 * crc32 handles short inputs, unaligned tails and CPUs without PCLMULQDQ.
 *
 * The constants are x^n mod P(x) for the bit-reflected CRC-32 polynomial
 * P = 0x104C11DB7 at the distances the folds need (4x128+32 and 4x128-32
 * bits for the 4-lane fold, 128+32 and 128-32 for the single fold, 64 for
 * the 64-to-32 step), plus P' and floor(x^64 / P)' for Barrett, all
 * bit-reflected and shifted left by one as the reflected folding requires. */
#include "tensorstore/crc32.h"

#include <zlib.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define CRC32_FOLD_MIN_BYTES 256

static const uint64_t fold_4x128[2] = {0x0154442bd4ULL, 0x01c6e41596ULL};
static const uint64_t fold_1x128[2] = {0x01751997d0ULL, 0x00ccaa009eULL};
static const uint64_t fold_64[2] = {0x0163cd6124ULL, 0};
static const uint64_t barrett[2] = {0x01db710641ULL, 0x01f7011641ULL};

/* One fold step: multiply the lane's halves by the two constants and add
 * the next data block. */
__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold(__m128i lane, __m128i k,
                                                                    __m128i next)
{
    __m128i lo = _mm_clmulepi64_si128(lane, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(lane, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

/* len is a multiple of 16 and at least 64; crc is the raw (not inverted)
 * register value; returns the raw register value. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_fold(uint32_t crc,
                                                                    const unsigned char *p,
                                                                    size_t len)
{
    __m128i x0 = _mm_loadu_si128((const __m128i *)(p + 0));
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)crc));
    p += 64;
    len -= 64;

    __m128i k = _mm_loadu_si128((const __m128i *)fold_4x128);
    for (; len >= 64; p += 64, len -= 64) {
        x0 = fold(x0, k, _mm_loadu_si128((const __m128i *)(p + 0)));
        x1 = fold(x1, k, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = fold(x2, k, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = fold(x3, k, _mm_loadu_si128((const __m128i *)(p + 48)));
    }

    k = _mm_loadu_si128((const __m128i *)fold_1x128);
    x0 = fold(x0, k, x1);
    x0 = fold(x0, k, x2);
    x0 = fold(x0, k, x3);
    for (; len >= 16; p += 16, len -= 16)
        x0 = fold(x0, k, _mm_loadu_si128((const __m128i *)p));

    /* 128 -> 64 bits. */
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i t = _mm_clmulepi64_si128(x0, k, 0x10);
    x0 = _mm_xor_si128(_mm_srli_si128(x0, 8), t);
    /* 64 -> 32 bits. */
    k = _mm_loadl_epi64((const __m128i *)fold_64);
    t = _mm_srli_si128(x0, 4);
    x0 = _mm_clmulepi64_si128(_mm_and_si128(x0, low32), k, 0x00);
    x0 = _mm_xor_si128(x0, t);
    /* Barrett reduction to the 32-bit remainder. */
    k = _mm_loadu_si128((const __m128i *)barrett);
    t = _mm_and_si128(x0, low32);
    t = _mm_clmulepi64_si128(t, k, 0x10);
    t = _mm_and_si128(t, low32);
    t = _mm_clmulepi64_si128(t, k, 0x00);
    x0 = _mm_xor_si128(x0, t);
    return (uint32_t)_mm_extract_epi32(x0, 1);
}

static int cpu_has_pclmul(void)
{
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    }
    return cached;
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    if (p != NULL && len >= CRC32_FOLD_MIN_BYTES && cpu_has_pclmul()) {
        size_t folded = len & ~(size_t)15;
        crc = ~crc32_fold(~crc, p, folded);
        p += folded;
        len -= folded;
    }
    return (uint32_t)crc32_z(crc, p, len);
}

#else

uint32_t crc32_update(uint32_t crc, const void *data, size_t len)
{
    return (uint32_t)crc32_z(crc, data, len);
}

#endif
