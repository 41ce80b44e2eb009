/* csi_client.c - tetris-test-csi-client: the kubelet's calls to a CSI
 * plugin, one per run, over tests/lib/grpc_client.c, for the shell tests:
 *
 *   tetris-test-csi-client SOCKET CALL [ARG]...
 *     plugin-info | plugin-caps | probe | node-caps | node-info | reg-info
 *     publish VOLUME TARGET [KEY=VALUE]...    mount volume, readonly, with
 *                                             the volume context given
 *     publish-block VOLUME TARGET [KEY=VALUE]...   a block volume
 *     publish-nocap VOLUME TARGET [KEY=VALUE]...   no volume_capability
 *     unpublish VOLUME TARGET
 *     notify true|false [ERROR]               NotifyRegistrationStatus
 *     raw METHOD PATH CONTENT-TYPE HEX        a body as given (no framing)
 *     big PATH BYTES                          one message of BYTES bytes
 *     garbage                                 bytes that are not HTTP/2
 *
 * Prints "status=NAME message=..." (or "http=N" for a refusal below
 * gRPC), then the reply's top-level fields, "fN=VALUE" (strings quoted).
 * Exit status: 0 answered (whatever the status), 1 no answer, 2 usage;
 * garbage: 0 when the server closed the connection. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/grpc.h"
#include "common/pbwire.h"
#include "protocol/csi.h"
#include "tests/lib/grpc_client.h"

static int usage(FILE *to, int status)
{
    fprintf(to, "usage: tetris-test-csi-client SOCKET CALL [ARG]...\n"
                "Calls a CSI plugin as the kubelet does (calls: see tests/csi/csi_client.c).\n"
                "Exit status: 0 answered, 1 no answer, 2 usage error.\n");
    return status;
}

static void print_fields(const uint8_t *msg, size_t len)
{
    pb_reader r;
    struct pb_field f;
    tetris_error err;
    int rc;
    pb_reader_init(&r, msg, len);
    while ((rc = pb_next(&r, &f, &err)) > 0) {
        if (f.wire_type != PB_WT_LEN) {
            printf("f%u=%llu\n", f.number, (unsigned long long)f.value);
            continue;
        }
        bool text = true;
        for (size_t i = 0; i < f.len; i++)
            text = text && f.data[i] >= 0x20 && f.data[i] < 0x7f;
        if (text) {
            printf("f%u=\"%.*s\"\n", f.number, (int)f.len, (const char *)f.data);
        } else {
            printf("f%u=0x", f.number);
            for (size_t i = 0; i < f.len; i++)
                printf("%02x", f.data[i]);
            printf("\n");
        }
    }
    if (rc < 0)
        printf("reply-error=\"%s\"\n", err.msg);
}

static void put_entry(pb_writer *w, uint32_t number, const char *kv)
{
    const char *eq = strchr(kv, '=');
    pb_writer e;
    pb_writer_init(&e, 1 << 20);
    if (eq != NULL) {
        pb_put_bytes(&e, 1, kv, (size_t)(eq - kv));
        pb_put_string(&e, 2, eq + 1);
    } else {
        pb_put_string(&e, 1, kv);
    }
    pb_put_message(w, number, &e);
    pb_writer_free(&e);
}

/* NodePublishVolumeRequest: volume_id 1, target_path 4, capability 5
 * (block 1 or mount 2, access_mode 3 {mode 1}), readonly 6, context 8. */
static void encode_publish(pb_writer *w, const char *how, int argc, char **argv)
{
    pb_put_string(w, 1, argv[0]);
    pb_put_string(w, 4, argv[1]);
    if (strcmp(how, "publish-nocap") != 0) {
        pb_writer cap, empty, mode;
        pb_writer_init(&cap, 1 << 16);
        pb_writer_init(&empty, 16);
        pb_writer_init(&mode, 16);
        pb_put_message(&cap, strcmp(how, "publish-block") == 0 ? 1 : 2, &empty);
        pb_put_varint(&mode, 1, 2); /* SINGLE_NODE_READER_ONLY */
        pb_put_message(&cap, 3, &mode);
        pb_put_message(w, 5, &cap);
        pb_writer_free(&cap);
        pb_writer_free(&empty);
        pb_writer_free(&mode);
    }
    pb_put_bool(w, 6, true);
    for (int i = 2; i < argc; i++)
        put_entry(w, 8, argv[i]);
}

static int from_hex(const char *hex, uint8_t **out, size_t *len)
{
    size_t n = strlen(hex);
    if (n % 2 != 0)
        return -1;
    *out = malloc(n / 2 + 1);
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        (*out)[i] = (uint8_t)v;
    }
    *len = n / 2;
    return 0;
}

/* Garbage: the server must close the connection (after a GOAWAY). */
static int garbage(const char *sock)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        perror("connect");
        return 1;
    }
    static const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\xff\xfe garbage garbage";
    if (write(fd, junk, sizeof(junk)) < 0) {
        perror("write");
        return 1;
    }
    char buf[4096];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 30000) <= 0) {
            printf("connection-open-after-garbage\n");
            return 1;
        }
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0) {
            printf("connection-closed\n");
            close(fd);
            return 0;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--help") == 0)
        return usage(stdout, 0);
    if (argc >= 2 && strcmp(argv[1], "--version") == 0)
        return printf("tetris-test-csi-client " TETRIS_VERSION "\n"), 0;
    if (argc < 3 || argv[1][0] == '-')
        return usage(stderr, 2);
    const char *sock = argv[1], *call = argv[2];
    int nargs = argc - 3;
    char **args = argv + 3;
    const char *path = NULL;
    pb_writer w;
    pb_writer_init(&w, 64u << 20);
    struct grpc_call_result res;
    tetris_error err = {0};
    int rc;

    if (strcmp(call, "garbage") == 0)
        return garbage(sock);
    if (strcmp(call, "plugin-info") == 0)
        path = CSI_PATH_GET_PLUGIN_INFO;
    else if (strcmp(call, "plugin-caps") == 0)
        path = CSI_PATH_GET_PLUGIN_CAPABILITIES;
    else if (strcmp(call, "probe") == 0)
        path = CSI_PATH_PROBE;
    else if (strcmp(call, "node-caps") == 0)
        path = CSI_PATH_NODE_GET_CAPABILITIES;
    else if (strcmp(call, "node-info") == 0)
        path = CSI_PATH_NODE_GET_INFO;
    else if (strcmp(call, "reg-info") == 0)
        path = CSI_PATH_REGISTRATION_GET_INFO;
    else if (strncmp(call, "publish", 7) == 0 && nargs >= 2) {
        path = CSI_PATH_NODE_PUBLISH_VOLUME;
        encode_publish(&w, call, nargs, args);
    } else if (strcmp(call, "unpublish") == 0 && nargs == 2) {
        path = CSI_PATH_NODE_UNPUBLISH_VOLUME;
        pb_put_string(&w, 1, args[0]);
        pb_put_string(&w, 2, args[1]);
    } else if (strcmp(call, "notify") == 0 && nargs >= 1) {
        path = CSI_PATH_REGISTRATION_NOTIFY;
        pb_put_bool(&w, 1, strcmp(args[0], "true") == 0);
        if (nargs > 1)
            pb_put_string(&w, 2, args[1]);
    } else if (strcmp(call, "raw") == 0 && nargs == 4) {
        uint8_t *body;
        size_t len;
        if (from_hex(args[3], &body, &len) < 0)
            return usage(stderr, 2);
        rc = grpc_client_call_raw(sock, args[0], args[1], args[2], body, len, &res, &err);
        free(body);
        goto answered;
    } else if (strcmp(call, "big") == 0 && nargs == 2) {
        size_t n = strtoul(args[1], NULL, 10);
        uint8_t *msg = calloc(n + 1, 1);
        rc = grpc_client_call(sock, args[0], msg, n, &res, &err);
        free(msg);
        goto answered;
    } else {
        return usage(stderr, 2);
    }
    uint8_t *msg;
    size_t len;
    if (pb_writer_finish(&w, &msg, &len, &err) < 0) {
        fprintf(stderr, "encode: %s\n", err.msg);
        return 1;
    }
    rc = grpc_client_call(sock, path, msg, len, &res, &err);
    free(msg);
answered:
    if (rc < 0) {
        printf("no-answer message=\"%s\"\n", err.msg);
        return 1;
    }
    if (res.grpc_status < 0)
        printf("http=%d\n", res.http_status);
    else
        printf("status=%s message=\"%s\"\n", grpc_status_name(res.grpc_status), res.message);
    if (res.msg != NULL)
        print_fields(res.msg, res.msg_len);
    grpc_call_result_free(&res);
    return 0;
}
