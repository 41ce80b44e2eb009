/* cli.h - numbers from the programs' option values (and from environment
 * variables that stand for options).
 *
 * A value is one decimal number and nothing else: not empty, no leading
 * white space, no trailing junk, no sign on an unsigned one, not past what
 * the type holds, within [min, max] (a double also finite). A bad value
 * fails with TETRIS_E_INVAL and a message naming the option, e.g.
 *   --batch: '0' is not an integer in [1, 1024]
 *   --rate: 'x' is not a number >= 0.001
 * which the program prints as a usage error (exit status 2). With opt
 * NULL the message leaves the name out, for a caller that adds where the
 * value came from itself (a setting read from a file or a flag). */
#ifndef TETRIS_CLI_H
#define TETRIS_CLI_H

#include <stdint.h>

#include "common/error.h"

int cli_parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out,
                  tetris_error *err);
int cli_parse_i64(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out,
                  tetris_error *err);
int cli_parse_int(const char *opt, const char *s, int min, int max, int *out, tetris_error *err);
/* max may be INFINITY: then only min bounds the value. */
int cli_parse_double(const char *opt, const char *s, double min, double max, double *out,
                     tetris_error *err);

/* The value of an environment variable that stands for an option, or NULL
 * when it is unset or empty: an empty value means "not set", as Kubernetes
 * and OpenFaaS write a variable they were given no value for. */
const char *cli_env(const char *name);

#endif
