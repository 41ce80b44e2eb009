#!/usr/bin/python3
"""oip_tool.py - an Open Inference Protocol client's side of the tests,
written independently of the C code it checks (Python's json and struct).

  oip_tool.py binary REQUEST.json OUT [--binary-outputs]
      REQUEST with every input's data moved into the binary part (binary
      tensor data extension) into OUT; prints the JSON header's length (the
      Inference-Header-Content-Length value). --binary-outputs asks for all
      outputs in binary.
  oip_tool.py hash RESPONSE [HEADER_LENGTH]
      SHA-256 of the response's outputs' bytes, concatenated in the order
      the response lists them (the model's), each row-major, little-endian:
      what tetris-onnx-run prints as sha256. HEADER_LENGTH (the reply's
      Inference-Header-Content-Length, empty: none) splits off binary data.
  oip_tool.py tensors FILE [HEADER_LENGTH]
      One line per output of a response (per input of a request, when FILE
      has no "outputs"): NAME DATATYPE SHAPE SHA256-OF-ITS-BYTES.

Exit status: 0 done, 1 a malformed request or response, 2 usage.
"""
import hashlib
import json
import struct
import sys

FORMATS = {
    "BOOL": "?", "UINT8": "B", "UINT16": "H", "UINT32": "I", "UINT64": "Q",
    "INT8": "b", "INT16": "h", "INT32": "i", "INT64": "q",
    "FP16": "e", "FP32": "f", "FP64": "d",
}
NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def flatten(data):
    for v in data:
        if isinstance(v, list):
            yield from flatten(v)
        else:
            yield v


def number(v):
    return NON_FINITE[v] if isinstance(v, str) else v


def pack(datatype, data):
    values = list(flatten(data))
    if datatype == "BYTES":
        return b"".join(struct.pack("<I", len(e)) + e for e in (v.encode("utf-8") for v in values))
    if datatype == "BF16":  # the upper half of the FP32 it prints as
        return b"".join(struct.pack("<f", number(v))[2:] for v in values)
    return struct.pack("<%d%s" % (len(values), FORMATS[datatype]), *map(number, values))


def to_binary(request_path, out_path, binary_outputs):
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    blobs = []
    for tensor in request["inputs"]:
        blob = pack(tensor["datatype"], tensor.pop("data"))
        tensor.setdefault("parameters", {})["binary_data_size"] = len(blob)
        blobs.append(blob)
    if binary_outputs:
        request.setdefault("parameters", {})["binary_data_output"] = True
    header = json.dumps(request).encode("utf-8")
    with open(out_path, "wb") as f:
        f.write(header + b"".join(blobs))
    print(len(header))


def tensors(path, header_length):
    with open(path, "rb") as f:
        body = f.read()
    n = int(header_length) if header_length else len(body)
    message = json.loads(body[:n])
    binary, offset = body[n:], 0
    for tensor in message["outputs" if "outputs" in message else "inputs"]:
        size = tensor.get("parameters", {}).get("binary_data_size")
        if size is None:
            blob = pack(tensor["datatype"], tensor["data"])
        else:
            blob = binary[offset:offset + size]
            if len(blob) != size:
                raise ValueError("binary data ends early")
            offset += size
        yield tensor, blob
    if offset != len(binary):
        raise ValueError("%d bytes of binary data left over" % (len(binary) - offset))


def main(argv):
    if len(argv) >= 3 and argv[1] == "binary":
        to_binary(argv[2], argv[3], "--binary-outputs" in argv[4:])
    elif len(argv) in (3, 4) and argv[1] == "hash":
        h = hashlib.sha256()
        for _, blob in tensors(argv[2], argv[3] if len(argv) == 4 else ""):
            h.update(blob)
        print(h.hexdigest())
    elif len(argv) in (3, 4) and argv[1] == "tensors":
        for tensor, blob in tensors(argv[2], argv[3] if len(argv) == 4 else ""):
            print(tensor["name"], tensor["datatype"], json.dumps(tensor["shape"], separators=(",", ":")),
                  hashlib.sha256(blob).hexdigest())
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (ValueError, KeyError, TypeError, struct.error, OSError) as e:
        sys.stderr.write("oip_tool.py: %s\n" % e)
        sys.exit(1)
