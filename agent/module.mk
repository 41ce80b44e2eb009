# agent/module.mk - the agent library (loader, ingest client, ONNX Runtime
# adapter, seeded inputs, model views), the tetris-agent CLI (with exec's
# supervisor), tetris-onnx-run, tetris-registry (models to OCI registries),
# and their tests.
LIB_SRCS += agent/agent.c agent/ingest_client.c agent/ort_adapter.c agent/ort_inputs.c \
            agent/onnx_share.c agent/view.c agent/derived_form.c agent/ort_status.c

PROGRAMS += tetris-agent tetris-onnx-run tetris-derive tetris-registry
tetris-agent_SRCS := agent/tetris-agent.c agent/hold.c agent/supervise.c
# One file that runs in any image with a glibc (`exec` as a container's
# entrypoint, copied into a function's image): the libraries that are not
# glibc's are linked in. It needs no ONNX Runtime.
tetris-agent_LDLIBS := -Wl,-Bstatic -lcrypto -lz -ljansson -lyaml -Wl,-Bdynamic -lm -ldl
tetris-registry_SRCS := agent/tetris-registry.c
tetris-registry_LIBS := -lcurl
tetris-onnx-run_SRCS := agent/tetris-onnx-run.c agent/hold.c
tetris-onnx-run_LIBS := -lonnxruntime
# ONNX Runtime is loaded at run time (dlopen): the one beside the build,
# found by the program's run path as the linker would, or --runtime-lib.
tetris-derive_SRCS := agent/tetris-derive.c agent/unprivileged.c

UNIT_TESTS += tests/agent/test_agent.c tests/agent/test_ingest_client.c tests/agent/test_view.c
UNIT_LIBS += -lonnxruntime
SHELL_TESTS += $(sort $(wildcard tests/agent/test-*.sh))
TEST_PROGRAMS += tetris-test-fake-daemon
tetris-test-fake-daemon_SRCS := tests/agent/fake_daemon.c
TEST_PROGRAMS += tetris-test-externalize
tetris-test-externalize_SRCS := tests/agent/externalize.c
TEST_PROGRAMS += tetris-test-view-run
tetris-test-view-run_SRCS := tests/agent/view_run.c agent/hold.c
tetris-test-view-run_LIBS := -lonnxruntime
