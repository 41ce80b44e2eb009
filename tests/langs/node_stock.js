#!/usr/bin/env node
// node_stock.js - stock onnxruntime-node on a model file, with its own
// defaults (graph optimisation `all`, MLAS pre-packing on) and one
// intra-op thread: the baseline a Node.js function on a view with a
// derived form must answer byte for byte (tests/langs/test-node-derived.sh).
// Reads an Open Inference Protocol request (JSON), runs it once and prints
// the SHA-256 of every output's raw bytes, in the model's output order, and
// their count ("<hex> <bytes>"), as scripts/lib/oip-sha256.js prints a
// function's answer.
//   node_stock.js MODEL REQUEST
'use strict';
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const oip = require(path.join(__dirname, '../../function/node/oip'));

async function main() {
  const [model, request] = process.argv.slice(2);
  if (!model || !request) throw new Error('usage: node_stock.js MODEL REQUEST');
  const ort = require('onnxruntime-node');
  const session = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: 'all', intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
  });
  const meta = (list) => list.map((m) => ({ name: m.name, type: m.type, shape: m.shape }));
  const outputs = meta(session.outputMetadata);
  const r = oip.parseInferRequest(fs.readFileSync(request), {}, meta(session.inputMetadata), outputs);
  const feeds = {};
  for (const f of r.feeds) feeds[f.name] = new ort.Tensor(f.type, f.data, f.shape);
  const got = await session.run(feeds, r.outputs.map((o) => o.name));
  const hash = crypto.createHash('sha256');
  let total = 0;
  for (const o of r.outputs) {
    const d = got[o.name].data;
    const bytes = Buffer.from(d.buffer, d.byteOffset, d.byteLength);
    hash.update(bytes);
    total += bytes.length;
  }
  process.stdout.write(`${hash.digest('hex')} ${total}\n`);
}

main().catch((e) => {
  process.stderr.write(`node_stock.js: ${e.message}\n`);
  process.exit(1);
});
