/* tetris-bench-formats.c - what indexing a model costs: parsing its format, hashing
 * every tensor (SHA-256 + CRC32 identity), and writing the manifest; medians
 * over repetitions, one Markdown table row per model.
 *
 * Usage: tetris-bench-formats [--reps N] MODEL...
 * Exit status: 0 ok, 1 a model failed, 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/options.h"
#include "model/manifest.h"
#include "model/model.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One model: parse, digest and manifest times (ms), medians of reps. */
static int bench_model(const char *path, int reps)
{
    double parse[reps], digest[reps], manifest[reps];
    model *m = NULL;
    tetris_error err;
    for (int r = 0; r < reps; r++) {
        double t0 = clock_now_ms();
        if (model_parse_file(path, &m, &err) < 0) {
            log_error("event=bench-failed model=%s msg=%s", path, LOG_Q(err.msg));
            return -1;
        }
        double t1 = clock_now_ms();
        if (model_compute_digests(m, &err) < 0) {
            log_error("event=bench-failed model=%s msg=%s", path, LOG_Q(err.msg));
            model_free(m);
            return -1;
        }
        double t2 = clock_now_ms();
        char *json = manifest_to_json(m, &err);
        double t3 = clock_now_ms();
        if (json == NULL) {
            log_error("event=bench-failed model=%s msg=%s", path, LOG_Q(err.msg));
            model_free(m);
            return -1;
        }
        free(json);
        parse[r] = t1 - t0;
        digest[r] = t2 - t1;
        manifest[r] = t3 - t2;
        if (r + 1 < reps)
            model_free(m);
    }
    const char *base = strrchr(path, '/');
    double mib = (double)m->total_bytes / (1024.0 * 1024.0);
    double d = median(digest, reps);
    printf("| %s | %s | %zu | %.1f | %.2f | %.1f | %.2f | %.2f |\n", base ? base + 1 : path,
           m->format, m->n_tensors, mib, median(parse, reps), d,
           d > 0 ? (double)m->total_bytes / (d / 1e3) / 1e9 : 0.0, median(manifest, reps));
    model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 5, i;
    const struct opt_spec specs[] = {
        {.name = "reps",
         .type = OPT_TYPE_INT,
         .dest = &reps,
         .min = 1,
         .max = 1000,
         .meta = "N",
         .help = "timed runs per model, of which the median (default 5)"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-bench-formats",
        .synopsis = "[--reps N] MODEL...",
        .about = "Times parsing, hashing (SHA-256 + CRC32) and manifest writing per model;\n"
                 "prints a Markdown table of medians.\n",
        .options = specs,
        .epilogue = "Exit status: 0 ok, 1 a model failed, 2 usage.\n",
    };

    log_init(argv[0]);
    log_set_level(LOG_LEVEL_WARN);
    if ((i = opt_parse(&prog, argc, argv)) < 0)
        return 2;
    if (i >= argc)
        return opt_usage_error(&prog, "expected a MODEL"), 2;
    printf("| model | format | tensors | MiB | parse ms | hash ms | hash GB/s | manifest ms |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
    int failed = 0;
    for (; i < argc; i++)
        failed |= bench_model(argv[i], reps) < 0;
    return failed;
}
