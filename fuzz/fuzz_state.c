/* fuzz_state.c - libFuzzer harness for the reclaimer's state file
 * (reclaimer/tensor_index.h: "HEXDIGEST LAST_REF_SECONDS" lines), loaded
 * at every start. A file that loads must save and load again to the same
 * last-use times; one that does not gets a format error naming it. */
#include <stdint.h>

#include "fuzz/fuzz_store_files.h"
#include "reclaimer/tensor_index.h"

static void same(tensor_index *a, tensor_index *b)
{
    if (tensor_index_count(a) != tensor_index_count(b))
        abort();
    size_t c = 0;
    struct index_entry *e;
    while ((e = tensor_index_next(a, &c)) != NULL) {
        struct index_entry *f = tensor_index_find(b, &e->digest);
        if (f == NULL || f->last_ref_s != e->last_ref_s)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[PATH_MAX], path[PATH_MAX + 32], again[PATH_MAX + 32];
    fuzz_store(dir);
    snprintf(path, sizeof path, "%s/fuzz.state", dir);
    snprintf(again, sizeof again, "%s/fuzz-again.state", dir);
    fuzz_write_file(path, data, size);
    tensor_index *ix = NULL, *back = NULL;
    tetris_error err;
    if (tensor_index_new(&ix, &err) < 0 || tensor_index_new(&back, &err) < 0)
        abort();
    int rc = tensor_index_load(ix, path, &err);
    if (rc < 0) {
        if (err.code != TETRIS_E_FORMAT || strstr(err.msg, path) == NULL)
            abort();
    } else {
        if (tensor_index_save(ix, again, &err) < 0 || tensor_index_load(back, again, &err) < 0)
            abort();
        same(ix, back);
        same(back, ix);
    }
    tensor_index_free(ix);
    tensor_index_free(back);
    return 0;
}
