/* fuzz_holders.c - libFuzzer harness for the holder file parser
 * (tensorstore/holders.c): the daemon and every repair read holders/*.ref,
 * which a direct-mode process or a crashed writer may have left in any
 * state. Each input is one holder file of a real store on tmpfs, read
 * through store_foreach_holder; what it reports must be consistent. */
#include <stdint.h>

#include "fuzz/fuzz_store_files.h"

static int check_holder(void *ctx, const struct store_holder_info *h)
{
    size_t *seen = ctx;
    (*seen)++;
    if (h->id == NULL || h->label == NULL || h->pid < 0 || h->alive)
        abort();
    if (h->n_refs > 0 && (h->refs == NULL || h->ref_bytes == NULL))
        abort();
    /* Every byte of every reference is readable. */
    uint64_t sum = 0;
    for (size_t i = 0; i < h->n_refs; i++)
        sum += h->ref_bytes[i] + h->refs[i].bytes[0] + h->refs[i].bytes[TENSOR_DIGEST_BYTES - 1];
    (void)sum;
    (void)strlen(h->label);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[PATH_MAX], path[PATH_MAX + 32];
    store *s = fuzz_store(dir);
    snprintf(path, sizeof path, "%s/private/holders/fuzz.ref", dir);
    fuzz_write_file(path, data, size);
    size_t seen = 0;
    tetris_error err;
    if (store_foreach_holder(s, check_holder, &seen, &err) < 0 && err.code != TETRIS_E_NOMEM)
        abort();
    if (seen != 1)
        abort();
    unlink(path);
    return 0;
}
