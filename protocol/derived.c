/* derived.c - derived forms' identities and index entries (the contract
 * is in derived.h). */
#include "protocol/derived.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "common/cleanup.h"

static void sha256_parts(const void *const *parts, const size_t *lens, size_t n, tensor_digest *out)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned len = 0;
    /* Allocation failures in OpenSSL abort: an identity must never be a
     * digest of nothing. */
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
        abort();
    for (size_t i = 0; i < n; i++)
        if (EVP_DigestUpdate(ctx, parts[i], lens[i]) != 1)
            abort();
    if (EVP_DigestFinal_ex(ctx, out->bytes, &len) != 1 || len != TENSOR_DIGEST_BYTES)
        abort();
    EVP_MD_CTX_free(ctx);
}

int derived_mode_parse(const char *label, const char *s, enum derived_mode *out, tetris_error *err)
{
    static const char *const names[] = {[DERIVED_OFF] = "off",
                                        [DERIVED_USE] = "use",
                                        [DERIVED_AUTO] = "auto",
                                        [DERIVED_MAKE] = "make"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum derived_mode)i;
            return 0;
        }
    }
    return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: '%s': expected off, use, auto or make", label,
                       s);
}

void derived_source_digest(const void *image, size_t len, tensor_digest *out)
{
    static const char tag[] = "tetris-derive-source-v1";
    const void *parts[] = {tag, image};
    size_t lens[] = {sizeof(tag), len}; /* the tag's NUL included */
    sha256_parts(parts, lens, 2, out);
}

void derived_identity(const char *transform, const char *runtime, const char *cpu,
                      const tensor_digest *source, tensor_digest *out)
{
    static const char tag[] = "tetris-derived-v1";
    const void *parts[] = {tag, transform, runtime, cpu, source->bytes};
    size_t lens[] = {sizeof(tag), strlen(transform) + 1, strlen(runtime) + 1, strlen(cpu) + 1,
                     TENSOR_DIGEST_BYTES};
    sha256_parts(parts, lens, 5, out);
}

void derived_runtime_name(const char *ort_version, char *out, size_t cap)
{
    snprintf(out, cap, "onnxruntime %s", ort_version);
}

/* The flags MLAS's dispatch (platform.cpp) looks at, in the order they are
 * written. Any other flag changes no kernel choice, so leaving it out lets
 * nodes that differ only in it share a form's identity. */
static const char *const mlas_flags[] = {
    "sse4_1",      "avx",      "avx2",     "fma",         "f16c",     "avx512f",
    "avx512bw",    "avx512dq", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16",
    "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",    "asimd",    "asimddp",
    "i8mm",        "sve",      "bf16",     "fphp",
};

static bool has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n) {
        bool start = p == list || p[-1] == ' ' || p[-1] == '\t';
        bool end = p[n] == '\0' || p[n] == ' ' || p[n] == '\n' || p[n] == '\t';
        if (start && end)
            return true;
    }
    return false;
}

int derived_cpu_features(char *out, size_t cap, tetris_error *err)
{
    struct utsname u;
    if (uname(&u) != 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "uname");
    cleanup_fclose FILE *f = fopen("/proc/cpuinfo", "re");
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "/proc/cpuinfo");
    cleanup_free char *line = NULL;
    size_t line_cap = 0;
    bool found = false;
    while (!found && getline(&line, &line_cap, f) > 0)
        found = strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0;
    size_t used = (size_t)snprintf(out, cap, "%s", u.machine);
    for (size_t i = 0; found && i < sizeof(mlas_flags) / sizeof(mlas_flags[0]); i++) {
        const char *colon = strchr(line, ':');
        if (colon != NULL && has_word(colon + 1, mlas_flags[i]) && used < cap)
            used += (size_t)snprintf(out + used, cap - used, " %s", mlas_flags[i]);
    }
    if (used >= cap)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "CPU features longer than %zu bytes", cap);
    return 0;
}

void derived_entry_path(const char *public_dir, const tensor_digest *identity, char *out,
                        size_t cap)
{
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(identity, hex);
    snprintf(out, cap, "%s/%s/%s", public_dir, DERIVED_DIR, hex);
}

char *derived_part_label(enum derived_part_index i)
{
    return i == DERIVED_PART_GRAPH  ? "derived graph"
           : i == DERIVED_PART_DATA ? "derived data"
                                    : "derived ORT format";
}

size_t derived_entry_parts(const derived_entry *e)
{
    return e->has_ort ? DERIVED_PARTS : DERIVED_PART_ORT;
}

const struct derived_part *derived_entry_part(const derived_entry *e, enum derived_part_index i)
{
    assert(i < derived_entry_parts(e));
    return i == DERIVED_PART_GRAPH ? &e->graph : i == DERIVED_PART_DATA ? &e->data : &e->ort;
}

static json_t *part_encode(const struct derived_part *p)
{
    char hex[TENSOR_DIGEST_HEX_LEN + 1], digest[TENSOR_DIGEST_HEX_LEN + 8];
    tensor_digest_to_hex(&p->digest, hex);
    snprintf(digest, sizeof(digest), "sha256:%s", hex);
    return json_pack("{s:s, s:I, s:I}", "digest", digest, "nbytes", (json_int_t)p->nbytes, "crc32",
                     (json_int_t)p->crc32);
}

char *derived_entry_encode(const derived_entry *e)
{
    char source[TENSOR_DIGEST_HEX_LEN + 1], identity[TENSOR_DIGEST_HEX_LEN + 1];
    char s[TENSOR_DIGEST_HEX_LEN + 8], id[TENSOR_DIGEST_HEX_LEN + 8];
    tensor_digest_to_hex(&e->source, source);
    tensor_digest_to_hex(&e->identity, identity);
    snprintf(s, sizeof(s), "sha256:%s", source);
    snprintf(id, sizeof(id), "sha256:%s", identity);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:s}", "format", DERIVED_FORMAT,
                          "transform", e->transform, "runtime", e->runtime, "cpu", e->cpu, "source",
                          s, "identity", id, "graph", part_encode(&e->graph), "data",
                          part_encode(&e->data), "data_location", e->data_location);
    if (j != NULL && e->has_ort && json_object_set_new(j, "ort", part_encode(&e->ort)) != 0) {
        json_decref(j);
        return NULL;
    }
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    if (text == NULL)
        return NULL;
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (line == NULL) {
        free(text);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    return line;
}

static int digest_field(json_t *v, const char *what, tensor_digest *out, tetris_error *err)
{
    const char *s = json_string_value(v);
    tetris_error derr;
    if (s == NULL || strncmp(s, "sha256:", 7) != 0 || tensor_digest_from_hex(s + 7, out, &derr) < 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "derived entry: %s must be \"sha256:\" and "
                           "64 hex digits",
                           what);
    return 0;
}

bool derived_name_valid(const char *s)
{
    if (s == NULL || s[0] == '\0' || strlen(s) >= DERIVED_NAME_MAX)
        return false;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '/')
            return false;
    return true;
}

static int name_field(json_t *v, const char *what, char *out, tetris_error *err)
{
    const char *s = json_string_value(v);
    if (!derived_name_valid(s))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "derived entry: %s must be a string of 1 to %d bytes without control "
                           "characters or slashes",
                           what, DERIVED_NAME_MAX - 1);
    strcpy(out, s);
    return 0;
}

static int part_decode(json_t *v, const char *what, struct derived_part *p, tetris_error *err)
{
    json_t *digest = NULL, *nbytes = NULL, *crc = NULL;
    if (!json_is_object(v) || json_object_size(v) != 3 ||
        json_unpack(v, "{s:o, s:o, s:o}", "digest", &digest, "nbytes", &nbytes, "crc32", &crc) !=
            0 ||
        !json_is_integer(nbytes) || !json_is_integer(crc) || json_integer_value(nbytes) <= 0 ||
        json_integer_value(crc) < 0 || json_integer_value(crc) > (json_int_t)UINT32_MAX)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "derived entry: %s must be {\"digest\",\"nbytes\" > 0,\"crc32\"}", what);
    p->nbytes = (uint64_t)json_integer_value(nbytes);
    p->crc32 = (uint32_t)json_integer_value(crc);
    return digest_field(digest, what, &p->digest, err);
}

/* The fields of an entry, each checked (the identity is checked after). */
static int entry_fields(json_t *j, derived_entry *e, tetris_error *err)
{
    static const char *const keys[] = {"format",        "transform", "runtime", "cpu",
                                       "source",        "identity",  "graph",   "data",
                                       "data_location", "ort"};
    if (!json_is_object(j))
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "derived entry is not an object");
    const char *key;
    json_t *v;
    json_object_foreach (j, key, v) {
        bool known = false;
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
            known = known || strcmp(key, keys[i]) == 0;
        if (!known)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "derived entry: unknown key \"%s\"", key);
    }
    const char *format = json_string_value(json_object_get(j, "format"));
    if (format == NULL || strcmp(format, DERIVED_FORMAT) != 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "derived entry: format is not %s",
                           DERIVED_FORMAT);
    int rc = name_field(json_object_get(j, "transform"), "transform", e->transform, err);
    if (rc == 0)
        rc = name_field(json_object_get(j, "runtime"), "runtime", e->runtime, err);
    if (rc == 0)
        rc = name_field(json_object_get(j, "cpu"), "cpu", e->cpu, err);
    if (rc == 0)
        rc = name_field(json_object_get(j, "data_location"), "data_location", e->data_location,
                        err);
    if (rc == 0)
        rc = digest_field(json_object_get(j, "source"), "source", &e->source, err);
    if (rc == 0)
        rc = digest_field(json_object_get(j, "identity"), "identity", &e->identity, err);
    if (rc == 0)
        rc = part_decode(json_object_get(j, "graph"), "graph", &e->graph, err);
    if (rc == 0)
        rc = part_decode(json_object_get(j, "data"), "data", &e->data, err);
    json_t *ort = json_object_get(j, "ort");
    e->has_ort = ort != NULL;
    if (rc == 0 && e->has_ort)
        rc = part_decode(ort, "ort", &e->ort, err);
    return rc;
}

int derived_entry_decode(const char *json, size_t len, derived_entry *e, tetris_error *err)
{
    memset(e, 0, sizeof(*e));
    if (len > DERIVED_ENTRY_MAX_BYTES)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "derived entry longer than %d bytes",
                           DERIVED_ENTRY_MAX_BYTES);
    json_error_t jerr;
    json_t *j = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "derived entry is not JSON: %s", jerr.text);
    int rc = entry_fields(j, e, err);
    json_decref(j);
    if (rc < 0)
        return rc;
    tensor_digest want;
    derived_identity(e->transform, e->runtime, e->cpu, &e->source, &want);
    if (!tensor_digest_equal(&want, &e->identity))
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "derived entry: identity does not match its transform, runtime, "
                           "cpu and source");
    return 0;
}

int derived_entry_read(const char *public_dir, const tensor_digest *identity, derived_entry *e,
                       tetris_error *err)
{
    char path[4096];
    struct stat dir, st;
    derived_entry_path(public_dir, identity, path, sizeof(path));
    if (stat(public_dir, &dir) != 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "%s", public_dir);
    cleanup_close int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return tetris_fail(err, TETRIS_E_NOTFOUND, errno, "no derived form");
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "%s", path);
    if (fstat(fd, &st) != 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "%s", path);
    if (!S_ISREG(st.st_mode) || st.st_uid != dir.st_uid || (st.st_mode & 022) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "%s: not a regular file of the store's owner, or writable by others",
                           path);
    if (st.st_size > DERIVED_ENTRY_MAX_BYTES)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: longer than %d bytes", path,
                           DERIVED_ENTRY_MAX_BYTES);
    char buf[DERIVED_ENTRY_MAX_BYTES];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "%s", path);
    int rc = derived_entry_decode(buf, (size_t)n, e, err);
    if (rc == 0 && !tensor_digest_equal(&e->identity, identity))
        rc = tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: holds the entry of another identity", path);
    return rc < 0 ? tetris_wrap(err, "%s", path) : 0;
}

int derived_entry_lookup(const char *public_dir, const char *transform, const char *runtime,
                         const char *cpu, const tensor_digest *source, derived_entry *e,
                         tetris_error *err)
{
    tensor_digest identity;
    derived_identity(transform, runtime, cpu, source, &identity);
    return derived_entry_read(public_dir, &identity, e, err);
}
