# agent/formats.mk - model formats and manifests (part of libtetris), their
# unit tests and the bad-input tests.
LIB_SRCS += agent/protobuf.c agent/format_safetensors.c agent/format_onnx.c \
            agent/model.c agent/manifest.c agent/model_print.c
