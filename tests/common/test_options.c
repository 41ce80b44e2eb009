/* test_options.c - the option table (common/options.h): every type into
 * its destination, ranges refused with a message naming the option, the
 * environment read first and the option winning, an empty variable unset,
 * unknown options and missing values as usage errors, operands and
 * options_first, --help and --version (in a child: they exit), the
 * generated help's layout, line by line, and values applied by name from
 * elsewhere (opt_apply: a settings file). */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/options.h"
#include "tests/lib/unit.h"

/* Everything a table below writes. */
struct values {
    bool flag;
    const char *string;
    int count;
    int64_t offset;
    uint64_t seed;
    double rate;
    uint64_t bytes;
    double timeout;
    int custom_calls;
    const char *custom;
};

static struct values v;

/* Takes "left" or "right"; anything else is refused naming the label. */
static int parse_side(const struct opt_spec *spec, const char *label, const char *value,
                      tetris_error *err)
{
    struct values *out = spec->dest;
    out->custom_calls++;
    if (strcmp(value, "left") != 0 && strcmp(value, "right") != 0)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: want left or right, not '%s'", label,
                           value);
    out->custom = value;
    return 0;
}

static const struct opt_spec specs[] = {
    {.name = "flag",
     .short_name = 'f',
     .type = OPT_TYPE_FLAG,
     .dest = &v.flag,
     .env = "TOPT_FLAG",
     .help = "a flag"},
    {.name = "string",
     .short_name = 's',
     .type = OPT_TYPE_STRING,
     .dest = &v.string,
     .env = "TOPT_STRING",
     .meta = "S",
     .help = "a string"},
    {.name = "count",
     .type = OPT_TYPE_INT,
     .dest = &v.count,
     .min = 1,
     .max = 1024,
     .env = "TOPT_COUNT",
     .meta = "N",
     .help = "a count"},
    {.name = "offset",
     .type = OPT_TYPE_I64,
     .dest = &v.offset,
     .meta = "N",
     .help = "any 64-bit integer"},
    {.name = "seed",
     .type = OPT_TYPE_U64,
     .dest = &v.seed,
     .umin = 0,
     .umax = UINT32_MAX,
     .meta = "N",
     .help = "a seed"},
    {.name = "rate",
     .type = OPT_TYPE_DOUBLE,
     .dest = &v.rate,
     .dmin = 0.001,
     .dmax = INFINITY,
     .meta = "RPS",
     .help = "a rate"},
    {.name = "bytes",
     .type = OPT_TYPE_BYTES,
     .dest = &v.bytes,
     .umin = 4096,
     .umax = 1ULL << 34,
     .env = "TOPT_BYTES",
     .meta = "N",
     .help = "a size"},
    {.name = "timeout",
     .type = OPT_TYPE_SECONDS,
     .dest = &v.timeout,
     .dmin = 0.001,
     .dmax = 3600,
     .meta = "T",
     .help = "a duration"},
    {.name = "side",
     .type = OPT_TYPE_CUSTOM,
     .dest = &v,
     .parse = parse_side,
     .meta = "SIDE",
     .help = "left or right"},
    {0},
};

static const struct opt_program prog = {.name = "topt", .options = specs};

/* stderr into a file for the rest of this (forked) test. */
static FILE *err_file;

static void capture_stderr(void)
{
    err_file = tmpfile();
    ck_assert_ptr_nonnull(err_file);
    fflush(stderr);
    ck_assert_int_ge(dup2(fileno(err_file), STDERR_FILENO), 0);
}

static const char *captured(void)
{
    static char text[4096];
    fflush(stderr);
    size_t n = fread(text, 1, sizeof(text) - 1, (rewind(err_file), err_file));
    text[n] = '\0';
    return text;
}

static void setup(void)
{
    memset(&v, 0, sizeof(v));
    v.count = 7;
    v.string = "default";
    unsetenv("TOPT_FLAG");
    unsetenv("TOPT_STRING");
    unsetenv("TOPT_COUNT");
    unsetenv("TOPT_BYTES");
    capture_stderr();
}

/* Parses a NULL-ended argument list after "topt". */
static int parse_with(const struct opt_program *p, const char *first, ...)
{
    static char *argv[32];
    va_list ap;
    int argc = 0;
    argv[argc++] = (char *)"topt";
    va_start(ap, first);
    for (const char *a = first; a != NULL; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    return opt_parse(p, argc, argv);
}

#define parse(...) parse_with(&prog, __VA_ARGS__, (const char *)NULL)

/* A value from elsewhere (a settings file): found by name, '_' for '-',
 * through the option's own parser and range, named by where it came from. */
START_TEST(apply_named_value)
{
    tetris_error err = {0};
    ck_assert_ptr_eq(opt_find(&prog, "count"), &specs[2]);
    ck_assert_ptr_null(opt_find(&prog, "cou"));
    ck_assert_int_eq(opt_apply(&prog, "count", "12", "f.yaml:1: count", &err), 0);
    ck_assert_int_eq(v.count, 12);
    ck_assert_int_eq(opt_apply(&prog, "timeout", "2m", "f.yaml:2: timeout", &err), 0);
    ck_assert_double_eq(v.timeout, 120);
    ck_assert_int_eq(opt_apply(&prog, "flag", "yes", "f.yaml:3: flag", &err), 0);
    ck_assert(v.flag);
    ck_assert_int_eq(opt_apply(&prog, "side", "right", "f.yaml:4: side", &err), 0);
    ck_assert_str_eq(v.custom, "right");
    ck_assert_int_lt(opt_apply(&prog, "count", "0", "f.yaml:5: count", &err), 0);
    ck_assert_str_eq(err.msg, "f.yaml:5: count: '0' is not an integer in [1, 1024]");
    ck_assert_int_eq(v.count, 12);
    ck_assert_int_eq(opt_apply(&prog, "no_such", "1", "f.yaml:6: no_such", &err),
                     -TETRIS_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown setting \"no_such\""));
    ck_assert_str_eq(captured(), "");
}
END_TEST

START_TEST(apply_dashes_and_underscores)
{
    static const struct opt_spec dashed[] = {
        {.name = "keep-alive", .type = OPT_TYPE_SECONDS, .dest = &v.timeout, .meta = "T"},
        {0},
    };
    static const struct opt_program p = {.name = "topt", .options = dashed};
    tetris_error err = {0};
    ck_assert_int_eq(opt_apply(&p, "keep_alive", "5m", "keep_alive", &err), 0);
    ck_assert_double_eq(v.timeout, 300);
    ck_assert_int_eq(opt_apply(&p, "keep-alive", "1", "keep-alive", &err), 0);
    ck_assert_double_eq(v.timeout, 1);
    ck_assert_ptr_null(opt_find(&p, "keep_alive_"));
    ck_assert_ptr_null(opt_find(&p, "keep"));
}
END_TEST

/* opt_parse_args reports a usage error in err and prints nothing. */
START_TEST(parse_args_reports)
{
    char *argv[] = {"topt", "--count", "0", NULL};
    char *argv2[] = {"topt", "--bogus", NULL};
    tetris_error err = {0};
    ck_assert_int_eq(opt_parse_args(&prog, 3, argv, &err), -TETRIS_E_INVAL);
    ck_assert_str_eq(err.msg, "--count: '0' is not an integer in [1, 1024]");
    ck_assert_int_eq(opt_parse_args(&prog, 2, argv2, &err), -TETRIS_E_INVAL);
    ck_assert_str_eq(err.msg, "unrecognized option '--bogus'");
    ck_assert_str_eq(captured(), "");
}
END_TEST

START_TEST(every_type)
{
    ck_assert_int_eq(parse("-f", "--string", "x", "--count", "1024", "--offset", "-9", "--seed",
                           "4294967295", "--rate", "0.5", "--bytes", "64Mi", "--timeout", "500ms",
                           "--side", "left"),
                     18);
    ck_assert(v.flag);
    ck_assert_str_eq(v.string, "x");
    ck_assert_int_eq(v.count, 1024);
    ck_assert_int_eq(v.offset, -9);
    ck_assert_uint_eq(v.seed, UINT32_MAX);
    ck_assert_double_eq(v.rate, 0.5);
    ck_assert_uint_eq(v.bytes, 64ULL << 20);
    ck_assert_double_eq_tol(v.timeout, 0.5, 1e-12);
    ck_assert_int_eq(v.custom_calls, 1);
    ck_assert_str_eq(v.custom, "left");
    ck_assert_str_eq(captured(), "");
}
END_TEST

START_TEST(defaults_stay)
{
    ck_assert_int_eq(parse(NULL), 1);
    ck_assert(!v.flag);
    ck_assert_str_eq(v.string, "default");
    ck_assert_int_eq(v.count, 7);
    ck_assert_int_eq(v.custom_calls, 0);
}
END_TEST

/* Each value is refused with the option's name, the value and the range,
 * then the hint; nothing after it is read. */
static void refused(const char *opt, const char *value, const char *message)
{
    char want[512];
    ck_assert_int_eq(parse(opt, value, "--count", "3"), -1);
    snprintf(want, sizeof(want), "topt: %s\nTry 'topt --help'.\n", message);
    ck_assert_str_eq(captured(), want);
    ck_assert_int_eq(v.count, 7);
}

START_TEST(int_range)
{
    refused("--count", "0", "--count: '0' is not an integer in [1, 1024]");
}
END_TEST

START_TEST(int_junk)
{
    refused("--count", "12x", "--count: '12x' is not an integer in [1, 1024]");
}
END_TEST

START_TEST(u64_range)
{
    refused("--seed", "4294967296", "--seed: '4294967296' is not an integer in [0, 4294967295]");
}
END_TEST

START_TEST(u64_sign)
{
    refused("--seed", "-1", "--seed: '-1' is not an integer in [0, 4294967295]");
}
END_TEST

START_TEST(double_range)
{
    refused("--rate", "0", "--rate: '0' is not a number >= 0.001");
}
END_TEST

START_TEST(bytes_range)
{
    refused("--bytes", "4095", "--bytes: '4095' is not a byte count in [4096, 17179869184]");
}
END_TEST

START_TEST(bytes_unit)
{
    refused("--bytes", "4Xi", "--bytes: bad byte count \"4Xi\" (suffixes: Ki Mi Gi Ti k M G T)");
}
END_TEST

START_TEST(seconds_range)
{
    refused("--timeout", "2h", "--timeout: '2h' is not a duration in [0.001, 3600] s");
}
END_TEST

START_TEST(custom_refused)
{
    refused("--side", "up", "--side: want left or right, not 'up'");
}
END_TEST

START_TEST(env_then_option)
{
    setenv("TOPT_COUNT", "12", 1);
    setenv("TOPT_STRING", "from-env", 1);
    setenv("TOPT_BYTES", "8Ki", 1);
    setenv("TOPT_FLAG", "yes", 1);
    ck_assert_int_eq(parse("--count", "13"), 3);
    ck_assert_int_eq(v.count, 13);
    ck_assert_str_eq(v.string, "from-env");
    ck_assert_uint_eq(v.bytes, 8192);
    ck_assert(v.flag);
    ck_assert_int_eq(parse("--string", "from-option"), 3);
    ck_assert_int_eq(v.count, 12);
    ck_assert_str_eq(v.string, "from-option");
}
END_TEST

START_TEST(env_bytes_range)
{
    /* 1Ki is under the minimum: refused naming the variable. */
    setenv("TOPT_BYTES", "1Ki", 1);
    ck_assert_int_eq(parse("--bytes", "8Ki"), -1);
    ck_assert_str_eq(captured(),
                     "topt: TOPT_BYTES: '1Ki' is not a byte count in [4096, 17179869184]\n"
                     "Try 'topt --help'.\n");
}
END_TEST

START_TEST(env_empty_is_unset)
{
    setenv("TOPT_COUNT", "", 1);
    setenv("TOPT_STRING", "", 1);
    ck_assert_int_eq(parse(NULL), 1);
    ck_assert_int_eq(v.count, 7);
    ck_assert_str_eq(v.string, "default");
}
END_TEST

START_TEST(env_bad_value)
{
    setenv("TOPT_COUNT", "many", 1);
    ck_assert_int_eq(parse(NULL), -1);
    ck_assert_str_eq(captured(), "topt: TOPT_COUNT: 'many' is not an integer in [1, 1024]\n"
                                 "Try 'topt --help'.\n");
}
END_TEST

START_TEST(env_bad_flag)
{
    setenv("TOPT_FLAG", "maybe", 1);
    ck_assert_int_eq(parse(NULL), -1);
    ck_assert_str_eq(captured(), "topt: TOPT_FLAG: 'maybe' is not 1, true, yes, 0, false or no\n"
                                 "Try 'topt --help'.\n");
    setenv("TOPT_FLAG", "0", 1);
    v.flag = true;
    ck_assert_int_eq(parse(NULL), 1);
    ck_assert(!v.flag);
}
END_TEST

START_TEST(unknown_option)
{
    ck_assert_int_eq(parse("--count", "3", "--no-such-option"), -1);
    ck_assert_str_eq(captured(), "topt: unrecognized option '--no-such-option'\n"
                                 "Try 'topt --help'.\n");
}
END_TEST

START_TEST(unknown_letter)
{
    ck_assert_int_eq(parse("-fz"), -1);
    ck_assert_str_eq(captured(), "topt: unrecognized option '-z'\nTry 'topt --help'.\n");
}
END_TEST

START_TEST(missing_value)
{
    ck_assert_int_eq(parse("--count"), -1);
    ck_assert_str_eq(captured(), "topt: option '--count' requires an argument\n"
                                 "Try 'topt --help'.\n");
}
END_TEST

START_TEST(missing_value_short)
{
    ck_assert_int_eq(parse("-s"), -1);
    ck_assert_str_eq(captured(), "topt: option '-s' requires an argument\nTry 'topt --help'.\n");
}
END_TEST

START_TEST(flag_takes_no_value)
{
    ck_assert_int_eq(parse("--flag=1"), -1);
    ck_assert_ptr_nonnull(strstr(captured(), "Try 'topt --help'."));
}
END_TEST

START_TEST(operands_permuted)
{
    char *argv[] = {"topt", "a", "--count", "5", "b", "-s", "t", NULL};
    ck_assert_int_eq(opt_parse(&prog, 7, argv), 5);
    ck_assert_int_eq(v.count, 5);
    ck_assert_str_eq(argv[5], "a");
    ck_assert_str_eq(argv[6], "b");
}
END_TEST

START_TEST(options_first)
{
    static const struct opt_program first = {.name = "topt",
                                             .options = specs,
                                             .options_first = true};
    char *argv[] = {"topt", "--count", "5", "cmd", "--count", "6", NULL};
    ck_assert_int_eq(opt_parse(&first, 6, argv), 3);
    ck_assert_int_eq(v.count, 5);
    ck_assert_str_eq(argv[3], "cmd");
}
END_TEST

START_TEST(double_dash_ends_options)
{
    char *argv[] = {"topt", "--", "--count", NULL};
    ck_assert_int_eq(opt_parse(&prog, 3, argv), 2);
    ck_assert_int_eq(v.count, 7);
}
END_TEST

START_TEST(usage_error_after_parse)
{
    ck_assert_int_eq(opt_usage_error(&prog, "no model: set %s or --model", "TOPT_MODEL"), -1);
    ck_assert_str_eq(captured(), "topt: no model: set TOPT_MODEL or --model\n"
                                 "Try 'topt --help'.\n");
}
END_TEST

/* Runs opt_parse(p, argv) in a child; its stdout and exit status. */
static int run_child(const struct opt_program *p, char **argv, char *out, size_t size)
{
    int fds[2], status;
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int argc = 0;
        while (argv[argc] != NULL)
            argc++;
        dup2(fds[1], STDOUT_FILENO);
        opt_parse(p, argc, argv);
        _exit(99); /* --help and --version exit themselves */
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t got;
    while (n < size - 1 && (got = read(fds[0], out + n, size - 1 - n)) > 0)
        n += (size_t)got;
    out[n] = '\0';
    close(fds[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}

START_TEST(version)
{
    static const struct opt_program cmd = {.name = "topt run", .options = specs};
    char out[256];
    char *argv[] = {"topt", "--count", "2", "--version", NULL};
    ck_assert_int_eq(run_child(&prog, argv, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "topt " TETRIS_VERSION "\n");
    /* A command says its program's name. */
    char *cmd_argv[] = {"run", "-V", NULL};
    ck_assert_int_eq(run_child(&cmd, cmd_argv, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "topt " TETRIS_VERSION "\n");
}
END_TEST

START_TEST(help_exits)
{
    char out[8192];
    char *argv[] = {"topt", "--help", "--no-such-option", NULL};
    ck_assert_int_eq(run_child(&prog, argv, out, sizeof(out)), 0);
    ck_assert(strncmp(out, "usage: topt [OPTION]...\n", 24) == 0);
    char *short_argv[] = {"topt", "-h", NULL};
    ck_assert_int_eq(run_child(&prog, short_argv, out, sizeof(out)), 0);
    ck_assert(strncmp(out, "usage: topt", 11) == 0);
}
END_TEST

/* The layout: synopsis lines aligned, the options in one column, the
 * environment variable first, long help wrapped under its column, an
 * option too long for the column with its help on the next line, '\n'
 * kept, then --help and --version, then the epilogue. */
START_TEST(help_layout)
{
    static int n;
    static const struct opt_spec layout_specs[] = {
        {.name = "model",
         .short_name = 'm',
         .type = OPT_TYPE_STRING,
         .dest = &v.string,
         .env = "TOPT_MODEL",
         .meta = "FILE",
         .help = "the ONNX model to serve; its weights are mapped from the tensor store when "
                 "there is one"},
        {.name = "batch",
         .type = OPT_TYPE_INT,
         .dest = &n,
         .meta = "B",
         .help = "most requests per batch (default 1)"},
        {.name = "a-rather-long-option-name",
         .type = OPT_TYPE_INT,
         .dest = &n,
         .meta = "N",
         .help = "one:\n  - a listed item"},
        {0},
    };
    static const struct opt_program layout = {
        .name = "topt",
        .synopsis = "[OPTION]... MODEL\n--list",
        .about = "Serves a model.\n",
        .options = layout_specs,
        .epilogue = "Exit status: 0 ok, 2 usage.\n",
    };
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    opt_print_help(&layout, out);
    fclose(out);
    ck_assert_str_eq(text, "usage: topt [OPTION]... MODEL\n"
                           "            --list\n"
                           "\n"
                           "Serves a model.\n"
                           "\n"
                           "Options:\n"
                           "  -m, --model FILE  TOPT_MODEL: the ONNX model to serve; its weights "
                           "are mapped\n"
                           "                    from the tensor store when there is one\n"
                           "      --batch B     most requests per batch (default 1)\n"
                           "      --a-rather-long-option-name N\n"
                           "                    one:\n"
                           "                      - a listed item\n"
                           "  -h, --help        print this help and exit\n"
                           "  -V, --version     print the version and exit\n"
                           "\n"
                           "Exit status: 0 ok, 2 usage.\n");
    free(text);
}
END_TEST

/* Every line of the full table's help fits in 79 columns. */
START_TEST(help_width)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    opt_print_help(&prog, out);
    fclose(out);
    for (char *line = text, *nl; *line != '\0'; line = nl + 1) {
        nl = strchr(line, '\n');
        ck_assert_ptr_nonnull(nl);
        ck_assert_msg(nl - line <= 79, "line too long: %.*s", (int)(nl - line), line);
    }
    ck_assert_ptr_nonnull(strstr(text, "  -s, --string S   TOPT_STRING: a string\n"));
    free(text);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "options", 0);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, every_type);
    tcase_add_test(tc, defaults_stay);
    tcase_add_test(tc, int_range);
    tcase_add_test(tc, int_junk);
    tcase_add_test(tc, u64_range);
    tcase_add_test(tc, u64_sign);
    tcase_add_test(tc, double_range);
    tcase_add_test(tc, bytes_range);
    tcase_add_test(tc, bytes_unit);
    tcase_add_test(tc, seconds_range);
    tcase_add_test(tc, custom_refused);
    tcase_add_test(tc, env_then_option);
    tcase_add_test(tc, env_bytes_range);
    tcase_add_test(tc, env_empty_is_unset);
    tcase_add_test(tc, env_bad_value);
    tcase_add_test(tc, env_bad_flag);
    tcase_add_test(tc, unknown_option);
    tcase_add_test(tc, unknown_letter);
    tcase_add_test(tc, missing_value);
    tcase_add_test(tc, missing_value_short);
    tcase_add_test(tc, flag_takes_no_value);
    tcase_add_test(tc, operands_permuted);
    tcase_add_test(tc, options_first);
    tcase_add_test(tc, double_dash_ends_options);
    tcase_add_test(tc, usage_error_after_parse);
    tcase_add_test(tc, version);
    tcase_add_test(tc, help_exits);
    tcase_add_test(tc, help_layout);
    tcase_add_test(tc, help_width);
    tcase_add_test(tc, apply_named_value);
    tcase_add_test(tc, apply_dashes_and_underscores);
    tcase_add_test(tc, parse_args_reports);
}

UNIT_MAIN("options")
