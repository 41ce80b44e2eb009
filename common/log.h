/* log.h - structured logs on stderr, one `key=value` line per event.
 *
 * Every line starts with `ts=<RFC3339 UTC> level=<lvl> prog=<name>` and then
 * the caller's key=value pairs, e.g.
 *   log_info("event=load model=%s tensors=%zu", path, n);
 * Values with spaces must be quoted by the caller: use log_quote(). */
#ifndef TETRIS_LOG_H
#define TETRIS_LOG_H

#include <stddef.h>

enum log_level { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

void log_init(const char *prog);          /* program name for prog= */
void log_set_level(enum log_level level);  /* default info; TETRIS_LOG_LEVEL env */
void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_write(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...) log_write(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...) log_write(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)

/* Quotes s as a logfmt value into buf: "..." with \" and \\, \n, \r and
 * \t escaped and other control bytes as \xHH, so a value from a peer
 * (a message, a path, a label) can neither end the line nor forge a key
 * nor drive a terminal; cut to fit len, never inside an escape. */
const char *log_quote(const char *s, char *buf, size_t len);

/* log_quote into a buffer that lives until the end of the enclosing
 * block: log_warn("event=x msg=%s", LOG_Q(err.msg)). */
#define LOG_QUOTE_MAX 600
#define LOG_Q(s) log_quote((s), (char[LOG_QUOTE_MAX]){0}, LOG_QUOTE_MAX)

/* True when stderr is a terminal: programs draw progress only then. */
int log_is_tty(void);

#endif
