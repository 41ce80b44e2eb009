#!/usr/bin/env python3
"""fake_apiserver.py - a read-only Kubernetes API for shell tests that run a
real tetris program (tetris-node-pins, say) without a cluster.

It serves, from a JSON file re-read on every request, the objects
{"namespaces": [...], "pods": [...], "configmaps": [...]}:

  GET /api/v1/namespaces/NAME                   a namespace, or 404 Status
  GET /api/v1/pods                              pods in all namespaces
  GET /api/v1/namespaces/NS/pods|configmaps     the same in one namespace

Lists honour labelSelector (key, !key, key=value, key!=value, comma-joined)
and fieldSelector (spec.nodeName=X, metadata.namespace=X) as the apiserver
does, and come back in one page. Each request is appended to the log file
as "METHOD PATH?QUERY". Usage: fake_apiserver.py OBJECTS.json PORTFILE LOG;
it listens on a free 127.0.0.1 port and writes the port to PORTFILE.
Anything but GET is 405: the programs under test only read."""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlsplit

OBJECTS, PORTFILE, LOG = sys.argv[1:4]


def label_match(labels, selector):
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.rstrip("=")) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_value(obj, path):
    for part in path.split("."):
        obj = obj.get(part, {}) if isinstance(obj, dict) else {}
    return obj if isinstance(obj, str) else ""


def field_match(obj, selector):
    for term in filter(None, selector.split(",")):
        k, v = term.split("=", 1)
        if field_value(obj, k.rstrip("=")) != v:
            return False
    return True


def status(code, reason, message):
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                  "reason": reason, "message": message, "code": code}


def answer(path, query):
    with open(OBJECTS) as f:
        objects = json.load(f)
    parts = path.strip("/").split("/")
    if parts[:2] != ["api", "v1"]:
        return status(404, "NotFound", "no such path")
    parts = parts[2:]
    if len(parts) == 2 and parts[0] == "namespaces":
        for ns in objects.get("namespaces", []):
            if ns["metadata"]["name"] == parts[1]:
                return 200, ns
        return status(404, "NotFound", 'namespaces "%s" not found' % parts[1])
    ns = None
    if len(parts) == 3 and parts[0] == "namespaces":
        ns, parts = parts[1], parts[2:]
    if len(parts) != 1 or parts[0] not in ("pods", "configmaps"):
        return status(404, "NotFound", "no such path")
    items = [o for o in objects.get(parts[0], [])
             if (ns is None or o["metadata"].get("namespace") == ns)
             and label_match(o["metadata"].get("labels", {}),
                             query.get("labelSelector", [""])[0])
             and field_match(o, query.get("fieldSelector", [""])[0])]
    return 200, {"kind": "List", "apiVersion": "v1",
                 "metadata": {"resourceVersion": "1"}, "items": items}


class Handler(BaseHTTPRequestHandler):
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        with open(LOG, "a") as log:
            log.write("GET %s\n" % self.path)
        url = urlsplit(self.path)
        self.reply(*answer(url.path, parse_qs(url.query)))

    def do_POST(self):
        self.reply(*status(405, "MethodNotAllowed", "read-only fake"))

    do_PUT = do_PATCH = do_DELETE = do_POST

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORTFILE + ".tmp", PORTFILE)
server.serve_forever()
