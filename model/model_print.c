/* model_print.c - a model's tensors for humans (tetris-agent inspect). */
#include "model/model.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

static void human_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", n);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
}

int model_print(const model *m, FILE *out, tetris_error *err)
{
    char total[32];
    human_bytes(m->total_bytes, total, sizeof total);
    size_t name_width = 4;
    for (size_t i = 0; i < m->n_tensors; i++) {
        size_t n = strlen(m->tensors[i].name);
        if (n > name_width)
            name_width = n < 60 ? n : 60;
    }

    fprintf(out, "model:   %s\nformat:  %s\ntensors: %zu (%" PRIu64 " bytes, %s)\n", m->path,
            m->format, m->n_tensors, m->total_bytes, total);
    if (m->n_skipped > 0)
        fprintf(out, "skipped: %zu (string or sparse tensors, not shareable)\n", m->n_skipped);
    fprintf(out, "\n%-*s  %-12s  %-20s  %12s  %-6s  %12s  %s\n", (int)name_width, "NAME", "DTYPE",
            "SHAPE", "BYTES", "ENC", "OFFSET", "DIGEST");
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        char shape[160], digest[TENSOR_DIGEST_HEX_LEN + 1] = "-";
        tensor_shape_format(t->meta.shape, (size_t)t->meta.ndim, shape, sizeof shape);
        if (t->has_digest) {
            tensor_digest_to_hex(&t->meta.digest, digest);
            digest[16] = '\0'; /* enough to tell tensors apart by eye */
        }
        fprintf(out, "%-*.*s  %-12s  %-20s  %12" PRIu64 "  %-6s  %12" PRIu64 "  %s", (int)name_width,
                (int)name_width, t->name, t->meta.dtype, shape, t->meta.nbytes,
                t->encoding == TENSOR_ENC_VARINT ? "varint" : "raw", t->offset, digest);
        if (strcmp(t->source, m->path) != 0)
            fprintf(out, "  (in %s)", t->source);
        fputc('\n', out);
    }
    if (fflush(out) != 0 || ferror(out))
        return tetris_fail(err, TETRIS_E_IO, errno, "write model listing");
    return 0;
}
