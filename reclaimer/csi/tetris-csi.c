/* tetris-csi.c - the CSI node plugin: gives a pod its model as an inline
 * ephemeral volume, the model view of the node's store mounted read-only,
 * so that the pod needs no hostPath and no agent of its own. It serves
 * the CSI Identity and Node services on --csi-socket and, for the
 * kubelet to find it, the plugin-registration service on a socket in
 * --registry-dir (no registrar sidecar). Volumes are volumes.h's.
 *
 * It runs beside the node daemon (a container of its DaemonSet pod, as
 * the store's owner, with the kubelet's pods directory mounted with
 * bidirectional propagation) and talks to it over the ingest socket like
 * any agent: the daemon stays the only one that writes tensors. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/daemon_run.h"
#include "common/grpc.h"
#include "common/log.h"
#include "common/options.h"
#include "protocol/csi.h"
#include "protocol/names.h"
#include "reclaimer/csi/tenant_map.h"
#include "reclaimer/csi/volumes.h"

struct csi_run {
    const char *driver;
    const char *csi_socket;
    const char *registry_dir;
    const char *node_id;
    const char *tenant_map_path;
    struct csi_volumes_config vc;
    char node_buf[256];
    char reg_socket[4096];
    csi_volumes *volumes;
    grpc_server *csi, *registration;
};

/* ---- Identity ---- */

/* Every reply is encoded the same way: the encoder's result or INTERNAL. */
static void reply_encoded(struct grpc_reply *reply, int rc, const tetris_error *err)
{
    if (rc < 0)
        grpc_reply_error(reply, err);
}

/* The request of a call that has no fields we read: well-formed or
 * INVALID_ARGUMENT. */
static bool empty_request_ok(const uint8_t *req, size_t len, struct grpc_reply *reply)
{
    tetris_error err = {0};
    if (csi_decode_empty(req, len, &err) == 0)
        return true;
    grpc_reply_error(reply, &err);
    return false;
}

static void get_plugin_info(void *ctx, const uint8_t *req, size_t len, struct grpc_reply *reply)
{
    struct csi_run *run = ctx;
    tetris_error err = {0};
    if (empty_request_ok(req, len, reply))
        reply_encoded(reply,
                      csi_encode_plugin_info(run->driver, TETRIS_VERSION, &reply->body,
                                             &reply->body_len, &err),
                      &err);
}

static void get_plugin_capabilities(void *ctx, const uint8_t *req, size_t len,
                                    struct grpc_reply *reply)
{
    (void)ctx;
    tetris_error err = {0};
    if (empty_request_ok(req, len, reply))
        reply_encoded(reply, csi_encode_plugin_capabilities(&reply->body, &reply->body_len, &err),
                      &err);
}

static void probe(void *ctx, const uint8_t *req, size_t len, struct grpc_reply *reply)
{
    (void)ctx;
    tetris_error err = {0};
    if (empty_request_ok(req, len, reply))
        reply_encoded(reply, csi_encode_probe(true, &reply->body, &reply->body_len, &err), &err);
}

/* ---- Controller: capabilities only (csi.h says why) ---- */

static void controller_get_capabilities(void *ctx, const uint8_t *req, size_t len,
                                        struct grpc_reply *reply)
{
    (void)ctx;
    tetris_error err = {0};
    if (empty_request_ok(req, len, reply))
        reply_encoded(reply,
                      csi_encode_controller_capabilities(&reply->body, &reply->body_len, &err),
                      &err);
}

/* ---- Node ---- */

static void node_get_capabilities(void *ctx, const uint8_t *req, size_t len,
                                  struct grpc_reply *reply)
{
    (void)ctx;
    tetris_error err = {0};
    if (empty_request_ok(req, len, reply))
        reply_encoded(reply, csi_encode_node_capabilities(&reply->body, &reply->body_len, &err),
                      &err);
}

static void node_get_info(void *ctx, const uint8_t *req, size_t len, struct grpc_reply *reply)
{
    struct csi_run *run = ctx;
    tetris_error err = {0};
    if (empty_request_ok(req, len, reply))
        reply_encoded(reply,
                      csi_encode_node_info(run->node_id, run->vc.max_volumes, &reply->body,
                                           &reply->body_len, &err),
                      &err);
}

static void node_publish(void *ctx, const uint8_t *req, size_t len, struct grpc_reply *reply)
{
    struct csi_run *run = ctx;
    struct csi_publish_request r;
    tetris_error err = {0};
    if (csi_decode_publish(req, len, &r, &err) < 0) {
        grpc_reply_error(reply, &err);
        log_info("event=publish-refused code=INVALID_ARGUMENT msg=%s", LOG_Q(err.msg));
        return;
    }
    csi_volumes_publish(run->volumes, &r, reply);
    csi_publish_request_free(&r);
    if (reply->status == GRPC_OK)
        reply_encoded(reply, csi_encode_empty(&reply->body, &reply->body_len, &err), &err);
}

static void node_unpublish(void *ctx, const uint8_t *req, size_t len, struct grpc_reply *reply)
{
    struct csi_run *run = ctx;
    struct csi_unpublish_request r;
    tetris_error err = {0};
    if (csi_decode_unpublish(req, len, &r, &err) < 0) {
        grpc_reply_error(reply, &err);
        log_info("event=unpublish-refused code=INVALID_ARGUMENT msg=%s", LOG_Q(err.msg));
        return;
    }
    csi_volumes_unpublish(run->volumes, &r, reply);
    csi_unpublish_request_free(&r);
    if (reply->status == GRPC_OK)
        reply_encoded(reply, csi_encode_empty(&reply->body, &reply->body_len, &err), &err);
}

/* ---- the kubelet's plugin registration ---- */

static void registration_get_info(void *ctx, const uint8_t *req, size_t len,
                                  struct grpc_reply *reply)
{
    struct csi_run *run = ctx;
    tetris_error err = {0};
    if (empty_request_ok(req, len, reply))
        reply_encoded(reply,
                      csi_encode_registration_info(run->driver, run->csi_socket, &reply->body,
                                                   &reply->body_len, &err),
                      &err);
}

static void registration_notify(void *ctx, const uint8_t *req, size_t len, struct grpc_reply *reply)
{
    struct csi_run *run = ctx;
    struct csi_registration_status st;
    tetris_error err = {0};
    if (csi_decode_registration_status(req, len, &st, &err) < 0) {
        grpc_reply_error(reply, &err);
        return;
    }
    if (st.registered)
        log_info("event=registered driver=%s", run->driver);
    else
        log_error("event=registration-refused driver=%s msg=%s", run->driver, LOG_Q(st.error));
    csi_registration_status_free(&st);
    reply_encoded(reply, csi_encode_empty(&reply->body, &reply->body_len, &err), &err);
}

static const struct grpc_method csi_methods[] = {
    {CSI_PATH_GET_PLUGIN_INFO, get_plugin_info},
    {CSI_PATH_GET_PLUGIN_CAPABILITIES, get_plugin_capabilities},
    {CSI_PATH_PROBE, probe},
    {CSI_PATH_CONTROLLER_GET_CAPABILITIES, controller_get_capabilities},
    {CSI_PATH_NODE_GET_CAPABILITIES, node_get_capabilities},
    {CSI_PATH_NODE_GET_INFO, node_get_info},
    {CSI_PATH_NODE_PUBLISH_VOLUME, node_publish},
    {CSI_PATH_NODE_UNPUBLISH_VOLUME, node_unpublish},
    {NULL, NULL},
};

static const struct grpc_method registration_methods[] = {
    {CSI_PATH_REGISTRATION_GET_INFO, registration_get_info},
    {CSI_PATH_REGISTRATION_NOTIFY, registration_notify},
    {NULL, NULL},
};

/* ---- the run ---- */

/* The store first (recovery decides what is published), then the CSI
 * socket, then registration, which makes the kubelet call us. */
static int run_start(void *ctx, tetris_error *err)
{
    struct csi_run *run = ctx;
    int r = csi_volumes_open(&run->vc, &run->volumes, err);
    if (r < 0)
        return r;
    struct grpc_server_options o = {.socket_path = run->csi_socket,
                                    .methods = csi_methods,
                                    .ctx = run,
                                    .name = "csi"};
    if ((r = grpc_server_start(&o, &run->csi, err)) < 0)
        return r;
    if (run->registry_dir[0] != '\0') {
        if (snprintf(run->reg_socket, sizeof(run->reg_socket), "%s/%s-reg.sock", run->registry_dir,
                     run->driver) >= (int)sizeof(run->reg_socket))
            return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "--registry-dir: too long");
        struct grpc_server_options ro = {.socket_path = run->reg_socket,
                                         .methods = registration_methods,
                                         .ctx = run,
                                         .name = "registration"};
        if ((r = grpc_server_start(&ro, &run->registration, err)) < 0)
            return r;
    }
    log_info("event=started driver=%s node=%s csi_socket=%s registration_socket=%s store=%s "
             "pods_dir=%s models_dir=%s tenant_map=%s volumes=%zu",
             run->driver, LOG_Q(run->node_id), LOG_Q(run->csi_socket),
             LOG_Q(run->registry_dir[0] != '\0' ? run->reg_socket : "none"),
             LOG_Q(run->vc.store_dir), LOG_Q(run->vc.pods_dir), LOG_Q(run->vc.models_dir),
             LOG_Q(run->tenant_map_path != NULL ? run->tenant_map_path : "none"),
             csi_volumes_count(run->volumes));
    return 0;
}

/* Sockets first, so no call runs while the volumes go. The mounts and
 * kept holders stay: they are the volumes, until the kubelet unpublishes. */
static void run_stop(void *ctx)
{
    struct csi_run *run = ctx;
    grpc_server_stop(run->registration);
    grpc_server_stop(run->csi);
    csi_volumes_close(run->volumes);
}

/* A store that is not there or not ours: 4, as every program here; a
 * pods or models directory that does not resolve is configuration: 2. */
static int run_start_failed(void *ctx, int r, const tetris_error *err)
{
    (void)ctx;
    log_error("event=start-failed code=%s msg=%s", tetris_code_name(err->code), LOG_Q(err->msg));
    return r == -TETRIS_E_NOTFOUND || r == -TETRIS_E_DENIED ? 4 : r == -TETRIS_E_INVAL ? 2 : 1;
}

int main(int argc, char **argv)
{
    struct csi_run run = {
        .driver = TETRIS_CSI_DRIVER,
        .csi_socket = TETRIS_CSI_SOCKET,
        .registry_dir = TETRIS_KUBELET_REGISTRY_DIR,
        .vc = {.store_dir = TETRIS_STORE_DIR,
               .pods_dir = TETRIS_KUBELET_PODS_DIR,
               .models_dir = TETRIS_MODEL_HOST_DIR,
               .max_volumes = 256},
    };
    const struct opt_spec specs[] = {
        {.name = "store",
         .type = OPT_TYPE_STRING,
         .dest = &run.vc.store_dir,
         .env = "TETRIS_STORE",
         .meta = "DIR",
         .help = "the node daemon's store (default " TETRIS_STORE_DIR ")"},
        {.name = "daemon-socket",
         .type = OPT_TYPE_STRING,
         .dest = &run.vc.daemon_socket,
         .meta = "PATH",
         .help = "the daemon's ingest socket (default <store>/public/ingest.sock)"},
        {.name = "csi-socket",
         .type = OPT_TYPE_STRING,
         .dest = &run.csi_socket,
         .meta = "PATH",
         .help = "where the CSI services listen (default " TETRIS_CSI_SOCKET ")"},
        {.name = "registry-dir",
         .type = OPT_TYPE_STRING,
         .dest = &run.registry_dir,
         .meta = "DIR",
         .help = "the kubelet's plugins_registry: the registration socket DIR/<driver>-reg.sock "
                 "goes there (default " TETRIS_KUBELET_REGISTRY_DIR "; \"\": none)"},
        {.name = "pods-dir",
         .type = OPT_TYPE_STRING,
         .dest = &run.vc.pods_dir,
         .meta = "DIR",
         .help = "target paths must be beneath it (default " TETRIS_KUBELET_PODS_DIR ")"},
        {.name = "models-dir",
         .type = OPT_TYPE_STRING,
         .dest = &run.vc.models_dir,
         .meta = "DIR",
         .help = "a volume's model must be a file beneath it (default " TETRIS_MODEL_HOST_DIR ")"},
        {.name = "driver-name",
         .type = OPT_TYPE_STRING,
         .dest = &run.driver,
         .meta = "NAME",
         .help = "the CSI driver's name (default " TETRIS_CSI_DRIVER ")"},
        {.name = "node-id",
         .type = OPT_TYPE_STRING,
         .dest = &run.node_id,
         .env = TETRIS_ENV_NODE_NAME,
         .meta = "NAME",
         .help = "NodeGetInfo's node id (default: the host name)"},
        {.name = "max-volumes",
         .type = OPT_TYPE_INT,
         .dest = &run.vc.max_volumes,
         .min = 1,
         .max = 65536,
         .meta = "N",
         .help = "volumes this node serves at once (default 256)"},
        {.name = "tenant-map",
         .type = OPT_TYPE_STRING,
         .dest = &run.tenant_map_path,
         .meta = "FILE",
         .help = "which store a pod's volume uses, from its namespace and service account "
                 "(lines NAMESPACE SERVICE-ACCOUNT tenant:NAME|shared; a pod no line matches is "
                 "refused); followed: a changed file applies to new volumes; default: every "
                 "volume the shared store's"},
        {.name = "daemon-timeout",
         .type = OPT_TYPE_INT,
         .dest = &run.vc.daemon_timeout_ms,
         .min = 1,
         .max = 3600000,
         .meta = "MS",
         .help = "how long a publish waits for the daemon (default the agent's, 30000)"},
        {.name = "pull-timeout",
         .type = OPT_TYPE_INT,
         .dest = &run.vc.pull_timeout_ms,
         .min = 1,
         .max = 3600000,
         .meta = "MS",
         .help = "how long a publish of a model named by reference (oci://) waits for the "
                 "daemon's pull (default the agent's, 600000)"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-csi",
        .synopsis = "[OPTION]...",
        .about = "The CSI node plugin: a pod's inline volume\n"
                 "  csi: {driver: " TETRIS_CSI_DRIVER ", readOnly: true,\n"
                 "        volumeAttributes: {model: /var/lib/tetris/models/x.onnx}}\n"
                 "(or model: oci://HOST:PORT/REPO[:TAG|@sha256:HEX], pulled by the node daemon)\n"
                 "gets the model view of the node's store (docs/PROTOCOLS.md, \"Model view\"),\n"
                 "mounted read-only; its tensors stay referenced until the volume is\n"
                 "unpublished, across restarts of this plugin and of the node daemon.\n",
        .options = specs,
        .epilogue = "Runs as the store's owner (root), beside tetris-reclaimer. Logs key=value\n"
                    "lines on stderr.\n"
                    "Exit status: 0 stopped by SIGTERM/SIGINT, 1 failure (a socket that cannot "
                    "be\n"
                    "made), 2 usage error (also a pods or models directory that does not\n"
                    "resolve, or a tenant map that cannot be read), 4 no usable store (missing,\n"
                    "or not this user's).\n",
    };
    log_init(argv[0]);
    int first = opt_parse(&prog, argc, argv);
    if (first < 0)
        return 2;
    if (first < argc)
        return opt_usage_error(&prog, "unexpected argument '%s'", argv[first]), 2;
    if (run.node_id == NULL || run.node_id[0] == '\0') {
        if (gethostname(run.node_buf, sizeof(run.node_buf) - 1) < 0)
            return opt_usage_error(&prog, "no --node-id, and no host name: %s", strerror(errno)), 2;
        run.node_id = run.node_buf;
    }
    /* Read now, so a map that does not parse stops the start (exit 2);
     * followed after by the publishes (volumes.h). */
    tenant_map_file *tenants = NULL;
    if (run.tenant_map_path != NULL && run.tenant_map_path[0] != '\0') {
        tetris_error err = {0};
        if (tenant_map_file_open(run.tenant_map_path, &tenants, &err) < 0) {
            log_error("event=start-failed code=%s msg=%s", tetris_code_name(err.code),
                      LOG_Q(err.msg));
            return 2;
        }
        run.vc.tenants = tenants;
        log_info("event=tenant-map-read path=%s rules=%zu", LOG_Q(run.tenant_map_path),
                 tenant_map_rules(tenant_map_file_map(tenants)));
    } else {
        run.tenant_map_path = NULL;
    }
    int rc = daemon_run(&(struct daemon_run){.ctx = &run,
                                             .start = run_start,
                                             .stop = run_stop,
                                             .start_failed = run_start_failed});
    tenant_map_file_free(tenants);
    return rc;
}
