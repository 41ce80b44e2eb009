/* options.c - a program's command line from one table (see options.h):
 * getopt_long's table built from the specs, the environment read first,
 * every value checked by its type, and the help generated. */
#include "common/options.h"

#include <assert.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/cli.h"
#include "common/config_yaml.h"

/* getopt_long's values for the options without a short letter, and for
 * --help and --version: above every char. */
enum { VAL_SPEC = 256, VAL_HELP = 0x10000, VAL_VERSION = 0x10001 };

/* The help's lines are at most this wide; an option's help starts in a
 * column at most HELP_COLUMN_MAX (longer options put it on the next line). */
#define HELP_WIDTH 79
#define HELP_COLUMN_MAX 28

static size_t count_specs(const struct opt_spec *specs)
{
    size_t n = 0;
    while (specs != NULL && specs[n].name != NULL)
        n++;
    return n;
}

static bool takes_value(const struct opt_spec *s)
{
    return s->type != OPT_TYPE_FLAG;
}

/* The table owns -h and -V unless an option took the letter. */
static bool letter_taken(const struct opt_spec *specs, char letter)
{
    for (size_t i = 0; specs != NULL && specs[i].name != NULL; i++)
        if (specs[i].short_name == letter)
            return true;
    return false;
}

/* ---- values ---- */

static int parse_flag(const char *label, const char *value, bool *out, tetris_error *err)
{
    if (value == NULL || strcmp(value, "1") == 0 || strcmp(value, "true") == 0 ||
        strcmp(value, "yes") == 0)
        *out = true;
    else if (strcmp(value, "0") == 0 || strcmp(value, "false") == 0 || strcmp(value, "no") == 0)
        *out = false;
    else
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: '%s' is not 1, true, yes, 0, false or no",
                           label, value);
    return 0;
}

/* A byte count with its unit, within [min, max] (both 0: any). */
static int parse_bytes(const char *label, const char *value, uint64_t min, uint64_t max,
                       uint64_t *out, tetris_error *err)
{
    uint64_t v;
    if (config_parse_bytes(value, &v, err) < 0) {
        char why[sizeof(err->msg)];
        snprintf(why, sizeof(why), "%s", err->msg);
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: %s", label, why);
    }
    if (!(min == 0 && max == 0) && (v < min || v > max))
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "%s: '%s' is not a byte count in [%" PRIu64 ", %" PRIu64 "]", label,
                           value, min, max);
    *out = v;
    return 0;
}

/* A duration with its unit, in seconds within [min, max] (both 0: any). */
static int parse_seconds(const char *label, const char *value, double min, double max, double *out,
                         tetris_error *err)
{
    double v;
    if (config_parse_seconds(value, &v, err) < 0) {
        char why[sizeof(err->msg)];
        snprintf(why, sizeof(why), "%s", err->msg);
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: %s", label, why);
    }
    if (!(min == 0 && max == 0) && !(v >= min && v <= max))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: '%s' is not a duration in [%g, %g] s",
                           label, value, min, max);
    *out = v;
    return 0;
}

/* Stores value (NULL for a flag given as an option) through the spec;
 * label names where it came from in a message. */
static int apply(const struct opt_spec *s, const char *label, const char *value, tetris_error *err)
{
    bool whole = s->min == 0 && s->max == 0, uwhole = s->umin == 0 && s->umax == 0,
         dwhole = s->dmin == 0 && s->dmax == 0;

    assert(s->dest != NULL || s->type == OPT_TYPE_CUSTOM);
    assert(value != NULL || s->type == OPT_TYPE_FLAG);
    assert(s->parse != NULL || s->type != OPT_TYPE_CUSTOM);
    switch (s->type) {
    case OPT_TYPE_FLAG: return parse_flag(label, value, s->dest, err);
    case OPT_TYPE_STRING: *(const char **)s->dest = value; return 0;
    case OPT_TYPE_INT:
        return cli_parse_int(label, value, whole ? INT_MIN : (int)s->min,
                             whole ? INT_MAX : (int)s->max, s->dest, err);
    case OPT_TYPE_I64:
        return cli_parse_i64(label, value, whole ? INT64_MIN : s->min, whole ? INT64_MAX : s->max,
                             s->dest, err);
    case OPT_TYPE_U64:
        return cli_parse_u64(label, value, s->umin, uwhole ? UINT64_MAX : s->umax, s->dest, err);
    case OPT_TYPE_DOUBLE:
        return cli_parse_double(label, value, dwhole ? -INFINITY : s->dmin,
                                dwhole ? INFINITY : s->dmax, s->dest, err);
    case OPT_TYPE_BYTES: return parse_bytes(label, value, s->umin, s->umax, s->dest, err);
    case OPT_TYPE_SECONDS: return parse_seconds(label, value, s->dmin, s->dmax, s->dest, err);
    case OPT_TYPE_CUSTOM: return s->parse(s, label, value, err);
    }
    return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: unknown option type", label);
}

/* Every option's environment variable that is set, in table order. */
static int apply_env(const struct opt_spec *specs, tetris_error *err)
{
    for (size_t i = 0; specs != NULL && specs[i].name != NULL; i++) {
        const char *v = specs[i].env != NULL ? cli_env(specs[i].env) : NULL;
        int r;
        if (v != NULL && (r = apply(&specs[i], specs[i].env, v, err)) < 0)
            return r;
    }
    return 0;
}

/* ---- the command line ---- */

/* getopt's option string: options_first, ':' for a missing value, the
 * letters. */
static void short_options(const struct opt_program *p, char *buf, size_t size)
{
    size_t len = 0;
    if (p->options_first)
        buf[len++] = '+';
    buf[len++] = ':';
    for (size_t i = 0; p->options != NULL && p->options[i].name != NULL; i++) {
        const struct opt_spec *s = &p->options[i];
        if (s->short_name == 0)
            continue;
        assert(len + 3 < size);
        buf[len++] = s->short_name;
        if (takes_value(s))
            buf[len++] = ':';
    }
    if (!letter_taken(p->options, 'h'))
        buf[len++] = 'h';
    if (!letter_taken(p->options, 'V'))
        buf[len++] = 'V';
    assert(len < size);
    buf[len] = '\0';
}

static const struct opt_spec *spec_for(const struct opt_spec *specs, int val)
{
    for (size_t i = 0; specs != NULL && specs[i].name != NULL; i++)
        if ((specs[i].short_name != 0 && specs[i].short_name == val) || val == VAL_SPEC + (int)i)
            return &specs[i];
    return NULL;
}

int opt_usage_error(const struct opt_program *p, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", p->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", p->name);
    return -1;
}

/* The option getopt stopped at: "--name" as given, or "-x" (also when
 * it was one of several letters in one argument). */
static const char *offending(int argc, char **argv, char *buf, size_t size)
{
    const char *arg = optind - 1 < argc ? argv[optind - 1] : "?";
    if (strncmp(arg, "--", 2) != 0 && optopt > 0 && optopt < VAL_SPEC) {
        snprintf(buf, size, "-%c", optopt);
        return buf;
    }
    return arg;
}

static void print_version(const struct opt_program *p)
{
    size_t first_word = strcspn(p->name, " ");
    printf("%.*s %s\n", (int)first_word, p->name, TETRIS_VERSION);
}

int opt_parse_args(const struct opt_program *p, int argc, char **argv, tetris_error *err)
{
    size_t n = count_specs(p->options);
    cleanup_free struct option *longopts = calloc(n + 3, sizeof(*longopts));
    char shortopts[2 * 64 + 8], buf[8];
    int c, r;

    assert(n <= 64);
    if (longopts == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const struct opt_spec *s = &p->options[i];
        longopts[i] = (struct option){s->name, takes_value(s) ? required_argument : no_argument,
                                      NULL, s->short_name != 0 ? s->short_name : VAL_SPEC + (int)i};
    }
    longopts[n] = (struct option){"help", no_argument, NULL, VAL_HELP};
    longopts[n + 1] = (struct option){"version", no_argument, NULL, VAL_VERSION};
    short_options(p, shortopts, sizeof(shortopts));

    if ((r = apply_env(p->options, err)) < 0)
        return r;
    optind = 0; /* glibc: start over, also after an earlier parse */
    opterr = 0;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const struct opt_spec *s;
        char label[80];
        if (c == '?')
            return tetris_fail(err, TETRIS_E_INVAL, 0, "unrecognized option '%s'",
                               offending(argc, argv, buf, sizeof(buf)));
        if (c == ':')
            return tetris_fail(err, TETRIS_E_INVAL, 0, "option '%s' requires an argument",
                               offending(argc, argv, buf, sizeof(buf)));
        if (c == VAL_HELP || (c == 'h' && !letter_taken(p->options, 'h'))) {
            opt_print_help(p, stdout);
            exit(fflush(stdout) == 0 ? 0 : 1);
        }
        if (c == VAL_VERSION || (c == 'V' && !letter_taken(p->options, 'V'))) {
            print_version(p);
            exit(fflush(stdout) == 0 ? 0 : 1);
        }
        s = spec_for(p->options, c);
        assert(s != NULL);
        snprintf(label, sizeof(label), "--%s", s->name);
        if ((r = apply(s, label, optarg, err)) < 0)
            return r;
    }
    return optind;
}

int opt_parse(const struct opt_program *p, int argc, char **argv)
{
    tetris_error err = {0};
    int first = opt_parse_args(p, argc, argv, &err);
    return first < 0 ? opt_usage_error(p, "%s", err.msg) : first;
}

/* ---- values from elsewhere ---- */

/* name equals the option's, '_' standing for '-'. */
static bool same_name(const char *option, const char *name)
{
    for (; *option != '\0' && *name != '\0'; option++, name++)
        if (*option != (*name == '_' ? '-' : *name))
            return false;
    return *option == '\0' && *name == '\0';
}

const struct opt_spec *opt_find(const struct opt_program *p, const char *name)
{
    for (size_t i = 0; p->options != NULL && p->options[i].name != NULL; i++)
        if (same_name(p->options[i].name, name))
            return &p->options[i];
    return NULL;
}

int opt_apply(const struct opt_program *p, const char *name, const char *value, const char *where,
              tetris_error *err)
{
    const struct opt_spec *s = opt_find(p, name);
    if (s == NULL)
        return tetris_fail(err, TETRIS_E_NOTFOUND, 0, "%s: unknown setting \"%s\"", where, name);
    return apply(s, where, value, err);
}

/* ---- help ---- */

/* text from column col (where the cursor is) to HELP_WIDTH, each further
 * line indented to indent; a '\n' in text breaks the line there and keeps
 * the spaces after it. */
static void print_wrapped(FILE *out, const char *text, int col, int indent)
{
    bool line_start = true;
    for (const char *s = text; *s != '\0';) {
        if (*s == '\n') {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
            line_start = true;
            s++;
            while (*s == ' ') {
                fputc(' ', out);
                col++;
                s++;
            }
            continue;
        }
        if (*s == ' ') {
            s++;
            continue;
        }
        int w = (int)strcspn(s, " \n");
        if (!line_start && col + 1 + w > HELP_WIDTH) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
            line_start = true;
        }
        if (!line_start) {
            fputc(' ', out);
            col++;
        }
        fwrite(s, 1, (size_t)w, out);
        col += w;
        s += w;
        line_start = false;
    }
    fputc('\n', out);
}

/* "-x, --name META", or "    --name META" in a table with letters and
 * "--name META" in one without. */
static int option_column(const struct opt_spec *s, bool letters, char *buf, size_t size)
{
    char letter[8] = "";
    if (s->short_name != 0)
        snprintf(letter, sizeof(letter), "-%c, ", s->short_name);
    else if (letters)
        snprintf(letter, sizeof(letter), "    ");
    int len = snprintf(buf, size, "%s--%s%s%s", letter, s->name, s->meta != NULL ? " " : "",
                       s->meta != NULL ? s->meta : "");
    return len < (int)size ? len : (int)size - 1;
}

static void print_option(FILE *out, const struct opt_spec *s, bool letters, int help_col)
{
    char left[128], help[1024];
    int len = option_column(s, letters, left, sizeof(left));
    fprintf(out, "  %s", left);
    if (2 + len + 2 > help_col) {
        fprintf(out, "\n%*s", help_col, "");
    } else {
        fprintf(out, "%*s", help_col - 2 - len, "");
    }
    snprintf(help, sizeof(help), "%s%s%s", s->env != NULL ? s->env : "",
             s->env != NULL && s->help != NULL ? ": " : "", s->help != NULL ? s->help : "");
    print_wrapped(out, help, help_col, help_col);
}

/* "usage: NAME SYNOPSIS", a '\n' in it aligning the next line under it. */
static void print_synopsis(FILE *out, const struct opt_program *p)
{
    int indent = (int)strlen("usage: ") + (int)strlen(p->name) + 1;
    fprintf(out, "usage: %s ", p->name);
    for (const char *s = p->synopsis != NULL ? p->synopsis : "[OPTION]..."; *s != '\0'; s++) {
        fputc(*s, out);
        if (*s == '\n')
            fprintf(out, "%*s", indent, "");
    }
    fputc('\n', out);
}

void opt_print_help(const struct opt_program *p, FILE *out)
{
    /* -h and -V always work; the help shows them in a table with letters. */
    bool letters = false;
    for (size_t i = 0; p->options != NULL && p->options[i].name != NULL; i++)
        letters = letters || p->options[i].short_name != 0;
    bool show_h = letters && !letter_taken(p->options, 'h');
    bool show_v = letters && !letter_taken(p->options, 'V');
    const struct opt_spec help = {.name = "help",
                                  .short_name = show_h ? 'h' : 0,
                                  .help = "print this help and exit"};
    const struct opt_spec version = {.name = "version",
                                     .short_name = show_v ? 'V' : 0,
                                     .help = "print the version and exit"};
    char left[128];
    int width = option_column(&version, letters, left, sizeof(left));

    for (size_t i = 0; p->options != NULL && p->options[i].name != NULL; i++) {
        int len = option_column(&p->options[i], letters, left, sizeof(left));
        if (2 + len + 2 <= HELP_COLUMN_MAX && len > width)
            width = len;
    }
    print_synopsis(out, p);
    if (p->about != NULL)
        fprintf(out, "\n%s", p->about);
    fprintf(out, "\nOptions:\n");
    for (size_t i = 0; p->options != NULL && p->options[i].name != NULL; i++)
        print_option(out, &p->options[i], letters, 2 + width + 2);
    print_option(out, &help, letters, 2 + width + 2);
    print_option(out, &version, letters, 2 + width + 2);
    if (p->epilogue != NULL)
        fprintf(out, "\n%s", p->epilogue);
}
