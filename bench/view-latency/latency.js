#!/usr/bin/env node
// latency.js (bench/view-latency) - one process's session and per-request
// latency with stock onnxruntime-node, as the Node.js function opens its
// model (function/node/view-session.js):
//   TETRIS_MODEL_VIEW set  the view's derived form made by this runtime,
//                          with the form's session options (optimisation
//                          off, pre-packing on, packs mapped from the store)
//   unset                  MODEL privately at onnxruntime-node's defaults
//                          (optimisation `all`, pre-packing on): stock
// It runs the Open Inference Protocol request REQUEST RUNS times and prints
// one JSON line: session_ms, first_ms (the first inference alone), run_ms
// (the mean of the others), the outputs' sha256 and bytes, and, for a form,
// how its data file is mapped: form_pmd_kb (ShmemPmdMapped: on 2 MiB
// pages through 2 MiB entries) and form_eligible (mappings khugepaged may
// collapse it through: THPeligible).
//   latency.js MODEL REQUEST RUNS THREADS
// Exit status: 0 measured, 1 the runtime or the view failed, 2 usage.
'use strict';
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const fn = path.join(__dirname, '..', '..', 'function', 'node');
const oip = require(path.join(fn, 'oip'));
const { openView, derivedFor } = require(path.join(fn, 'tetris-view'));
const { ortSessionOptions, graphSource } = require(path.join(fn, 'view-session'));

const msSince = (t) => Number(process.hrtime.bigint() - t) / 1e6;

// ShmemPmdMapped and THPeligible summed over this process's mappings of file.
function mappedAs(file) {
  let on = false;
  let pmdKb = 0;
  let eligible = 0;
  for (const line of fs.readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s+(.*)$/.exec(line);
    if (head) on = head[1] === file;
    else if (on && line.startsWith('ShmemPmdMapped:')) pmdKb += Number(line.split(/\s+/)[1]);
    else if (on && line.startsWith('THPeligible:')) eligible += Number(line.split(/\s+/)[1]);
  }
  return { pmdKb, eligible };
}

async function main() {
  const [model, request, runsArg, threadsArg] = process.argv.slice(2);
  const runs = Number(runsArg);
  const threads = Number(threadsArg);
  if (!model || !request || !(runs >= 2) || !(threads >= 1)) {
    process.stderr.write('usage: latency.js MODEL REQUEST RUNS(>=2) THREADS(>=1)\n');
    process.exit(2);
  }
  const ort = require('onnxruntime-node');
  let source;
  let options;
  let form = null;
  if (process.env.TETRIS_MODEL_VIEW) {
    const view = openView(process.env.TETRIS_MODEL_VIEW);
    form = derivedFor(view, `onnxruntime ${ort.env.versions.node}`);
    if (form === null) throw new Error(`the view carries no form made by onnxruntime ${ort.env.versions.node}`);
    options = ortSessionOptions(form.sessionOptions, threads).options;
    source = graphSource(form.graph, form.sessionOptions);
  } else {
    options = ortSessionOptions({ graph_optimization_level: 'all' }, threads).options;
    source = model;
  }
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(source, options);
  const sessionMs = msSince(t0);
  const meta = (list) => list.map((m) => ({ name: m.name, type: m.type, shape: m.shape }));
  const r = oip.parseInferRequest(fs.readFileSync(request), {}, meta(session.inputMetadata), meta(session.outputMetadata));
  const feeds = {};
  for (const f of r.feeds) feeds[f.name] = new ort.Tensor(f.type, f.data, f.shape);
  const names = r.outputs.map((o) => o.name);
  const times = [];
  let got;
  for (let i = 0; i < runs; i++) {
    const t = process.hrtime.bigint();
    got = await session.run(feeds, names);
    times.push(msSince(t));
  }
  const hash = crypto.createHash('sha256');
  let bytes = 0;
  for (const name of names) {
    const d = got[name].data;
    hash.update(Buffer.from(d.buffer, d.byteOffset, d.byteLength));
    bytes += d.byteLength;
  }
  const rest = times.slice(1);
  const mapped = form ? mappedAs(form.dataFile) : { pmdKb: 0, eligible: 0 };
  process.stdout.write(JSON.stringify({
    session_ms: sessionMs, first_ms: times[0], run_ms: rest.reduce((a, b) => a + b, 0) / rest.length,
    sha256: hash.digest('hex'), output_bytes: bytes, form_pmd_kb: mapped.pmdKb, form_eligible: mapped.eligible,
  }) + '\n');
}

main().catch((e) => {
  process.stderr.write(`latency.js: ${e.message}\n`);
  process.exit(1);
});
