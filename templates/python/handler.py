"""handler.py - the Python template's handler: the user's code. The
template (python3 -m tetris.template, under tetris-agent exec) gives load()
the model's weights as read-only numpy arrays over the node tensor store's
pages and calls handle() for every Open Inference Protocol request, with
its inputs decoded and checked against INPUTS.

This one is a two-layer perceptron over a safetensors file holding
fc1.weight [hidden, 256], fc1.bias, fc2.weight [10, hidden], fc2.bias
(templates/python/make-model.py writes one): x FP32 [batch, 256] ->
y FP32 [batch, 10]. Replace it with your model's code.
"""

import numpy as np

INPUTS = [("x", "FP32", [-1, 256])]
OUTPUTS = [("y", "FP32", [-1, 10])]

W = {}


def load(weights):
    # Keep the arrays themselves: a copy (np.array, astype) would be private
    # memory instead of the store's shared pages.
    W.update(weights)


def handle(feeds):
    h = np.maximum(feeds["x"] @ W["fc1.weight"].T + W["fc1.bias"], 0)
    return {"y": (h @ W["fc2.weight"].T + W["fc2.bias"]).astype(np.float32)}
