/* cli.c - option values to numbers (see cli.h). */
#include "common/cli.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* strto*() skip leading white space, and strtoull() takes a '-' (and
 * negates): a value must start with its number, signed only if the type
 * is. */
static bool starts_number(const char *s, bool sign)
{
    if (sign && (*s == '-' || *s == '+'))
        s++;
    return isdigit((unsigned char)*s) || *s == '.';
}

/* "OPT: 'S' is not WHAT", or without "OPT: " when opt is NULL. */
static int refuse(tetris_error *err, const char *opt, const char *s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(tetris_error *err, const char *opt, const char *s, const char *fmt, ...)
{
    char what[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tetris_fail(err, TETRIS_E_INVAL, 0, "%s%s'%s' is not %s", opt != NULL ? opt : "",
                       opt != NULL ? ": " : "", s, what);
}

int cli_parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out,
                  tetris_error *err)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = starts_number(s, false) ? strtoull(s, &end, 10) : 0;
    if (end == NULL || *end != '\0' || errno != 0 || v < min || v > max)
        return refuse(err, opt, s, "an integer in [%" PRIu64 ", %" PRIu64 "]", min, max);
    *out = v;
    return 0;
}

int cli_parse_i64(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out,
                  tetris_error *err)
{
    char *end = NULL;
    errno = 0;
    long long v = starts_number(s, true) ? strtoll(s, &end, 10) : 0;
    if (end == NULL || *end != '\0' || errno != 0 || v < min || v > max)
        return refuse(err, opt, s, "an integer in [%" PRId64 ", %" PRId64 "]", min, max);
    *out = v;
    return 0;
}

int cli_parse_int(const char *opt, const char *s, int min, int max, int *out, tetris_error *err)
{
    int64_t v;
    int rc = cli_parse_i64(opt, s, min, max, &v, err);
    if (rc == 0)
        *out = (int)v;
    return rc;
}

int cli_parse_double(const char *opt, const char *s, double min, double max, double *out,
                     tetris_error *err)
{
    char *end = NULL;
    errno = 0;
    double v = starts_number(s, true) ? strtod(s, &end) : NAN;
    if (end == NULL || *end != '\0' || errno != 0 || !isfinite(v) || !(v >= min && v <= max)) {
        if (isinf(max))
            return refuse(err, opt, s, "a number >= %g", min);
        return refuse(err, opt, s, "a number in [%g, %g]", min, max);
    }
    *out = v;
    return 0;
}

const char *cli_env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}
