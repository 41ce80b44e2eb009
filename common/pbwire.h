/* pbwire.h - the protocol buffers wire format, read and written by hand:
 * what a gRPC peer (the kubelet, over common/grpc.h) sends and expects. No
 * generated code and no .proto in the tree: each message is a handful of
 * fields whose numbers the contract that uses them names
 * (protocol/csi.h).
 *
 * A message is a sequence of fields, each a key (varint: number << 3 |
 * wire type) and a value:
 *   wire type 0 VARINT  an unsigned LEB128 varint, at most 10 bytes
 *   wire type 1 I64     8 bytes, little-endian (fixed64, sfixed64, double)
 *   wire type 2 LEN     a varint length, then that many bytes (string,
 *                       bytes, an embedded message, a packed repeated
 *                       field, a map entry: a message of key = 1, value = 2)
 *   wire type 5 I32     4 bytes, little-endian (fixed32, sfixed32, float)
 * Groups (wire types 3 and 4, deprecated since proto2) are refused.
 *
 * Reading trusts nothing: every length is checked against what is left of
 * the buffer before anything is touched, a varint longer than 10 bytes or
 * overflowing 64 bits, a field number of 0 or above 2^29 - 1 and a wire
 * type that is not one of the four above are TETRIS_E_FORMAT, with the
 * offset in the message. Fields a reader does not know are skipped, as
 * the format requires (a newer peer may send them). Tested in
 * tests/common/test_pbwire.c; fuzzed by fuzz/fuzz_pbwire.c.
 *
 * Writing appends to a growing buffer that never exceeds the limit its
 * writer was given: past it (or out of memory) the writer is marked failed
 * and pb_writer_finish reports it, so an encoder checks once, at the end.
 *
 *   pb_writer w;
 *   pb_writer_init(&w, GRPC_MAX_MESSAGE_BYTES);
 *   pb_put_string(&w, 1, "csi.tetris.io");
 *   if (pb_writer_finish(&w, &buf, &len, err) < 0) ...   // buf malloc'd */
#ifndef TETRIS_PBWIRE_H
#define TETRIS_PBWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

enum pb_wire_type {
    PB_WIRE_VARINT = 0,
    PB_WIRE_I64 = 1,
    PB_WIRE_LEN = 2,
    PB_WIRE_I32 = 5,
};

#define PB_MAX_FIELD_NUMBER ((1u << 29) - 1)
#define PB_MAX_VARINT_BYTES 10

/* ---- reading ---- */

typedef struct pb_reader {
    const uint8_t *start, *p, *end;
} pb_reader;

/* One field as read. For VARINT, I64 and I32 the value is in `value`
 * (fixed ones as their little-endian integer); for LEN, data and len
 * point into the reader's buffer. */
struct pb_field {
    uint32_t number;
    enum pb_wire_type type;
    uint64_t value;
    const uint8_t *data;
    size_t len;
};

void pb_reader_init(pb_reader *r, const uint8_t *buf, size_t len);
/* Reads the next field: 1 and *f filled, 0 at the end of the buffer, or
 * -TETRIS_E_FORMAT (a truncated or malformed field, naming its offset). */
int pb_next(pb_reader *r, struct pb_field *f, tetris_error *err);
/* Decodes one varint from [*p, end): 0 and *p past it, or -1 when it is
 * truncated, longer than PB_MAX_VARINT_BYTES or overflows 64 bits. */
int pb_read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out);
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
