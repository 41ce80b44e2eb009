/* seed-manifests.c - writes the manifest of each model given into a
 * directory: the manifest fuzzer's seed corpus, made at fuzz time from the
 * real and synthetic models rather than kept in the repository.
 *
 * Usage: seed-manifests OUTDIR MODEL...   Exit: 0 ok, 1 a model failed. */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "model/manifest.h"
#include "model/model.h"

int main(int argc, char **argv)
{
    log_init(argv[0]);
    if (argc < 3) {
        fprintf(stderr, "usage: %s OUTDIR MODEL...\n", argv[0]);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        model *m = NULL;
        tetris_error err;
        if (model_parse_file(argv[i], &m, &err) < 0 || model_compute_digests(m, &err) < 0) {
            log_error("event=seed-failed model=%s msg=%s", argv[i], LOG_Q(err.msg));
            model_free(m);
            return 1;
        }
        const char *base = strrchr(argv[i], '/');
        char out[4096];
        snprintf(out, sizeof out, "%s/%s.json", argv[1], base != NULL ? base + 1 : argv[i]);
        int ret = manifest_write_file(m, out, &err);
        model_free(m);
        if (ret < 0) {
            log_error("event=seed-failed model=%s msg=%s", argv[i], LOG_Q(err.msg));
            return 1;
        }
    }
    return 0;
}
