"""view_probe.py - test helper: a Python process that holds a model's tensors
the way a function would, through the tetris package, so that the tests
can check what it maps and measure its memory.

  view_probe.py view      open $TETRIS_MODEL_VIEW (tetris.open_view), check
                          every array is read-only and lies inside the
                          view's mappings, and that every tensor's bytes
                          have the identity (PROTOCOLS.md, "Tensor
                          identity") its digest claims
  view_probe.py private   read $TETRIS_MODEL (tetris.read_safetensors) into
                          private memory, the baseline

Both touch every page, print one JSON line on stdout (tensors, bytes, and
the SHA-256 over all tensors' bytes in name order, equal for a view and a
private read of the same model), log event=serving pid=N on stderr and wait
for SIGTERM. Exit status: 0, 1 a check failed, 3 the view was refused
(ViewError; its message on stderr).
"""

import hashlib
import json
import os
import signal
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import tetris  # noqa: E402


def identity(dtype, shape, data):
    h = hashlib.sha256(b"tetris-tensor-v1\0" + dtype.encode() + b"\0")
    h.update(struct.pack("<I", len(shape)))
    for d in shape:
        h.update(struct.pack("<q", d))
    h.update(data)
    return "sha256:" + h.hexdigest()


def check_view():
    try:
        view = tetris.open_view()
        arrays = view.arrays()
    except tetris.ViewError as e:
        print(f"view_probe.py: refused: {e}", file=sys.stderr)
        sys.exit(3)
    for t in view.tensors:
        if t.file is None:
            continue
        a = arrays[t.name]
        if a.flags.writeable:
            sys.exit(f"view_probe.py: {t.name}: array is writable")
        if a.size and not view.is_mapped(a.ctypes.data, a.nbytes):
            sys.exit(f"view_probe.py: {t.name}: array is not inside the view's mappings (a copy)")
        if t.digest is not None and identity(t.dtype, t.shape, a.tobytes()) != t.digest:
            sys.exit(f"view_probe.py: {t.name}: bytes do not match digest {t.digest}")
    return {t.name: (t.dtype, arrays[t.name]) for t in view.tensors if t.file is not None}


def main():
    mode = sys.argv[1] if len(sys.argv) == 2 else ""
    if mode == "view":
        arrays = check_view()
    elif mode == "private":
        arrays = tetris.read_safetensors(os.environ["TETRIS_MODEL"])
    else:
        sys.exit("usage: view_probe.py view|private")
    h, total = hashlib.sha256(), 0
    for name in sorted(arrays):
        b = memoryview(arrays[name][1]).cast("B")
        h.update(b)
        total += b.nbytes
    print(json.dumps({"mode": mode, "tensors": len(arrays), "bytes": total, "sha256": h.hexdigest()}),
          flush=True)
    print(f"prog=view_probe.py event=serving pid={os.getpid()}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
