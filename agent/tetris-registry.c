/* tetris-registry - a model to and from an OCI registry, tensor by tensor
 * (docs/PROTOCOLS.md, "Registry artifact"). `push` publishes a model as
 * protocol/oci.h's artifact: every blob the registry lacks is uploaded,
 * every blob it has (HEAD) or can mount from another repository is not,
 * so a variant costs only its own tensors.
 *
 * A program of its own, not a command of tetris-agent: it needs libcurl,
 * and tetris-agent is one file that runs in any image with only glibc
 * (`tetris-agent push` runs this program, installed next to it). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/agent.h"
#include "agent/onnx_share.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "common/options.h"
#include "model/manifest.h"
#include "model/model.h"
#include "model/onnx_rewrite.h"
#include "protocol/oci.h"

enum exit_code {
    EXIT_OK = 0,
    EXIT_FAIL = 1, /* the registry refused or failed */
    EXIT_USAGE = 2,
    EXIT_BAD_INPUT = 3, /* a model or manifest that is unreadable or malformed */
};

static const char exit_text[] =
    "Logs go to stderr as key=value lines (TETRIS_LOG_LEVEL=debug for more).\n"
    "Exit status: 0 ok; 1 the registry refused or could not be reached; 2 usage;\n"
    "3 bad model or manifest.\n";

static struct {
    const char *manifest;
    const char *from;
    uint64_t chunk;
    double timeout_s;
    const char *auth;
    const char *ca;
    bool insecure;
} args = {.timeout_s = 300};

static const struct opt_spec push_options[] = {
    {.name = "manifest",
     .type = OPT_TYPE_STRING,
     .dest = &args.manifest,
     .meta = "M",
     .help = "tensor identities from manifest M (tetris-agent index) instead of hashing MODEL"},
    {.name = "from",
     .type = OPT_TYPE_STRING,
     .dest = &args.from,
     .meta = "REPO",
     .help = "a repository of the same registry to mount blobs from (a base model's) before "
             "uploading them"},
    {.name = "chunk-size",
     .type = OPT_TYPE_BYTES,
     .dest = &args.chunk,
     .umax = 1ull << 40,
     .meta = "N",
     .help = "upload blobs larger than N in chunks of N bytes (default 0: each blob in one PUT)"},
    {.name = "timeout",
     .type = OPT_TYPE_SECONDS,
     .dest = &args.timeout_s,
     .dmin = 0.001,
     .dmax = 86400,
     .meta = "S",
     .help = "the time limit of each request (default 300 s)"},
    {.name = "registry-auth",
     .type = OPT_TYPE_STRING,
     .dest = &args.auth,
     .env = "TETRIS_REGISTRY_AUTH",
     .meta = "FILE",
     .help = "credentials for the registry, a dockerconfigjson document ({\"auths\": "
             "{\"HOST:PORT\": {\"auth\": base64 of user:password}}}), used as its "
             "WWW-Authenticate challenge asks (Basic, or a Bearer token from its realm) "
             "(default none: anonymous)"},
    {.name = "registry-ca",
     .type = OPT_TYPE_STRING,
     .dest = &args.ca,
     .env = "TETRIS_REGISTRY_CA",
     .meta = "FILE",
     .help = "PEM CA certificates that verify the registry's TLS certificate (default: the "
             "system's)"},
    {.name = "insecure",
     .type = OPT_TYPE_FLAG,
     .dest = &args.insecure,
     .env = "TETRIS_REGISTRY_INSECURE",
     .help = "the registry may be plain HTTP: TLS is tried first, plain HTTP if it does not "
             "speak TLS (always so for a loopback registry)"},
    {0},
};

static const struct opt_program registry_program = {
    .name = "tetris-registry",
    .synopsis = "COMMAND [OPTIONS]",
    .about = "commands (COMMAND --help for each one's options):\n"
             "  push [OPTION]... MODEL REF\n"
             "        publish MODEL (ONNX or safetensors) as an OCI artifact at REF\n"
             "        (oci://HOST[:PORT]/REPO[:TAG|@sha256:HEX]), uploading only the blobs\n"
             "        the registry lacks\n",
    .epilogue = exit_text,
    .options_first = true,
};

static const struct opt_program push_command = {
    .name = "tetris-registry push",
    .synopsis = "[OPTION]... MODEL REF",
    .about =
        "Publishes MODEL as an OCI artifact at REF (oci://HOST[:PORT]/REPO[:TAG|@sha256:HEX],\n"
        "HTTPS, port 443 by default): one layer per distinct tensor (its digest the tensor's\n"
        "identity),\n"
        "the non-weight part (ONNX: the graph with external references; safetensors: the\n"
        "header) and the manifest as config. A blob the registry has (HEAD) or mounts\n"
        "from --from is not sent. Prints one JSON object: ref, digest, blobs, present,\n"
        "mounted, uploaded, uploaded_bytes, requests.\n",
    .options = push_options,
    .epilogue = exit_text,
};

/* ---- the blobs that are not tensors ---- */

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

/* The config: m's manifest, with its paths cut to their file names (a
 * node has none of the pusher's files, and they are nobody's business). */
static char *config_json(const model *m, tetris_error *err)
{
    model copy = *m;
    cleanup_free tensor_desc *tensors = calloc(m->n_tensors + 1, sizeof *tensors);
    if (tensors == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "the config"), NULL;
    for (size_t i = 0; i < m->n_tensors; i++) {
        tensors[i] = m->tensors[i];
        tensors[i].source = (char *)base_name(m->tensors[i].source);
    }
    copy.tensors = tensors;
    copy.path = (char *)base_name(m->path);
    return manifest_to_json(&copy, err);
}

struct graph_share {
    struct onnx_share_match match;
};

/* onnx_share_fn: every tensor of the manifest but the tiny ones becomes
 * external data at its store name, as in a model view's graph. */
static bool share_proto(void *ctx, const struct onnx_tensor_ref *ref, struct onnx_external *ext)
{
    struct graph_share *c = ctx;
    const agent_tensor *t = onnx_share_match_find(&c->match, ref);
    if (t == NULL || !onnx_share_same_size(ref, t) ||
        (t->desc->meta.nbytes < AGENT_MIN_MAPPED_BYTES && ref->location == NULL))
        return false;
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(&t->desc->meta.digest, hex);
    snprintf(ext->location, sizeof ext->location, "tensors/%.2s/%s", hex, hex);
    ext->offset = 0;
    return true;
}

/* The non-weight layer: ONNX, the graph rewritten around m's tensors;
 * safetensors, the length and the JSON header. */
static int graph_blob(const model *m, uint8_t **out, size_t *len, tetris_error *err)
{
    cleanup_free uint8_t *image = NULL;
    size_t image_len = 0;
    int rc = onnx_share_read_image(m->path, &image, &image_len, err);
    if (rc < 0)
        return rc;
    if (strcmp(m->format, "safetensors") == 0) {
        uint64_t header = 0;
        for (int b = 0; b < 8 && (size_t)b < image_len; b++)
            header |= (uint64_t)image[b] << (8 * b);
        if (image_len < 8 || header > image_len - 8)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: bad safetensors header", m->path);
        *len = 8 + (size_t)header;
        *out = steal_pointer(&image);
        return 0;
    }
    cleanup_free agent_tensor *tensors = calloc(m->n_tensors + 1, sizeof *tensors);
    if (tensors == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "the graph");
    for (size_t i = 0; i < m->n_tensors; i++)
        tensors[i].desc = &m->tensors[i];
    agent_model am = {.model = (model *)m, .tensors = tensors};
    struct graph_share c;
    if ((rc = onnx_share_match_init(&c.match, &am, m->path, err)) < 0)
        return rc;
    rc = onnx_rewrite(image, image_len, share_proto, &c, out, len, err);
    onnx_share_match_release(&c.match);
    return rc < 0 ? tetris_wrap(err, "%s", m->path) : 0;
}

/* A tensor's blob: the identity's header, then its bytes. */
static int tensor_blob(const tensor_desc *t, uint8_t **out, size_t *len, tetris_error *err)
{
    uint8_t header[TENSOR_DIGEST_HEADER_MAX];
    size_t header_len = tensor_digest_header(&t->meta, header);
    cleanup_close int fd = open(t->source, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", t->source);
    if (t->meta.nbytes > SIZE_MAX - header_len)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "tensor \"%s\" too large", t->name);
    cleanup_free uint8_t *blob = malloc(header_len + t->meta.nbytes + 1);
    if (blob == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "tensor \"%s\"", t->name);
    memcpy(blob, header, header_len);
    int rc = model_read_tensor(t, fd, blob + header_len, err);
    if (rc < 0)
        return rc;
    *len = header_len + t->meta.nbytes;
    *out = steal_pointer(&blob);
    return 0;
}

/* ---- push ---- */

struct push {
    oci_registry reg;
    const char *from;
    size_t chunk;
    size_t present, mounted, uploaded;
    uint64_t uploaded_bytes;
};

/* Whether the registry needs blob d at all (*needed false: it has it, or
 * mounted it). */
static int blob_needed(struct push *p, const tensor_digest *d, bool *needed, tetris_error *err)
{
    bool present = false, mounted = false;
    int rc = oci_blob_exists(&p->reg, d, &present, NULL, err);
    if (rc == 0 && !present && p->from != NULL)
        rc = oci_blob_mount(&p->reg, d, p->from, &mounted, err);
    p->present += present;
    p->mounted += mounted;
    *needed = rc == 0 && !present && !mounted;
    return rc;
}

static int send_blob(struct push *p, const tensor_digest *d, const uint8_t *data, size_t len,
                     tetris_error *err)
{
    int rc = oci_blob_upload(&p->reg, d, data, len, p->chunk, err);
    if (rc == 0) {
        p->uploaded++;
        p->uploaded_bytes += len;
    }
    return rc;
}

/* A blob held in memory already (config, graph). */
static int push_bytes(struct push *p, const tensor_digest *d, const uint8_t *data, size_t len,
                      tetris_error *err)
{
    bool needed;
    int rc = blob_needed(p, d, &needed, err);
    return rc < 0 || !needed ? rc : send_blob(p, d, data, len, err);
}

/* The first tensor of m whose identity is d. */
static const tensor_desc *tensor_of(const model *m, const tensor_digest *d)
{
    for (size_t i = 0; i < m->n_tensors; i++)
        if (tensor_digest_equal(&m->tensors[i].meta.digest, d))
            return &m->tensors[i];
    return NULL;
}

static int load_model(const char *path, model **out, tetris_error *err)
{
    int rc;
    if (args.manifest != NULL)
        return manifest_read_file(args.manifest, out, err);
    if ((rc = model_parse_file(path, out, err)) == 0 &&
        (rc = model_sources_realpath(*out, err)) == 0)
        rc = model_compute_digests(*out, err);
    return rc;
}

/* A file named by an option that cannot be used: a usage error (exit 2),
 * not a bad model. */
static int usage_file_error(const char *option, tetris_error *err)
{
    tetris_error cause = *err;
    return tetris_fail(err, TETRIS_E_INVAL, cause.errnum, "%s: %s", option, cause.msg);
}

static int push(const char *model_path, const char *ref_text, tetris_error *err)
{
    oci_ref ref;
    int rc = oci_ref_parse(ref_text, &ref, err);
    if (rc < 0)
        return rc;
    if (args.ca != NULL && (rc = oci_ca_file_check(args.ca, err)) < 0)
        return usage_file_error("--registry-ca", err);
    model *m = NULL;
    if ((rc = load_model(model_path, &m, err)) < 0)
        return rc;
    struct push p = {.from = args.from, .chunk = (size_t)args.chunk};
    oci_credentials *creds = NULL;
    if (args.auth != NULL && (rc = oci_credentials_read(args.auth, &creds, err)) < 0) {
        model_free(m);
        return usage_file_error("--registry-auth", err);
    }
    oci_options o = {.timeout_ms = (long)(args.timeout_s * 1000),
                     .ca_file = args.ca,
                     .credentials = creds,
                     .insecure = args.insecure};
    if ((rc = oci_registry_open(&p.reg, &ref, &o, err)) < 0) {
        oci_credentials_free(creds);
        model_free(m);
        return rc;
    }
    cleanup_free char *config = NULL, *manifest = NULL;
    cleanup_free uint8_t *graph = NULL;
    size_t graph_len = 0, manifest_len = 0;
    tensor_digest config_digest, graph_digest, manifest_digest;
    oci_artifact *a = NULL;
    if ((config = config_json(m, err)) == NULL)
        rc = -err->code;
    if (rc == 0)
        rc = oci_sha256(config, strlen(config), &config_digest, err);
    if (rc == 0)
        rc = graph_blob(m, &graph, &graph_len, err);
    if (rc == 0)
        rc = oci_sha256(graph, graph_len, &graph_digest, err);
    if (rc == 0)
        rc = oci_artifact_from_model(m, &config_digest, strlen(config), &graph_digest, graph_len,
                                     &a, err);
    if (rc == 0 && (manifest = oci_artifact_to_json(a, &manifest_len, err)) == NULL)
        rc = -err->code;
    /* A REF pinned by digest must name this very artifact: checked before
     * anything is sent. */
    if (rc == 0 && ref.has_digest &&
        (rc = oci_sha256(manifest, manifest_len, &manifest_digest, err)) == 0 &&
        !tensor_digest_equal(&ref.digest, &manifest_digest))
        rc = tetris_fail(err, TETRIS_E_INVAL, 0, "%s: the artifact's digest is not the one named",
                         ref_text);
    if (rc == 0)
        rc = push_bytes(&p, &config_digest, (const uint8_t *)config, strlen(config), err);
    if (rc == 0)
        rc = push_bytes(&p, &graph_digest, graph, graph_len, err);
    for (size_t i = 0; rc == 0 && i < a->n_tensors; i++) {
        bool needed;
        if ((rc = blob_needed(&p, &a->tensors[i].digest, &needed, err)) < 0 || !needed)
            continue;
        cleanup_free uint8_t *blob = NULL;
        size_t len = 0;
        const tensor_desc *t = tensor_of(m, &a->tensors[i].digest);
        assert(t != NULL); /* the artifact's tensors are m's */
        if ((rc = tensor_blob(t, &blob, &len, err)) == 0)
            rc = send_blob(&p, &a->tensors[i].digest, blob, len, err);
    }
    char reference[OCI_TAG_MAX + 7 + TENSOR_DIGEST_HEX_LEN + 1];
    if (ref.has_digest)
        oci_digest_format(&ref.digest, reference);
    else
        snprintf(reference, sizeof reference, "%s", ref.tag);
    if (rc == 0)
        rc = oci_manifest_put(&p.reg, reference, manifest, manifest_len, &manifest_digest, err);
    if (rc == 0) {
        char digest[7 + TENSOR_DIGEST_HEX_LEN + 1];
        oci_digest_format(&manifest_digest, digest);
        json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "ref", ref_text, "digest",
                              digest, "blobs", (json_int_t)(a->n_tensors + 2), "present",
                              (json_int_t)p.present, "mounted", (json_int_t)p.mounted, "uploaded",
                              (json_int_t)p.uploaded, "uploaded_bytes",
                              (json_int_t)p.uploaded_bytes, "requests", (json_int_t)p.reg.requests);
        char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        if (text == NULL || printf("%s\n", text) < 0 || fflush(stdout) != 0)
            rc = tetris_fail(err, TETRIS_E_IO, errno, "writing the result");
        free(text);
        log_info("event=push ref=%s digest=%s tensors=%zu uploaded=%zu uploaded_bytes=%" PRIu64
                 " present=%zu mounted=%zu",
                 LOG_Q(ref_text), digest, a->n_tensors, p.uploaded, p.uploaded_bytes, p.present,
                 p.mounted);
    }
    oci_artifact_free(a);
    model_free(m);
    oci_registry_close(&p.reg);
    oci_credentials_free(creds);
    return rc;
}

static int cmd_push(int argc, char **argv)
{
    tetris_error err = {0};
    int first = opt_parse(&push_command, argc, argv);
    if (first < 0)
        return EXIT_USAGE;
    if (argc - first != 2)
        return opt_usage_error(&push_command, "expected MODEL and REF"), EXIT_USAGE;
    int rc = push(argv[first], argv[first + 1], &err);
    if (rc == 0)
        return EXIT_OK;
    log_error("event=error op=push code=%s msg=%s", tetris_code_name(rc), LOG_Q(err.msg));
    switch (-rc) {
    case TETRIS_E_INVAL: return EXIT_USAGE;
    case TETRIS_E_FORMAT:
    case TETRIS_E_IO:
    case TETRIS_E_NOTFOUND: return EXIT_BAD_INPUT;
    default: return EXIT_FAIL;
    }
}

int main(int argc, char **argv)
{
    log_init(argv[0]);
    int first = opt_parse(&registry_program, argc, argv);
    if (first < 0)
        return EXIT_USAGE;
    if (first == argc)
        return opt_usage_error(&registry_program, "expected a COMMAND"), EXIT_USAGE;
    if (strcmp(argv[first], "push") == 0)
        return cmd_push(argc - first, argv + first);
    return opt_usage_error(&registry_program, "unknown command '%s'", argv[first]), EXIT_USAGE;
}
