/* pbwire.h - the protocol buffers wire format, read and written by hand:
 * ONNX files (model/) and what a gRPC peer, the kubelet over common/grpc.h,
 * sends and expects (protocol/csi.h). No generated code and no .proto in
 * the tree: each message is a handful of fields whose numbers the code
 * that uses them names.
 *
 * A message is a sequence of fields, each a key (varint: number << 3 |
 * wire type) and a value:
 *   wire type 0 VARINT   an unsigned LEB128 varint, at most 10 bytes
 *   wire type 1 FIXED64  8 bytes, little-endian (fixed64, sfixed64, double)
 *   wire type 2 LEN      a varint length, then that many bytes (string,
 *                        bytes, an embedded message, a packed repeated
 *                        field, a map entry: a message of key = 1,
 *                        value = 2)
 *   wire type 5 FIXED32  4 bytes, little-endian (fixed32, sfixed32, float)
 *
 * Reading: a pb_reader is a cursor over one message's bytes inside a
 * larger buffer (a file image, a request); offsets it reports are
 * relative to that buffer so they can be used as file regions. Every
 * length is checked against the end of the enclosing message, varints
 * longer than 10 bytes or overflowing 64 bits are errors, field number 0
 * or above 2^29 - 1 is an error, groups (wire types 3/4) are rejected,
 * and nested readers carry a depth so hostile nesting cannot exhaust the
 * stack of a recursive walker. Errors are TETRIS_E_FORMAT and say at which
 * byte of the buffer. Fields a reader does not know are skipped by its
 * caller, as the format requires (a newer peer may send them). Tested in
 * tests/common/test_pbwire.c and tests/model/test_onnx.c; fuzzed by
 * fuzz/fuzz_pbwire.c and the ONNX harnesses.
 *
 * Writing appends to a growing buffer that never exceeds the limit its
 * writer was given: past it (or out of memory) the writer is marked failed
 * and pb_writer_finish reports it, so an encoder checks once, at the end.
 *
 *   pb_writer w;
 *   pb_writer_init(&w, 64 << 10);
 *   pb_put_string(&w, 1, "csi.tetris.io");
 *   if (pb_writer_finish(&w, &buf, &len, err) < 0) ...   // buf malloc'd */
#ifndef TETRIS_PBWIRE_H
#define TETRIS_PBWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define PB_MAX_DEPTH 64
#define PB_MAX_FIELD_NUMBER 536870911u /* 2^29 - 1 */
#define PB_MAX_VARINT_BYTES 10

enum pb_wire_type {
    PB_WT_VARINT = 0,
    PB_WT_FIXED64 = 1,
    PB_WT_LEN = 2,
    PB_WT_FIXED32 = 5,
};

/* ---- reading ---- */

typedef struct pb_reader {
    const uint8_t *base; /* start of the whole buffer (offsets are from here) */
    const uint8_t *p;    /* next byte to read */
    const uint8_t *end;  /* end of this message */
    int depth;           /* 0 for the outermost message */
} pb_reader;

typedef struct pb_field {
    uint32_t number;
    enum pb_wire_type wire_type;
    uint64_t value;      /* VARINT, FIXED64 and FIXED32 values */
    const uint8_t *data; /* the field's payload bytes (all wire types) */
    size_t len;          /* payload length */
} pb_field;

void pb_reader_init(pb_reader *r, const uint8_t *data, size_t len);

/* Reads the next field. Returns 1 with *f filled, 0 at the end of the
 * message, or a negative error. */
int pb_next(pb_reader *r, pb_field *f, tetris_error *err);

/* A reader over a length-delimited field's payload, one level deeper. */
int pb_reader_sub(const pb_reader *parent, const pb_field *f, pb_reader *child, tetris_error *err);

/* Offset of a payload byte from the start of the buffer. */
uint64_t pb_offset(const pb_reader *r, const uint8_t *p);

/* Decodes one varint at *p (not past end), advancing *p. Returns 0, or -1 on
 * truncation, more than 10 bytes, or overflow of 64 bits. */
int pb_decode_varint(const uint8_t **p, const uint8_t *end, uint64_t *out);

/* Counts the varints in a packed region; a malformed or truncated varint is
 * an error naming its offset within the region. */
int pb_count_varints(const uint8_t *data, size_t len, uint64_t *count, tetris_error *err);

/* A map<string, string> entry (a LEN field's bytes): key = 1, value = 2,
 * either possibly absent (then ""), unknown fields skipped. The strings
 * point into data and are not NUL-terminated. -TETRIS_E_FORMAT when the
 * entry is malformed or a key or value is not LEN. */
int pb_map_entry(const uint8_t *data, size_t len, const uint8_t **key, size_t *key_len,
                 const uint8_t **value, size_t *value_len, tetris_error *err);

/* ---- writing ---- */

typedef struct pb_writer {
    uint8_t *buf;
    size_t len, cap, max;
    bool failed;     /* over max, or out of memory */
    bool over_limit; /* failed because of max */
} pb_writer;

/* max: the largest encoding this writer may make. */
void pb_writer_init(pb_writer *w, size_t max);
void pb_put_varint(pb_writer *w, uint32_t number, uint64_t value);
void pb_put_bool(pb_writer *w, uint32_t number, bool value);
void pb_put_fixed32(pb_writer *w, uint32_t number, uint32_t value);
void pb_put_fixed64(pb_writer *w, uint32_t number, uint64_t value);
void pb_put_bytes(pb_writer *w, uint32_t number, const void *data, size_t len);
/* A string field (len = strlen); s NULL writes nothing. */
void pb_put_string(pb_writer *w, uint32_t number, const char *s);
/* An embedded message: sub's bytes as a LEN field (sub is left as is; a
 * failed sub fails w). */
void pb_put_message(pb_writer *w, uint32_t number, const pb_writer *sub);
/* Hands the encoding to the caller (*out malloc'd, never NULL, even for
 * an empty message) and resets w; -TETRIS_E_NOMEM or -TETRIS_E_INVAL
 * (over the limit) if any put failed, w freed either way. */
int pb_writer_finish(pb_writer *w, uint8_t **out, size_t *len, tetris_error *err);
void pb_writer_free(pb_writer *w);

#endif
