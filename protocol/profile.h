/* profile.h - a model's latency profile: one entry per instance config
 * <c, m, b, p> with its measured latency, throughput and memory.
 *
 * The profiler writes profiles, the autoscaler plans with them. On disk a
 * profile is a YAML file, one model per file:
 *
 *   tetris_profile: 1              # schema version
 *   model: silero_vad_v5           # function / model name
 *   model_file: silero_vad_v5.onnx # optional, what TETRIS_MODEL names
 *   measured: true                 # false: illustrative numbers
 *   source: "tetris-profiler 0.1.0, 2 x86-64 cores"   # optional, free text
 *   configs:
 *     - {c: 1, m_mib: 96, b: 1, p: 1,
 *        latency_ms: {mean: 4.1, p95: 5.0, p99: 6.2},
 *        throughput_rps: 240, private_bytes: 52428800, shared_bytes: 2327524}
 *
 * c is CPUs (may be fractional), m_mib the memory an instance needs without
 * tensor sharing (MiB), b the maximum batch, p the concurrent inference
 * threads, latency_ms the inference latency of one batch, throughput_rps what
 * the instance sustained at saturation, private_bytes the peak memory that is
 * the instance's own and shared_bytes the tensor bytes it maps from the
 * store. Unknown keys are rejected so that typos do not go unnoticed. */
#ifndef TETRIS_PROFILE_H
#define TETRIS_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"

#define PROFILE_SCHEMA_VERSION 1
/* A profile is a few KiB: a larger file is refused, not read. */
#define PROFILE_MAX_BYTES (16u << 20)

typedef struct profile_latency {
    double mean, p95, p99; /* milliseconds */
} profile_latency;

typedef struct profile_config {
    double c;      /* CPUs */
    double m_mib;  /* memory without tensor sharing, MiB */
    int b;         /* maximum batch size */
    int p;         /* concurrent inference threads */
    profile_latency latency_ms;
    double throughput_rps;  /* measured at saturation; 0 when not measured */
    uint64_t private_bytes; /* instance's own peak memory; 0 when unknown */
    uint64_t shared_bytes;  /* tensor bytes mapped from the store */
} profile_config;

typedef struct profile {
    char *model;
    char *model_file; /* NULL when absent */
    char *source;     /* NULL when absent */
    bool measured;
    profile_config *configs;
    size_t n_configs;
} profile;

/* Which latency statistic stands for l in planning. */
enum profile_stat { PROFILE_STAT_MEAN, PROFILE_STAT_P95, PROFILE_STAT_P99 };

/* Parses "mean", "p95" or "p99". */
int profile_stat_parse(const char *s, enum profile_stat *out, tetris_error *err);
const char *profile_stat_name(enum profile_stat stat);
double profile_config_latency(const profile_config *cfg, enum profile_stat stat);

/* Reads and validates a profile file; name is used in error messages.
 * -TETRIS_E_IO when it cannot be read, -TETRIS_E_FORMAT with the line and
 * the offending key when it is not a valid profile. *out is freed with
 * profile_free(). */
int profile_load(const char *path, profile **out, tetris_error *err);
int profile_parse(const char *text, size_t len, const char *name, profile **out,
                  tetris_error *err);

/* Writes p as YAML (the format above); profile_save writes a temporary file
 * next to path and renames it, so readers never see a partial profile. */
int profile_write(FILE *f, const profile *p, tetris_error *err);
int profile_save(const char *path, const profile *p, tetris_error *err);

void profile_free(profile *p);

#endif
