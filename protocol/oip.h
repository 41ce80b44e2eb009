/* oip.h - the tensors of the Open Inference Protocol (KServe V2 REST) as
 * tetris's programs write and read them: tetris-function decodes requests
 * and encodes answers in this form, tetris-onnx-run --oip-request writes
 * the request that carries its seeded inputs, so that any server speaking
 * the protocol can be sent exactly those inputs and its outputs compared
 * byte for byte.
 *
 * A tensor's bytes (oip_tensor.data) are its elements in row-major order,
 * little-endian, without padding: the layout of the protocol's binary
 * tensor data extension and of ONNX Runtime's buffers. BYTES elements are
 * each a 4-byte little-endian length followed by that many bytes.
 *
 * The JSON form of a tensor:
 *
 *   {"name": S, "datatype": D, "shape": [N, ...], "data": [V, ...]}
 *
 * with data flat (row-major). V per datatype: BOOL true/false; integers in
 * decimal; FP32 printed with 9 significant digits and FP64 with 17, FP16
 * and BF16 as the FP32 number they are (9 digits), which parse back to the
 * very same bits; negative zero as -0.0 (a client's JSON parser may read
 * "-0" as the integer 0); non-finite floats, which JSON has no number for,
 * as the strings "NaN", "Infinity", "-Infinity" (protobuf's JSON mapping);
 * BYTES as JSON strings (their bytes must be UTF-8 to be written so). A tensor
 * sent as binary data has "parameters": {"binary_data_size": N} in place
 * of "data", and its bytes follow the JSON header (see
 * OIP_HEADER_LENGTH_HEADER).
 *
 * Tests: tests/function/test_oip.c (the conversions, every datatype written and
 * decoded back), fuzz/fuzz_oip.c, tests/function/test-oip*.sh. */
#ifndef TETRIS_OIP_H
#define TETRIS_OIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/textbuf.h"
#include "tensorstore/digest.h"

/* The HTTP header giving the length of the JSON part of a body that
 * carries binary tensor data after it (request and reply alike). */
#define OIP_HEADER_LENGTH_HEADER "Inference-Header-Content-Length"
/* The server metadata's name for that extension. */
#define OIP_EXTENSION_BINARY "binary_tensor_data"
#define OIP_MAX_DIMS TENSOR_MAX_DIMS

enum oip_datatype {
    OIP_BOOL,
    OIP_UINT8,
    OIP_UINT16,
    OIP_UINT32,
    OIP_UINT64,
    OIP_INT8,
    OIP_INT16,
    OIP_INT32,
    OIP_INT64,
    OIP_FP16,
    OIP_FP32,
    OIP_FP64,
    OIP_BF16,
    OIP_BYTES,
    OIP_DATATYPE_COUNT,
    OIP_DATATYPE_NONE = -1 /* no protocol datatype for it */
};

/* "BOOL", "UINT8", ..., "BYTES"; "" for OIP_DATATYPE_NONE. */
const char *oip_datatype_name(enum oip_datatype dt);
/* The datatype named by the len bytes at s, or OIP_DATATYPE_NONE. */
enum oip_datatype oip_datatype_parse(const char *s, size_t len);
/* Bytes per element; 0 for BYTES (variable) and NONE. */
size_t oip_datatype_size(enum oip_datatype dt);
bool oip_datatype_is_float(enum oip_datatype dt);
/* From an ONNX TensorProto.DataType value (ONNX Runtime's
 * ONNXTensorElementDataType has the same numbers): STRING is BYTES;
 * OIP_DATATYPE_NONE for complex, float8 and other types the protocol does
 * not name. */
enum oip_datatype oip_datatype_from_onnx(int onnx_type);
int oip_datatype_to_onnx(enum oip_datatype dt);

/* Half and bfloat16 bits from a double, rounded to nearest even (values
 * past the range become infinities), and back to float (exact). */
uint16_t oip_fp16_from_double(double d);
uint16_t oip_bf16_from_double(double d);
float oip_fp16_to_float(uint16_t h);
float oip_bf16_to_float(uint16_t b);

typedef struct oip_tensor {
    char *name;
    enum oip_datatype datatype;
    size_t ndim;
    int64_t shape[OIP_MAX_DIMS];
    size_t count;  /* elements: the product of shape */
    uint8_t *data; /* see the layout above */
    size_t data_bytes;
} oip_tensor;

/* Frees name and data of a tensor that owns them (the decoder's and the
 * function's outputs do; a tensor that borrows them is not cleared). */
void oip_tensor_clear(oip_tensor *t);

/* Checks that len bytes at data are exactly count BYTES elements (each a
 * 4-byte little-endian length and that many bytes). TETRIS_E_FORMAT
 * naming what is wrong otherwise. */
int oip_bytes_check(const uint8_t *data, size_t len, size_t count, tetris_error *err);

/* Appends s (len bytes, UTF-8) as a JSON string. TETRIS_E_FORMAT when s
 * is not valid UTF-8 (JSON cannot carry it); nothing is appended then. */
int oip_write_json_string(textbuf *t, const char *s, size_t len, tetris_error *err);
/* Appends the tensor in its JSON form; with binary, "parameters":
 * {"binary_data_size": data_bytes} instead of "data" (the caller appends
 * the bytes after the header). TETRIS_E_FORMAT for a BYTES element that
 * is not UTF-8 (in JSON form) or malformed BYTES data. Out of memory is
 * t->failed, checked by the caller once at the end. */
int oip_write_tensor(textbuf *t, const oip_tensor *x, bool binary, tetris_error *err);

#endif
