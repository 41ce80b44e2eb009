# fuzz/module.mk - libFuzzer harnesses for the model parsers (safetensors,
# ONNX and its protobuf reader, manifests). Built with clang only by
# `make fuzz`, never by `make` or `make test`.
FUZZ_SECONDS ?= 60
FUZZ_DIR := build/fuzz
FUZZ_TARGETS := safetensors onnx manifest
FUZZ_LIB_SRCS := common/error.c common/log.c tensorstore/digest.c agent/protobuf.c \
                 agent/format_safetensors.c agent/format_onnx.c agent/model.c \
                 agent/manifest.c agent/model_print.c
FUZZ_CFLAGS := -std=c11 -g -O1 -Wall -Wextra -fno-omit-frame-pointer \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LDLIBS := -lcrypto -lz -ljansson

$(FUZZ_DIR)/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_common.h $(FUZZ_LIB_SRCS) | .deps/.stamp
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_SRCS) $(FUZZ_LDLIBS)

$(FUZZ_DIR)/seed-manifests: fuzz/seed-manifests.c $(FUZZ_LIB_SRCS) | .deps/.stamp
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_LIB_SRCS) $(FUZZ_LDLIBS)

fuzz: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%) $(FUZZ_DIR)/seed-manifests $(BIN)/tetris-gen-model-corpus
	FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz/run-fuzzers.sh $(FUZZ_DIR) $(abspath $(BIN))/tetris-gen-model-corpus
