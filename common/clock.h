/* clock.h - the time readings the programs take: the monotonic clock for
 * durations, deadlines and ages (never jumps), the wall clock only for
 * timestamps that leave the process (logs, /metrics, files).
 *
 * clock_gettime() cannot fail for these clocks on Linux, so none of these
 * calls report an error. */
#ifndef TETRIS_CLOCK_H
#define TETRIS_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in milliseconds with the fraction: for measuring. */
double clock_now_ms(void);
/* CLOCK_MONOTONIC in whole milliseconds / microseconds: for deadlines. */
int64_t clock_mono_ms(void);
int64_t clock_mono_us(void);
/* CLOCK_REALTIME in whole milliseconds since the epoch. */
int64_t clock_wall_ms(void);

/* Milliseconds as a timespec: a reading of clock_now_ms() for the waits
 * that take an absolute time (clock_nanosleep, pthread_cond_timedwait on
 * a monotonic condition), or a duration for those that take one. */
struct timespec clock_timespec(double ms);

/* Sleeps ms milliseconds, the whole time even when signals arrive. */
void clock_sleep_ms(long ms);

/* The wait before try number attempt + 1 of something that failed
 * (attempt >= 1): base_ms doubled per attempt up to max_ms, then a random
 * point in [d/2, d], so clients that failed together do not come back
 * together. */
long clock_backoff_ms(long base_ms, long max_ms, int attempt);

#endif
