"""template.py - the Python function template's server: `python3 -m
tetris.template` loads the user's handler module (TETRIS_HANDLER, default
/function/handler.py), gives it the model's weights as read-only numpy
arrays and serves it over the Open Inference Protocol (tetris.serve) in
OpenFaaS's of-watchdog HTTP mode. The weights are the node tensor store's
pages when `tetris-agent exec` wrote a view (TETRIS_MODEL_VIEW: mapped
shared, never copied); without one, TETRIS_MODEL (a safetensors file) is
read into private memory, the baseline that computes the same.

A handler module defines
    INPUTS, OUTPUTS   [(name, datatype, shape)], datatype as the protocol
                      spells it (FP32, INT64, ...), -1 for any dimension
    load(weights)     called once with {tensor name: read-only array}
    handle(feeds)     {input name: array} -> {output name: array}
and needs only numpy: this file owns the view, the protocol and HTTP.
"""

import importlib.util
import os
import signal
import sys

from . import open_view, read_safetensors, SafetensorsError, ViewError
from .serve import log as serve_log, make_server

PROG = "tetris-python-template"
VERSION = "0.1.0"
EXIT_RUNTIME, EXIT_USAGE, EXIT_MODEL = 1, 2, 3

USAGE = f"""Usage: python3 -m tetris.template [--help] [--version]

Serves the handler module's model over the Open Inference Protocol (KServe
V2 REST), in the shape OpenFaaS's of-watchdog expects in HTTP mode.

Environment:
  TETRIS_HANDLER     the handler module (default /function/handler.py):
                     INPUTS, OUTPUTS, load(weights), handle(feeds)
  TETRIS_MODEL_VIEW  a tetris model view (tetris-agent exec): the weights
                     are the store's pages, mapped read-only
  TETRIS_MODEL       without a view: a safetensors file, read privately
  TETRIS_MODEL_NAME  the name in /v2/models/{{name}} (default: the model
                     file's name without its extension)
  TETRIS_MODEL_VERSION  its version (default: none)
  port, TETRIS_PORT, PORT  listen on :PORT (all interfaces); unset:
                     127.0.0.1:8080; 0 picks a free port
  TETRIS_MAX_BODY_BYTES  largest request body (default 67108864)

Exit status: 0 stopped by SIGTERM/SIGINT, 1 runtime failure, 2 usage,
3 bad model, untrusted view or bad handler.
"""


def log(level, event, **kv):
    serve_log(PROG, level, event, **kv)


def die(code, event, msg):
    log("error", event, msg=msg)
    sys.exit(code)


def env_int(name, default, lo=1, hi=None):
    v = os.environ.get(name, "")
    if v == "":
        return default
    if not v.isdigit() or int(v) < lo or (hi is not None and int(v) > hi):
        die(EXIT_USAGE, "usage", f"{name}={v} is not an integer in [{lo}, {hi or 'inf'}]")
    return int(v)


def listen_address():
    for name in ("port", "TETRIS_PORT", "PORT"):
        if os.environ.get(name, ""):
            return "", env_int(name, 0, 0, 65535)
    return "127.0.0.1", 8080


def load_handler(path):
    spec = importlib.util.spec_from_file_location("handler", path)
    if spec is None or not os.path.isfile(path):
        die(EXIT_USAGE, "bad-handler", f"{path}: no such file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        die(EXIT_MODEL, "bad-handler", f"{path}: {type(e).__name__}: {e}")
    for attr in ("INPUTS", "OUTPUTS", "load", "handle"):
        if not hasattr(module, attr):
            die(EXIT_MODEL, "bad-handler", f"{path} defines no {attr}")
    return module


class Model:
    """The handler over its weights, as tetris.serve wants a model."""

    def __init__(self, handler):
        self.handler = handler
        self.inputs, self.outputs = list(handler.INPUTS), list(handler.OUTPUTS)
        try:
            if os.environ.get("TETRIS_MODEL_VIEW"):
                view = open_view()
                if view.fallback is not None:
                    log("warn", "view-fallback", reason=view.fallback, msg="weights map the original model file")
                self.mode, self.model, self.view = "view", view.model, view
                weights = view.arrays()
                self.shared_bytes = sum(t.length for t in view.tensors if t.shared and t.file)
            else:
                path = os.environ.get("TETRIS_MODEL")
                if not path:
                    die(EXIT_USAGE, "usage", "neither TETRIS_MODEL_VIEW nor TETRIS_MODEL is set (try --help)")
                self.mode, self.model, self.view = "private", path, None
                weights = {n: a for n, (_, a) in read_safetensors(path).items()}
                self.shared_bytes = 0
        except (ViewError, SafetensorsError, OSError) as e:
            die(EXIT_MODEL, "untrusted-view" if isinstance(e, ViewError) else "bad-model", str(e))
        self.bytes = sum(a.nbytes for a in weights.values())
        try:
            handler.load(weights)
        except Exception as e:
            die(EXIT_MODEL, "bad-handler", f"load(): {type(e).__name__}: {e}")

    def run(self, feeds):
        return self.handler.handle(feeds)


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
    max_body = env_int("TETRIS_MAX_BODY_BYTES", 64 * 1024 * 1024)
    host, port = listen_address()
    handler_path = os.environ.get("TETRIS_HANDLER") or "/function/handler.py"
    model = Model(load_handler(handler_path))
    name = os.environ.get("TETRIS_MODEL_NAME") or os.path.splitext(os.path.basename(model.model))[0]
    try:
        server = make_server(PROG, VERSION, model, name, os.environ.get("TETRIS_MODEL_VERSION") or None,
                             "numpy", host, port, max_body)
    except OSError as e:
        die(EXIT_RUNTIME, "listen-failed", str(e))

    def stop(sig, _frame):
        log("info", "stopping", signal=signal.Signals(sig).name)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log("info", "serving", port=server.server_address[1], pid=os.getpid(), model=model.model, name=name,
        mode=model.mode, bytes=model.bytes, shared_bytes=model.shared_bytes, handler=handler_path)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
