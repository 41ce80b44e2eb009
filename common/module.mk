# common/module.mk - shared plumbing: errors, logging, cleanup attributes,
# clocks, text buffers, Prometheus text, option values and the programs'
# option tables, the daemons' run loop, the HTTP server and GET
# client, YAML reading, configuration and writing, the string map, the
# Kubernetes client, CPU-sized worker threads, JSON read without a tree
# (json_scan), UTF-8 and bounded whole-file reads, the protocol buffers wire
# format and unary gRPC servers over HTTP/2; their unit tests and the
# client's fault-injection test.
LIB_SRCS += common/error.c common/log.c common/clock.c common/textbuf.c common/prom.c \
            common/cli.c common/options.c common/daemon_run.c common/httpserver.c \
            common/httpclient.c common/config_yaml.c common/strmap.c common/kube.c common/yaml_write.c \
            common/yaml_read.c common/kubeconfig.c common/workers.c common/json_scan.c \
            common/utf8.c common/fileio.c common/pbwire.c common/grpc.c common/grpc_server.c

# common/httpserver.c needs libmicrohttpd; every program linking libtetris
# may pull it in, so the library goes on the global link line.
LDLIBS += -lmicrohttpd
# common/grpc_server.c: HTTP/2 (the kubelet's gRPC) through nghttp2.
LDLIBS += -lnghttp2

UNIT_TESTS += tests/common/test_httpserver.c tests/common/test_kubeconfig.c tests/common/test_common.c \
              tests/common/test_yaml_write.c tests/common/test_yaml_read.c tests/common/test_fileio.c \
              tests/common/test_options.c tests/common/test_daemon_run.c \
              tests/common/test_pbwire.c
UNIT_LIBS += -lcurl

# The Kubernetes client against the fault-injecting HTTP server (dropped
# connections, 410 mid-stream, 429 storms, slow replies).
TEST_PROGRAMS += kube-client-test
kube-client-test_SRCS := tests/common/kube_client_test.c tests/lib/faultserver.c tests/lib/unit.c
kube-client-test_LIBS := -lcheck -lsubunit -lrt -lcurl
SHELL_TESTS += tests/common/test-kube-client.sh
# The daemons' shared run loop: reloads, stops, ticks.
SHELL_TESTS += tests/common/test-daemon-run.sh

# The client against the real apiserver (driven by tests/k8s/).
TEST_PROGRAMS += kube-e2e
kube-e2e_SRCS := tests/common/kube_e2e.c
kube-e2e_LIBS := -lcurl
