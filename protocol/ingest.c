/* ingest.c - the ingest protocol (see ingest.h): framing, and encoding and
 * decoding every message, for the agent's client and the node daemon
 * alike. Every blocking step of the framing waits in poll() against one
 * deadline, so a stalled peer turns into TETRIS_E_TIMEOUT instead of a hung
 * thread. */
#include "protocol/ingest.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/clock.h"
#include "common/json_scan.h"
#include "common/textbuf.h"
#include "common/utf8.h"
#include "model/manifest.h"
#include "protocol/derived.h"
#include "protocol/oci.h"

/* ---- framing ---- */

int ingest_wait_ready(int sock, short events, int64_t deadline_ms, tetris_error *err)
{
    for (;;) {
        int timeout = -1;
        if (deadline_ms > 0) {
            int64_t left = deadline_ms - clock_mono_ms();
            if (left <= 0)
                return tetris_fail(err, TETRIS_E_TIMEOUT, ETIMEDOUT, "ingest socket: timed out");
            timeout = left > 1000000 ? 1000000 : (int)left;
        }
        struct pollfd p = {.fd = sock, .events = events};
        int n = poll(&p, 1, timeout);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return tetris_fail(err, TETRIS_E_IO, errno, "ingest socket: poll");
    }
}

void ingest_frame_header(uint8_t header[INGEST_HEADER_BYTES], uint32_t len)
{
    header[0] = (uint8_t)len;
    header[1] = (uint8_t)(len >> 8);
    header[2] = (uint8_t)(len >> 16);
    header[3] = (uint8_t)(len >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int ingest_send_message(int sock, const char *json, size_t len, const int *fds, size_t n_fds,
                        int64_t deadline_ms, tetris_error *err)
{
    if (len > INGEST_MAX_MESSAGE_BYTES)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "ingest message of %zu bytes exceeds %u", len,
                           INGEST_MAX_MESSAGE_BYTES);
    if (n_fds > INGEST_MAX_SOURCES)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%zu descriptors exceed %d", n_fds,
                           INGEST_MAX_SOURCES);
    uint8_t header[INGEST_HEADER_BYTES];
    ingest_frame_header(header, (uint32_t)len);
    size_t total = sizeof(header) + len;
    size_t sent = 0;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * INGEST_MAX_SOURCES)];
    } control;
    while (sent < total) {
        int rc = ingest_wait_ready(sock, POLLOUT, deadline_ms, err);
        if (rc < 0)
            return rc;
        struct iovec iov[2];
        int n_iov = 0;
        if (sent < sizeof(header)) {
            iov[n_iov++] = (struct iovec){header + sent, sizeof(header) - sent};
            iov[n_iov++] = (struct iovec){(void *)json, len};
        } else {
            size_t off = sent - sizeof(header);
            iov[n_iov++] = (struct iovec){(void *)(json + off), len - off};
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
        if (sent == 0 && n_fds > 0) {
            memset(&control, 0, sizeof(control));
            msg.msg_control = control.buf;
            msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
            struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
            memcpy(CMSG_DATA(cm), fds, sizeof(int) * n_fds);
        }
        ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            if (errno == EPIPE || errno == ECONNRESET)
                return tetris_fail(err, TETRIS_E_UNAVAILABLE, errno, "ingest socket: peer gone");
            return tetris_fail(err, TETRIS_E_IO, errno, "ingest socket: sendmsg");
        }
        sent += (size_t)n;
    }
    return 0;
}

static void close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Takes the descriptors of one recvmsg's control data. Returns false if
 * there were more than fit (all of them are closed then). */
static bool collect_fds(struct msghdr *msg, int *fds, size_t max_fds, size_t *n_fds)
{
    bool ok = (msg->msg_flags & MSG_CTRUNC) == 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm != NULL; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int got[INGEST_MAX_SOURCES + 8];
        if (n > sizeof(got) / sizeof(got[0]))
            n = sizeof(got) / sizeof(got[0]);
        memcpy(got, CMSG_DATA(cm), n * sizeof(int));
        for (size_t i = 0; i < n; i++) {
            if (*n_fds < max_fds)
                fds[(*n_fds)++] = got[i];
            else {
                close(got[i]);
                ok = false;
            }
        }
    }
    return ok;
}

/* Reads exactly len bytes (descriptors only ride on the header). */
static int recv_exact(int sock, void *buf, size_t len, int64_t deadline_ms, bool first,
                      int *fds, size_t max_fds, size_t *n_fds, bool *fds_ok, tetris_error *err)
{
    size_t got = 0;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * (INGEST_MAX_SOURCES + 8))];
    } control;
    while (got < len) {
        int rc = ingest_wait_ready(sock, POLLIN, deadline_ms, err);
        if (rc < 0)
            return rc;
        struct iovec iov = {(char *)buf + got, len - got};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof(control.buf);
        ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            if (errno == ECONNRESET)
                return tetris_fail(err, TETRIS_E_UNAVAILABLE, errno, "ingest socket: peer gone");
            return tetris_fail(err, TETRIS_E_IO, errno, "ingest socket: recvmsg");
        }
        if (msg.msg_controllen > 0 && !collect_fds(&msg, fds, max_fds, n_fds))
            *fds_ok = false;
        if (n == 0) {
            if (first && got == 0)
                return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "ingest socket: closed by peer");
            return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                               "ingest socket: truncated message (%zu of %zu bytes)", got, len);
        }
        got += (size_t)n;
    }
    return 0;
}

int ingest_recv_message(int sock, size_t max_len, char **json, size_t *len, int *fds,
                        size_t max_fds, size_t *n_fds, int64_t deadline_ms, tetris_error *err)
{
    size_t nfd = 0;
    bool fds_ok = true;
    uint8_t header[INGEST_HEADER_BYTES];
    int rc = recv_exact(sock, header, sizeof(header), deadline_ms, true, fds, max_fds, &nfd,
                        &fds_ok, err);
    if (rc < 0)
        goto fail;
    if (!fds_ok) {
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "too many descriptors (max %zu)", max_fds);
        goto fail;
    }
    uint32_t n = get_le32(header);
    if (n > max_len) {
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "message of %u bytes exceeds %zu", n,
                         max_len);
        goto fail;
    }
    char *buf = malloc((size_t)n + 1);
    if (buf == NULL) {
        rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "message of %u bytes", n);
        goto fail;
    }
    rc = recv_exact(sock, buf, n, deadline_ms, false, fds, max_fds, &nfd, &fds_ok, err);
    if (rc == 0 && !fds_ok)
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "too many descriptors (max %zu)", max_fds);
    if (rc < 0) {
        free(buf);
        goto fail;
    }
    buf[n] = '\0';
    *json = buf;
    *len = n;
    if (n_fds != NULL)
        *n_fds = nfd;
    return 0;
fail:
    close_fds(fds, nfd);
    if (n_fds != NULL)
        *n_fds = 0;
    return rc;
}

/* ---- requests ---- */

/* Finds or adds path in sources[*n]: its index, or -1 past
 * INGEST_MAX_SOURCES. */
static int source_index(const char *path, const char *sources[INGEST_MAX_SOURCES], size_t *n)
{
    size_t s = 0;
    while (s < *n && strcmp(sources[s], path) != 0)
        s++;
    if (s == *n) {
        if (s == INGEST_MAX_SOURCES)
            return -1;
        sources[(*n)++] = path;
    }
    return (int)s;
}

/* Written as text, not built as a tree: every instance's start sends its
 * model's few hundred entries (bench/first-answer: a tree cost a small
 * model's start some 3 ms, most of it allocations and their faults). */
int ingest_request_encode(const char *label, const model *m, char **json,
                          const char *sources[INGEST_MAX_SOURCES], size_t *n_sources,
                          tetris_error *err)
{
    *json = NULL;
    *n_sources = 0;
    label = label != NULL ? label : "";
    if (!utf8_valid(label, strlen(label)))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "label is not valid UTF-8");
    for (size_t i = 0; i < m->n_tensors; i++) {
        const char *path = m->tensors[i].source ? m->tensors[i].source : m->path;
        size_t before = *n_sources;
        if (source_index(path, sources, n_sources) < 0)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "model has more than %d source files",
                               INGEST_MAX_SOURCES);
        if (*n_sources > before && !utf8_valid(path, strlen(path)))
            return tetris_fail(err, TETRIS_E_INVAL, 0, "source %s is not valid UTF-8", path);
    }
    textbuf b = {0};
    textbuf_reserve(&b, 64 + m->n_tensors * 256);
    textbuf_puts(&b, "{\"op\":\"ingest\",\"label\":");
    textbuf_json_string(&b, label);
    textbuf_puts(&b, ",\"sources\":[");
    for (size_t s = 0; s < *n_sources; s++) {
        textbuf_puts(&b, s > 0 ? "," : "");
        textbuf_json_string(&b, sources[s]);
    }
    textbuf_puts(&b, "],\"tensors\":[");
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        /* A tensor without its identity goes without one: the daemon
         * computes it while it reads the bytes. */
        char index[24];
        snprintf(index, sizeof index, "%d",
                 source_index(t->source ? t->source : m->path, sources, n_sources));
        textbuf_puts(&b, i > 0 ? "," : "");
        rc = manifest_entry_write(&b, t, "source_index", index, err);
    }
    if (rc == 0 && !textbuf_puts(&b, "]}"))
        rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request");
    if (rc == 0 && (*json = textbuf_take(&b, NULL)) == NULL)
        rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request");
    textbuf_free(&b);
    return rc;
}

char *ingest_fallback_encode(const char *label, const char *reason)
{
    json_t *req = json_pack("{s:s, s:s, s:s}", "op", "report_fallback", "label",
                            label ? label : "", "reason", reason ? reason : "");
    char *text = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    return text;
}

char *ingest_derive_encode(const char *label, const char *transform, const char *runtime)
{
    json_t *req = json_pack("{s:s, s:s, s:s}", "op", "derive", "label", label ? label : "",
                            "transform", transform);
    if (req != NULL && runtime != NULL &&
        json_object_set_new(req, "runtime", json_string(runtime)) < 0) {
        json_decref(req);
        return NULL;
    }
    char *text = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    return text;
}

char *ingest_pull_encode(const char *label, const char *ref)
{
    json_t *req = json_pack("{s:s, s:s, s:s}", "op", "pull", "label", label ? label : "", "ref",
                            ref);
    char *text = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    return text;
}

char *ingest_gpu_attach_encode(const char *device, const tensor_digest *digests, size_t n)
{
    json_t *list = json_array();
    for (size_t i = 0; list != NULL && i < n; i++) {
        char hex[TENSOR_DIGEST_HEX_LEN + 1], digest[TENSOR_DIGEST_HEX_LEN + 8];
        tensor_digest_to_hex(&digests[i], hex);
        snprintf(digest, sizeof(digest), "sha256:%s", hex);
        if (json_array_append_new(list, json_string(digest)) < 0) {
            json_decref(list);
            return NULL;
        }
    }
    json_t *req = json_pack("{s:s, s:s, s:o*}", "op", "gpu_attach", "device", device, "digests",
                            list);
    char *text = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    return text;
}

/* ---- decoding requests ----
 * A request is checked and cut into spans (common/json_scan.h), never
 * loaded whole: tensor entries are decoded in place (model/manifest.h),
 * and each source path and string is loaded on its own, at most
 * INGEST_MAX_ELEMENT_BYTES of text, and freed before the next, so
 * decoding holds the message, the request it fills in and one small tree
 * at a time. */

/* The top-level members a request may have; others are ignored. */
struct request_members {
    json_span op, label, reason, sources, tensors, device, digests, transform, runtime, ref;
};

static int collect_members(json_span doc, struct request_members *m, tetris_error *err)
{
    static const struct {
        const char *key;
        size_t offset;
    } known[] = {
        {"op", offsetof(struct request_members, op)},
        {"label", offsetof(struct request_members, label)},
        {"reason", offsetof(struct request_members, reason)},
        {"sources", offsetof(struct request_members, sources)},
        {"tensors", offsetof(struct request_members, tensors)},
        {"device", offsetof(struct request_members, device)},
        {"digests", offsetof(struct request_members, digests)},
        {"transform", offsetof(struct request_members, transform)},
        {"runtime", offsetof(struct request_members, runtime)},
        {"ref", offsetof(struct request_members, ref)},
    };
    memset(m, 0, sizeof(*m));
    json_iter it;
    if (!json_iter_object(&it, doc))
        return 0; /* no members: "unknown op (none)" */
    json_span key, value;
    while (json_iter_next(&it, &key, &value) > 0) {
        char name[16];
        if (json_span_string(key, name, sizeof(name)) < 0)
            continue; /* longer than any we read */
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++) {
            if (strcmp(name, known[k].key) != 0)
                continue;
            json_span *slot = (json_span *)((char *)m + known[k].offset);
            if (slot->p != NULL)
                return tetris_fail(err, TETRIS_E_FORMAT, 0, "duplicate key \"%s\"", name);
            *slot = value;
        }
    }
    return 0;
}

/* One element of the request as a jansson value, or a format error naming
 * it (what) when it is longer than INGEST_MAX_ELEMENT_BYTES. */
static int load_element(json_span v, const char *what, json_t **out, tetris_error *err)
{
    if (v.len > INGEST_MAX_ELEMENT_BYTES)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: longer than %d bytes of JSON", what,
                           INGEST_MAX_ELEMENT_BYTES);
    json_error_t jerr;
    *out = json_loadb(v.p, v.len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (*out == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: %s", what, jerr.text);
    return 0;
}

/* A string member that may be absent (""); malloc'd into *out. */
static int optional_string(json_span v, const char *key, char **out, tetris_error *err)
{
    if (v.p == NULL) {
        *out = strdup("");
    } else {
        if (!json_span_is_string(v))
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "\"%s\" must be a string", key);
        json_t *j;
        int rc = load_element(v, key, &j, err);
        if (rc < 0)
            return rc;
        *out = strdup(json_string_value(j));
        json_decref(j);
    }
    if (*out == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request");
    return 0;
}

static int decode_label(json_span v, ingest_request *rq, tetris_error *err)
{
    int rc = optional_string(v, "label", &rq->label, err);
    if (rc < 0)
        return rc;
    if (strlen(rq->label) > INGEST_MAX_LABEL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "label longer than %d bytes",
                           INGEST_MAX_LABEL);
    for (const char *c = rq->label; *c != '\0'; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "label has control characters");
    return 0;
}

#define REQUEST_WHAT "ingest request"

static int decode_tensor(json_span v, size_t i, size_t n_sources, ingest_request_tensor *out,
                         tetris_error *err)
{
    if (v.len > INGEST_MAX_ELEMENT_BYTES)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           REQUEST_WHAT ": tensors[%zu]: longer than %d bytes of JSON", i,
                           INGEST_MAX_ELEMENT_BYTES);
    json_span index;
    int rc = manifest_entry_decode(v, REQUEST_WHAT, i, "source_index", true, &out->desc, &index,
                                   err);
    if (rc < 0)
        return rc;
    out->desc.source = (char *)INGEST_SOURCE_DESCRIPTOR;
    uint64_t source;
    if (json_span_uint(index, &source) <= 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           REQUEST_WHAT ": tensors[%zu] (\"%s\"): field \"source_index\": must "
                                        "be a non-negative integer",
                           i, out->desc.name);
    if (source >= n_sources)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           REQUEST_WHAT ": tensors[%zu] (\"%s\"): field \"source_index\": %llu "
                                        "out of range (%zu sources)",
                           i, out->desc.name, (unsigned long long)source, n_sources);
    out->source_index = (size_t)source;
    return 0;
}

static int decode_ingest(const struct request_members *m, size_t n_fds, ingest_request *rq,
                         tetris_error *err)
{
    int rc = decode_label(m->label, rq, err);
    if (rc < 0)
        return rc;
    json_iter sources, tensors;
    if (!json_iter_array(&sources, m->sources) || !json_iter_array(&tensors, m->tensors))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "ingest needs \"sources\" and \"tensors\"");
    size_t n_sources = json_iter_count(sources), n_tensors = json_iter_count(tensors);
    if (n_sources != n_fds)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%zu sources but %zu descriptors attached",
                           n_sources, n_fds);
    if (n_tensors > INGEST_MAX_TENSORS)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%zu tensors exceed the limit of %d", n_tensors,
                           INGEST_MAX_TENSORS);
    rq->sources = calloc(n_sources ? n_sources : 1, sizeof(*rq->sources));
    rq->tensors = calloc(n_tensors ? n_tensors : 1, sizeof(*rq->tensors));
    if (rq->sources == NULL || rq->tensors == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request of %zu tensors", n_tensors);
    rq->n_sources = n_sources;
    rq->n_tensors = n_tensors;
    json_span v;
    for (size_t i = 0; json_iter_next(&sources, NULL, &v) > 0; i++) {
        if (!json_span_is_string(v))
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "sources[%zu] must be a string", i);
        char what[32];
        snprintf(what, sizeof(what), "sources[%zu]", i);
        if ((rc = optional_string(v, what, &rq->sources[i], err)) < 0)
            return rc;
    }
    for (size_t i = 0; json_iter_next(&tensors, NULL, &v) > 0; i++)
        if ((rc = decode_tensor(v, i, n_sources, &rq->tensors[i], err)) < 0)
            return rc;
    return 0;
}

static int decode_gpu_attach(const struct request_members *m, ingest_request *rq, tetris_error *err)
{
    char device[INGEST_DEVICE_MAX];
    if (json_span_string(m->device, device, sizeof(device)) < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "gpu_attach needs \"device\", a string of at most %d bytes",
                           INGEST_DEVICE_MAX - 1);
    snprintf(rq->device, sizeof(rq->device), "%s", device);
    json_iter list;
    size_t n = json_iter_array(&list, m->digests) ? json_iter_count(list) : 0;
    if (n == 0 || n > INGEST_MAX_GPU_TENSORS)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "gpu_attach needs \"digests\", 1 to %d of them",
                           INGEST_MAX_GPU_TENSORS);
    rq->digests = calloc(n, sizeof(*rq->digests));
    if (rq->digests == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request");
    rq->n_digests = n;
    json_span v;
    for (size_t i = 0; json_iter_next(&list, NULL, &v) > 0; i++) {
        char hex[TENSOR_DIGEST_HEX_LEN + 8];
        tetris_error derr;
        if (json_span_string(v, hex, sizeof(hex)) < 0 || strncmp(hex, "sha256:", 7) != 0 ||
            tensor_digest_from_hex(hex + 7, &rq->digests[i], &derr) < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "gpu_attach: digests[%zu] must be \"sha256:\" and 64 hex digits", i);
    }
    return 0;
}

/* The op, when it is a string that fits op (an unknown one is named in
 * the error); "" for anything else. */
static void decode_op(json_span v, char *op, size_t cap)
{
    if (json_span_string(v, op, cap) < 0)
        op[0] = '\0';
}

int ingest_request_decode(const char *json, size_t len, size_t n_fds, ingest_request **out,
                          tetris_error *err)
{
    *out = NULL;
    json_span doc;
    tetris_error serr;
    if (json_scan_document(json, len, &doc, &serr) < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "request is not JSON: %s", serr.msg);
    if (!json_span_is_object(doc) && !json_span_is_array(doc))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "request is not JSON: not an object");
    struct request_members m;
    int rc = collect_members(doc, &m, err);
    if (rc < 0)
        return rc;
    ingest_request *rq = calloc(1, sizeof(*rq));
    char op[256];
    decode_op(m.op, op, sizeof(op));
    if (rq == NULL) {
        rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request");
    } else if (strcmp(op, "ingest") == 0) {
        rq->op = INGEST_OP_INGEST;
        rc = decode_ingest(&m, n_fds, rq, err);
    } else if (strcmp(op, "gpu_attach") == 0 && n_fds == 0) {
        rq->op = INGEST_OP_GPU_ATTACH;
        rc = decode_gpu_attach(&m, rq, err);
    } else if (strcmp(op, "derive") == 0 && n_fds == 1) {
        rq->op = INGEST_OP_DERIVE;
        rc = decode_label(m.label, rq, err);
        if (rc == 0)
            rc = optional_string(m.transform, "transform", &rq->transform, err);
        if (rc == 0 && strcmp(rq->transform, DERIVED_TRANSFORM_ORT) != 0)
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "derive: unknown transform (expected %s)",
                             DERIVED_TRANSFORM_ORT);
        if (rc == 0)
            rc = optional_string(m.runtime, "runtime", &rq->runtime, err);
        if (rc == 0 && m.runtime.p != NULL && !derived_name_valid(rq->runtime))
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0,
                             "derive: runtime must be 1 to %d bytes without control characters "
                             "or slashes",
                             DERIVED_NAME_MAX - 1);
    } else if (strcmp(op, "pull") == 0 && n_fds == 0) {
        rq->op = INGEST_OP_PULL;
        rc = decode_label(m.label, rq, err);
        if (rc == 0 && m.ref.p == NULL)
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "pull needs \"ref\"");
        if (rc == 0)
            rc = optional_string(m.ref, "ref", &rq->ref, err);
        if (rc == 0 && strlen(rq->ref) > INGEST_MAX_REF)
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "ref longer than %d bytes", INGEST_MAX_REF);
        oci_ref parsed;
        tetris_error rerr;
        if (rc == 0 && oci_ref_parse(rq->ref, &parsed, &rerr) < 0)
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "pull: %s", rerr.msg);
    } else if (strcmp(op, "report_fallback") == 0 && n_fds == 0) {
        rq->op = INGEST_OP_REPORT_FALLBACK;
        rc = optional_string(m.label, "label", &rq->label, err);
        if (rc == 0)
            rc = optional_string(m.reason, "reason", &rq->reason, err);
        if (rc == 0 && strlen(rq->reason) > INGEST_MAX_REASON)
            rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "reason longer than %d bytes",
                             INGEST_MAX_REASON);
    } else {
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "unknown op %s%s", op[0] ? op : "(none)",
                         n_fds ? " (or unexpected descriptors)" : "");
    }
    if (rc < 0) {
        ingest_request_free(rq);
        return rc;
    }
    *out = rq;
    return 0;
}

void ingest_request_free(ingest_request *rq)
{
    if (rq == NULL)
        return;
    free(rq->label);
    free(rq->reason);
    free(rq->transform);
    free(rq->runtime);
    free(rq->ref);
    for (size_t i = 0; rq->sources != NULL && i < rq->n_sources; i++)
        free(rq->sources[i]);
    free(rq->sources);
    for (size_t i = 0; rq->tensors != NULL && i < rq->n_tensors; i++)
        free(rq->tensors[i].desc.name);
    free(rq->tensors);
    free(rq->digests);
    free(rq);
}

/* ---- replies ---- */

static const char *const status_names[] = {
    [INGEST_RESIDENT] = "resident",
    [INGEST_INGESTED] = "ingested",
    [INGEST_REJECTED] = "rejected",
};

static char *dump_and_free(json_t *j)
{
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return text;
}

/* Written as text, not built as a tree: a reply to 200,000 tensors is a
 * few MB of text and would be ten times that as jansson values. */
char *ingest_reply_encode(const char *holder, uint64_t ingested_bytes,
                          const struct ingest_tensor_result *results, size_t n)
{
    textbuf t = {0};
    textbuf_reserve(&t, 64 + n * 32);
    textbuf_puts(&t, "{\"ok\":true,\"holder\":");
    textbuf_json_string(&t, holder);
    textbuf_printf(&t, ",\"ingested_bytes\":%llu,\"tensors\":[",
                   (unsigned long long)ingested_bytes);
    for (size_t i = 0; i < n; i++) {
        const struct ingest_tensor_result *r = &results[i];
        textbuf_printf(&t, "%s{\"status\":\"%s\"", i ? "," : "", status_names[r->status]);
        if (r->status == INGEST_REJECTED) {
            textbuf_printf(&t, ",\"error\":\"%s\",\"reason\":", tetris_code_name(r->code));
            textbuf_json_string(&t, r->reason);
        } else if (r->has_digest) {
            char hex[TENSOR_DIGEST_HEX_LEN + 1];
            tensor_digest_to_hex(&r->digest, hex);
            textbuf_printf(&t, ",\"digest\":\"sha256:%s\",\"crc32\":%u", hex, r->crc32);
        }
        textbuf_puts(&t, "}");
    }
    textbuf_puts(&t, "]}");
    return textbuf_take(&t, NULL);
}

char *ingest_ack_encode(void)
{
    return dump_and_free(json_pack("{s:b}", "ok", 1));
}

char *ingest_error_encode(int code, const char *message)
{
    return dump_and_free(json_pack("{s:b, s:s, s:s}", "ok", 0, "error", tetris_code_name(code),
                                   "message", message));
}

static int code_from_name(const char *name)
{
    for (int c = TETRIS_E_INVAL; c <= TETRIS_E_DENIED; c++)
        if (strcmp(tetris_code_name(c), name) == 0)
            return c;
    return TETRIS_E_PROTOCOL;
}

/* Parses a reply: 0 with *reply set for {"ok":true,...}; the daemon's
 * error for {"ok":false,...}. */
static int reply_open(const char *json, size_t len, json_t **reply, tetris_error *err)
{
    json_error_t jerr;
    *reply = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (*reply == NULL)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "daemon reply is not JSON: %s", jerr.text);
    if (!json_is_object(*reply))
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "daemon reply is not a JSON object");
    if (json_is_true(json_object_get(*reply, "ok")))
        return 0;
    const char *code = json_string_value(json_object_get(*reply, "error"));
    const char *msg = json_string_value(json_object_get(*reply, "message"));
    return tetris_fail(err, code ? code_from_name(code) : TETRIS_E_PROTOCOL, 0,
                       "node daemon refused: %s", msg ? msg : "(no message)");
}

/* The identity the daemon computed for an entry sent without one: both
 * "digest" and "crc32", or neither. */
static int decode_identity(const json_t *t, size_t i, struct ingest_tensor_result *r,
                           tetris_error *err)
{
    const json_t *digest = json_object_get(t, "digest");
    const json_t *crc = json_object_get(t, "crc32");
    if (digest == NULL && crc == NULL)
        return 0;
    const char *hex = json_string_value(digest);
    tetris_error derr;
    if (hex == NULL || strncmp(hex, "sha256:", 7) != 0 ||
        tensor_digest_from_hex(hex + 7, &r->digest, &derr) < 0)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                           "daemon reply: tensor %zu: \"digest\" must be \"sha256:\" and 64 hex "
                           "digits",
                           i);
    if (!json_is_integer(crc) || json_integer_value(crc) < 0 ||
        json_integer_value(crc) > UINT32_MAX)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                           "daemon reply: tensor %zu: \"crc32\" must be a 32-bit unsigned integer",
                           i);
    r->crc32 = (uint32_t)json_integer_value(crc);
    r->has_digest = true;
    return 0;
}

static int decode_result(const json_t *t, size_t i, struct ingest_tensor_result *r,
                         tetris_error *err)
{
    const char *status = json_string_value(json_object_get(t, "status"));
    memset(r, 0, sizeof(*r));
    if (status != NULL && (strcmp(status, "resident") == 0 || strcmp(status, "ingested") == 0)) {
        r->status = strcmp(status, "resident") == 0 ? INGEST_RESIDENT : INGEST_INGESTED;
        return decode_identity(t, i, r, err);
    } else if (status != NULL && strcmp(status, "rejected") == 0) {
        const char *code = json_string_value(json_object_get(t, "error"));
        const char *reason = json_string_value(json_object_get(t, "reason"));
        if (code == NULL || reason == NULL)
            return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                               "daemon reply: tensor %zu rejected without error and reason", i);
        r->status = INGEST_REJECTED;
        r->code = code_from_name(code);
        snprintf(r->reason, sizeof(r->reason), "%s", reason);
    } else {
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "daemon reply: bad status for tensor %zu",
                           i);
    }
    return 0;
}

int ingest_reply_decode(const char *json, size_t len, size_t n,
                        struct ingest_tensor_result *results, struct ingest_summary *summary,
                        tetris_error *err)
{
    json_t *reply = NULL;
    int rc = reply_open(json, len, &reply, err);
    const json_t *tensors = json_object_get(reply, "tensors");
    const json_t *bytes = json_object_get(reply, "ingested_bytes");
    if (rc == 0 && (!json_is_array(tensors) || json_array_size(tensors) != n))
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                         "daemon reply has %zu tensor results, want %zu",
                         json_array_size(tensors), n);
    if (rc == 0 && !json_is_string(json_object_get(reply, "holder")))
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "daemon reply: \"holder\" must be a string");
    if (rc == 0 && (!json_is_integer(bytes) || json_integer_value(bytes) < 0))
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                         "daemon reply: \"ingested_bytes\" must be a non-negative integer");
    struct ingest_summary sum = {0};
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = decode_result(json_array_get(tensors, i), i, &results[i], err);
        if (rc == 0) {
            sum.resident += results[i].status == INGEST_RESIDENT;
            sum.ingested += results[i].status == INGEST_INGESTED;
            sum.rejected += results[i].status == INGEST_REJECTED;
            sum.rejected_full +=
                results[i].status == INGEST_REJECTED && results[i].code == TETRIS_E_FULL;
        }
    }
    if (rc == 0) {
        sum.ingested_bytes = (uint64_t)json_integer_value(bytes);
        if (summary != NULL)
            *summary = sum;
    }
    json_decref(reply);
    return rc;
}

int ingest_ack_decode(const char *json, size_t len, tetris_error *err)
{
    json_t *reply = NULL;
    int rc = reply_open(json, len, &reply, err);
    json_decref(reply);
    return rc;
}

char *ingest_pull_reply_encode(const struct ingest_pull_result *r)
{
    char digest[7 + TENSOR_DIGEST_HEX_LEN + 1];
    oci_digest_format(&r->digest, digest);
    return dump_and_free(json_pack("{s:b, s:s, s:s, s:I, s:I, s:I, s:I}", "ok", 1, "holder",
                                   r->holder, "digest", digest, "tensors", (json_int_t)r->tensors,
                                   "pulled_tensors", (json_int_t)r->pulled_tensors, "pulled_bytes",
                                   (json_int_t)r->pulled_bytes, "skipped_bytes",
                                   (json_int_t)r->skipped_bytes));
}

/* A non-negative integer member of a reply into *out. */
static int reply_count(const json_t *reply, const char *key, uint64_t *out, tetris_error *err)
{
    const json_t *v = json_object_get(reply, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                           "daemon reply: \"%s\" must be a non-negative integer", key);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

int ingest_pull_reply_decode(const char *json, size_t len, size_t n_fds,
                             struct ingest_pull_result *out, tetris_error *err)
{
    json_t *reply = NULL;
    memset(out, 0, sizeof(*out));
    int rc = reply_open(json, len, &reply, err);
    const char *holder = json_string_value(json_object_get(reply, "holder"));
    const char *digest = json_string_value(json_object_get(reply, "digest"));
    if (rc == 0 && (holder == NULL || strlen(holder) >= sizeof(out->holder)))
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "daemon reply: \"holder\" must be a string");
    if (rc == 0 && (digest == NULL || oci_digest_parse(digest, &out->digest, err) < 0))
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "daemon reply: bad \"digest\"");
    if (rc == 0)
        rc = reply_count(reply, "tensors", &out->tensors, err);
    if (rc == 0)
        rc = reply_count(reply, "pulled_tensors", &out->pulled_tensors, err);
    if (rc == 0)
        rc = reply_count(reply, "pulled_bytes", &out->pulled_bytes, err);
    if (rc == 0)
        rc = reply_count(reply, "skipped_bytes", &out->skipped_bytes, err);
    if (rc == 0 && n_fds != 2)
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                         "daemon reply to a pull came with %zu descriptors, not 2", n_fds);
    if (rc == 0)
        snprintf(out->holder, sizeof(out->holder), "%s", holder);
    json_decref(reply);
    return rc;
}

char *ingest_gpu_reply_encode(const char *device, const struct ingest_gpu_result *results, size_t n)
{
    json_t *tensors = json_array();
    for (size_t i = 0; tensors != NULL && i < n; i++) {
        const struct ingest_gpu_result *r = &results[i];
        json_t *t = r->attached ? json_pack("{s:s, s:I, s:I}", "status", "attached", "size",
                                            (json_int_t)r->size, "nbytes", (json_int_t)r->nbytes)
                                : json_pack("{s:s, s:s, s:s}", "status", "rejected", "error",
                                            tetris_code_name(r->code), "reason", r->reason);
        json_array_append_new(tensors, t);
    }
    return dump_and_free(
        json_pack("{s:b, s:s, s:o*}", "ok", 1, "device", device, "tensors", tensors));
}

int ingest_gpu_reply_decode(const char *json, size_t len, size_t n, size_t n_fds,
                            struct ingest_gpu_result *results, tetris_error *err)
{
    json_t *reply = NULL;
    int rc = reply_open(json, len, &reply, err);
    const json_t *tensors = json_object_get(reply, "tensors");
    if (rc == 0 && (!json_is_array(tensors) || json_array_size(tensors) != n))
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "daemon reply has %zu GPU results, want %zu",
                         json_array_size(tensors), n);
    size_t attached = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const json_t *t = json_array_get(tensors, i);
        const char *status = json_string_value(json_object_get(t, "status"));
        struct ingest_gpu_result *r = &results[i];
        memset(r, 0, sizeof(*r));
        if (status != NULL && strcmp(status, "attached") == 0) {
            const json_t *size = json_object_get(t, "size");
            const json_t *nbytes = json_object_get(t, "nbytes");
            if (!json_is_integer(size) || !json_is_integer(nbytes) ||
                json_integer_value(size) <= 0 || json_integer_value(nbytes) < 0 ||
                json_integer_value(nbytes) > json_integer_value(size)) {
                rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                                 "daemon reply: GPU tensor %zu: bad \"size\" or \"nbytes\"", i);
                break;
            }
            r->attached = true;
            r->size = (uint64_t)json_integer_value(size);
            r->nbytes = (uint64_t)json_integer_value(nbytes);
            attached++;
        } else if (status != NULL && strcmp(status, "rejected") == 0) {
            const char *code = json_string_value(json_object_get(t, "error"));
            const char *reason = json_string_value(json_object_get(t, "reason"));
            if (code == NULL || reason == NULL) {
                rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                                 "daemon reply: GPU tensor %zu rejected without error and reason",
                                 i);
                break;
            }
            r->code = code_from_name(code);
            snprintf(r->reason, sizeof(r->reason), "%s", reason);
        } else {
            rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                             "daemon reply: bad status for GPU tensor %zu", i);
        }
    }
    if (rc == 0 && attached != n_fds)
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                         "daemon reply: %zu GPU tensors attached but %zu descriptors", attached,
                         n_fds);
    json_decref(reply);
    return rc;
}
