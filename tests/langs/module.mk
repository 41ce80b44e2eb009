# tests/langs/module.mk - the example functions in other languages on their
# stock runtimes (function/node/: Node.js and onnxruntime-node; python/ and
# function/python/: the tetris package and PyTorch) sharing weights through
# model views written by `tetris-agent exec` (Node.js: onnxruntime-node 1.22
# and 1.26).
SHELL_TESTS += tests/langs/test-node-view.sh tests/langs/test-node-derived.sh tests/langs/test-python-view.sh \
               tests/langs/test-oip-codecs.sh tests/langs/test-node-ort-versions.sh
# PyTorch (installed by scripts/models/paper-models.sh; SKIP without it):
# BERT-tiny's function takes about a minute and a half on a busy 2-core
# machine (each instance imports torch).
SLOW_TESTS += tests/langs/test-python-function.sh
# BERT-base (438 MB): minutes to export once, two minutes to run.
SLOW_TESTS += tests/langs/test-python-bert.sh
