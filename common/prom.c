/* prom.c - Prometheus text exposition writers (see prom.h). */
#include "common/prom.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/utf8.h"

void prom_header(textbuf *t, const char *name, const char *type, const char *help)
{
    textbuf_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void prom_label_value(textbuf *t, const char *value)
{
    const unsigned char *s = (const unsigned char *)value;
    size_t left = strlen(value);
    while (left > 0) {
        size_t n = utf8_sequence(s, left);
        if (n == 0)
            textbuf_puts(t, UTF8_REPLACEMENT);
        else if (*s == '\n' || *s == '"' || *s == '\\')
            textbuf_puts(t, *s == '\n' ? "\\n" : *s == '"' ? "\\\"" : "\\\\");
        else
            textbuf_append(t, (const char *)s, n);
        left -= n != 0 ? n : 1;
        s += n != 0 ? n : 1;
    }
}

void prom_copy_label(char *dst, size_t size, const char *src)
{
    utf8_copy_valid(dst, size, src);
}

/* name, then {labels} plus le="..." when le is not NULL; nothing after
 * the name when there are no labels. */
static void series(textbuf *t, const char *name, const char *suffix, const prom_label *labels,
                   size_t n_labels, const char *le)
{
    textbuf_puts(t, name);
    textbuf_puts(t, suffix);
    if (n_labels == 0 && le == NULL)
        return;
    textbuf_puts(t, "{");
    for (size_t i = 0; i < n_labels; i++) {
        textbuf_printf(t, "%s%s=\"", i > 0 ? "," : "", labels[i].name);
        prom_label_value(t, labels[i].value);
        textbuf_puts(t, "\"");
    }
    if (le != NULL)
        textbuf_printf(t, "%sle=\"%s\"", n_labels > 0 ? "," : "", le);
    textbuf_puts(t, "}");
}

static void value_u64(textbuf *t, uint64_t value)
{
    textbuf_printf(t, " %" PRIu64 "\n", value);
}

static void value_double(textbuf *t, const char *fmt, double value)
{
    textbuf_puts(t, " ");
    textbuf_printf(t, fmt, value);
    textbuf_puts(t, "\n");
}

void prom_sample(textbuf *t, const char *name, const prom_label *labels, size_t n_labels,
                 uint64_t value)
{
    series(t, name, "", labels, n_labels, NULL);
    value_u64(t, value);
}

void prom_sample_double(textbuf *t, const char *name, const prom_label *labels, size_t n_labels,
                        const char *fmt, double value)
{
    series(t, name, "", labels, n_labels, NULL);
    value_double(t, fmt, value);
}

void prom_histogram(textbuf *t, const char *name, const prom_label *labels, size_t n_labels,
                    const double *bounds, const uint64_t *counts, size_t n_bounds, double sum,
                    const char *sum_fmt)
{
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= n_bounds; i++) {
        char le[32] = "+Inf";
        if (i < n_bounds)
            snprintf(le, sizeof le, "%g", bounds[i]);
        cumulative += counts[i];
        series(t, name, "_bucket", labels, n_labels, le);
        value_u64(t, cumulative);
    }
    series(t, name, "_sum", labels, n_labels, NULL);
    value_double(t, sum_fmt, sum);
    series(t, name, "_count", labels, n_labels, NULL);
    value_u64(t, cumulative);
}

size_t prom_bucket(const double *bounds, size_t n_bounds, double v)
{
    size_t i = 0;
    while (i < n_bounds && v > bounds[i])
        i++;
    return i;
}
