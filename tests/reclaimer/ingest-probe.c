/* ingest-probe.c - test driver for tetris-reclaimer (tests and benchmarks
 * only): synthesises models, loads them the way a function instance does, and
 * talks to the daemon's socket by hand. The subcommands are in usage_text.
 *
 * Exit status: 0 done (a fallback still counts as done), 1 failure, 2 usage. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "agent/ingest_client.h"
#include "common/log.h"
#include "model/manifest.h"
#include "model/model.h"
#include "protocol/ingest.h"
#include "tensorstore/store.h"

static const char usage_text[] =
    "usage: tetris-ingest-probe COMMAND [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  synth --out FILE --tensors N --bytes B [--seed S]\n"
    "      writes a synthetic safetensors model: N float32 tensors of B bytes\n"
    "      each, seeded pseudo-random values (same seed, same bytes)\n"
    "  load --store DIR [--socket PATH] [--timeout-ms N] [--hold] [--direct] [--no-map] MODEL\n"
    "      what a function instance does: ask the daemon to ingest MODEL and\n"
    "      record references (or, with --direct, publish into the store\n"
    "      itself), map every tensor read-only and read each page; on any\n"
    "      daemon failure fall back to a private load and report it. Prints\n"
    "      one JSON line; with --hold keeps everything until SIGTERM. --no-map\n"
    "      only records references (a model of 100k tensors would exceed the\n"
    "      kernel's limit on mappings per process).\n"
    "  send --socket PATH [--fd FILE | --path-fd FILE]... [--raw [--no-eof]] [--shut-wr]\n"
    "       [--repeat N] [--hold]\n"
    "      sends stdin as one request (length-prefixed unless --raw) with the\n"
    "      files' descriptors attached (--path-fd: opened O_PATH); prints the\n"
    "      reply, or \"closed\". --raw\n"
    "      then ends the stream unless --no-eof (a stalled client), as does\n"
    "      --shut-wr after a framed request (a half-closed client). --repeat\n"
    "      sends it N times on the one connection, a reply line each; --hold\n"
    "      then keeps the connection (and its references) until SIGTERM.\n"
    "  forge --tensors N --bytes B [--corrupt] [--label L]\n"
    "      prints an ingest request for N uint8 tensors of B bytes each at\n"
    "      offsets i*B of one source of zeros (a sparse file will do), with the\n"
    "      digests of zeros, or, with --corrupt, digests the bytes do not have.\n"
    "      B = 0 gives N distinct empty tensors (shapes [0, i+1]).\n"
    "  conns --socket PATH --count N [--ingest MODEL] [--hold]\n"
    "      opens N connections, each sending one report_fallback, or with\n"
    "      --ingest an ingest request for MODEL (so that it holds references);\n"
    "      prints {\"accepted\":A,\"refused\":R,\"reason\":LAST-REFUSAL};\n"
    "      --hold keeps the accepted ones open until SIGTERM.\n"
    "  manifest MODEL\n"
    "      prints MODEL's manifest with digests (to build requests by hand)\n"
    "  tcp --port PORT\n"
    "      sends stdin to 127.0.0.1:PORT as is, prints what comes back\n"
    "  no-populate COMMAND [ARGS...]\n"
    "      runs COMMAND as on a kernel without MADV_POPULATE_READ (before\n"
    "      5.14): a seccomp filter answers that madvise with EINVAL\n"
    "  fill --socket PATH\n"
    "      connects to PATH until its backlog is full (EAGAIN), prints\n"
    "      \"full N\" and holds the N connections until stdin ends\n"
    "\n"
    "  -h, --help     this text         --version   the version\n"
    "\n"
    "Exit status: 0 done (a fallback still counts as done); 1 failure; 2 usage.\n";

static int usage(void)
{
    fprintf(stderr, "tetris-ingest-probe: bad usage\nTry 'tetris-ingest-probe --help'.\n");
    return 2;
}

/* ---- synth ---- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmd_synth(int argc, char **argv)
{
    const char *out = NULL;
    unsigned long n = 0, bytes = 0, seed = 1;
    static const struct option opts[] = {{"out", required_argument, NULL, 'o'},
                                         {"tensors", required_argument, NULL, 'n'},
                                         {"bytes", required_argument, NULL, 'b'},
                                         {"seed", required_argument, NULL, 's'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'o')
            out = optarg;
        else if (c == 'n')
            n = strtoul(optarg, NULL, 10);
        else if (c == 'b')
            bytes = strtoul(optarg, NULL, 10);
        else if (c == 's')
            seed = strtoul(optarg, NULL, 10);
        else
            return usage();
    }
    if (out == NULL || n == 0 || bytes == 0 || bytes % 4 != 0)
        return usage();
    /* Header: {"t0":{"dtype":"F32","shape":[k],"data_offsets":[a,b]},...} */
    size_t hcap = 128 + n * 96;
    cleanup_free char *hdr = malloc(hcap);
    if (hdr == NULL)
        return 1;
    size_t hl = 0;
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "{");
    for (unsigned long i = 0; i < n; i++)
        hl += (size_t)snprintf(hdr + hl, hcap - hl,
                               "%s\"t%lu\":{\"dtype\":\"F32\",\"shape\":[%lu],"
                               "\"data_offsets\":[%lu,%lu]}",
                               i ? "," : "", i, bytes / 4, i * bytes, (i + 1) * bytes);
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
    while (hl % 8 != 0)
        hdr[hl++] = ' ';
    cleanup_fclose FILE *fp = fopen(out, "we");
    if (fp == NULL) {
        perror(out);
        return 1;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    fwrite(len8, 1, 8, fp);
    fwrite(hdr, 1, hl, fp);
    cleanup_free uint64_t *buf = malloc(bytes + 8);
    if (buf == NULL)
        return 1;
    uint64_t state = seed * 0x100000001b3ull + 7;
    for (unsigned long i = 0; i < n; i++) {
        for (size_t k = 0; k < (bytes + 7) / 8; k++)
            buf[k] = splitmix(&state);
        fwrite(buf, 1, bytes, fp);
    }
    if (fflush(fp) != 0 || ferror(fp)) {
        perror(out);
        return 1;
    }
    return 0;
}

/* ---- load ---- */

static volatile sig_atomic_t got_term;
static void on_term(int sig)
{
    (void)sig;
    got_term = 1;
}

/* Reads every page so the mapping is really faulted in (and charged). */
static uint64_t touch(const void *p, uint64_t n)
{
    const volatile uint8_t *b = p;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i += 4096)
        sum += b[i];
    return sum;
}

/* Loads tensors [first, first + n) of m into private memory kept in
 * bufs[] (like an instance without a store) until the probe exits. */
static int load_private(const model *m, size_t first, size_t n, void **bufs, uint64_t *bytes)
{
    for (size_t i = first; i < first + n; i++) {
        const tensor_desc *t = &m->tensors[i];
        cleanup_close int fd = open(t->source ? t->source : m->path, O_RDONLY | O_CLOEXEC);
        bufs[i] = malloc(t->meta.nbytes ? t->meta.nbytes : 1);
        tetris_error err;
        if (fd < 0 || bufs[i] == NULL || model_read_tensor(t, fd, bufs[i], &err) < 0)
            return -1;
        touch(bufs[i], t->meta.nbytes);
        *bytes += t->meta.nbytes;
    }
    return 0;
}

static void wait_hold(void)
{
    while (!got_term)
        poll(NULL, 0, 100);
}

struct load_result {
    size_t resident, ingested, rejected;
    uint64_t ingested_bytes, mapped_bytes, private_bytes;
    bool fallback;
    char reason[512];
};

static int map_all(store *s, const model *m, const struct ingest_tensor_result *res,
                   store_mapping *maps, struct load_result *r, tetris_error *err)
{
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (res != NULL && res[i].status == INGEST_REJECTED)
            continue;
        int rc = store_map_tensor(s, &m->tensors[i].meta.digest, &maps[i], err);
        if (rc < 0)
            return rc;
        touch(maps[i].data, maps[i].nbytes);
        r->mapped_bytes += maps[i].nbytes;
    }
    return 0;
}

struct copy_src {
    const void *bytes;
};

static int fill_copy(void *ctx, void *dst, uint64_t len, tetris_error *err)
{
    (void)err;
    struct copy_src *src = ctx;
    memcpy(dst, src->bytes, len);
    return 0;
}

static int cmd_load(int argc, char **argv)
{
    const char *store_dir = NULL, *sock = NULL;
    int timeout_ms = 30000;
    bool hold = false, direct = false, no_map = false;
    static const struct option opts[] = {{"store", required_argument, NULL, 'd'},
                                         {"socket", required_argument, NULL, 'S'},
                                         {"timeout-ms", required_argument, NULL, 't'},
                                         {"hold", no_argument, NULL, 'h'},
                                         {"direct", no_argument, NULL, 'D'},
                                         {"no-map", no_argument, NULL, 'N'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'd')
            store_dir = optarg;
        else if (c == 'S')
            sock = optarg;
        else if (c == 't')
            timeout_ms = atoi(optarg);
        else if (c == 'h')
            hold = true;
        else if (c == 'D')
            direct = true;
        else if (c == 'N')
            no_map = true;
        else
            return usage();
    }
    if (store_dir == NULL || optind + 1 != argc)
        return usage();
    const char *path = argv[optind];
    signal(SIGTERM, on_term);
    signal(SIGPIPE, SIG_IGN);
    tetris_error err;
    model *m;
    if (model_parse_file(path, &m, &err) < 0 || model_compute_digests(m, &err) < 0) {
        fprintf(stderr, "probe: %s\n", err.msg);
        return 1;
    }
    struct load_result r = {0};
    double t0 = clock_now_ms();
    store *s = NULL;
    store_holder *holder = NULL;
    ingest_client *client = NULL;
    cleanup_free struct ingest_tensor_result *res = calloc(m->n_tensors + 1, sizeof(*res));
    cleanup_free store_mapping *maps = calloc(m->n_tensors + 1, sizeof(*maps));
    cleanup_free void **privs = calloc(m->n_tensors + 1, sizeof(*privs));
    struct store_options so = {.read_only = !direct};
    int rc = store_open(store_dir, &so, &s, &err);
    char sockbuf[4096];
    if (sock == NULL) {
        /* The socket is in the store's public part, or in the directory
         * given when that is a public part itself (a pod's mount). */
        snprintf(sockbuf, sizeof(sockbuf), "%s/%s", s != NULL ? store_public_dir(s) : store_dir,
                 INGEST_SOCKET_NAME);
        sock = sockbuf;
    }
    if (rc == 0 && direct) {
        /* Direct mode: publish and hold references ourselves. */
        rc = store_holder_open(s, path, getpid(), &holder, &err);
        for (size_t i = 0; rc == 0 && i < m->n_tensors; i++) {
            rc = store_holder_add(holder, &m->tensors[i].meta.digest, m->tensors[i].meta.nbytes,
                                  &err);
            if (rc == 0 && !store_has_tensor(s, &m->tensors[i].meta.digest)) {
                cleanup_close int fd = open(m->tensors[i].source ? m->tensors[i].source : path,
                                            O_RDONLY | O_CLOEXEC);
                cleanup_free void *buf = malloc(m->tensors[i].meta.nbytes + 1);
                rc = (fd < 0 || buf == NULL)
                         ? tetris_fail(&err, TETRIS_E_IO, errno, "open source")
                         : model_read_tensor(&m->tensors[i], fd, buf, &err);
                if (rc == 0) {
                    struct copy_src src = {buf};
                    bool pub = false;
                    rc = store_publish_tensor(s, &m->tensors[i].meta, fill_copy, &src, &pub,
                                              &err);
                    r.ingested += pub;
                }
            }
        }
        if (rc == 0)
            rc = map_all(s, m, NULL, maps, &r, &err);
    } else if (rc == 0) {
        rc = ingest_client_connect(sock, timeout_ms, &client, &err);
        if (rc == 0)
            rc = ingest_client_ingest(client, path, m, res, NULL, &err);
        for (size_t i = 0; rc == 0 && i < m->n_tensors; i++) {
            r.resident += res[i].status == INGEST_RESIDENT;
            r.ingested += res[i].status == INGEST_INGESTED;
            r.rejected += res[i].status == INGEST_REJECTED;
        }
        if (rc == 0 && !no_map)
            rc = map_all(s, m, res, maps, &r, &err);
    }
    if (rc < 0) {
        r.fallback = true;
        snprintf(r.reason, sizeof(r.reason), "%s: %.*s", tetris_code_name(err.code), 400, err.msg);
        ingest_client_close(client);
        client = NULL;
        for (size_t i = 0; i < m->n_tensors; i++)
            if (maps[i].map_base != NULL)
                store_unmap_tensor(&maps[i]);
        memset(maps, 0, m->n_tensors * sizeof(*maps));
        r.mapped_bytes = 0;
        tetris_error ignored;
        ingest_report_fallback(sock, path, r.reason, 2000, &ignored);
        if (load_private(m, 0, m->n_tensors, privs, &r.private_bytes) < 0) {
            fprintf(stderr, "probe: private load failed\n");
            return 1;
        }
    } else if (r.rejected > 0) {
        for (size_t i = 0; i < m->n_tensors; i++) {
            if (res[i].status == INGEST_REJECTED &&
                load_private(m, i, 1, privs, &r.private_bytes) < 0)
                return 1;
        }
    }
    double load_ms = clock_now_ms() - t0;
    printf("{\"pid\":%d,\"load_ms\":%.3f,\"tensors\":%zu,\"resident\":%zu,\"ingested\":%zu,"
           "\"rejected\":%zu,"
           "\"mapped_bytes\":%" PRIu64 ",\"private_bytes\":%" PRIu64 ",\"fallback\":%s,"
           "\"reason\":%s}\n",
           (int)getpid(), load_ms, m->n_tensors, r.resident, r.ingested, r.rejected, r.mapped_bytes,
           r.private_bytes, r.fallback ? "true" : "false", LOG_Q(r.fallback ? r.reason : ""));
    fflush(stdout);
    if (hold)
        wait_hold();
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (maps[i].map_base != NULL)
            store_unmap_tensor(&maps[i]);
        free(privs[i]);
    }
    ingest_client_close(client);
    if (holder != NULL)
        store_holder_close(holder);
    store_close(s);
    model_free(m);
    return 0;
}

/* ---- send, tcp, manifest ---- */

static char *read_stdin(size_t *len_out)
{
    size_t cap = 1 << 16, len = 0;
    char *body = malloc(cap);
    while (body != NULL) {
        if (len == cap) {
            char *b = realloc(body, cap *= 2);
            if (b == NULL) {
                free(body);
                return NULL;
            }
            body = b;
        }
        ssize_t n = read(0, body + len, cap - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    *len_out = len;
    return body;
}

static int cmd_tcp(int argc, char **argv)
{
    if (argc != 3 || strcmp(argv[1], "--port") != 0)
        return usage();
    size_t len;
    cleanup_free char *body = read_stdin(&len);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cleanup_close int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (body == NULL || s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        perror("tcp");
        return 1;
    }
    if (len > 0 && send(s, body, len, MSG_NOSIGNAL) < 0) {
        printf("closed\n");
        return 0;
    }
    shutdown(s, SHUT_WR);
    char buf[4096];
    struct pollfd p = {.fd = s, .events = POLLIN};
    while (poll(&p, 1, 20000) > 0) {
        ssize_t n = read(s, buf, sizeof(buf));
        if (n <= 0)
            break;
        fwrite(buf, 1, (size_t)n, stdout);
    }
    printf("\nclosed\n");
    return 0;
}

static int cmd_fill(int argc, char **argv)
{
    if (argc != 3 || strcmp(argv[1], "--socket") != 0)
        return usage();
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", argv[2]);
    size_t n = 0;
    for (;;) {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s < 0) {
            perror("socket");
            return 1;
        }
        if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            if (errno != EAGAIN) {
                perror(argv[2]);
                return 1;
            }
            close(s);
            break;
        }
        n++; /* held (leaked) until exit */
    }
    printf("full %zu\n", n);
    fflush(stdout);
    char buf[64];
    while (read(STDIN_FILENO, buf, sizeof(buf)) > 0)
        ;
    return 0;
}

static int cmd_manifest(int argc, char **argv)
{
    if (argc != 2)
        return usage();
    tetris_error err;
    model *m;
    if (model_parse_file(argv[1], &m, &err) < 0 || model_compute_digests(m, &err) < 0) {
        fprintf(stderr, "probe: %s\n", err.msg);
        return 1;
    }
    char *json = manifest_to_json(m, &err);
    model_free(m);
    if (json == NULL) {
        fprintf(stderr, "probe: %s\n", err.msg);
        return 1;
    }
    printf("%s\n", json);
    free(json);
    return 0;
}

static int connect_unix(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        perror(path);
        if (s >= 0)
            close(s);
        return -1;
    }
    return s;
}

static int cmd_send(int argc, char **argv)
{
    const char *sock = NULL;
    bool raw = false, no_eof = false;
    int fds[INGEST_MAX_SOURCES + 8];
    size_t n_fds = 0;
    unsigned long repeat = 1;
    bool hold = false, shut_wr = false;
    static const struct option opts[] = {{"socket", required_argument, NULL, 'S'},
                                         {"fd", required_argument, NULL, 'f'},
                                         {"path-fd", required_argument, NULL, 'p'},
                                         {"raw", no_argument, NULL, 'r'},
                                         {"no-eof", no_argument, NULL, 'e'},
                                         {"repeat", required_argument, NULL, 'n'},
                                         {"hold", no_argument, NULL, 'H'},
                                         {"shut-wr", no_argument, NULL, 'w'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'S')
            sock = optarg;
        else if (c == 'w')
            shut_wr = true;
        else if (c == 'r')
            raw = true;
        else if (c == 'e')
            no_eof = true;
        else if (c == 'n')
            repeat = strtoul(optarg, NULL, 10);
        else if (c == 'H')
            hold = true;
        else if ((c == 'f' || c == 'p') && n_fds < sizeof(fds) / sizeof(fds[0])) {
            /* Non-blocking, so that opening a FIFO does not wait for a
             * writer: the daemon is what must refuse it. */
            fds[n_fds] = open(optarg, (c == 'p' ? O_PATH : O_RDONLY | O_NONBLOCK) | O_CLOEXEC);
            if (fds[n_fds] < 0) {
                perror(optarg);
                return 1;
            }
            n_fds++;
        } else
            return usage();
    }
    if (sock == NULL || repeat == 0)
        return usage();
    size_t len;
    cleanup_free char *body = read_stdin(&len);
    if (body == NULL)
        return 1;
    cleanup_close int s = connect_unix(sock);
    if (s < 0)
        return 1;
    if (hold)
        signal(SIGTERM, on_term);
    tetris_error err;
    /* Framed here rather than by ingest_send_message, which would refuse
     * the oversized descriptor lists the tests want the daemon to see. */
    cleanup_free char *msg_bytes = malloc(len + INGEST_HEADER_BYTES);
    if (msg_bytes == NULL)
        return 1;
    size_t off = 0;
    if (!raw) {
        ingest_frame_header((uint8_t *)msg_bytes, (uint32_t)len);
        off = INGEST_HEADER_BYTES;
    }
    memcpy(msg_bytes + off, body, len);
    len += off;
    for (unsigned long r = 0; r < repeat; r++) {
        struct iovec iov = {msg_bytes, len};
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * (INGEST_MAX_SOURCES + 8))];
        } control;
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        if (n_fds > 0) {
            memset(&control, 0, sizeof(control));
            msg.msg_control = control.buf;
            msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
            struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
            memcpy(CMSG_DATA(cm), fds, sizeof(int) * n_fds);
        }
        /* A large request may not fit the socket buffer in one go. */
        size_t sent = 0;
        while (sent < len) {
            ssize_t n = sendmsg(s, &msg, MSG_NOSIGNAL);
            if (n < 0) {
                perror("sendmsg");
                return 1;
            }
            sent += (size_t)n;
            iov = (struct iovec){msg_bytes + sent, len - sent};
            msg = (struct msghdr){.msg_iov = &iov, .msg_iovlen = 1};
        }
        if ((raw && !no_eof) || shut_wr)
            shutdown(s, SHUT_WR);
        cleanup_free char *reply = NULL;
        size_t rl;
        /* A reply may take as long as the daemon lets a request run. */
        if (ingest_recv_message(s, INGEST_MAX_MESSAGE_BYTES, &reply, &rl, NULL, 0, NULL,
                                clock_mono_ms() + 3600 * 1000, &err) < 0) {
            printf("closed\n");
            return 0;
        }
        printf("%s\n", reply);
        fflush(stdout);
    }
    if (hold) {
        printf("held\n");
        fflush(stdout);
        while (!got_term)
            pause();
    }
    return 0;
}

/* ---- forge, conns ---- */

static int cmd_forge(int argc, char **argv)
{
    unsigned long n = 0, bytes = 0;
    bool corrupt = false;
    const char *label = "forged";
    static const struct option opts[] = {{"tensors", required_argument, NULL, 'n'},
                                         {"bytes", required_argument, NULL, 'b'},
                                         {"corrupt", no_argument, NULL, 'c'},
                                         {"label", required_argument, NULL, 'l'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'n')
            n = strtoul(optarg, NULL, 10);
        else if (c == 'b')
            bytes = strtoul(optarg, NULL, 10);
        else if (c == 'c')
            corrupt = true;
        else if (c == 'l')
            label = optarg;
        else
            return usage();
    }
    if (n == 0)
        return usage();
    cleanup_free uint8_t *zeros = corrupt ? NULL : calloc(1, bytes ? bytes : 1);
    if (!corrupt && zeros == NULL)
        return 1;
    printf("{\"op\":\"ingest\",\"label\":\"%s\",\"sources\":[\"zeros\"],\"tensors\":[", label);
    tensor_meta meta = {.dtype = "uint8", .ndim = bytes ? 1 : 2};
    for (unsigned long i = 0; i < n; i++) {
        meta.shape[0] = bytes ? (int64_t)bytes : 0;
        meta.shape[1] = (int64_t)i + 1;
        meta.nbytes = bytes;
        char hex[TENSOR_DIGEST_HEX_LEN + 1];
        if (corrupt) {
            snprintf(hex, sizeof(hex), "%064lx", i + 1);
        } else {
            tetris_error err;
            if (tensor_digest_compute(&meta, zeros, &err) < 0) {
                fprintf(stderr, "probe: %s\n", err.msg);
                return 1;
            }
            tensor_digest_to_hex(&meta.digest, hex);
        }
        printf("%s{\"name\":\"f%lu\",\"dtype\":\"uint8\",\"shape\":", i ? "," : "", i);
        if (bytes)
            printf("[%lu]", bytes);
        else
            printf("[0,%lu]", i + 1);
        printf(",\"source_index\":0,\"offset\":%lu,\"length\":%lu,\"nbytes\":%lu,"
               "\"encoding\":\"raw\",\"digest\":\"sha256:%s\",\"crc32\":%u}",
               i * bytes, bytes, bytes, hex, corrupt ? 0u : meta.crc32);
    }
    printf("]}\n");
    return fflush(stdout) == 0 ? 0 : 1;
}

/* What each connection of conns sends: its request and descriptors, and
 * how many tensors the reply must answer for (0: a report_fallback). */
struct conn_request {
    char *json;
    int fds[INGEST_MAX_SOURCES];
    size_t n_fds;
    size_t n_tensors;
};

static int conn_request_make(const char *model_path, struct conn_request *r)
{
    *r = (struct conn_request){0};
    if (model_path == NULL) {
        r->json = ingest_fallback_encode("conns", "probing the connection limits");
        return r->json != NULL ? 0 : -1;
    }
    tetris_error err;
    model *m = NULL;
    const char *sources[INGEST_MAX_SOURCES];
    int rc = model_parse_file(model_path, &m, &err);
    if (rc == 0)
        rc = model_compute_digests(m, &err);
    if (rc == 0)
        rc = ingest_request_encode("conns", m, &r->json, sources, &r->n_fds, &err);
    for (size_t i = 0; rc == 0 && i < r->n_fds; i++)
        if ((r->fds[i] = open(sources[i], O_RDONLY | O_CLOEXEC)) < 0)
            rc = tetris_fail(&err, TETRIS_E_IO, errno, "open %s", sources[i]);
    if (rc == 0)
        r->n_tensors = m->n_tensors;
    else
        fprintf(stderr, "probe: %s\n", err.msg);
    model_free(m);
    return rc;
}

static int cmd_conns(int argc, char **argv)
{
    const char *sock = NULL, *model_path = NULL;
    unsigned long count = 0;
    bool hold = false;
    static const struct option opts[] = {{"socket", required_argument, NULL, 'S'},
                                         {"count", required_argument, NULL, 'n'},
                                         {"ingest", required_argument, NULL, 'i'},
                                         {"hold", no_argument, NULL, 'H'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'S')
            sock = optarg;
        else if (c == 'n')
            count = strtoul(optarg, NULL, 10);
        else if (c == 'i')
            model_path = optarg;
        else if (c == 'H')
            hold = true;
        else
            return usage();
    }
    if (sock == NULL || count == 0 || count > 4096)
        return usage();
    signal(SIGTERM, on_term);
    cleanup_free int *open_socks = calloc(count, sizeof(int));
    struct conn_request req;
    if (open_socks == NULL || conn_request_make(model_path, &req) < 0)
        return 1;
    unsigned long accepted = 0, refused = 0;
    char reason[sizeof(((tetris_error *)0)->msg)] = "";
    for (unsigned long i = 0; i < count; i++) {
        int s = connect_unix(sock);
        if (s < 0)
            return 1;
        tetris_error err;
        char *reply = NULL;
        size_t rl;
        int64_t deadline = clock_mono_ms() + 20000;
        /* A refused connection gets its error at once, maybe before the
         * request goes out: the reply is read whatever the send said. */
        tetris_error send_err;
        int send_rc = ingest_send_message(s, req.json, strlen(req.json), req.fds, req.n_fds,
                                          deadline, &send_err);
        int rc = ingest_recv_message(s, INGEST_MAX_MESSAGE_BYTES, &reply, &rl, NULL, 0, NULL,
                                     deadline, &err);
        if (rc < 0 && send_rc < 0)
            err = send_err;
        if (rc == 0 && req.n_tensors == 0) {
            rc = ingest_ack_decode(reply, rl, &err);
        } else if (rc == 0) {
            struct ingest_tensor_result *res = calloc(req.n_tensors, sizeof(*res));
            rc = res != NULL ? ingest_reply_decode(reply, rl, req.n_tensors, res, NULL, &err) : -1;
            free(res);
        }
        free(reply);
        if (rc == 0) {
            open_socks[accepted++] = s;
        } else {
            refused++;
            snprintf(reason, sizeof(reason), "%s", err.msg);
            close(s);
        }
    }
    printf("{\"accepted\":%lu,\"refused\":%lu,\"reason\":\"%s\"}\n", accepted, refused, reason);
    fflush(stdout);
    while (hold && !got_term)
        pause();
    for (unsigned long i = 0; i < accepted; i++)
        close(open_socks[i]);
    for (size_t i = 0; i < req.n_fds; i++)
        close(req.fds[i]);
    free(req.json);
    return 0;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

#if defined(__x86_64__)
#define PROBE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define PROBE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/* An old kernel, for the one call that tells: madvise(MADV_POPULATE_READ)
 * fails EINVAL, everything else (the sanitizers' own madvise calls too) is
 * allowed. The filter is inherited across exec. */
static int cmd_no_populate(int argc, char **argv)
{
    if (argc < 2)
        return usage();
#ifdef PROBE_AUDIT_ARCH
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROBE_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_POPULATE_READ, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
        fprintf(stderr, "tetris-ingest-probe: seccomp filter: %s\n", strerror(errno));
        return 1;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "tetris-ingest-probe: %s: %s\n", argv[1], strerror(errno));
    return 1;
#else
    fprintf(stderr, "tetris-ingest-probe: no-populate: no seccomp filter for this architecture\n");
    return 1;
#endif
}

int main(int argc, char **argv)
{
    log_init("tetris-ingest-probe");
    if (argc < 2)
        return usage();
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("tetris-ingest-probe %s\n", TETRIS_VERSION);
        return 0;
    }
    const char *cmd = argv[1];
    argc--;
    argv++;
    if (strcmp(cmd, "synth") == 0)
        return cmd_synth(argc, argv);
    if (strcmp(cmd, "load") == 0)
        return cmd_load(argc, argv);
    if (strcmp(cmd, "send") == 0)
        return cmd_send(argc, argv);
    if (strcmp(cmd, "tcp") == 0)
        return cmd_tcp(argc, argv);
    if (strcmp(cmd, "manifest") == 0)
        return cmd_manifest(argc, argv);
    if (strcmp(cmd, "fill") == 0)
        return cmd_fill(argc, argv);
    if (strcmp(cmd, "forge") == 0)
        return cmd_forge(argc, argv);
    if (strcmp(cmd, "conns") == 0)
        return cmd_conns(argc, argv);
    if (strcmp(cmd, "no-populate") == 0)
        return cmd_no_populate(argc, argv);
    return usage();
}
