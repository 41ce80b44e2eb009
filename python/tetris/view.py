"""view.py - open a tetris model view (docs/PROTOCOLS.md, "Model view") from
Python with the standard library and numpy: every tensor becomes a
read-only numpy array over a shared mapping of the node tensor store's
file, so N processes serving the same model hold one copy of its weights.

A view is trusted only if
  - its directory and tensors.json are owned by this uid or root and not
    writable by group or others (tensors.json is opened without following a
    symlink and checked on the open descriptor);
  - tensors.json is "tetris-model-view/1" with every field well-formed;
  - every tensor's `file` resolves (symlinks followed) to a regular file
    inside `store`, or, for a tensor that is not shared, is the model or a
    file beside it (its external data), at least offset + length bytes
    long, and length = elements x dtype size.
A view as a CSI volume (docs/programs/tetris-csi.md) has the store's tensors
mounted in it: its `store`, and the external-data folder of its session
options, are "." (the view directory, wherever it is mounted), and its
`model` is the node's path of the original, which a pod does not see: a
model that does not exist is no error, it only cannot be the graph or a
tensor's file.
Anything else raises ViewError naming the view, the tensor and the field.
Nothing is ever written, and mappings are PROT_READ: writing to an array
raises (numpy) or faults (through a pointer), never changes the store.

Arrays: dtype per the canonical name (PROTOCOLS.md, "Tensor identity"),
little-endian. numpy has no bfloat16 or float8: those arrays hold the raw
bits (bfloat16 as int16, float8 as uint8) and Tensor.raw says so;
bind_torch (torch_bind.py) reinterprets bfloat16 for PyTorch.

    v = open_view()                  # $TETRIS_MODEL_VIEW
    w = v.arrays()["embeddings.word.weight"]
    v.close()                        # unmaps (arrays must be dropped first)
"""

import errno
import json
import mmap
import os
import re
import stat

import numpy as np

FORMAT = "tetris-model-view/1"
# tensors.json of the largest models is a few MB; the bound keeps a hostile
# file from deciding how much memory is taken.
MAX_INDEX_BYTES = 64 * 1024 * 1024
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
# "store" (and a folder in session_options) of a view with the store's
# tensors mounted in it: the view directory.
VIEW_SELF = "."
FOLDER_OPTIONS = ("session.model_external_initializers_file_folder_path",)

# canonical dtype name -> (numpy dtype of the array, element bytes, raw bits?)
DTYPES = {
    "float32": ("<f4", 4, False), "float16": ("<f2", 2, False), "float64": ("<f8", 8, False),
    "bfloat16": ("<i2", 2, True), "int8": ("i1", 1, False), "uint8": ("u1", 1, False),
    "int16": ("<i2", 2, False), "uint16": ("<u2", 2, False), "int32": ("<i4", 4, False),
    "uint32": ("<u4", 4, False), "int64": ("<i8", 8, False), "uint64": ("<u8", 8, False),
    "bool": ("?", 1, False), "float8e4m3fn": ("u1", 1, True), "float8e5m2": ("u1", 1, True),
}


class ViewError(Exception):
    """A view that cannot be trusted or read; the message names what."""


class Tensor:
    """One tensor of a view. file is the resolved path (None: kept in the
    ONNX graph, read by the runtime); array, once the view is mapped, is a
    read-only numpy array over the file's shared mapping."""

    __slots__ = ("name", "dtype", "shape", "file", "offset", "length", "digest", "shared",
                 "raw", "array")

    def __init__(self, name, dtype, shape, file, offset, length, digest, shared):
        self.name, self.dtype, self.shape = name, dtype, tuple(shape)
        self.file, self.offset, self.length = file, offset, length
        self.digest, self.shared = digest, shared
        self.raw = DTYPES[dtype][2]
        self.array = None

    def __repr__(self):
        return f"Tensor({self.name!r}, {self.dtype}, {list(self.shape)}, shared={self.shared})"


def _need(cond, where, msg):
    if not cond:
        raise ViewError(f"{where}: {msg}")


def _is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_owner_mode(what, st):
    uid = os.getuid()
    _need(st.st_uid in (uid, 0), what,
          f"owned by uid {st.st_uid}, not by this process's uid {uid} or root")
    _need(not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH), what,
          f"mode {stat.S_IMODE(st.st_mode):o} is writable by group or others")


def _inside(child, parent):
    return child.startswith(parent.rstrip("/") + "/")


def _read_index(d):
    path = os.path.join(d, "tensors.json")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise ViewError(f"{path}: cannot open: "
                        f"{'a symlink' if e.errno == errno.ELOOP else e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        _need(stat.S_ISREG(st.st_mode), path, "not a regular file")
        _check_owner_mode(path, st)
        _need(st.st_size <= MAX_INDEX_BYTES, path,
              f"{st.st_size} bytes, more than the {MAX_INDEX_BYTES}-byte limit")
        text = f.read(MAX_INDEX_BYTES + 1)
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise ViewError(f"{path}: malformed JSON: {e}") from None


def _resolve(d, p, where):
    """A path from the view: absolute, or relative to the view without '..'."""
    if not os.path.isabs(p):
        _need(".." not in p.split("/"), where, f'"{p}" climbs out of the view directory')
        p = os.path.join(d, p)
    try:
        real = os.path.realpath(p, strict=True)
        st = os.stat(real)
    except OSError as e:
        raise ViewError(f"{where}: {p}: {e.strerror}") from None
    _need(stat.S_ISREG(st.st_mode), where, f"{p} is not a regular file")
    return real, st.st_size


class View:
    """A validated view; arrays are mapped on first use of arrays()."""

    def __init__(self, d, index):
        self.dir = d
        where = os.path.join(d, "tensors.json")
        self._where = where
        _need(isinstance(index, dict), where, "not a JSON object")
        _need(index.get("format") == FORMAT, where,
              f'"format" is {json.dumps(index.get("format"))}, not "{FORMAT}"')
        model = index.get("model")
        _need(isinstance(model, str) and os.path.isabs(model), where,
              '"model" is not an absolute path')
        _need(isinstance(index.get("model_format"), str), where,
              '"model_format" missing or not a string')
        store = index.get("store")
        _need(store is None or store == VIEW_SELF or
              (isinstance(store, str) and os.path.isabs(store)),
              where, '"store" is neither null, "." nor an absolute path')
        _need(isinstance(index.get("shared"), bool), where, '"shared" missing or not a boolean')
        fallback = index.get("fallback")
        _need(fallback is None or isinstance(fallback, str), where,
              '"fallback" is neither null nor a string')
        so = index.get("session_options")
        _need(so is None or (isinstance(so, dict) and
                             all(isinstance(v, str) or v is None for v in so.values())),
              where, '"session_options" is not an object of strings')
        _need(isinstance(index.get("tensors"), list), where, '"tensors" is not an array')
        try:
            self._model_real = os.path.realpath(model, strict=True)
        except FileNotFoundError:
            self._model_real = None
        except OSError as e:
            raise ViewError(f"{where}: {e.filename}: {e.strerror}") from None
        if store == VIEW_SELF:
            store = d
        try:
            self._store_real = None if store is None else os.path.realpath(store, strict=True)
        except OSError as e:
            raise ViewError(f"{where}: {e.filename}: {e.strerror}") from None
        self.model, self.model_format, self.store = model, index["model_format"], store
        self.shared, self.fallback = index["shared"], fallback
        self.session_options = {k: d if v == VIEW_SELF and k in FOLDER_OPTIONS else v
                                for k, v in (so or {}).items() if v is not None}
        graph = index.get("graph")
        self.graph = None if graph is None else self._check_graph(graph)
        self.tensors = [self._check_tensor(t, i) for i, t in enumerate(index["tensors"])]
        self.by_name = {}
        for t in self.tensors:
            _need(t.name not in self.by_name, where, f'tensor "{t.name}" listed twice')
            self.by_name[t.name] = t
        self._maps = {}  # resolved file -> (mmap, base address, size)

    def _check_graph(self, graph):
        where = f'{self._where}: "graph"'
        _need(isinstance(graph, str) and graph, where, "not a path")
        real, _ = _resolve(self.dir, graph, where)
        is_model = self._model_real is not None and real == self._model_real
        _need(_inside(real, self.dir) or is_model, where,
              f"{graph} resolves to {real}, neither inside the view nor the model")
        return real

    def _check_tensor(self, t, i):
        name = t.get("name") if isinstance(t, dict) else None
        where = f"{self._where}: tensors[{i}]" + (f' "{name}"' if isinstance(name, str) else "")
        _need(isinstance(t, dict), where, "not an object")
        _need(isinstance(name, str), where, '"name" missing or not a string')
        _need(t.get("dtype") in DTYPES, where,
              f'"dtype" {json.dumps(t.get("dtype"))} is not a canonical dtype name')
        shape = t.get("shape")
        _need(isinstance(shape, list) and all(_is_count(d) for d in shape), where,
              '"shape" is not an array of non-negative integers')
        _need(isinstance(t.get("shared"), bool), where, '"shared" missing or not a boolean')
        digest = t.get("digest")
        _need(digest is None or (isinstance(digest, str) and DIGEST_RE.match(digest)), where,
              '"digest" is neither null nor sha256:<64 hex>')
        f = t.get("file")
        if f is None:
            return Tensor(name, t["dtype"], shape, None, 0, 0, digest, t["shared"])
        _need(isinstance(f, str) and f, where, '"file" is neither null nor a path')
        offset, length = t.get("offset"), t.get("length")
        _need(_is_count(offset) and _is_count(length), where,
              '"offset" and "length" must be non-negative integers')
        elements = 1
        for dim in shape:
            elements *= dim
        _need(elements * DTYPES[t["dtype"]][1] == length, where,
              f'"length" {length} is not {elements} elements of {t["dtype"]}')
        real, size = _resolve(self.dir, f, where)
        in_store = self._store_real is not None and _inside(real, self._store_real)
        is_model = self._model_real is not None and (
            real == self._model_real or os.path.dirname(real) == os.path.dirname(self._model_real))
        _need(in_store or (is_model and not t["shared"]), where,
              f"file {f} resolves to {real}, outside the store {self.store}" +
              ("" if t["shared"] else " and not the model or its external data"))
        _need(size >= offset + length, where,
              f"file {real} is {size} bytes, shorter than offset {offset} + length {length} "
              "(truncated?)")
        return Tensor(name, t["dtype"], shape, real, offset, length, digest, t["shared"])

    def _map(self, path):
        m = self._maps.get(path)
        if m is None:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                # MAP_SHARED, PROT_READ: the page cache's (the store's) pages
                mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else None
            base = np.frombuffer(mm, np.uint8).ctypes.data if mm is not None else 0
            m = self._maps[path] = (mm, base, size)
        return m

    def arrays(self):
        """{name: read-only numpy array} of every tensor that has a file,
        mapped (not read) from it; tensors kept in an ONNX graph are not
        included."""
        out = {}
        for t in self.tensors:
            if t.file is None:
                continue
            if t.array is None:
                mm, _, _ = self._map(t.file)
                np_dtype, size, _ = DTYPES[t.dtype]
                if t.length == 0:
                    a = np.zeros(t.shape, np_dtype)
                elif t.offset % size:
                    # an unaligned tensor in the original model file (not
                    # shared anyway): a private, aligned copy
                    a = np.frombuffer(mm, np.uint8, t.length, t.offset).view(np_dtype).copy()
                else:
                    a = np.frombuffer(mm, np_dtype, t.length // size, t.offset)
                a = a.reshape(t.shape)
                a.flags.writeable = False
                t.array = a
            out[t.name] = t.array
        return out

    def mapped_ranges(self):
        """[(start, end)] addresses of this view's mappings: an array whose
        data lies inside one is the store's (or model file's) pages, no copy."""
        return [(base, base + size) for _, base, size in self._maps.values() if size]

    def is_mapped(self, address, nbytes=1):
        return any(s <= address and address + nbytes <= e for s, e in self.mapped_ranges())

    def close(self):
        """Unmaps the files. Arrays (and tensors made from them) must be gone
        first: numpy refuses to close a mapping that is still exported."""
        for t in self.tensors:
            t.array = None
        for mm, _, _ in self._maps.values():
            if mm is not None:
                mm.close()
        self._maps = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_view(path=None):
    """The validated view at path (default $TETRIS_MODEL_VIEW). Raises
    ViewError when it is missing, malformed or cannot be trusted."""
    path = path or os.environ.get("TETRIS_MODEL_VIEW")
    if not path:
        raise ViewError("no model view: TETRIS_MODEL_VIEW is not set")
    try:
        real = os.path.realpath(path, strict=True)
        st = os.stat(real)
    except OSError as e:
        raise ViewError(f"{path}: {e.strerror}") from None
    _need(stat.S_ISDIR(st.st_mode), path, "not a directory")
    _check_owner_mode(path, st)
    return View(real, _read_index(real))
