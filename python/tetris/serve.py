"""serve.py - the Open Inference Protocol (KServe V2 REST) server of the
Python functions, in the shape OpenFaaS's of-watchdog expects in HTTP mode
(GET /_/health, the V2 routes, POST .../infer), on http.server from the
standard library. What a model computes is not this file's: it serves any
object with `inputs` and `outputs` ([(name, datatype, shape)], shape -1 for
any) and `run(feeds) -> {name: numpy array}`, so the PyTorch function
(function/python/index.py) and the numpy template (templates/python) answer
the same requests the same way.

Every malformed request gets 4xx with {"error": "..."} and the server
serves on; logs are key=value lines on stderr.
"""

import http.server
import json
import sys
import time

from . import oip


def _quote(v):
    s = str(v)
    return s if s and all(c.isalnum() or c in "_.:/@+-" for c in s) else json.dumps(s)


def log(prog, level, event, **kv):
    """One key=value line on stderr, as every tetris program logs."""
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"
    pairs = "".join(f" {k}={_quote(v)}" for k, v in kv.items())
    sys.stderr.write(f"ts={ts} level={level} prog={prog} event={event}{pairs}\n")
    sys.stderr.flush()


class Handler(http.server.BaseHTTPRequestHandler):
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
        log(self.server.prog, "error" if status >= 500 else "info", "request-failed",
            method=self.command, path=self.path, status=status, msg=msg)
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
            return self.reply(200, {"name": self.server.prog, "version": self.server.prog_version,
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

    def read_body(self):
        """(body, error): the request's body, by Content-Length or chunked
        (OpenFaaS's gateway forwards a body in chunks), at most max_body."""
        limit = self.server.max_body
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts, n = [], 0
            while True:
                line = self.rfile.readline(1024).split(b";")[0].strip()
                try:
                    size = int(line, 16)
                except ValueError:
                    self.close_connection = True
                    return None, (400, "malformed chunked body")
                if size == 0:
                    while self.rfile.readline(1024).strip():  # trailers
                        pass
                    return b"".join(parts), None
                n += size
                if n > limit:
                    self.close_connection = True
                    return None, (413, f"request body over {limit} bytes")
                chunk = self.rfile.read(size)
                if len(chunk) != size or self.rfile.readline(3).strip():
                    self.close_connection = True
                    return None, (400, "malformed chunked body")
                parts.append(chunk)
        length = self.headers.get("Content-Length", "")
        if not length.isdigit():
            return None, (411, "Content-Length required")
        if int(length) > limit:
            self.close_connection = True
            return None, (413, f"request body over {limit} bytes")
        return self.rfile.read(int(length)), None

    def do_POST(self):
        action, err = self.model_route()
        if err:
            return self.fail(*err)
        if action != "/infer":
            return self.fail(405, f"POST {self.path}: use GET")
        body, err = self.read_body()
        if err:
            return self.fail(*err)
        m = self.server.model
        try:
            rid, feeds, wanted = oip.parse_infer_request(body, self.headers, m.inputs, m.outputs)
            results = m.run(feeds)
        except oip.RequestError as e:
            return self.fail(e.status, str(e))
        except Exception as e:  # names, types and shapes were checked
            return self.fail(400, f"the model refused the inputs: {e}")
        types = {o[0]: o[1] for o in m.outputs}
        missing = [n for n, _ in wanted if n not in results]
        if missing:
            return self.fail(500, f"the model returned no output {', '.join(missing)}")
        headers, data = oip.encode_infer_response(
            self.server.name, self.server.version, rid,
            [(n, types[n], results[n], b) for n, b in wanted])
        self.reply(200, data, headers)


def make_server(prog, prog_version, model, name, version, platform, host, port, max_body):
    """A ThreadingHTTPServer serving `model` as NAME; raises OSError when it
    cannot listen."""
    handler = type("Handler", (Handler,), {"server_version": f"{prog}/{prog_version}"})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.prog, server.prog_version = prog, prog_version
    server.model, server.name, server.version, server.max_body = model, name, version, max_body
    server.metadata = oip.model_metadata(name, version, platform, model.inputs, model.outputs)
    return server
