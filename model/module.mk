# model/module.mk - the model-format library: the
# safetensors and ONNX parsers (on common/pbwire.h's protobuf reader), tensor manifests, publishing a model's
# tensors into the store and the ONNX rewriter; their unit tests, the
# bad-input corpus generator and the bad-input CLI test. (The fuzz
# harnesses are in fuzz/module.mk, built only by `make fuzz`.)
LIB_SRCS += model/format_safetensors.c model/format_onnx.c \
            model/model.c model/model_parse.c model/manifest.c model/model_print.c model/model_publish.c \
            model/onnx_rewrite.c

UNIT_TESTS += tests/model/test_safetensors.c tests/model/test_onnx.c tests/model/test_manifest.c

TEST_PROGRAMS += tetris-gen-model-corpus
tetris-gen-model-corpus_SRCS := tests/model/gen-model-corpus.c

SHELL_TESTS += tests/model/test-bad-models.sh
