/* clock.c - monotonic and wall-clock readings (see clock.h). */
#include "common/clock.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

static struct timespec now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts;
}

double clock_now_ms(void)
{
    struct timespec ts = now(CLOCK_MONOTONIC);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int64_t clock_mono_ms(void)
{
    struct timespec ts = now(CLOCK_MONOTONIC);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_mono_us(void)
{
    struct timespec ts = now(CLOCK_MONOTONIC);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t clock_wall_ms(void)
{
    struct timespec ts = now(CLOCK_REALTIME);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec clock_timespec(double ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1e3)};
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1e3) * 1e6);
    /* Rounding can land on a whole second, which the waits refuse. */
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

void clock_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

long clock_backoff_ms(long base_ms, long max_ms, int attempt)
{
    long d = base_ms;
    for (int i = 1; i < attempt && d < max_ms; i++)
        d *= 2;
    if (d > max_ms)
        d = max_ms;
    if (d <= 1)
        return d;
    static _Thread_local unsigned seed;
    if (seed == 0)
        seed = (unsigned)time(NULL) ^ (unsigned)(uintptr_t)&seed;
    return d / 2 + (long)(rand_r(&seed) % (unsigned)(d / 2 + 1));
}
