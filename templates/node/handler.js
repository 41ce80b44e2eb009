// handler.js - the Node.js template's handler: the user's code. The
// template (function/node/index.js under tetris-agent exec) opens the
// model's ONNX Runtime session over the node tensor store's pages, decodes
// each Open Inference Protocol request into ort.Tensors checked against
// the model's inputs, and calls handle() with them and the names of the
// outputs the request asks for; handle() returns those outputs as
// ort.Tensors, which the template encodes (JSON or binary).
//
// This one runs the model as it is. Pre- or post-processing goes around
// session.run (e.g. normalising an input, or keeping the top-k of an
// output under the output's own name).
'use strict';

module.exports.handle = async function handle({ session, ort, feeds, outputs }) {
  void ort; // for making tensors: new ort.Tensor('float32', data, dims)
  return session.run(feeds, outputs);
};
