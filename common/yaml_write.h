/* yaml_write.h - writing YAML with libyaml's emitter: its events with a
 * tetris_error when they fail (the profile writer emits its own layout
 * through them), and JSON values as a stream of YAML documents, the way
 * Kubernetes objects built with jansson are printed for
 * `kubectl apply -f -`. */
#ifndef TETRIS_YAML_WRITE_H
#define TETRIS_YAML_WRITE_H

#include <stdio.h>

#include <jansson.h>
#include <yaml.h>

#include "common/error.h"

/* Emits ev (the emitter takes it); TETRIS_E_IO with the emitter's problem. */
int yaml_write_event(yaml_emitter_t *e, yaml_event_t *ev, tetris_error *err);
/* A scalar in style, plain or quoted as libyaml decides it may be. */
int yaml_write_scalar(yaml_emitter_t *e, const char *s, yaml_scalar_style_t style,
                      tetris_error *err);

/* Writes a YAML stream to out: body (given ctx) emits its documents between
 * the stream's start and end events. Lines are wrapped at width columns
 * (-1: never); out is flushed. */
typedef int (*yaml_write_fn)(yaml_emitter_t *e, void *ctx, tetris_error *err);
int yaml_write_stream(FILE *out, int width, yaml_write_fn body, void *ctx, tetris_error *err);

/* Writes each value of the array as one YAML document ("---" between
 * them), in block style, every string that YAML would read as something
 * else (a boolean, number or null) quoted. */
int yaml_write_json_documents(FILE *out, json_t *values, tetris_error *err);

#endif
