# tests/langs/module.mk - the example functions in other languages on their
# stock runtimes (function/node/: Node.js and onnxruntime-node; python/ and
# function/python/: the tetris package and PyTorch) sharing weights through
# model views written by `tetris-agent exec`.
SHELL_TESTS += tests/langs/test-node-view.sh tests/langs/test-python-view.sh
