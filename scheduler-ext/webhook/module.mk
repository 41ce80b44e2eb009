# scheduler-ext/webhook/module.mk - tetris-webhook, the MutatingAdmissionWebhook
# that gives OpenFaaS functions' pods the tensor store, and its tests. The
# review codec, the patch and the certificates live in libtetris so the
# unit tests and the fuzzer reach them.
LIB_SRCS += scheduler-ext/webhook/review.c scheduler-ext/webhook/patch.c \
            scheduler-ext/webhook/certs.c

PROGRAMS += tetris-webhook
tetris-webhook_SRCS := scheduler-ext/webhook/tetris-webhook.c
tetris-webhook_LIBS := -lmicrohttpd -lcurl

UNIT_TESTS += tests/webhook/test_webhook.c
# The real binary over TLS on loopback, reviews posted with curl; the
# namespaces it reads come from the fake apiserver (tests/module.mk).
SHELL_TESTS += tests/webhook/test-webhook.sh
# Registered with the local cluster's apiserver.
E2E_TESTS += tests/k8s/test-webhook-k8s.sh
E2E_SAN_TESTS += tests/k8s/test-webhook-k8s.sh
