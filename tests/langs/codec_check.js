#!/usr/bin/env node
// codec_check.js - test helper: the Node.js function's OIP codec
// (function/node/oip.js) on its own. SIGNATURE is the model's inputs as
// [{name, datatype, shape}] (-1: dynamic), also used as its outputs.
//   codec_check.js decode SIGNATURE REQUEST   one line per input, in the
//       signature's order: "name DATATYPE <hex of the bytes>"
//   codec_check.js encode SIGNATURE REQUEST   the decoded inputs sent back
//       as an infer response (JSON), on stdout
// A request the codec refuses: "error STATUS message" on stdout, exit 1.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const oip = require(path.join(__dirname, '..', '..', 'function', 'node', 'oip.js'));

const [mode, sigFile, reqFile] = process.argv.slice(2);
const sig = JSON.parse(fs.readFileSync(sigFile, 'utf8')).map((t) => ({
  name: t.name, type: oip.DATATYPES[t.datatype].type, shape: t.shape,
}));
let r;
try {
  r = oip.parseInferRequest(fs.readFileSync(reqFile), {}, sig, sig);
} catch (e) {
  if (!(e instanceof oip.RequestError)) throw e;
  process.stdout.write(`error ${e.status} ${e.message}\n`);
  process.exit(1);
}
if (mode === 'decode') {
  for (const f of r.feeds) {
    const b = Buffer.from(f.data.buffer, f.data.byteOffset, f.data.byteLength);
    process.stdout.write(`${f.name} ${oip.datatypeOf(f.type)} ${b.toString('hex')}\n`);
  }
} else {
  const outs = r.feeds.map((f) => ({ ...f, binary: false }));
  process.stdout.write(oip.encodeInferResponse('codec', null, r.id, outs).body);
}
