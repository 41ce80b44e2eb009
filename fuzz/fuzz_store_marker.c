/* fuzz_store_marker.c - libFuzzer harness for the .tetris-store marker
 * (tensorstore/store.c), which every store_open reads: a store whose
 * marker is anything opens with the capacity it says or fails with a
 * format error naming the marker, never crashes. */
#include <stdint.h>

#include "fuzz/fuzz_store_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[PATH_MAX], path[PATH_MAX + 32];
    fuzz_store(dir);
    snprintf(path, sizeof path, "%s/.tetris-store", dir);
    fuzz_write_file(path, data, size);
    store *s = NULL;
    struct store_options o = {.read_only = true};
    tetris_error err;
    if (store_open(dir, &o, &s, &err) < 0) {
        if (err.code != TETRIS_E_FORMAT || strstr(err.msg, ".tetris-store") == NULL)
            abort();
        return 0;
    }
    (void)store_capacity(s);
    store_close(s);
    return 0;
}
