"""safetensors.py - read a safetensors file into private numpy arrays, with
the standard library and numpy (Debian packages no `safetensors`): what a
function does without a model view, the private baseline a view is
measured against, and the reference its arrays are compared with.

The file: an 8-byte little-endian header length, a JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"},
then the tensors' bytes. Every field is checked (the same rules as
model/format_safetensors.c); a bad file raises SafetensorsError naming the
tensor and the field.
"""

import json
import os
import struct

import numpy as np

from .view import DTYPES

# safetensors dtype -> canonical name (PROTOCOLS.md, "Tensor identity")
CANONICAL = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
    "BOOL": "bool", "F8_E4M3": "float8e4m3fn", "F8_E5M2": "float8e5m2",
    "U16": "uint16", "U32": "uint32", "U64": "uint64",
}
MAX_HEADER_BYTES = 100 * 1000 * 1000


class SafetensorsError(Exception):
    """A malformed safetensors file; the message names what is wrong."""


def read_header(f, path):
    """(header dict without __metadata__, offset of the byte buffer, its size)."""
    size = os.fstat(f.fileno()).st_size
    head = f.read(8)
    if len(head) < 8:
        raise SafetensorsError(f"{path}: truncated: {size} bytes")
    (n,) = struct.unpack("<Q", head)
    if n > size - 8 or n > MAX_HEADER_BYTES:
        raise SafetensorsError(f"{path}: header length {n} runs past the file or the limit")
    try:
        header = json.loads(f.read(n))
    except (ValueError, UnicodeDecodeError) as e:
        raise SafetensorsError(f"{path}: header JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    header.pop("__metadata__", None)
    return header, 8 + n, size - 8 - n


def _entry(path, name, e, buffer_bytes):
    where = f'{path}: tensor "{name}"'
    if not isinstance(e, dict) or e.get("dtype") not in CANONICAL:
        raise SafetensorsError(f"{where}: missing or unknown dtype")
    dtype = CANONICAL[e["dtype"]]
    shape, offs = e.get("shape"), e.get("data_offsets")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise SafetensorsError(f"{where}: shape is not a list of non-negative integers")
    if not (isinstance(offs, list) and len(offs) == 2 and
            all(isinstance(o, int) and o >= 0 for o in offs) and offs[0] <= offs[1] <= buffer_bytes):
        raise SafetensorsError(f"{where}: data_offsets out of range")
    n = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype][1]
    if offs[1] - offs[0] != n:
        raise SafetensorsError(f"{where}: data_offsets span {offs[1] - offs[0]} bytes, "
                               f"{dtype} {shape} needs {n}")
    return dtype, shape, offs[0]


def read_safetensors(path):
    """{name: (canonical dtype, writable numpy array)} read into private
    memory (numpy dtypes as view.DTYPES: bfloat16 and float8 as raw bits)."""
    out = {}
    with open(path, "rb") as f:
        header, start, buffer_bytes = read_header(f, path)
        for name, e in header.items():
            dtype, shape, begin = _entry(path, name, e, buffer_bytes)
            np_dtype, size, _ = DTYPES[dtype]
            count = int(np.prod(shape, dtype=np.int64))
            f.seek(start + begin)
            a = np.fromfile(f, np_dtype, count) if count else np.zeros(0, np_dtype)
            if a.size != count:
                raise SafetensorsError(f'{path}: tensor "{name}": file truncated')
            out[name] = (dtype, a.reshape(shape))
    return out
