"""oip.py - Open Inference Protocol (KServe V2 REST) tensors as numpy
arrays, standard library and numpy only: an infer request's inputs
(JSON, or the binary tensor extension) decoded and checked against the
model's inputs, outputs encoded back. The same encoding as tetris-function
and the Node.js example (protocol/oip.h): data flat or nested, row-major;
floats exact both ways (a float32 written as the shortest decimal of its
value parses back to the same bits); NaN and infinities as the strings
"NaN", "Infinity", "-Infinity"; binary data after a JSON header whose
length is the Inference-Header-Content-Length header.

Model inputs and outputs are described as (name, datatype, shape) with -1
for a dynamic dimension.
"""

import json

import numpy as np

DATATYPES = {
    "BOOL": "?", "UINT8": "u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8",
    "INT8": "i1", "INT16": "<i2", "INT32": "<i4", "INT64": "<i8",
    "FP16": "<f2", "FP32": "<f4", "FP64": "<f8",
}
HEADER_LENGTH = "Inference-Header-Content-Length"
MAX_ELEMENTS = 1 << 28
SPECIAL = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class RequestError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _bad(msg):
    return RequestError(400, msg)


def _flatten(data, where):
    if not isinstance(data, list):
        raise _bad(f'{where}: "data" is not an array')
    if not any(isinstance(v, list) for v in data):
        return data
    out, stack = [], [(iter(data), 0)]
    while stack:
        it, depth = stack[-1]
        v = next(it, stack)
        if v is stack:
            stack.pop()
        elif isinstance(v, list):
            if depth >= 64:
                raise _bad(f'{where}: "data" nested too deeply')
            stack.append((iter(v), depth + 1))
        else:
            out.append(v)
    return out


def _from_json(dt, flat, where):
    if dt in ("FP16", "FP32", "FP64"):
        vals = []
        for i, v in enumerate(flat):
            if isinstance(v, str) and v in SPECIAL:
                v = SPECIAL[v]
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _bad(f"{where}: data[{i}] is not a number")
            vals.append(v)
        return np.array(vals, np.float64).astype(DATATYPES[dt])
    if dt == "BOOL":
        if not all(isinstance(v, bool) for v in flat):
            raise _bad(f"{where}: data holds a value that is not a boolean")
        return np.array(flat, "?")
    info = np.iinfo(DATATYPES[dt])
    for i, v in enumerate(flat):
        if isinstance(v, str) and v.lstrip("-").isdigit() and len(v) <= 21:
            v = flat[i] = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or not info.min <= v <= info.max:
            raise _bad(f"{where}: data[{i}] is not a {dt} integer")
    return np.array(flat, DATATYPES[dt])


def _check_shape(shape, meta_shape, where):
    if not (isinstance(shape, list) and
            all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise _bad(f'{where}: "shape" is not an array of non-negative integers')
    if len(shape) != len(meta_shape):
        raise _bad(f"{where}: shape {shape} has {len(shape)} dimensions, "
                   f"the model's input has {len(meta_shape)}")
    for i, (d, m) in enumerate(zip(shape, meta_shape)):
        if m >= 0 and d != m:
            raise _bad(f"{where}: shape {shape} dimension {i} must be {m}")
    n = int(np.prod(shape, dtype=np.int64))
    if n > MAX_ELEMENTS:
        raise _bad(f"{where}: {n} elements, more than {MAX_ELEMENTS}")
    return n


def _split(body, headers):
    h = headers.get(HEADER_LENGTH)
    n = len(body)
    if h is not None:
        if not h.isdigit() or int(h) > len(body):
            raise _bad(f"{HEADER_LENGTH} {h} is not a length within the {len(body)}-byte body")
        n = int(h)
    try:
        req = json.loads(body[:n])
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad(f"request is not JSON: {e}") from None
    if not isinstance(req, dict):
        raise _bad("request is not a JSON object")
    return req, memoryview(body)[n:]


def _wants_binary(params, key):
    return isinstance(params, dict) and params.get(key) is True


def parse_infer_request(body, headers, inputs, outputs):
    """(id, {name: array} in the model's input order, [(output name,
    binary)] in the model's output order). Raises RequestError (400) naming
    what is wrong."""
    req, binary = _split(body, headers)
    rid = req.get("id")
    if rid is not None and not isinstance(rid, str):
        raise _bad('"id" is not a string')
    if not isinstance(req.get("inputs"), list):
        raise _bad('"inputs" missing or not an array')
    meta = {m[0]: m for m in inputs}
    got, pos = {}, 0
    for i, t in enumerate(req["inputs"]):
        name = t.get("name") if isinstance(t, dict) else None
        where = f"inputs[{i}]" + (f' "{name}"' if isinstance(name, str) else "")
        if not isinstance(t, dict):
            raise _bad(f"{where}: not an object")
        if name not in meta:
            raise _bad(f"{where}: the model has no input of that name "
                       f"(it has {', '.join(meta)})")
        if name in got:
            raise _bad(f"{where}: given twice")
        _, want, meta_shape = meta[name]
        if t.get("datatype") != want:
            raise _bad(f"{where}: datatype {json.dumps(t.get('datatype'))}, the model wants {want}")
        n = _check_shape(t.get("shape"), meta_shape, where)
        size = (t.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or size < 0 or pos + size > len(binary):
                raise _bad(f"{where}: binary_data_size {size} runs past the body's binary part")
            itemsize = np.dtype(DATATYPES[want]).itemsize
            if size % itemsize:
                raise _bad(f"{where}: {size} binary bytes are not whole {want} elements")
            a = np.frombuffer(binary[pos:pos + size], DATATYPES[want]).copy()
            pos += size
        else:
            a = _from_json(want, _flatten(t.get("data"), where), where)
        if a.size != n:
            raise _bad(f"{where}: {a.size} elements, shape {t['shape']} needs {n}")
        got[name] = a.reshape(t["shape"])
    if pos != len(binary):
        raise _bad(f"{len(binary) - pos} bytes of binary data that no input claims")
    missing = [m for m in meta if m not in got]
    if missing:
        raise _bad(f"missing input(s): {', '.join(missing)}")
    all_binary = _wants_binary(req.get("parameters"), "binary_data_output")
    names = [o[0] for o in outputs]
    wanted = [(n, all_binary) for n in names]
    if "outputs" in req:
        if not isinstance(req["outputs"], list):
            raise _bad('"outputs" is not an array')
        asked = {}
        for i, o in enumerate(req["outputs"]):
            if not isinstance(o, dict) or not isinstance(o.get("name"), str):
                raise _bad(f'outputs[{i}]: no "name"')
            if o["name"] not in names:
                raise _bad(f'outputs[{i}]: the model has no output "{o["name"]}"')
            if o["name"] in asked:
                raise _bad(f'outputs[{i}]: "{o["name"]}" asked for twice')
            asked[o["name"]] = all_binary or _wants_binary(o.get("parameters"), "binary_data")
        # answered in the model's order, as tetris-function answers
        wanted = [(n, asked[n]) for n in names if n in asked]
    return rid, {m[0]: got[m[0]] for m in inputs}, wanted


def _json_data(dt, a):
    flat = a.reshape(-1)
    if dt in ("FP16", "FP32", "FP64"):
        vals = flat.astype(np.float64).tolist()
        if not np.isfinite(flat).all():
            vals = [v if np.isfinite(v) else ("NaN" if v != v else ("Infinity" if v > 0 else "-Infinity"))
                    for v in vals]
        return json.dumps(vals, allow_nan=False)
    return json.dumps(flat.tolist())


def encode_infer_response(model, version, rid, outputs):
    """outputs: [(name, datatype, array, binary)] -> (headers, body);
    version None: the model has none."""
    parts, blobs = [], []
    for name, dt, a, binary in outputs:
        a = np.ascontiguousarray(a, DATATYPES[dt])
        t = f'{{"name":{json.dumps(name)},"datatype":"{dt}","shape":{json.dumps(list(a.shape))}'
        if binary:
            blobs.append(a.tobytes())
            t += f',"parameters":{{"binary_data_size":{a.nbytes}}}}}'
        else:
            t += f',"data":{_json_data(dt, a)}}}'
        parts.append(t)
    head = (f'{{"model_name":{json.dumps(model)}' +
            (f',"model_version":{json.dumps(version)}' if version is not None else "") +
            (f',"id":{json.dumps(rid)}' if rid is not None else "") +
            f',"outputs":[{",".join(parts)}]}}').encode()
    if not blobs:
        return {"Content-Type": "application/json"}, head
    return ({"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(head))},
            head + b"".join(blobs))


def model_metadata(model, version, platform, inputs, outputs):
    """GET /v2/models/{name}: "versions" only for a versioned model."""
    def t(m):
        return {"name": m[0], "datatype": m[1], "shape": list(m[2])}

    meta = {"name": model}
    if version is not None:
        meta["versions"] = [version]
    meta.update(platform=platform, inputs=[t(m) for m in inputs], outputs=[t(m) for m in outputs])
    return meta
