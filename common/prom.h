/* prom.h - the Prometheus text exposition format (version 0.0.4) that the
 * daemons serve on /metrics: family headers, samples with labels, and
 * histograms, appended to a textbuf (which records any failure).
 *
 * Usage:
 *   prom_header(&t, "tetris_x_total", "counter", "Things done.");
 *   prom_sample(&t, "tetris_x_total", (prom_label[]){{"verb", v}}, 1, n);
 *
 * Label values are escaped (backslash, double quote, newline) and made
 * valid UTF-8 (a byte that starts no well-formed sequence is written as
 * U+FFFD), so they may come from clients: Prometheus rejects a whole
 * scrape for one invalid label value; metric names, label names, types and help texts are
 * the program's own and are written as they are (a help text holds no
 * backslash or newline). Numbers: integers in decimal; a double with the
 * caller's printf conversion, so each family keeps the precision its unit
 * needs ("%.6f" for microsecond sums, "%.0f" for a whole count). */
#ifndef TETRIS_PROM_H
#define TETRIS_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "common/textbuf.h"

typedef struct prom_label {
    const char *name;
    const char *value;
} prom_label;

/* "# HELP name help" and "# TYPE name type" lines. */
void prom_header(textbuf *t, const char *name, const char *type, const char *help);

/* `name{l1="v1",...} value`; just `name value` when n_labels is 0. */
void prom_sample(textbuf *t, const char *name, const prom_label *labels, size_t n_labels,
                 uint64_t value);
/* The same with a double, written with fmt (a conversion of one double). */
void prom_sample_double(textbuf *t, const char *name, const prom_label *labels, size_t n_labels,
                        const char *fmt, double value);

/* The series of one histogram: name_bucket{labels,le="B"} with cumulative
 * counts for each bound (written "%g") and for "+Inf", then name_sum
 * (written with sum_fmt) and name_count. counts has n_bounds + 1 entries,
 * per bucket, not cumulative: counts[i] observations fell in
 * (bounds[i-1], bounds[i]], counts[n_bounds] above every bound. */
void prom_histogram(textbuf *t, const char *name, const prom_label *labels, size_t n_labels,
                    const double *bounds, const uint64_t *counts, size_t n_bounds, double sum,
                    const char *sum_fmt);

/* The bucket an observation v falls in: the first i with v <= bounds[i]
 * (bounds ascending), n_bounds when v is above them all. */
size_t prom_bucket(const double *bounds, size_t n_bounds, double v);

/* Appends value escaped for use between a label's double quotes. */
void prom_label_value(textbuf *t, const char *value);

/* Copies src into dst (size > 0 bytes, NUL included) as a label value:
 * bytes that start no well-formed UTF-8 sequence become U+FFFD, and a
 * value too long is cut before the code point that does not fit, never
 * inside one. */
void prom_copy_label(char *dst, size_t size, const char *src);

#endif
