/* protobuf.h - a small reader for the protocol buffers wire format, enough
 * to walk ONNX files without generated code.
 *
 * A pb_reader is a cursor over one message's bytes inside a larger buffer
 * (the file image); offsets it reports are relative to that buffer so they
 * can be used as file regions. Every length is checked against the end of
 * the enclosing message, varints longer than 10 bytes or overflowing 64 bits
 * are errors, groups (wire types 3/4) are rejected, and nested readers carry
 * a depth so hostile nesting cannot exhaust the stack of a recursive walker.
 * Errors are TETRIS_E_FORMAT and say at which byte of the buffer. */
#ifndef TETRIS_PROTOBUF_H
#define TETRIS_PROTOBUF_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define PB_MAX_DEPTH 64

enum pb_wire_type {
    PB_WT_VARINT = 0,
    PB_WT_FIXED64 = 1,
    PB_WT_LEN = 2,
    PB_WT_FIXED32 = 5,
};

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
int pb_reader_sub(const pb_reader *parent, const pb_field *f, pb_reader *child,
                  tetris_error *err);

/* Offset of a payload byte from the start of the buffer. */
uint64_t pb_offset(const pb_reader *r, const uint8_t *p);

/* Decodes one varint at *p (not past end), advancing *p. Returns 0, or -1 on
 * truncation, more than 10 bytes, or overflow of 64 bits. */
int pb_decode_varint(const uint8_t **p, const uint8_t *end, uint64_t *out);

/* Counts the varints in a packed region; a malformed or truncated varint is
 * an error naming its offset within the region. */
int pb_count_varints(const uint8_t *data, size_t len, uint64_t *count, tetris_error *err);

#endif
