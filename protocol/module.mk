# protocol/module.mk - the contracts between tetris's components, one
# module each (spec comment, encoder, decoder, used by both sides): the
# model profile the profiler writes and the autoscaler reads, the ingest
# protocol between the agent and the node daemon, the node inventory the
# daemon serves and the scheduler extender polls, the Open Inference
# Protocol's tensors (tetris-function reads and answers them,
# tetris-onnx-run writes requests), and the names (labels, ConfigMaps,
# environment) every component and the cluster share, and the CSI and
# kubelet plugin-registration messages tetris-csi serves. (The tensor
# manifest, a model's JSON form, is model/manifest.h's.)
LIB_SRCS += protocol/profile.c protocol/ingest.c protocol/inventory.c protocol/names.c \
            protocol/oip.c protocol/derived.c protocol/oci_artifact.c protocol/oci_ref.c \
            protocol/oci_client.c protocol/oci_fetch.c protocol/oci_auth.c protocol/oci_transport.c \
            protocol/csi.c
UNIT_TESTS += tests/protocol/test_profile.c tests/protocol/test_ingest_protocol.c tests/protocol/test_inventory.c \
              tests/protocol/test_names.c tests/protocol/test_oci.c tests/protocol/test_oci_auth.c \
              tests/protocol/test_csi.c
