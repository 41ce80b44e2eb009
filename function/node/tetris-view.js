// tetris-view.js - reads and validates a tetris model view (docs/PROTOCOLS.md,
// "Model view") with nothing but node's standard library, so that a Node.js
// function can hand its runtime the view's graph and know that every byte
// it will map comes from the node's tensor store (or the original model),
// not from a file someone else could have written.
//
// A view is trusted only if
//   - its directory and tensors.json are owned by this uid or root and not
//     writable by group or others (tensors.json is opened without following
//     a symlink, and checked on the open descriptor);
//   - tensors.json is "tetris-model-view/1" with every field well-formed;
//   - `graph` (ONNX) is a regular file inside the view directory, or the
//     original model itself;
//   - every tensor's `file` resolves (symlinks followed) to a regular file
//     inside `store`, or is the model or a file beside it (its external
//     data), at least offset + length bytes long, and length = elements x
//     dtype size.
//   - a derived form ("derived", not null: the store's graph optimised by
//     one runtime, with its pre-packed weights) has its graph inside the
//     view and its data file inside `store`, at least `length` bytes long.
//     Its runtime is the one that made it: a caller opens it only when it
//     runs that runtime (derivedFor), else the plain graph.
// A view as a CSI volume (docs/programs/tetris-csi.md) has the store's
// tensors mounted in it: its `store`, and the external-data folder of its
// session options, are "." (the view directory, wherever it is mounted),
// and its `model` is the node's path of the original, which a pod does not
// see: a model that does not exist is no error, it only cannot be the
// graph or a tensor's file.
// Anything else throws a ViewError whose message names the view, the
// tensor and the field; nothing is ever written.
'use strict';

const fs = require('node:fs');
const path = require('node:path');

const FORMAT = 'tetris-model-view/1';
// "store" (and a folder in session_options) of a view with the store's
// tensors mounted in it: the view directory.
const VIEW_SELF = '.';
// The session option naming the folder external data resolves against.
const EXTERNAL_FOLDER_OPTION = 'session.model_external_initializers_file_folder_path';
const FOLDER_OPTIONS = [EXTERNAL_FOLDER_OPTION];
// tensors.json of the largest models is a few MB; a bound keeps a hostile
// file from deciding how much memory we take.
const MAX_INDEX_BYTES = 64 * 1024 * 1024;

// Canonical dtype names (PROTOCOLS.md, "Tensor identity") and element sizes.
const DTYPE_BYTES = {
  float32: 4, float16: 2, bfloat16: 2, float64: 8, int8: 1, uint8: 1, int16: 2, uint16: 2,
  int32: 4, uint32: 4, int64: 8, uint64: 8, bool: 1, float8e4m3fn: 1, float8e5m2: 1,
};

class ViewError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ViewError';
  }
}

// owned by us or root, not writable by group or others
function checkOwnerMode(what, st) {
  const uid = process.getuid();
  if (st.uid !== uid && st.uid !== 0) {
    throw new ViewError(`${what}: owned by uid ${st.uid}, not by this process's uid ${uid} or root`);
  }
  if (st.mode & 0o022) {
    throw new ViewError(`${what}: mode ${(st.mode & 0o777).toString(8)} is writable by group or others`);
  }
}

function readIndex(dir) {
  const file = path.join(dir, 'tensors.json');
  let fd;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
  } catch (e) {
    throw new ViewError(`${file}: cannot open: ${e.code === 'ELOOP' ? 'a symlink' : e.message}`);
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw new ViewError(`${file}: not a regular file`);
    checkOwnerMode(file, st);
    if (st.size > MAX_INDEX_BYTES) {
      throw new ViewError(`${file}: ${st.size} bytes, more than the ${MAX_INDEX_BYTES}-byte limit`);
    }
    const text = fs.readFileSync(fd, 'utf8');
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new ViewError(`${file}: malformed JSON: ${e.message}`);
    }
  } finally {
    fs.closeSync(fd);
  }
}

function isInside(child, parent) {
  return child.startsWith(parent.endsWith('/') ? parent : parent + '/');
}

function need(cond, where, msg) {
  if (!cond) throw new ViewError(`${where}: ${msg}`);
}

function isCount(v) {
  return Number.isSafeInteger(v) && v >= 0;
}

// A relative path from the view must stay in it lexically too: no '..'.
function resolveInView(dir, p, where) {
  if (path.isAbsolute(p)) return p;
  need(!p.split('/').includes('..'), where, `"${p}" climbs out of the view directory`);
  return path.join(dir, p);
}

function realFile(p, where) {
  let real;
  try {
    real = fs.realpathSync(p);
  } catch (e) {
    throw new ViewError(`${where}: ${p}: ${e.code === 'ENOENT' ? 'does not exist' : e.message}`);
  }
  const st = fs.statSync(real);
  need(st.isFile(), where, `${p} is not a regular file`);
  return { real, size: st.size };
}

// The tensor's file, resolved, and the checks of the module's header.
function checkTensorFile(ctx, t, where) {
  const f = realFile(resolveInView(ctx.dir, t.file, where), where);
  const inStore = ctx.store !== null && isInside(f.real, ctx.store);
  const isModel = ctx.model !== null &&
    (f.real === ctx.model || path.dirname(f.real) === path.dirname(ctx.model));
  need(inStore || (isModel && !t.shared), where,
    `file ${t.file} resolves to ${f.real}, outside the store ${ctx.store}` +
    (t.shared ? '' : ' and not the model or its external data'));
  need(f.size >= t.offset + t.length, where,
    `file ${f.real} is ${f.size} bytes, shorter than offset ${t.offset} + length ${t.length} (truncated?)`);
  return f.real;
}

function checkTensor(ctx, t, i) {
  const where = `${ctx.index}: tensors[${i}]${t && typeof t.name === 'string' ? ` "${t.name}"` : ''}`;
  need(t !== null && typeof t === 'object' && !Array.isArray(t), where, 'not an object');
  need(typeof t.name === 'string', where, '"name" missing or not a string');
  need(Object.hasOwn(DTYPE_BYTES, t.dtype), where, `"dtype" ${JSON.stringify(t.dtype)} is not a canonical dtype name`);
  need(Array.isArray(t.shape) && t.shape.every(isCount), where, '"shape" is not an array of non-negative integers');
  need(typeof t.shared === 'boolean', where, '"shared" missing or not a boolean');
  need(t.digest === null || (typeof t.digest === 'string' && /^sha256:[0-9a-f]{64}$/.test(t.digest)), where,
    '"digest" is neither null nor sha256:<64 hex>');
  if (t.file === null) return { name: t.name, dtype: t.dtype, shape: t.shape, file: null, shared: t.shared };
  need(typeof t.file === 'string' && t.file.length > 0, where, '"file" is neither null nor a path');
  need(isCount(t.offset) && isCount(t.length), where, '"offset" and "length" must be non-negative integers');
  const elements = t.shape.reduce((a, b) => a * b, 1);
  need(elements * DTYPE_BYTES[t.dtype] === t.length, where,
    `"length" ${t.length} is not ${elements} elements of ${t.dtype}`);
  const real = checkTensorFile(ctx, t, where);
  return {
    name: t.name, dtype: t.dtype, shape: t.shape, file: real, offset: t.offset,
    length: t.length, digest: t.digest, shared: t.shared,
  };
}

function checkGraph(ctx, graph) {
  const where = `${ctx.index}: "graph"`;
  if (graph === null || graph === undefined) {
    need(ctx.modelFormat !== 'onnx', where, 'missing for an ONNX model');
    return null;
  }
  need(typeof graph === 'string' && graph.length > 0, where, 'not a path');
  const f = realFile(resolveInView(ctx.dir, graph, where), where);
  need(isInside(f.real, ctx.dir) || f.real === ctx.model, where,
    `${graph} resolves to ${f.real}, neither inside the view nor the model`);
  return f.real;
}

function checkSessionOptions(ctx, so) {
  const where = `${ctx.index}: "session_options"`;
  if (so === undefined || so === null) return {};
  need(typeof so === 'object' && !Array.isArray(so), where, 'not an object');
  const out = {};
  for (const [k, v] of Object.entries(so)) {
    need(typeof v === 'string' || v === null, where, `"${k}" is neither a string nor null`);
    // null: the option does not apply to this view
    if (v !== null) out[k] = v === VIEW_SELF && FOLDER_OPTIONS.includes(k) ? ctx.dir : v;
  }
  return out;
}

function checkDerived(ctx, d) {
  const where = `${ctx.index}: "derived"`;
  if (d === undefined || d === null) return null;
  need(typeof d === 'object' && !Array.isArray(d), where, 'not an object');
  need(typeof d.runtime === 'string' && d.runtime.length > 0, where, '"runtime" missing or not a string');
  need(typeof d.graph === 'string' && d.graph.length > 0, where, '"graph" is not a path');
  need(d.data !== null && typeof d.data === 'object' && typeof d.data.file === 'string' && isCount(d.data.length),
    where, '"data" needs "file" and "length"');
  need(ctx.store !== null, where, 'a derived form, but the view has no store');
  const graph = realFile(resolveInView(ctx.dir, d.graph, where), where);
  need(isInside(graph.real, ctx.dir), where, `graph ${d.graph} resolves to ${graph.real}, outside the view`);
  const data = realFile(resolveInView(ctx.dir, d.data.file, where), where);
  need(isInside(data.real, ctx.store), where, `data ${d.data.file} resolves to ${data.real}, outside the store ${ctx.store}`);
  need(data.size >= d.data.length, where,
    `data ${data.real} is ${data.size} bytes, shorter than its length ${d.data.length} (truncated?)`);
  return {
    runtime: d.runtime, graph: graph.real, dataFile: data.real, dataLength: d.data.length,
    // a folder of "." is the view's, as in the plain graph's options
    sessionOptions: checkSessionOptions({ index: `${ctx.index}: "derived"`, dir: ctx.dir }, d.session_options),
  };
}

// The derived form of view if it was made by runtime ("onnxruntime
// 1.22.0"), else null.
function derivedFor(view, runtime) {
  return view.derived !== null && view.derived.runtime === runtime ? view.derived : null;
}

// openView(dir = $TETRIS_MODEL_VIEW): the validated view. Throws ViewError.
function openView(dir = process.env.TETRIS_MODEL_VIEW) {
  if (!dir) throw new ViewError('no model view: TETRIS_MODEL_VIEW is not set');
  let real;
  try {
    real = fs.realpathSync(dir);
  } catch (e) {
    throw new ViewError(`${dir}: ${e.code === 'ENOENT' ? 'no such view directory' : e.message}`);
  }
  const st = fs.statSync(real);
  if (!st.isDirectory()) throw new ViewError(`${dir}: not a directory`);
  checkOwnerMode(dir, st);
  const v = readIndex(real);
  const index = path.join(dir, 'tensors.json');
  need(v !== null && typeof v === 'object' && !Array.isArray(v), index, 'not a JSON object');
  need(v.format === FORMAT, index, `"format" is ${JSON.stringify(v.format)}, not "${FORMAT}"`);
  need(typeof v.model === 'string' && path.isAbsolute(v.model), index, '"model" is not an absolute path');
  need(typeof v.model_format === 'string', index, '"model_format" missing or not a string');
  need(v.store === null || v.store === VIEW_SELF || (typeof v.store === 'string' && path.isAbsolute(v.store)),
    index, '"store" is neither null, "." nor an absolute path');
  need(typeof v.shared === 'boolean', index, '"shared" missing or not a boolean');
  need(v.fallback === null || typeof v.fallback === 'string', index, '"fallback" is neither null nor a string');
  need(Array.isArray(v.tensors), index, '"tensors" is not an array');
  let model = null;
  try {
    model = fs.realpathSync(v.model);
  } catch (e) {
    if (e.code !== 'ENOENT') throw new ViewError(`${index}: "model" ${v.model}: ${e.message}`);
  }
  let store = null;
  if (v.store === VIEW_SELF) {
    store = real;
  } else if (v.store !== null) {
    try {
      store = fs.realpathSync(v.store);
    } catch (e) {
      throw new ViewError(`${index}: "store" ${v.store}: ${e.message}`);
    }
  }
  const ctx = { dir: real, index, model, modelFormat: v.model_format, store };
  const tensors = v.tensors.map((t, i) => checkTensor(ctx, t, i));
  const names = new Set();
  for (const t of tensors) {
    need(!names.has(t.name), index, `tensor "${t.name}" listed twice`);
    names.add(t.name);
  }
  return {
    dir: real,
    model: v.model,
    modelFormat: v.model_format,
    graph: checkGraph(ctx, v.graph),
    store,
    shared: v.shared,
    fallback: v.fallback,
    sessionOptions: checkSessionOptions(ctx, v.session_options),
    derived: checkDerived(ctx, v.derived),
    tensors,
    sharedBytes: tensors.reduce((a, t) => a + (t.shared && t.file ? t.length : 0), 0),
  };
}

module.exports = { openView, derivedFor, ViewError, DTYPE_BYTES, FORMAT, EXTERNAL_FOLDER_OPTION };
