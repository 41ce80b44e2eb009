#!/usr/bin/env python3
"""make-model.py - writes the Python template's example model: a
safetensors file of a two-layer perceptron (fc1 256 -> HIDDEN, fc2 HIDDEN
-> 10, FP32) with seeded random weights, for handler.py.

Usage: make-model.py OUT.safetensors [HIDDEN (default 4096)] [SEED (default 1)]
"""

import json
import struct
import sys

import numpy as np


def main():
    if len(sys.argv) not in (2, 3, 4) or sys.argv[1].startswith("-"):
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    hidden = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    rng = np.random.default_rng(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    tensors = {
        "fc1.weight": rng.standard_normal((hidden, 256), np.float32) / 16,
        "fc1.bias": rng.standard_normal(hidden, np.float32) / 16,
        "fc2.weight": rng.standard_normal((10, hidden), np.float32) / 64,
        "fc2.bias": rng.standard_normal(10, np.float32) / 64,
    }
    header, offset = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(sys.argv[1], "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for a in tensors.values():
            f.write(a.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
