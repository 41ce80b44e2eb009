// view-session.js - what onnxruntime-node opens for a model view: a view's
// (or its derived form's) session_options as onnxruntime-node session
// options, and the graph as a path or as its bytes. Shared by the Node.js
// function (index.js) and the benchmarks that time it
// (bench/view-latency), so that both open a view the same way.
'use strict';

const fs = require('node:fs');

const { ViewError, EXTERNAL_FOLDER_OPTION } = require('./tetris-view');

const GRAPH_LEVELS = ['disabled', 'basic', 'extended', 'all'];

// The view's session_options as onnxruntime-node's session options:
// graph_optimization_level -> graphOptimizationLevel, every
// "<area>.<key>" entry (session.disable_prepacking) -> a session config
// entry through `extra`. Returns { options, ignored }: ignored lists the
// [key, value] pairs onnxruntime-node has no equivalent for. A level that
// is not one of onnxruntime-node's throws a ViewError.
function ortSessionOptions(sessionOptions, threads) {
  const options = { intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential', extra: {} };
  const ignored = [];
  for (const [k, v] of Object.entries(sessionOptions)) {
    if (k === 'graph_optimization_level') {
      if (!GRAPH_LEVELS.includes(v)) throw new ViewError(`graph_optimization_level "${v}" is not one of ${GRAPH_LEVELS}`);
      options.graphOptimizationLevel = v;
    } else if (k.includes('.')) {
      options.extra[k] = v;
    } else {
      ignored.push([k, v]);
    }
  }
  return { options, ignored };
}

// What the session opens for a view's graph: its bytes when the session
// options name the external-data folder (the store), else its path.
// onnxruntime-node 1.24 to 1.27 refuse, by path, external data that
// resolves (links followed) outside the model's folder even with that
// folder set, and the links of a view the agent writes lead into the
// store; from bytes every release from 1.22 on opens it, mapping the
// store's files all the same (docs/programs/tetris-agent.md). Reading the
// file may throw (the caller names it).
function graphSource(file, sessionOptions) {
  return EXTERNAL_FOLDER_OPTION in sessionOptions ? fs.readFileSync(file) : file;
}

module.exports = { ortSessionOptions, graphSource };
