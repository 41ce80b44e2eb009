// oip.js - the Open Inference Protocol (KServe V2) REST encoding of tensors
// for the Node.js example function: an infer request's inputs, JSON or with
// the binary tensor extension, decoded into typed arrays checked against
// the model's inputs, and outputs encoded back the same two ways. Standard
// library only; the runtime's tensors are built by the caller.
//
// JSON: each tensor is {name, datatype, shape, data}, data flat or nested
// in row-major order. Numbers are exact both ways: a float32 written as the
// shortest decimal of its double value parses back to the same float, and
// 64-bit integers are written as integer literals (read from numbers that
// are safe integers, or from decimal strings: JSON.parse reads every number
// as a double, so a larger one must come as a string). JSON has no NaN or infinity:
// they travel as the strings "NaN", "Infinity" and "-Infinity".
// Binary extension: the body is the JSON header (its length in the
// Inference-Header-Content-Length header) followed by raw little-endian
// tensors, each input's size in parameters.binary_data_size; an output is
// sent binary when asked for by parameters.binary_data (per output) or
// binary_data_output (request-wide).
'use strict';

// OIP datatype -> the runtime's tensor type name and typed array
const DATATYPES = {
  BOOL: { type: 'bool', Array: Uint8Array },
  UINT8: { type: 'uint8', Array: Uint8Array },
  UINT16: { type: 'uint16', Array: Uint16Array },
  UINT32: { type: 'uint32', Array: Uint32Array },
  UINT64: { type: 'uint64', Array: BigUint64Array },
  INT8: { type: 'int8', Array: Int8Array },
  INT16: { type: 'int16', Array: Int16Array },
  INT32: { type: 'int32', Array: Int32Array },
  INT64: { type: 'int64', Array: BigInt64Array },
  FP16: { type: 'float16', Array: Uint16Array },
  FP32: { type: 'float32', Array: Float32Array },
  FP64: { type: 'float64', Array: Float64Array },
};
const BY_TYPE = Object.fromEntries(Object.entries(DATATYPES).map(([k, v]) => [v.type, k]));
const INT_RANGES = {
  UINT8: [0, 255], UINT16: [0, 65535], UINT32: [0, 4294967295],
  INT8: [-128, 127], INT16: [-32768, 32767], INT32: [-2147483648, 2147483647],
};
const INT64_RANGES = {
  INT64: [-(2n ** 63n), 2n ** 63n - 1n], UINT64: [0n, 2n ** 64n - 1n],
};
// a tensor of more elements than this is refused whatever the body size
const MAX_ELEMENTS = 1 << 28;

class RequestError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function bad(msg) {
  return new RequestError(400, msg);
}

function datatypeOf(type) {
  return BY_TYPE[type] || null;
}

// ---- decoding ---------------------------------------------------------------

function flatten(data, where) {
  if (!Array.isArray(data)) throw bad(`${where}: "data" is not an array`);
  if (!data.some(Array.isArray)) return data;
  const out = [];
  const walk = (a, depth) => {
    if (depth > 64) throw bad(`${where}: "data" nested too deeply`);
    for (const v of a) {
      if (Array.isArray(v)) walk(v, depth + 1);
      else out.push(v);
    }
  };
  walk(data, 0);
  return out;
}

const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);

// float -> IEEE half bits, rounded to nearest even
function toHalf(x) {
  F32[0] = x;
  const b = U32[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && (h & 1))) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++;
  return sign | h;
}

function fromHalf(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

const SPECIAL = { NaN: NaN, Infinity: Infinity, '-Infinity': -Infinity };

function toFloat(v, where, i) {
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && Object.hasOwn(SPECIAL, v)) return SPECIAL[v];
  throw bad(`${where}: data[${i}] is not a number`);
}

function fromJson(dt, flat, where) {
  const { Array: A } = DATATYPES[dt];
  const out = new A(flat.length);
  for (let i = 0; i < flat.length; i++) {
    const v = flat[i];
    if (dt === 'FP32' || dt === 'FP64') {
      out[i] = toFloat(v, where, i);
    } else if (dt === 'FP16') {
      out[i] = toHalf(toFloat(v, where, i));
    } else if (dt === 'BOOL') {
      if (typeof v !== 'boolean') throw bad(`${where}: data[${i}] is not a boolean`);
      out[i] = v ? 1 : 0;
    } else if (dt === 'INT64' || dt === 'UINT64') {
      let n;
      if (typeof v === 'number' && Number.isSafeInteger(v)) n = BigInt(v);
      else if (typeof v === 'string' && /^-?[0-9]{1,20}$/.test(v)) n = BigInt(v);
      else throw bad(`${where}: data[${i}] is not an integer (a safe integer or a decimal string)`);
      const [lo, hi] = INT64_RANGES[dt];
      if (n < lo || n > hi) throw bad(`${where}: data[${i}] = ${n} out of range for ${dt}`);
      out[i] = n;
    } else {
      const [lo, hi] = INT_RANGES[dt];
      if (!Number.isInteger(v) || v < lo || v > hi) throw bad(`${where}: data[${i}] is not a ${dt} integer`);
      out[i] = v;
    }
  }
  return out;
}

function fromBinary(dt, bytes, where) {
  const { Array: A } = DATATYPES[dt];
  if (bytes.length % A.BYTES_PER_ELEMENT) {
    throw bad(`${where}: ${bytes.length} binary bytes are not whole ${dt} elements`);
  }
  // copy: the body's buffer need not be aligned for the element type
  const copy = new Uint8Array(bytes);
  return new A(copy.buffer, 0, bytes.length / A.BYTES_PER_ELEMENT);
}

function checkShape(shape, meta, where) {
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw bad(`${where}: "shape" is not an array of non-negative integers`);
  }
  if (meta.shape.length !== shape.length) {
    throw bad(`${where}: shape [${shape}] has ${shape.length} dimensions, the model's input has ${meta.shape.length}`);
  }
  meta.shape.forEach((d, i) => {
    if (typeof d === 'number' && d >= 0 && d !== shape[i]) {
      throw bad(`${where}: shape [${shape}] dimension ${i} must be ${d}`);
    }
  });
  const n = shape.reduce((a, b) => a * b, 1);
  if (n > MAX_ELEMENTS) throw bad(`${where}: ${n} elements, more than ${MAX_ELEMENTS}`);
  return n;
}

function parseHeader(body, headers) {
  const h = headers['inference-header-content-length'];
  let jsonLen = body.length;
  if (h !== undefined) {
    if (!/^[0-9]+$/.test(h) || Number(h) > body.length) {
      throw bad(`Inference-Header-Content-Length ${h} is not a length within the ${body.length}-byte body`);
    }
    jsonLen = Number(h);
  }
  let req;
  try {
    req = JSON.parse(body.subarray(0, jsonLen).toString('utf8'));
  } catch (e) {
    throw bad(`request is not JSON: ${e.message}`);
  }
  if (req === null || typeof req !== 'object' || Array.isArray(req)) throw bad('request is not a JSON object');
  return { req, binary: body.subarray(jsonLen) };
}

function wantsBinary(parameters, key) {
  return parameters !== null && typeof parameters === 'object' && parameters[key] === true;
}

// parseInferRequest(body, headers, inputs, outputs): inputs and outputs are
// the model's metadata ({name, type, shape}). Returns {id, feeds: [{name,
// type, shape, data}] in the model's input order, outputs: [{name, binary}]
// in the model's output order}.
// Throws RequestError (400) naming what is wrong.
function parseInferRequest(body, headers, inputs, outputs) {
  const { req, binary } = parseHeader(body, headers);
  if (req.id !== undefined && typeof req.id !== 'string') throw bad('"id" is not a string');
  if (!Array.isArray(req.inputs)) throw bad('"inputs" missing or not an array');
  const byName = new Map();
  let pos = 0;
  req.inputs.forEach((t, i) => {
    const where = `inputs[${i}]${t && typeof t.name === 'string' ? ` "${t.name}"` : ''}`;
    if (t === null || typeof t !== 'object') throw bad(`${where}: not an object`);
    const meta = inputs.find((m) => m.name === t.name);
    if (!meta) throw bad(`${where}: the model has no input of that name (it has ${inputs.map((m) => m.name).join(', ')})`);
    if (byName.has(t.name)) throw bad(`${where}: given twice`);
    const want = datatypeOf(meta.type);
    if (t.datatype !== want) throw bad(`${where}: datatype ${JSON.stringify(t.datatype)}, the model wants ${want}`);
    const n = checkShape(t.shape, meta, where);
    let data;
    const size = t.parameters && t.parameters.binary_data_size;
    if (size !== undefined) {
      if (!Number.isSafeInteger(size) || size < 0 || pos + size > binary.length) {
        throw bad(`${where}: binary_data_size ${size} runs past the body's binary part`);
      }
      data = fromBinary(t.datatype, binary.subarray(pos, pos + size), where);
      pos += size;
    } else {
      data = fromJson(t.datatype, flatten(t.data, where), where);
    }
    if (data.length !== n) throw bad(`${where}: ${data.length} elements, shape [${t.shape}] needs ${n}`);
    byName.set(t.name, { name: t.name, type: meta.type, shape: t.shape, data });
  });
  if (pos !== binary.length) throw bad(`${binary.length - pos} bytes of binary data that no input claims`);
  const missing = inputs.filter((m) => !byName.has(m.name)).map((m) => m.name);
  if (missing.length) throw bad(`missing input(s): ${missing.join(', ')}`);
  const allBinary = wantsBinary(req.parameters, 'binary_data_output');
  let wanted = outputs.map((m) => ({ name: m.name, binary: allBinary }));
  if (req.outputs !== undefined) {
    if (!Array.isArray(req.outputs)) throw bad('"outputs" is not an array');
    const asked = new Map();
    req.outputs.forEach((o, i) => {
      if (o === null || typeof o !== 'object' || typeof o.name !== 'string') throw bad(`outputs[${i}]: no "name"`);
      if (!outputs.some((m) => m.name === o.name)) throw bad(`outputs[${i}]: the model has no output "${o.name}"`);
      if (asked.has(o.name)) throw bad(`outputs[${i}]: "${o.name}" asked for twice`);
      asked.set(o.name, allBinary || wantsBinary(o.parameters, 'binary_data'));
    });
    // answered in the model's order, as tetris-function answers
    wanted = outputs.filter((m) => asked.has(m.name)).map((m) => ({ name: m.name, binary: asked.get(m.name) }));
  }
  return { id: req.id, feeds: inputs.map((m) => byName.get(m.name)), outputs: wanted };
}

// ---- encoding ---------------------------------------------------------------

function jsonData(dt, data) {
  if (dt === 'BOOL') return JSON.stringify(Array.from(data, (v) => v !== 0));
  if (dt === 'FP16') data = Float64Array.from(data, fromHalf);
  if (dt === 'FP16' || dt === 'FP32' || dt === 'FP64') {
    if (!data.every(Number.isFinite)) {
      return JSON.stringify(Array.from(data, (v) => (Number.isFinite(v) ? v : String(v))));
    }
  }
  // a typed array joins as exact decimal literals, BigInts included
  return '[' + Array.prototype.join.call(data, ',') + ']';
}

// encodeInferResponse(model, version, id, outputs): outputs [{name, type,
// shape, data, binary}]; version null: the model has none. Returns
// {headers, body}.
function encodeInferResponse(model, version, id, outputs) {
  const parts = [];
  const blobs = [];
  for (const o of outputs) {
    const dt = datatypeOf(o.type);
    if (!dt) throw new RequestError(500, `output "${o.name}" has type ${o.type}, which OIP cannot carry`);
    let t = `{"name":${JSON.stringify(o.name)},"datatype":"${dt}","shape":${JSON.stringify(o.shape)}`;
    if (o.binary) {
      const b = Buffer.from(o.data.buffer, o.data.byteOffset, o.data.byteLength);
      blobs.push(b);
      t += `,"parameters":{"binary_data_size":${b.length}}}`;
    } else {
      t += `,"data":${jsonData(dt, o.data)}}`;
    }
    parts.push(t);
  }
  const head = `{"model_name":${JSON.stringify(model)}` +
    (version !== null ? `,"model_version":${JSON.stringify(version)}` : '') +
    (id !== undefined ? `,"id":${JSON.stringify(id)}` : '') + `,"outputs":[${parts.join(',')}]}`;
  if (blobs.length === 0) {
    return { headers: { 'Content-Type': 'application/json' }, body: Buffer.from(head) };
  }
  const json = Buffer.from(head);
  return {
    headers: { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(json.length) },
    body: Buffer.concat([json, ...blobs]),
  };
}

// The model metadata of GET /v2/models/{name}: dynamic dimensions are -1;
// "versions" only for a versioned model.
function modelMetadata(model, version, platform, inputs, outputs) {
  const t = (m) => ({
    name: m.name,
    datatype: datatypeOf(m.type) || m.type,
    shape: m.shape.map((d) => (typeof d === 'number' && d >= 0 ? d : -1)),
  });
  return {
    name: model, ...(version !== null ? { versions: [version] } : {}), platform,
    inputs: inputs.map(t), outputs: outputs.map(t),
  };
}

module.exports = { parseInferRequest, encodeInferResponse, modelMetadata, RequestError, DATATYPES, datatypeOf };
