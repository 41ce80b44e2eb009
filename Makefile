# tetris - top-level build. Each module (a folder, see docs/ARCHITECTURE.md)
# has one module.mk that adds its own sources and tests to the variables
# below; this file only knows how to build and run them.
#
#   make            build everything into bin/ (deps installed on demand)
#   make check      lint, unit tests and the fast shell tests (minutes)
#   make test       lint and every test, then again under ASan/UBSan (the
#                   cluster tier there: the tests in E2E_SAN_TESTS)
#   make lint       layering and conventions (scripts/lint/lint.sh)
#   make demo       the main job on a local store (no cluster needed)
#   make bench      benchmarks (long; prints tables, see BENCHMARKS.md)
#   make eval       the simulated cluster evaluation (docs/EVAL.md)
#   make fuzz       the parser fuzzers for a bounded time (FUZZ_SECONDS)
#   make SAN=1      sanitizer build into build/asan/bin

CC ?= gcc
SAN ?= 0
TETRIS_VERSION := 0.1.0
TETRIS_CACHE ?= $(HOME)/.cache/tetris
ORT_DIR := .deps/onnxruntime

ifeq ($(SAN),1)
BUILD := build/asan
BIN := build/asan/bin
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
OPT := -O1
else
BUILD := build/release
BIN := bin
SANFLAGS :=
OPT := -O2
endif

# One include root: sources include "module/file.h".
CPPFLAGS := -I. -I$(ORT_DIR)/include -D_GNU_SOURCE -DTETRIS_VERSION=\"$(TETRIS_VERSION)\"
CFLAGS := -std=c11 $(OPT) -g -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
          -Wmissing-prototypes -Wno-missing-field-initializers -pthread $(SANFLAGS)
LDFLAGS := -pthread $(SANFLAGS) -L$(ORT_DIR)/lib -Wl,-rpath,'$$ORIGIN/../lib' \
           -Wl,-rpath,$(abspath $(ORT_DIR)/lib)
LDLIBS := -lcrypto -lz -ljansson -lyaml -lm -ldl

# Filled by module.mk files. Shell tests come in three tiers:
#   SHELL_TESTS  fast: one machine, no cluster, no long loops (make check)
#   SLOW_TESTS   one machine but long: crash and stress loops, real cgroups
#   E2E_TESTS    on the local Kubernetes cluster (scripts/cluster-up.sh)
#   E2E_SAN_TESTS  the cluster tests make test runs under ASan/UBSan too:
#                those where a real kubelet, apiserver or scheduler calls
#                our programs (the rest drive the same C paths through
#                Kubernetes objects, as long again; docs/TESTING.md)
# make test runs all three. A test named in SLOW_TESTS or E2E_TESTS leaves
# the fast tier even where a wildcard in SHELL_TESTS caught it. Unit tests
# (UNIT_TESTS) are fast. tests/run-tests.sh says how a test passes, fails or
# is skipped.
LIB_SRCS :=
PROGRAMS :=
UNIT_TESTS :=
SHELL_TESTS :=
SLOW_TESTS :=
E2E_TESTS :=
E2E_SAN_TESTS :=
TEST_PROGRAMS :=
UNIT_LIBS :=

# Every module's module.mk (fuzz/ only defines the fuzz target).
include $(sort $(wildcard */module.mk */*/module.mk))

FAST_TESTS := $(filter-out $(SLOW_TESTS) $(E2E_TESTS),$(SHELL_TESTS))

LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
LIBTETRIS := $(BUILD)/libtetris.a

.PHONY: all deps lint check test test-one demo bench eval fuzz clean cluster-up cluster-down
.DEFAULT_GOAL := all

all: deps-stamp $(addprefix $(BIN)/,$(PROGRAMS)) $(addprefix $(BIN)/,$(TEST_PROGRAMS))

# Dependencies: Debian packages and npm artefacts, cached outside the tree.
deps-stamp: .deps/.stamp
.deps/.stamp: scripts/deps.sh
	@scripts/deps.sh
	@touch $@
deps:
	@scripts/deps.sh

$(BUILD)/%.o: %.c | .deps/.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIBTETRIS): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

# PROGRAM_template(name): bin/name from $(name_SRCS) + libtetris + $(name_LIBS)
# + $(LDLIBS), or $(name_LDLIBS) in place of $(LDLIBS) where a program
# links the common libraries its own way (statically: tetris-agent).
define PROGRAM_template
$(BIN)/$(1): $$($(1)_SRCS:%.c=$(BUILD)/%.o) $(LIBTETRIS)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) -o $$@ $$^ $$($(1)_LIBS) $$(or $$($(1)_LDLIBS),$$(LDLIBS))
endef
$(foreach p,$(PROGRAMS) $(TEST_PROGRAMS),$(eval $(call PROGRAM_template,$(p))))

# A unit test lives with its module's other tests (tests/<module>/test_x.c,
# docs/TESTING.md) and builds into $(BUILD)/tests/test_x, so its name is
# unique across the tree.
unit_bin = $(BUILD)/tests/$(basename $(notdir $(1)))
UNIT_BINS := $(foreach t,$(UNIT_TESTS),$(call unit_bin,$(t)))
ifneq ($(words $(UNIT_BINS)),$(words $(sort $(UNIT_BINS))))
$(error two unit tests share a file name: $(sort $(UNIT_TESTS)))
endif
# Every unit test links tests/lib/unit.c: its main() and shared helpers
# (tests/lib/unit.h).
UNIT_LIB_OBJS := $(BUILD)/tests/lib/unit.o
# Unit-test objects are intermediate for make; keep them between runs.
.SECONDARY: $(UNIT_TESTS:%.c=$(BUILD)/%.o) $(UNIT_LIB_OBJS)
define UNIT_template
$(call unit_bin,$(1)): $(BUILD)/$(1:.c=.o) $(UNIT_LIB_OBJS) $(LIBTETRIS)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) -o $$@ $$^ -lcheck -lsubunit -lrt $$(UNIT_LIBS) $$(LDLIBS)
endef
$(foreach t,$(UNIT_TESTS),$(eval $(call UNIT_template,$(t))))

# run_tests(unit tests, shell tests): those unit tests, then those shell
# tests, against the binaries of the current build flavour (BIN).
run_tests = TETRIS_BIN=$(abspath $(BIN)) TETRIS_BUILD=$(abspath $(BUILD)) \
	    tests/run-tests.sh $(1) -- $(2)

# The fast tier, for the build flavour asked for (make check SAN=1).
check: lint all $(UNIT_BINS)
	@$(call run_tests,$(UNIT_BINS),$(FAST_TESTS))

# The tiers in TIERS (default all three; the unit tests go with the fast
# one), for one build flavour; the cluster tier of a sanitizer build is
# E2E_SAN_TESTS.
TIERS ?= fast slow e2e
E2E_FLAVOUR_TESTS := $(if $(filter 1,$(SAN)),$(E2E_SAN_TESTS),$(E2E_TESTS))
test-one: all $(UNIT_BINS)
	@$(call run_tests,$(if $(filter fast,$(TIERS)),$(UNIT_BINS)), \
	  $(if $(filter fast,$(TIERS)),$(FAST_TESTS)) \
	  $(if $(filter slow,$(TIERS)),$(SLOW_TESTS)) \
	  $(if $(filter e2e,$(TIERS)),$(E2E_FLAVOUR_TESTS)))

# The cluster's Go programs build and the paper models export in the
# background meanwhile, on the CPU the one-machine tiers leave idle
# (scripts/build-test-tools.sh; the exports are checked with the release
# programs, made first); the cluster tiers come last.
test: lint deps-stamp all
	@scripts/build-test-tools.sh --background
	$(MAKE) test-one SAN=0 TIERS="fast slow"
	$(MAKE) test-one SAN=1 TIERS="fast slow"
	$(MAKE) test-one SAN=0 TIERS=e2e
	$(MAKE) test-one SAN=1 TIERS=e2e

# Layering, file headers, module.mk ownership, commit subjects
# (docs/STYLE.md, scripts/lint/layers.txt).
lint:
	@scripts/lint/lint.sh

demo: all
	@scripts/demo.sh

bench: all
	@TETRIS_BIN=$(abspath $(BIN)) bench/run-bench.sh

eval: $(BIN)/tetris-eval
	@TETRIS_BIN=$(abspath $(BIN)) bench/eval/run-eval.sh

cluster-up: all
	@scripts/cluster-up.sh
cluster-down:
	@scripts/cluster-down.sh

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
