#!/usr/bin/env node
// index.js - the Node.js example function: an OpenFaaS of-watchdog HTTP-mode
// server that answers Open Inference Protocol (KServe V2) requests with
// stock onnxruntime-node, its weights mapped from the node's tensor store
// through a tetris model view. Nothing of tetris runs in this process:
// `tetris-agent exec` writes the view (TETRIS_MODEL_VIEW) and holds the
// store's references while we run; ONNX Runtime opens the view's graph,
// whose weights are external data files in the store, and maps them.
//
// The view's session options are what keeps those pages shared (graph
// optimisations fold weights into private copies, pre-packing copies GEMM
// weights): graph_optimization_level -> graphOptimizationLevel, and every
// "<area>.<key>" entry (session.disable_prepacking) -> a session config
// entry through `extra`. Without TETRIS_MODEL_VIEW it loads TETRIS_MODEL
// itself with the same options (the private baseline: same outputs).
//
// A view written for this runtime (`tetris-agent exec --derived use
// --runtime "onnxruntime 1.22.0"`) may carry the store's derived form:
// the graph optimised at `all` once per node by this very runtime, its
// pre-packed weights in a store file. The function opens it, with the
// form's session options (optimisation off, pre-packing on), when the
// form's runtime is the one onnxruntime-node runs, and answers as stock
// onnxruntime-node at `all` does; a form made by another runtime is not
// opened (its packs' layout is that runtime's): one log line, the plain
// graph.
//
// What an inference computes is a handler's (OpenFaaS's template layout): a
// module exporting `async handle({session, ort, feeds, outputs})` that
// returns the named outputs as ort.Tensors. It is TETRIS_HANDLER, else
// handler.js beside this file when there is one (the Node.js template puts
// the user's there), else session.run(feeds, outputs).
//
// Routes: GET /_/health (of-watchdog), /healthz, /v2/health/live,
// /v2/health/ready, /v2, /v2/models/{name}[/ready], POST
// /v2/models/{name}/infer (the versioned forms too), answered as
// tetris-function answers them (function/oip_api.c). Bad requests get 4xx
// with {"error": "..."} (400 also when the runtime refuses the inputs' values)
// and the function keeps serving. Logs are key=value lines on stderr, as
// every tetris program's.
'use strict';

const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');

const oip = require('./oip');
const { openView, derivedFor, ViewError } = require('./tetris-view');
const { ortSessionOptions, graphSource: viewGraphSource } = require('./view-session');

const PROG = 'tetris-node-function';
const VERSION = require('./package.json').version;
// the view's defaults, also used for the private baseline
const DEFAULT_SESSION_OPTIONS = { graph_optimization_level: 'disabled', 'session.disable_prepacking': '1' };
const EXIT_RUNTIME = 1;
const EXIT_USAGE = 2;
const EXIT_MODEL = 3;

const USAGE = `Usage: ${PROG} [--help] [--version]

Serves one ONNX model over the Open Inference Protocol (KServe V2 REST) in
the shape OpenFaaS's of-watchdog expects in HTTP mode, with stock
onnxruntime-node.

Environment:
  TETRIS_MODEL_VIEW  a tetris model view (written by tetris-agent exec/view):
                     the session opens its graph, whose weights are the node
                     tensor store's pages, with its session options; or its
                     derived form, when this onnxruntime-node made it
  TETRIS_MODEL       without a view: the ONNX model, loaded privately
  TETRIS_MODEL_NAME  the model's name in /v2/models/{name} (default: the
                     model file's name without .onnx)
  TETRIS_MODEL_VERSION  its version (default: none)
  TETRIS_THREADS     intra-op threads (default 1)
  TETRIS_HANDLER     a module exporting handle({session, ort, feeds,
                     outputs}) -> {name: ort.Tensor} (default: handler.js
                     beside this program if present, else session.run)
  port, TETRIS_PORT, PORT  listen on :PORT (all interfaces); unset:
                     127.0.0.1:8080. 0 picks a free port (the serving log
                     line names it)
  TETRIS_MAX_BODY_BYTES  largest request body (default 67108864)

Routes: GET /_/health, /healthz, /v2/health/live, /v2/health/ready, /v2,
/v2/models/{name}, /v2/models/{name}/ready; POST /v2/models/{name}/infer.
Logs: key=value lines on stderr.
Exit status: 0 stopped by SIGTERM/SIGINT, 1 runtime failure, 2 usage,
3 bad model or untrusted view.
`;

// ---- logs -----------------------------------------------------------------

function quote(v) {
  const s = String(v);
  return /^[A-Za-z0-9_.:/@+-]+$/.test(s) ? s : JSON.stringify(s);
}

function log(level, event, kv = {}) {
  const pairs = Object.entries(kv).map(([k, v]) => `${k}=${quote(v)}`);
  process.stderr.write(`ts=${new Date().toISOString()} level=${level} prog=${PROG} event=${event}` +
    (pairs.length ? ' ' + pairs.join(' ') : '') + '\n');
}

function die(code, event, msg) {
  log('error', event, { msg });
  process.exit(code);
}

// ---- configuration ----------------------------------------------------------

function positiveInt(name, fallback, min = 1) {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  if (!/^[0-9]+$/.test(v) || Number(v) < min) die(EXIT_USAGE, 'usage', `${name}=${v} is not an integer >= ${min}`);
  return Number(v);
}

function listenAddress() {
  for (const name of ['port', 'TETRIS_PORT', 'PORT']) {
    const v = process.env[name];
    if (v === undefined || v === '') continue;
    if (!/^[0-9]+$/.test(v) || Number(v) > 65535) die(EXIT_USAGE, 'usage', `${name}=${v} is not a port`);
    return { host: undefined, port: Number(v) };
  }
  return { host: '127.0.0.1', port: 8080 };
}

// The view's session_options as onnxruntime-node's session options.
function ortOptions(sessionOptions, threads) {
  let mapped;
  try {
    mapped = ortSessionOptions(sessionOptions, threads);
  } catch (e) {
    if (e instanceof ViewError) die(EXIT_MODEL, 'bad-view', e.message);
    throw e;
  }
  for (const [option, value] of mapped.ignored) {
    log('warn', 'view-option-ignored', { option, value, msg: 'no onnxruntime-node equivalent' });
  }
  return mapped.options;
}

// What to open: the view's graph (its derived form when runtime made it),
// or TETRIS_MODEL privately.
function chooseModel(runtime) {
  if (process.env.TETRIS_MODEL_VIEW) {
    let view;
    try {
      view = openView(process.env.TETRIS_MODEL_VIEW);
    } catch (e) {
      if (e instanceof ViewError) die(EXIT_MODEL, 'untrusted-view', e.message);
      throw e;
    }
    if (view.modelFormat !== 'onnx') die(EXIT_MODEL, 'bad-view', `the view's model is ${view.modelFormat}, not ONNX`);
    if (view.fallback !== null) log('warn', 'view-fallback', { reason: view.fallback, msg: 'serving the original model file' });
    const form = derivedFor(view, runtime);
    if (view.derived !== null && form === null) {
      log('warn', 'view-derived-mismatch', {
        runtime, form_runtime: view.derived.runtime, action: 'plain-graph',
        msg: 'the derived form was made by another runtime',
      });
    }
    return {
      mode: 'view', file: form ? form.graph : view.graph, model: view.model,
      options: form ? form.sessionOptions : view.sessionOptions, derived: form !== null,
      tensors: view.tensors.length, sharedBytes: view.sharedBytes + (form ? form.dataLength : 0),
    };
  }
  const model = process.env.TETRIS_MODEL;
  if (!model) die(EXIT_USAGE, 'usage', 'neither TETRIS_MODEL_VIEW nor TETRIS_MODEL is set (try --help)');
  return {
    mode: 'private', file: model, model, options: DEFAULT_SESSION_OPTIONS, derived: false, tensors: 0,
    sharedBytes: 0,
  };
}

// What the session opens: a view's graph (from its bytes where its
// external data is the store's: view-session.js), or TETRIS_MODEL's path.
function graphSource(chosen) {
  if (chosen.mode !== 'view') return chosen.file;
  try {
    return viewGraphSource(chosen.file, chosen.options);
  } catch (e) {
    return die(EXIT_MODEL, 'bad-model', `${chosen.file}: ${e.message}`);
  }
}

// The user's handler, or running the session as it is.
function loadHandler() {
  const file = process.env.TETRIS_HANDLER || path.join(__dirname, 'handler.js');
  if (!process.env.TETRIS_HANDLER && !fs.existsSync(file)) {
    return { file: null, handle: ({ session, feeds, outputs }) => session.run(feeds, outputs) };
  }
  let mod;
  try {
    mod = require(path.resolve(file));
  } catch (e) {
    die(EXIT_USAGE, 'bad-handler', `${file}: ${e.message}`);
  }
  const handle = typeof mod === 'function' ? mod : mod.handle;
  if (typeof handle !== 'function') die(EXIT_USAGE, 'bad-handler', `${file} exports no handle() function`);
  return { file, handle };
}

// ---- HTTP -------------------------------------------------------------------

function reply(res, status, obj) {
  const body = Buffer.from(JSON.stringify(obj));
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': body.length });
  res.end(body);
}

function readBody(req, limit) {
  const declared = Number(req.headers['content-length']);
  if (declared > limit) return Promise.reject(new oip.RequestError(413, `request body over ${limit} bytes`));
  return new Promise((resolve, reject) => {
    const chunks = [];
    let n = 0;
    req.on('data', (c) => {
      n += c.length;
      if (n > limit) {
        reject(new oip.RequestError(413, `request body over ${limit} bytes`));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function tensorMeta(list) {
  return list.map((m) => {
    if (!m.isTensor) die(EXIT_MODEL, 'bad-model', `"${m.name}" is not a tensor`);
    return { name: m.name, type: m.type, shape: m.shape };
  });
}

async function infer(ctx, req, res) {
  const body = await readBody(req, ctx.maxBody);
  const r = oip.parseInferRequest(body, req.headers, ctx.inputs, ctx.outputs);
  const feeds = {};
  for (const f of r.feeds) feeds[f.name] = new ctx.ort.Tensor(f.type, f.data, f.shape);
  let results;
  try {
    results = await ctx.handler.handle({
      session: ctx.session, ort: ctx.ort, feeds, outputs: r.outputs.map((o) => o.name),
    });
  } catch (e) {
    if (e instanceof oip.RequestError) throw e;
    // names, types and shapes were checked: what is left is the values
    throw new oip.RequestError(400, `the runtime refused the inputs: ${e.message}`);
  }
  const outs = r.outputs.map((o) => {
    const t = results && results[o.name];
    if (!t || !(t instanceof ctx.ort.Tensor)) {
      throw new oip.RequestError(500, `the handler returned no tensor "${o.name}"`);
    }
    return { name: o.name, type: t.type, shape: t.dims, data: t.data, binary: o.binary };
  });
  const enc = oip.encodeInferResponse(ctx.name, ctx.version, r.id, outs);
  res.writeHead(200, { ...enc.headers, 'Content-Length': enc.body.length });
  res.end(enc.body);
}

const MODEL_ROUTE = /^\/v2\/models\/([^/]+)(?:\/versions\/([^/]+))?(\/ready|\/infer)?$/;

async function route(ctx, req, res) {
  const url = req.url.split('?')[0];
  if (req.method === 'GET') {
    if (url === '/_/health' || url === '/healthz') {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('OK\n');
      return;
    }
    if (url === '/v2/health/live') return reply(res, 200, { live: true });
    if (url === '/v2/health/ready') return reply(res, 200, { ready: true });
    if (url === '/v2' || url === '/v2/') return reply(res, 200, { name: PROG, version: VERSION, extensions: ['binary_tensor_data'] });
  }
  const m = MODEL_ROUTE.exec(url);
  if (!m) return reply(res, 404, { error: `no route ${req.method} ${url}` });
  let name;
  try {
    name = decodeURIComponent(m[1]);
  } catch (e) {
    return reply(res, 400, { error: `model name in ${url} is not valid percent-encoding` });
  }
  if (name !== ctx.name) return reply(res, 404, { error: `unknown model "${name}" (this function serves "${ctx.name}")` });
  if (m[2] !== undefined && ctx.version === null) return reply(res, 404, { error: `model "${name}" has no versions` });
  if (m[2] !== undefined && m[2] !== ctx.version) {
    return reply(res, 404, { error: `model "${name}" has no version "${m[2]}" (it has "${ctx.version}")` });
  }
  const action = m[3] || '';
  const want = action === '/infer' ? 'POST' : 'GET';
  if (req.method !== want) {
    res.setHeader('Allow', want);
    return reply(res, 405, { error: `${req.method} ${url}: use ${want}` });
  }
  if (action === '/ready') return reply(res, 200, { name, ready: true });
  if (action === '') return reply(res, 200, ctx.metadata);
  return infer(ctx, req, res);
}

function serve(ctx, addr) {
  const handle = (req, res) => {
    route(ctx, req, res).catch((e) => {
      const status = e instanceof oip.RequestError ? e.status : 500;
      log(status >= 500 ? 'error' : 'info', 'request-failed', { method: req.method, path: req.url, status, msg: e.message });
      // a body we did not read must not be taken for the next request
      if (status === 413) res.setHeader('Connection', 'close');
      if (!res.headersSent) reply(res, status, { error: e.message });
      else res.destroy();
    });
  };
  const server = http.createServer(handle);
  // Expect: 100-continue: refuse an oversized body before it is sent
  server.on('checkContinue', (req, res) => {
    if (!(Number(req.headers['content-length']) > ctx.maxBody)) res.writeContinue();
    handle(req, res);
  });
  server.on('error', (e) => die(EXIT_RUNTIME, 'listen-failed', e.message));
  server.listen(addr.port, addr.host, () => {
    log('info', 'serving', {
      port: server.address().port, pid: process.pid, model: ctx.model, name: ctx.name, mode: ctx.mode,
      derived: ctx.derived, tensors: ctx.tensors, shared_bytes: ctx.sharedBytes, ort: ctx.ort.env.versions.node,
      handler: ctx.handler.file || 'session.run',
    });
  });
  const stop = (sig) => {
    log('info', 'stopping', { signal: sig });
    server.close(() => process.exit(0));
    server.closeAllConnections();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

async function main() {
  const args = process.argv.slice(2);
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(USAGE);
    return;
  }
  if (args.includes('--version')) {
    process.stdout.write(`${PROG} ${VERSION}\n`);
    return;
  }
  if (args.length) die(EXIT_USAGE, 'usage', `unknown argument "${args[0]}" (try --help)`);

  const threads = positiveInt('TETRIS_THREADS', 1);
  const maxBody = positiveInt('TETRIS_MAX_BODY_BYTES', 64 * 1024 * 1024);
  const addr = listenAddress();
  // loaded only now: --help and --version work without the runtime
  const ort = require('onnxruntime-node');
  const chosen = chooseModel(`onnxruntime ${ort.env.versions.node}`);
  const handler = loadHandler();
  let session;
  try {
    session = await ort.InferenceSession.create(graphSource(chosen), ortOptions(chosen.options, threads));
  } catch (e) {
    die(EXIT_MODEL, 'bad-model', `${chosen.file}: ${e.message}`);
  }
  const inputs = tensorMeta(session.inputMetadata);
  const outputs = tensorMeta(session.outputMetadata);
  const name = process.env.TETRIS_MODEL_NAME || path.basename(chosen.model).replace(/\.onnx$/, '');
  const version = process.env.TETRIS_MODEL_VERSION || null;
  serve({
    ort, session, handler, inputs, outputs, name, version, maxBody, mode: chosen.mode, model: chosen.model,
    derived: chosen.derived, tensors: chosen.tensors, sharedBytes: chosen.sharedBytes,
    metadata: oip.modelMetadata(name, version, 'onnx_onnxv1', inputs, outputs),
  }, addr);
}

main().catch((e) => die(EXIT_RUNTIME, 'error', e.stack || e.message));
