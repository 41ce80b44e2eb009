# bench/module.mk - the benchmark programs (`make bench`, bench/run-bench.sh):
# the synthetic-model generator, store mapping, model indexing, the
# extender's decision latency and DTS against the GLPK optimum.
PROGRAMS += tetris-synth-model
tetris-synth-model_SRCS := bench/tetris-synth-model.c
PROGRAMS += tetris-bench-map
tetris-bench-map_SRCS := bench/tetris-bench-map.c
PROGRAMS += tetris-bench-formats
tetris-bench-formats_SRCS := bench/formats/tetris-bench-formats.c
PROGRAMS += tetris-bench-extender
tetris-bench-extender_SRCS := bench/extender/tetris-bench-extender.c
tetris-bench-extender_LIBS := -lcurl
PROGRAMS += tetris-bench-dts
tetris-bench-dts_SRCS := bench/dts/tetris-bench-dts.c
tetris-bench-dts_LIBS := -lglpk
# The cluster evaluation (`make eval`, bench/eval/run-eval.sh): the
# autoscaler's own policy code on a simulated testbed.
PROGRAMS += tetris-eval
tetris-eval_SRCS := bench/eval/tetris-eval.c bench/eval/eval_scale.c bench/eval/eval_common.c \
                    scheduler-ext/autoscaler/autoscaler_policy.c \
                    scheduler-ext/autoscaler/autoscaler_rate.c \
                    scheduler-ext/autoscaler/autoscaler_deploy.c \
                    scheduler-ext/autoscaler/autoscaler_kube.c \
                    scheduler-ext/autoscaler/autoscaler_openfaas.c \
                    scheduler-ext/autoscaler/autoscaler_capacity.c
tetris-eval_LIBS := -lglpk -lcurl
# GPU sharing: warm attach against host-to-device copies (real GPU only;
# exits 77 without one).
PROGRAMS += tetris-bench-gpu
tetris-bench-gpu_SRCS := bench/gpu/tetris-bench-gpu.c
# ONNX Runtime's ORT format against the ONNX file, one start per process
# (bench/ort-format/run.sh).
PROGRAMS += tetris-bench-ort-format
tetris-bench-ort-format_SRCS := bench/ort-format/tetris-bench-ort-format.c agent/hold.c
tetris-bench-ort-format_LIBS := -lonnxruntime
