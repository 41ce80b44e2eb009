/* externalize.c - test helper: rewrites an ONNX model so its larger raw
 * tensors live in an external data file next to it (what exporters do for
 * models over 2 GB), to test the agent and the ORT adapter on external
 * data with real models.
 *
 *   tetris-test-externalize IN.onnx OUT.onnx   (writes OUT.onnx.data)
 * Exit status: 0 ok (or --help, --version), 1 failure, 2 usage. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "model/onnx_rewrite.h"

struct ctx {
    const uint8_t *img;
    FILE *data;
    const char *data_name;
    uint64_t data_len;
    int failed;
};

static size_t element_size(int data_type)
{
    switch (data_type) {
    case 1: case 6: case 12: return 4;
    case 7: case 11: case 13: return 8;
    case 4: case 5: case 10: case 16: return 2;
    case 2: case 3: case 9: return 1;
    default: return 0;
    }
}

static bool externalize(void *p, const struct onnx_tensor_ref *t, struct onnx_external *ext)
{
    struct ctx *c = p;
    uint64_t nbytes = element_size(t->data_type);
    for (int i = 0; i < t->ndim; i++)
        nbytes *= (uint64_t)t->dims[i];
    /* raw little-endian payloads only (raw_data, packed float/double) */
    if (t->location != NULL || nbytes < 128 || nbytes != t->length)
        return false;
    if (fwrite(c->img + t->offset, 1, nbytes, c->data) != nbytes) {
        c->failed = 1;
        return false;
    }
    snprintf(ext->location, sizeof(ext->location), "%s", c->data_name);
    ext->offset = c->data_len;
    c->data_len += nbytes;
    return true;
}

static const char usage_text[] =
    "usage: tetris-test-externalize IN.onnx OUT.onnx\n"
    "\n"
    "Rewrites IN.onnx so its larger raw tensors live in OUT.onnx.data, an\n"
    "external data file next to OUT.onnx, as exporters do for large models.\n"
    "\n"
    "  -h, --help     this text         --version   the version\n"
    "\n"
    "Exit status: 0 ok; 1 failure; 2 usage.\n";

int main(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("tetris-test-externalize %s\n", TETRIS_VERSION);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "tetris-test-externalize: expected IN.onnx OUT.onnx\n"
                        "Try 'tetris-test-externalize --help'.\n");
        return 2;
    }
    cleanup_close int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "externalize: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    cleanup_free uint8_t *img = malloc((size_t)st.st_size);
    if (img == NULL || read(fd, img, (size_t)st.st_size) != st.st_size) {
        fprintf(stderr, "externalize: cannot read %s\n", argv[1]);
        return 1;
    }
    char data_path[4096];
    snprintf(data_path, sizeof(data_path), "%s.data", argv[2]);
    const char *base = strrchr(data_path, '/');
    struct ctx c = {.img = img, .data_name = base != NULL ? base + 1 : data_path};
    cleanup_fclose FILE *data = c.data = fopen(data_path, "wb");
    if (data == NULL) {
        fprintf(stderr, "externalize: %s: %s\n", data_path, strerror(errno));
        return 1;
    }
    uint8_t *out = NULL;
    size_t out_len = 0;
    tetris_error err = {0};
    if (onnx_rewrite(img, (size_t)st.st_size, externalize, &c, &out, &out_len, &err) < 0 ||
        c.failed) {
        fprintf(stderr, "externalize: %s\n", c.failed ? "write failed" : err.msg);
        free(out);
        return 1;
    }
    cleanup_fclose FILE *f = fopen(argv[2], "wb");
    int ok = f != NULL && fwrite(out, 1, out_len, f) == out_len;
    free(out);
    if (!ok) {
        fprintf(stderr, "externalize: cannot write %s\n", argv[2]);
        return 1;
    }
    printf("%llu bytes external\n", (unsigned long long)c.data_len);
    return 0;
}
