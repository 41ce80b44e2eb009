/* cli.c - option values to numbers (see cli.h). */
#include "common/cli.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
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

int cli_parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out,
                  tetris_error *err)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = starts_number(s, false) ? strtoull(s, &end, 10) : 0;
    if (end == NULL || *end != '\0' || errno != 0 || v < min || v > max)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "%s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]", opt, s,
                           min, max);
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
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "%s: '%s' is not an integer in [%" PRId64 ", %" PRId64 "]", opt, s,
                           min, max);
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
            return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: '%s' is not a number >= %g", opt, s,
                               min);
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: '%s' is not a number in [%g, %g]", opt,
                           s, min, max);
    }
    *out = v;
    return 0;
}
