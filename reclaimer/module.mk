# reclaimer/module.mk - the node daemon tetris-reclaimer, the HTTP server
# it shares with the scheduler extender, and the agent's ingest client.

# common/httpserver.c needs libmicrohttpd; every program linking libtetris
# may pull it in, so the library goes on the global link line.
LIB_SRCS += common/httpserver.c
LDLIBS += -lmicrohttpd

UNIT_TESTS += tests/unit/test_reclaimer_httpserver.c
UNIT_LIBS += -lcurl

LIB_SRCS += common/config_yaml.c agent/ingest_client.c

PROGRAMS += tetris-reclaimer
tetris-reclaimer_SRCS := reclaimer/main.c reclaimer/stores.c reclaimer/reclaim.c \
                         reclaimer/ingest_server.c reclaimer/http_api.c
# The daemon's settings and tensor index are in the library so the unit
# tests can reach them.
LIB_SRCS += reclaimer/config.c reclaimer/tensor_index.c
UNIT_TESTS += tests/unit/test_reclaimer_units.c
UNIT_TESTS += tests/unit/test_reclaimer_ingest_client.c
