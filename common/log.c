/* log.c - logfmt lines on stderr. One write(2) per line so lines from
 * concurrent processes sharing stderr never interleave. */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "tetris";
static enum log_level log_min_level = LOG_LEVEL_INFO;
static int log_level_from_env_done;

void log_init(const char *prog)
{
    const char *slash = strrchr(prog, '/');
    log_prog = slash != NULL ? slash + 1 : prog;
}

void log_set_level(enum log_level level)
{
    log_min_level = level;
    log_level_from_env_done = 1;
}

static void log_level_from_env(void)
{
    const char *env = getenv("TETRIS_LOG_LEVEL");
    log_level_from_env_done = 1;
    if (env == NULL)
        return;
    if (strcasecmp(env, "debug") == 0)
        log_min_level = LOG_LEVEL_DEBUG;
    else if (strcasecmp(env, "warn") == 0)
        log_min_level = LOG_LEVEL_WARN;
    else if (strcasecmp(env, "error") == 0)
        log_min_level = LOG_LEVEL_ERROR;
}

void log_write(enum log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    if (!log_level_from_env_done)
        log_level_from_env();
    if (level < log_min_level)
        return;

    char line[4096];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s prog=%s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, names[level], log_prog);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w; /* nowhere left to report a failing stderr */
}

const char *log_quote(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    if (len < 3) {
        if (len > 0)
            buf[0] = '\0';
        return buf;
    }
    buf[o++] = '"';
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        char piece[5];
        if (c == '"' || c == '\\')
            snprintf(piece, sizeof piece, "\\%c", c);
        else if (c == '\n' || c == '\r' || c == '\t')
            snprintf(piece, sizeof piece, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
        else if (c < 0x20 || c == 0x7f)
            snprintf(piece, sizeof piece, "\\x%02x", c);
        else
            piece[0] = (char)c, piece[1] = '\0';
        size_t n = strlen(piece);
        if (o + n + 2 > len)
            break; /* what fits, never half an escape */
        memcpy(buf + o, piece, n);
        o += n;
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

int log_is_tty(void)
{
    return isatty(STDERR_FILENO);
}
