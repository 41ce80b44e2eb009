# agent/ort_inputs.mk - deterministic seeded (and batched) inputs for ONNX
# Runtime sessions, shared by tetris-function and tetris-profiler.
LIB_SRCS += agent/ort_inputs.c
