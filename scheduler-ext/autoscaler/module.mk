# scheduler-ext/autoscaler/module.mk - DTS, the GLPK optimum and
# tetris-autoscaler, and their tests.
LIB_SRCS += scheduler-ext/autoscaler/dts.c scheduler-ext/autoscaler/ilp.c

PROGRAMS += tetris-autoscaler
tetris-autoscaler_SRCS := scheduler-ext/autoscaler/tetris-autoscaler.c \
                          scheduler-ext/autoscaler/autoscaler_policy.c \
                          scheduler-ext/autoscaler/autoscaler_rate.c \
                          scheduler-ext/autoscaler/autoscaler_deploy.c \
                          scheduler-ext/autoscaler/autoscaler_kube.c \
                          scheduler-ext/autoscaler/autoscaler_openfaas.c \
                          scheduler-ext/autoscaler/autoscaler_capacity.c
tetris-autoscaler_LIBS := -lglpk -lcurl

UNIT_TESTS += tests/autoscaler/test_dts.c tests/autoscaler/test_ilp.c
UNIT_LIBS += -lglpk
SHELL_TESTS += $(sort $(wildcard tests/autoscaler/test-*.sh))
# Deployments and pods on the local cluster.
E2E_TESTS += $(sort $(wildcard tests/autoscaler/test-k8s-*.sh))

# The gateway's invocation counter for the Prometheus test (no OpenFaaS here).
TEST_PROGRAMS += autoscaler-gateway-counter
autoscaler-gateway-counter_SRCS := tests/autoscaler/gateway_counter.c
autoscaler-gateway-counter_LIBS := -lmicrohttpd

# OpenFaaS functions' sibling Deployments against the fault-injecting API
# server, the equal-share plan and the Prometheus query.
TEST_PROGRAMS += autoscaler-test
autoscaler-test_SRCS := tests/autoscaler/autoscaler_test.c tests/lib/faultserver.c tests/lib/unit.c \
                        scheduler-ext/autoscaler/autoscaler_policy.c \
                        scheduler-ext/autoscaler/autoscaler_rate.c \
                        scheduler-ext/autoscaler/autoscaler_deploy.c \
                        scheduler-ext/autoscaler/autoscaler_kube.c \
                        scheduler-ext/autoscaler/autoscaler_openfaas.c \
                        scheduler-ext/autoscaler/autoscaler_capacity.c
autoscaler-test_LIBS := -lcheck -lsubunit -lrt -lcurl -lglpk
