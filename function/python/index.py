#!/usr/bin/env python3
"""index.py - the PyTorch example function: an OpenFaaS of-watchdog
HTTP-mode server (http.server, standard library) that answers Open
Inference Protocol (KServe V2) requests with a BERT module in stock
PyTorch whose parameters are the node tensor store's pages, through a
tetris model view. Nothing of tetris runs in this process:
`tetris-agent exec` writes the view (TETRIS_MODEL_VIEW) of the model's
safetensors file and holds the store's references while we run.

The module is built on the meta device (no weight allocated, none
initialised), then every parameter is bound to the view's read-only numpy
array over the store's mapping (tetris.bind_torch: no copy; load_state_dict
would copy). Without TETRIS_MODEL_VIEW it reads TETRIS_MODEL (the
safetensors file) into private memory instead: the baseline, computing
exactly the same.

Architecture: scripts/models/bert.py (BERT_ARCH, default bert-base: the
names export.py writes in bert-base.safetensors). Inputs and outputs are
named as the ONNX export names them: input_ids INT64 [batch, sequence] ->
logits FP32 [batch, 2] (bert-large: start_logits, end_logits).
"""

import http.server
import json
import os
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# In the source tree the tetris package and the architecture are here;
# an image puts them on PYTHONPATH.
for p in (os.path.join(HERE, "..", "..", "python"), os.path.join(HERE, "..", "..", "scripts", "models")):
    if os.path.isdir(p):
        sys.path.append(os.path.normpath(p))

PROG = "tetris-python-function"
VERSION = "0.1.0"
EXIT_RUNTIME, EXIT_USAGE, EXIT_MODEL = 1, 2, 3

USAGE = f"""Usage: {PROG} [--help] [--version]

Serves a BERT model in PyTorch over the Open Inference Protocol (KServe V2
REST), in the shape OpenFaaS's of-watchdog expects in HTTP mode.

Environment:
  TETRIS_MODEL_VIEW  a tetris model view of the model's safetensors file
                     (tetris-agent exec/view): parameters are bound to the
                     store's pages, no copy
  TETRIS_MODEL       without a view: the safetensors file, read privately
  BERT_ARCH          bert-base (default), bert-large or bert-tiny
  TETRIS_MODEL_NAME  the name in /v2/models/{{name}} (default: the model
                     file's name without .safetensors)
  TETRIS_MODEL_VERSION  its version (default: none)
  TETRIS_THREADS     torch.set_num_threads (default 1)
  port, TETRIS_PORT, PORT  listen on :PORT (all interfaces); unset:
                     127.0.0.1:8080; 0 picks a free port (the serving log
                     line names it)
  TETRIS_MAX_BODY_BYTES  largest request body (default 67108864)

Routes: GET /_/health, /healthz, /v2/health/live, /v2/health/ready, /v2,
/v2/models/{{name}}, /v2/models/{{name}}/ready; POST /v2/models/{{name}}/infer
(input_ids INT64 [batch, sequence], sequence 1..512, ids below 30522).
Logs: key=value lines on stderr.
Exit status: 0 stopped by SIGTERM/SIGINT, 1 runtime failure, 2 usage,
3 bad model or untrusted view.
"""


def _quote(v):
    s = str(v)
    return s if s and all(c.isalnum() or c in "_.:/@+-" for c in s) else json.dumps(s)


def log(level, event, **kv):
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"
    pairs = "".join(f" {k}={_quote(v)}" for k, v in kv.items())
    sys.stderr.write(f"ts={ts} level={level} prog={PROG} event={event}{pairs}\n")
    sys.stderr.flush()


def die(code, event, msg):
    log("error", event, msg=msg)
    sys.exit(code)


def env_int(name, default, lo=1):
    v = os.environ.get(name, "")
    if v == "":
        return default
    if not v.isdigit() or int(v) < lo:
        die(EXIT_USAGE, "usage", f"{name}={v} is not an integer >= {lo}")
    return int(v)


def listen_address():
    for name in ("port", "TETRIS_PORT", "PORT"):
        v = os.environ.get(name, "")
        if v:
            if not v.isdigit() or int(v) > 65535:
                die(EXIT_USAGE, "usage", f"{name}={v} is not a port")
            return "", int(v)
    return "127.0.0.1", 8080


class Model:
    """The module bound to its weights, and what the protocol says of it."""

    def __init__(self, arch):
        import bert
        import torch

        from tetris import open_view, read_safetensors, ViewError, SafetensorsError
        from tetris.torch_bind import BindError, bind_torch

        if arch not in bert.BERT:
            die(EXIT_USAGE, "usage", f"BERT_ARCH={arch} is not one of {', '.join(bert.BERT)}")
        self.torch, self.vocab, self.max_seq = torch, bert.VOCAB, bert.MAX_POSITIONS
        self.module = bert.build(arch, device="meta")
        self.view = None
        try:
            if os.environ.get("TETRIS_MODEL_VIEW"):
                self.view = open_view()
                if self.view.model_format != "safetensors":
                    die(EXIT_MODEL, "bad-view", f"the view's model is {self.view.model_format}: this "
                        "function needs a view of the module's safetensors state_dict")
                if self.view.fallback is not None:
                    log("warn", "view-fallback", reason=self.view.fallback,
                        msg="tensors map the original model file")
                self.mode, self.model = "view", self.view.model
                self.bytes = bind_torch(self.module, self.view)
                self.shared_bytes = sum(t.length for t in self.view.tensors if t.shared and t.file)
            else:
                path = os.environ.get("TETRIS_MODEL")
                if not path:
                    die(EXIT_USAGE, "usage", "neither TETRIS_MODEL_VIEW nor TETRIS_MODEL is set (try --help)")
                self.mode, self.model = "private", path
                self.bytes = bind_torch(self.module, read_safetensors(path))
                self.shared_bytes = 0
        except (ViewError, SafetensorsError, BindError, OSError) as e:
            die(EXIT_MODEL, "untrusted-view" if isinstance(e, ViewError) else "bad-model", str(e))
        self.module.eval()
        self.inputs = [("input_ids", "INT64", [-1, -1])]
        if self.module.qa:
            self.outputs = [("start_logits", "FP32", [-1, -1]), ("end_logits", "FP32", [-1, -1])]
        else:
            self.outputs = [("logits", "FP32", [-1, 2])]
        self.lock = threading.Lock()

    def run(self, feeds):
        from tetris.oip import RequestError

        ids = feeds["input_ids"]
        if ids.shape[0] < 1 or not 1 <= ids.shape[1] <= self.max_seq:
            raise RequestError(400, f"input_ids shape {list(ids.shape)}: batch must be >= 1 and "
                               f"sequence 1..{self.max_seq}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab):
            raise RequestError(400, f"input_ids must be token ids in [0, {self.vocab})")
        torch = self.torch
        with self.lock, torch.no_grad():
            out = self.module(torch.from_numpy(ids))
        out = out if isinstance(out, tuple) else (out,)
        return {name: t.numpy() for (name, _, _), t in zip(self.outputs, out)}


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = f"{PROG}/{VERSION}"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # key=value logs only, for failures
        pass

    def reply(self, status, body, headers=None):
        if isinstance(body, (dict, list)):
            body, headers = json.dumps(body).encode(), {"Content-Type": "application/json"}
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def fail(self, status, msg):
        log("error" if status >= 500 else "info", "request-failed", method=self.command,
            path=self.path, status=status, msg=msg)
        self.reply(status, {"error": msg})

    def model_route(self):
        """(action, error): action '', '/ready' or '/infer' for this model."""
        parts = self.path.split("?")[0].split("/")
        # ['', 'v2', 'models', NAME, ('versions', V)?, ('ready'|'infer')?]
        if len(parts) < 4 or parts[1:3] != ["v2", "models"]:
            return None, (404, f"no route {self.command} {self.path}")
        rest = parts[4:]
        if rest[:1] == ["versions"]:
            version = self.server.version
            if version is None:
                return None, (404, f"model \"{parts[3]}\" has no versions")
            if len(rest) < 2 or rest[1] != version:
                return None, (404, f"model \"{parts[3]}\" has no version \"{rest[1] if len(rest) > 1 else ''}\" "
                              f"(it has \"{version}\")")
            rest = rest[2:]
        if len(rest) > 1 or (rest and rest[0] not in ("ready", "infer")):
            return None, (404, f"no route {self.command} {self.path}")
        name = parts[3]
        if name != self.server.name:
            return None, (404, f"unknown model \"{name}\" (this function serves \"{self.server.name}\")")
        return ("/" + rest[0]) if rest else "", None

    def do_GET(self):
        path = self.path.split("?")[0]
        if path in ("/_/health", "/healthz"):
            return self.reply(200, b"OK\n", {"Content-Type": "text/plain"})
        if path == "/v2/health/live":
            return self.reply(200, {"live": True})
        if path == "/v2/health/ready":
            return self.reply(200, {"ready": True})
        if path in ("/v2", "/v2/"):
            return self.reply(200, {"name": PROG, "version": VERSION,
                                    "extensions": ["binary_tensor_data"]})
        action, err = self.model_route()
        if err:
            return self.fail(*err)
        if action == "/infer":
            return self.fail(405, f"GET {path}: use POST")
        if action == "/ready":
            return self.reply(200, {"name": self.server.name, "ready": True})
        return self.reply(200, self.server.metadata)

    def handle_expect_100(self):
        """Expect: 100-continue: refuse an oversized body before it is sent."""
        length = self.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > self.server.max_body:
            self.close_connection = True
            self.fail(413, f"request body over {self.server.max_body} bytes")
            return False
        return super().handle_expect_100()

    def do_POST(self):
        from tetris import oip

        action, err = self.model_route()
        if err:
            return self.fail(*err)
        if action != "/infer":
            return self.fail(405, f"POST {self.path}: use GET")
        length = self.headers.get("Content-Length", "")
        if not length.isdigit():
            return self.fail(411, "Content-Length required")
        if int(length) > self.server.max_body:
            self.close_connection = True
            return self.fail(413, f"request body over {self.server.max_body} bytes")
        body = self.rfile.read(int(length))
        m = self.server.model
        try:
            rid, feeds, wanted = oip.parse_infer_request(body, self.headers, m.inputs, m.outputs)
            results = m.run(feeds)
        except oip.RequestError as e:
            return self.fail(e.status, str(e))
        except Exception as e:  # names, types, shapes and ids were checked
            return self.fail(400, f"the model refused the inputs: {e}")
        types = {o[0]: o[1] for o in m.outputs}
        headers, data = oip.encode_infer_response(
            self.server.name, self.server.version, rid,
            [(n, types[n], results[n], b) for n, b in wanted])
        self.reply(200, data, headers)


def main():
    args = sys.argv[1:]
    if "--help" in args or "-h" in args:
        sys.stdout.write(USAGE)
        return 0
    if "--version" in args:
        print(f"{PROG} {VERSION}")
        return 0
    if args:
        die(EXIT_USAGE, "usage", f'unknown argument "{args[0]}" (try --help)')
    threads = env_int("TETRIS_THREADS", 1)
    max_body = env_int("TETRIS_MAX_BODY_BYTES", 64 * 1024 * 1024)
    host, port = listen_address()
    import torch

    from tetris import oip

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    model = Model(os.environ.get("BERT_ARCH", "bert-base"))
    name = os.environ.get("TETRIS_MODEL_NAME") or os.path.basename(model.model).removesuffix(".safetensors")
    try:
        server = http.server.ThreadingHTTPServer((host, port), Handler)
    except OSError as e:
        die(EXIT_RUNTIME, "listen-failed", str(e))
    server.daemon_threads = True
    server.model, server.name, server.max_body = model, name, max_body
    server.version = os.environ.get("TETRIS_MODEL_VERSION") or None
    server.metadata = oip.model_metadata(name, server.version, "pytorch", model.inputs, model.outputs)

    def stop(sig, _frame):
        log("info", "stopping", signal=signal.Signals(sig).name)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log("info", "serving", port=server.server_address[1], pid=os.getpid(), model=model.model, name=name,
        mode=model.mode, bytes=model.bytes, shared_bytes=model.shared_bytes,
        threads=threads, torch=torch.__version__)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
