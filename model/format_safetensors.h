/* format_safetensors.h - the safetensors format: an 8-byte little-endian
 * header length, a JSON header mapping tensor names to dtype, shape and
 * [begin, end) offsets into the byte buffer that follows, and an optional
 * "__metadata__" object of strings. */
#ifndef TETRIS_FORMAT_SAFETENSORS_H
#define TETRIS_FORMAT_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* The header is at most this long (as in the reference implementation). */
#define SAFETENSORS_MAX_HEADER (100u * 1000 * 1000)

/* True when data looks like a safetensors file (plausible length, '{'). */
bool safetensors_sniff(const uint8_t *data, size_t len);

/* Parses a whole file image. The byte buffer must be covered exactly: no
 * tensor may overlap another, leave a hole, or run past the end. */
int safetensors_parse(const char *path, const uint8_t *data, size_t len, model **out,
                      tetris_error *err);

/* Maps a safetensors dtype ("F32") to its canonical name ("float32"), NULL
 * when unknown. */
const char *safetensors_dtype_canonical(const char *dtype);

#endif
