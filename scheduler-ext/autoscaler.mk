# autoscaler.mk - model profiles, DTS, the GLPK optimum and tetris-autoscaler.
LIB_SRCS += scheduler-ext/profile.c scheduler-ext/dts.c scheduler-ext/ilp.c

PROGRAMS += tetris-autoscaler
tetris-autoscaler_SRCS := scheduler-ext/autoscaler.c scheduler-ext/autoscaler_policy.c \
                          scheduler-ext/autoscaler_rate.c scheduler-ext/autoscaler_deploy.c \
                          scheduler-ext/autoscaler_kube.c
tetris-autoscaler_LIBS := -lglpk -lcurl

UNIT_TESTS += tests/unit/test_profile.c tests/unit/test_dts.c tests/unit/test_ilp.c
UNIT_LIBS += -lglpk
SHELL_TESTS += $(sort $(wildcard tests/autoscaler/test-*.sh))

# The gateway's invocation counter for the Prometheus test (no OpenFaaS here).
TEST_PROGRAMS += autoscaler-gateway-counter
autoscaler-gateway-counter_SRCS := tests/autoscaler/gateway_counter.c
autoscaler-gateway-counter_LIBS := -lmicrohttpd
