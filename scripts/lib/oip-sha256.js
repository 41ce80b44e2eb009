#!/usr/bin/env node
// oip-sha256.js - the SHA-256 of an Open Inference Protocol infer
// response's output bytes, computed as tetris-onnx-run computes its
// "sha256" (every output's raw little-endian bytes, in order, concatenated),
// so that a function's JSON answer can be compared with a private ONNX
// Runtime run (scripts/lib/serving.sh's oip_answer; the demo, the
// benchmarks and tests/langs). Reads the response from FILE (JSON, or the
// binary tensor extension when HEADER_LENGTH, its
// Inference-Header-Content-Length, is given); prints "<hex> <bytes>".
// Node's standard library only. (JSON integers beyond 2^53 would lose
// digits here; the models' outputs are floats.)
//   oip-sha256.js FILE [HEADER_LENGTH]
'use strict';
const crypto = require('node:crypto');
const fs = require('node:fs');

const ARRAYS = {
  BOOL: Uint8Array, UINT8: Uint8Array, UINT16: Uint16Array, UINT32: Uint32Array,
  UINT64: BigUint64Array, INT8: Int8Array, INT16: Int16Array, INT32: Int32Array,
  INT64: BigInt64Array, FP32: Float32Array, FP64: Float64Array,
};
const SPECIAL = { NaN: NaN, Infinity: Infinity, '-Infinity': -Infinity };

function die(msg) {
  process.stderr.write(`oip-sha256.js: ${msg}\n`);
  process.exit(1);
}

const [file, headerLength] = process.argv.slice(2);
if (!file) die('usage: oip-sha256.js FILE [HEADER_LENGTH]');
const body = fs.readFileSync(file);
const jsonLen = headerLength === undefined ? body.length : Number(headerLength);
const text = body.subarray(0, jsonLen).toString('utf8');
const resp = JSON.parse(text);
if (!Array.isArray(resp.outputs)) die(`no "outputs" in the response: ${text.slice(0, 300)}`);
const hash = crypto.createHash('sha256');
let total = 0;
let pos = jsonLen;
for (const o of resp.outputs) {
  const A = ARRAYS[o.datatype];
  if (!A) die(`output "${o.name}": datatype ${o.datatype} not handled`);
  let bytes;
  if (o.parameters && o.parameters.binary_data_size !== undefined) {
    bytes = body.subarray(pos, pos + o.parameters.binary_data_size);
    pos += bytes.length;
  } else {
    const flat = [o.data].flat(Infinity);
    const conv = A === BigInt64Array || A === BigUint64Array ? (v) => BigInt(v)
      : o.datatype === 'BOOL' ? (v) => (v ? 1 : 0)
        : (v) => (typeof v === 'string' ? SPECIAL[v] : v);
    const arr = A.from(flat, conv);
    bytes = Buffer.from(arr.buffer, arr.byteOffset, arr.byteLength);
  }
  hash.update(bytes);
  total += bytes.length;
}
process.stdout.write(`${hash.digest('hex')} ${total}\n`);
