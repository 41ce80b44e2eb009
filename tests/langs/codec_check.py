"""codec_check.py - test helper: the Python package's OIP codec
(python/tetris/oip.py) on its own, as codec_check.js does for Node.js's.
SIGNATURE is the model's inputs as [{name, datatype, shape}] (-1:
dynamic), also used as its outputs.
  codec_check.py decode SIGNATURE REQUEST   "name DATATYPE <hex>" per input
  codec_check.py encode SIGNATURE REQUEST   the inputs as a response (JSON)
A request the codec refuses: "error STATUS message" on stdout, exit 1.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from tetris import oip  # noqa: E402

mode, sig_file, req_file = sys.argv[1:4]
with open(sig_file) as f:
    sig = [(t["name"], t["datatype"], t["shape"]) for t in json.load(f)]
with open(req_file, "rb") as f:
    body = f.read()
try:
    rid, feeds, _ = oip.parse_infer_request(body, {}, sig, sig)
except oip.RequestError as e:
    print(f"error {e.status} {e}")
    sys.exit(1)
if mode == "decode":
    for name, dt, _ in sig:
        print(f"{name} {dt} {feeds[name].tobytes().hex()}")
else:
    types = {s[0]: s[1] for s in sig}
    _, out = oip.encode_infer_response("codec", None, rid, [(n, types[n], a, False) for n, a in feeds.items()])
    sys.stdout.buffer.write(out)
