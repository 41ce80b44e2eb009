/* options.h - a program's command line from one table.
 *
 * A program declares its options once, as an array of struct opt_spec
 * (name, short letter, type, range, where the value goes, the environment
 * variable that stands for it, its help), and opt_parse() does the rest
 * that every program used to wire by hand: getopt_long's table, the
 * environment, the checks on each value, --help (a usage text generated
 * from the table between the program's own synopsis, description and
 * epilogue) and --version. A program with commands (tetris-agent COMMAND)
 * declares one program per command, named "tetris-agent load".
 *
 * Order of precedence, lowest first: the default already in *dest, the
 * environment variable (an empty value is unset, as cli_env() says), the
 * option. Every value is checked where it is read, with the messages of
 * cli.h naming the option or the variable:
 *   tetris-function: --batch: '0' is not an integer in [1, 1024]
 *   Try 'tetris-function --help'.
 * and the caller exits with its usage status (2 in every program here). */
#ifndef TETRIS_OPTIONS_H
#define TETRIS_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"

enum opt_type {
    OPT_TYPE_FLAG,    /* no value: *(bool *)dest = true; from the environment
                       * 1/true/yes or 0/false/no */
    OPT_TYPE_STRING,  /* *(const char **)dest = the value (argv's or environ's) */
    OPT_TYPE_INT,     /* *(int *)dest, in [min, max] */
    OPT_TYPE_I64,     /* *(int64_t *)dest, in [min, max] */
    OPT_TYPE_U64,     /* *(uint64_t *)dest, in [umin, umax] */
    OPT_TYPE_DOUBLE,  /* *(double *)dest, finite, in [dmin, dmax] */
    OPT_TYPE_BYTES,   /* *(uint64_t *)dest, "4096", "64Mi", "2G" (config_parse_bytes),
                       * in [umin, umax] */
    OPT_TYPE_SECONDS, /* *(double *)dest, "30", "500ms", "5m" (config_parse_seconds),
                       * in [dmin, dmax] */
    OPT_TYPE_CUSTOM,  /* parse() takes the value */
};

struct opt_spec;

/* A custom option's parser: stores value through spec->dest (or wherever
 * the program wants) or fails with a message that starts with label, the
 * option ("--digests") or the environment variable the value came from. */
typedef int (*opt_parse_fn)(const struct opt_spec *spec, const char *label, const char *value,
                            tetris_error *err);

/* One option. A range whose bounds are both 0 is the type's whole range
 * (doubles: any finite number); only the fields of the option's type
 * count. A table ends with an entry whose name is NULL. */
struct opt_spec {
    const char *name; /* the long name, without "--" */
    char short_name;  /* -x, or 0 for none */
    enum opt_type type;
    void *dest;
    int64_t min, max;    /* OPT_TYPE_INT, OPT_TYPE_I64 */
    uint64_t umin, umax; /* OPT_TYPE_U64, OPT_TYPE_BYTES */
    double dmin, dmax;   /* OPT_TYPE_DOUBLE, OPT_TYPE_SECONDS; dmax may be INFINITY */
    opt_parse_fn parse;  /* OPT_TYPE_CUSTOM */
    const char *env;     /* the environment variable that stands for it, or NULL */
    const char *meta;    /* the value's name in the help ("FILE"); NULL for a flag */
    const char *help;    /* one paragraph; the help wraps it; '\n' breaks a line */
};

/* A program, or one command of a program. */
struct opt_program {
    const char *name;     /* "tetris-function"; a command: "tetris-agent load" */
    const char *synopsis; /* after "usage: NAME "; NULL: "[OPTION]..."; '\n' starts
                           * another usage line */
    const char *about;    /* what it does: printed after the usage line */
    const struct opt_spec *options;
    const char *epilogue; /* after the options: HTTP routes, output, exit status */
    /* Options end at the first operand (a command's name, or the command
     * line of a program to run); otherwise they may follow operands. */
    bool options_first;
};

/* Reads the environment, then argv, into the table's destinations.
 * Returns the index in argv of the first operand (argc when there is
 * none), or -1 after printing a usage error on stderr. --help prints the
 * help on stdout and --version "NAME VERSION" (the program's first word),
 * and both exit(0). argv[0] is skipped, so a command parses
 * opt_parse(cmd, argc - 1, argv + 1). */
int opt_parse(const struct opt_program *p, int argc, char **argv);

/* opt_parse() that reports instead of printing: a usage error returns
 * -TETRIS_E_INVAL with its message in err (the option's label first);
 * --help and --version still print and exit(0). For a program that
 * parses its command line more than once (a daemon re-reading its
 * settings) or reports errors its own way. */
int opt_parse_args(const struct opt_program *p, int argc, char **argv, tetris_error *err);

/* The option named name in p's table, where '_' stands for '-'
 * ("keep_alive" finds "keep-alive"); NULL if none. */
const struct opt_spec *opt_find(const struct opt_program *p, const char *name);

/* Applies one named value from elsewhere than argv (a settings file), with
 * the option's own parser, range and messages; where names it in a message
 * ("settings.yaml:3: keep_alive"). A flag takes 1/true/yes or 0/false/no.
 * -TETRIS_E_NOTFOUND if no option has that name. */
int opt_apply(const struct opt_program *p, const char *name, const char *value, const char *where,
              tetris_error *err);

/* The help opt_parse() prints for --help. */
void opt_print_help(const struct opt_program *p, FILE *out);

/* A usage error found after parsing ("no model: set TETRIS_MODEL or
 * --model"): prints "NAME: MESSAGE" and "Try 'NAME --help'." on stderr.
 * Returns -1. */
int opt_usage_error(const struct opt_program *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
