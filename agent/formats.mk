# agent/formats.mk - model formats and manifests (part of libtetris), their
# unit tests, the bad-input corpus generator and the bad-input CLI test.
# (The fuzz harnesses are in fuzz/module.mk, built only by `make fuzz`.)
LIB_SRCS += agent/protobuf.c agent/format_safetensors.c agent/format_onnx.c \
            agent/model.c agent/manifest.c agent/model_print.c

UNIT_TESTS += tests/unit/test_safetensors.c tests/unit/test_onnx.c tests/unit/test_manifest.c

TEST_PROGRAMS += tetris-gen-model-corpus
tetris-gen-model-corpus_SRCS := tests/formats/gen-model-corpus.c

SHELL_TESTS += tests/formats/test-bad-models.sh
