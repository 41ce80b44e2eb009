# agent/formats.mk - model formats and manifests (part of libtetris), their
# unit tests and the bad-input tests.
LIB_SRCS += agent/protobuf.c agent/format_safetensors.c agent/format_onnx.c \
            agent/model.c agent/manifest.c agent/model_print.c
UNIT_TESTS += tests/unit/test_safetensors.c
UNIT_TESTS += tests/unit/test_onnx.c
TEST_PROGRAMS += tetris-gen-model-corpus
tetris-gen-model-corpus_SRCS := tests/formats/gen-model-corpus.c
UNIT_TESTS += tests/unit/test_manifest.c
