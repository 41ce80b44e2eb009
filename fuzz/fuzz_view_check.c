/* fuzz_view_check.c - libFuzzer harness for the model view reader
 * (agent/view.c, view_check): a function's container reads tensors.json
 * written by another process, so nothing in it is trusted. Each input is
 * the tensors.json of a view directory on tmpfs; a view is accepted or
 * refused with a format, not-found, denied or I/O error, and what an
 * accepted one reports adds up. */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>

#include "agent/view.h"
#include "fuzz/fuzz_store_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[PATH_MAX], view[PATH_MAX + 16], path[PATH_MAX + 32];
    fuzz_store(dir);
    snprintf(view, sizeof view, "%s/view", dir);
    if (mkdir(view, 0700) < 0 && errno != EEXIST)
        abort();
    snprintf(path, sizeof path, "%s/tensors.json", view);
    fuzz_write_file(path, data, size);
    struct view_check_result res;
    tetris_error err;
    int r = view_check(view, &res, &err);
    if (r < 0) {
        if (err.code != TETRIS_E_FORMAT && err.code != TETRIS_E_NOTFOUND &&
            err.code != TETRIS_E_DENIED && err.code != TETRIS_E_IO && err.code != TETRIS_E_NOMEM)
            abort();
        if (err.msg[0] == '\0')
            abort();
    } else if (res.shared_files > res.files || res.files > res.tensors) {
        abort();
    }
    unlink(path);
    return 0;
}
