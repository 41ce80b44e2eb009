# fuzz/module.mk - libFuzzer harnesses for the model parsers (safetensors,
# ONNX and its protobuf reader, manifests), the ONNX rewriter that strips
# shared payloads before ONNX Runtime sees a model, the decoders of what
# peers send (ingest messages, and json_scan which cuts them up, node
# inventories, derived-form index entries, the AdmissionReviews
# tetris-webhook gets, the inference requests tetris-function decodes),
# the readers of the files the store and the daemon keep (holder files,
# the store marker, the daemon's state file),
# the model view's index a function's container reads (view_check), the
# protocol buffers reader and the CSI requests decoded with it (pbwire), the
# pin file the daemon reads before each pass (pin_file), the registry
# artifact and references (oci), what a registry is trusted with and shows
# (oci_auth: the credentials file, WWW-Authenticate, token replies),
# tetris-csi's tenant map (tenant_map), and the YAML reader with the
# settings and profile readers on top of it (yaml).
# Built with clang only by `make fuzz`, never by `make` or `make test`.
#
# The harnesses link a clang-built, coverage-instrumented libtetris. Its
# source list is complete only once every module.mk has been read, which is
# after this file, so `fuzz` hands it to a sub-make on the command line.
FUZZ_SECONDS ?= 60
FUZZ_DIR := build/fuzz
FUZZ_TARGETS := safetensors onnx onnx_rewrite manifest ingest json_scan inventory webhook \
                holders store_marker state view_check oip yaml derived pin_file oci oci_auth \
                pbwire tenant_map
FUZZ_CFLAGS := -std=c11 -g -O1 -Wall -Wextra -fno-omit-frame-pointer \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_OBJS := $(FUZZ_LIB_SRCS:%.c=$(FUZZ_DIR)/obj/%.o)

.PHONY: fuzz-run
fuzz: $(BIN)/tetris-gen-model-corpus
	@$(MAKE) --no-print-directory fuzz-run FUZZ_LIB_SRCS="$(LIB_SRCS)"

fuzz-run: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%) $(FUZZ_DIR)/seed-manifests
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_TARGETS="$(FUZZ_TARGETS)" fuzz/run-fuzzers.sh $(FUZZ_DIR) \
	    $(abspath $(BIN))/tetris-gen-model-corpus

$(FUZZ_DIR)/obj/%.o: %.c | .deps/.stamp
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/libtetris.a: $(FUZZ_OBJS)
	rm -f $@
	ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_common.h fuzz/fuzz_store_files.h $(FUZZ_DIR)/libtetris.a
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_DIR)/libtetris.a $(LDLIBS)

$(FUZZ_DIR)/seed-manifests: fuzz/seed-manifests.c $(FUZZ_DIR)/libtetris.a
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_DIR)/libtetris.a $(LDLIBS)
