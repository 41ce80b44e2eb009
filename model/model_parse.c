/* model_parse.c - picks a model file's format parser (ONNX or
 * safetensors) and runs it: above both parsers, which build the model
 * object of model.c, so that neither they nor model.c depend on each
 * other's callers. */
#include "model/model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "model/format_onnx.h"
#include "model/format_safetensors.h"

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The extension decides when there is one, so a damaged file gets the
 * error of the format it claims to be; otherwise the content does. */
int model_parse_buffer(const char *path, const uint8_t *data, size_t len, model **out,
                       tetris_error *err)
{
    *out = NULL;
    if (has_suffix(path, ".safetensors"))
        return safetensors_parse(path, data, len, out, err);
    if (has_suffix(path, ".onnx"))
        return onnx_parse(path, data, len, out, err);
    if (safetensors_sniff(data, len))
        return safetensors_parse(path, data, len, out, err);
    return onnx_parse(path, data, len, out, err);
}

int model_parse_file(const char *path, model **out, tetris_error *err)
{
    *out = NULL;
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_IO, errno,
                           "open %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "stat %s", path);
    if (!S_ISREG(st.st_mode))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: not a regular file", path);
    if (st.st_size == 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: empty file", path);
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED)
        return tetris_fail(err, TETRIS_E_IO, errno, "mmap %s", path);
    int ret = model_parse_buffer(path, map, len, out, err);
    munmap(map, len);
    return ret;
}
