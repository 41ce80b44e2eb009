# reclaimer/node-pins/module.mk - tetris-node-pins, the daemon's sidecar:
# keeps tetris-reclaimer's --pin-file in step with the pods bound to its
# node.
LIB_SRCS += reclaimer/node-pins/node_pods.c

PROGRAMS += tetris-node-pins
tetris-node-pins_SRCS := reclaimer/node-pins/tetris-node-pins.c
tetris-node-pins_LIBS := -lcurl

SHELL_TESTS += tests/node-pins/test-node-pins-tenants.sh
