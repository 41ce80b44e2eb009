#!/usr/bin/env python3
"""index.py - the PyTorch example function: an OpenFaaS of-watchdog
HTTP-mode server (tetris.serve, on the standard library) that answers Open
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

import os
import signal
import sys
import threading

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


def log(level, event, **kv):
    from tetris.serve import log as serve_log

    serve_log(PROG, level, event, **kv)


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

    from tetris.serve import make_server

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    model = Model(os.environ.get("BERT_ARCH", "bert-base"))
    name = os.environ.get("TETRIS_MODEL_NAME") or os.path.basename(model.model).removesuffix(".safetensors")
    try:
        server = make_server(PROG, VERSION, model, name, os.environ.get("TETRIS_MODEL_VERSION") or None,
                             "pytorch", host, port, max_body)
    except OSError as e:
        die(EXIT_RUNTIME, "listen-failed", str(e))

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
