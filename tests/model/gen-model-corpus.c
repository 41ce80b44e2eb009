/* gen-model-corpus.c - writes the bad-input corpus (every malformed model
 * file of model_synth.h) and, with --valid, small valid synthetic models
 * (fuzz seeds) into a directory.
 *
 * Usage: tetris-gen-model-corpus [--valid] DIR
 * Prints one line per file: NAME<TAB>PHRASE its error must contain ("-" for
 * valid files). Exit: 0 done, 1 a file could not be written, 2 usage. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "tests/model/model_synth.h"

static int write_one(const char *dir, const char *name, struct sbuf *b, const char *expect)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int ret = sbuf_write_file(b, path);
    sbuf_free(b);
    if (ret < 0) {
        log_error("event=write-failed file=%s errno=%d", path, errno);
        return -1;
    }
    printf("%s\t%s\n", name, expect);
    return 0;
}

/* Valid models covering each feature the parsers handle. */
static int write_valid(const char *dir)
{
    int64_t dims[] = {2, 2}, dims4[] = {4};
    float w[4] = {1, 2, 3, 4};
    int64_t ints[4] = {-1, 0, 1, 1 << 20};
    struct sbuf g = {0}, then_g = {0}, else_g = {0};
    struct sbuf t = syn_tensor("raw", SYN_FLOAT, 2, dims, SYN_F_RAW, w, sizeof w);
    syn_graph_add_initializer(&g, &t);
    t = syn_tensor("floats", SYN_FLOAT, 2, dims, SYN_F_FLOAT, w, sizeof w);
    syn_graph_add_initializer(&g, &t);
    struct sbuf v = syn_varints(ints, 4);
    t = syn_tensor("ints", SYN_INT64, 1, dims4, SYN_F_INT64, v.p, v.len);
    syn_graph_add_initializer(&g, &t);
    t = syn_tensor("halves", SYN_FLOAT16, 1, dims4, SYN_F_INT32, v.p, v.len);
    sbuf_free(&v);
    syn_graph_add_initializer(&g, &t);
    t = syn_tensor(NULL, SYN_FLOAT, 2, dims, SYN_F_RAW, w, sizeof w);
    struct sbuf n = syn_constant_node("then_c", &t);
    syn_graph_add_node(&then_g, &n);
    t = syn_tensor("else_i", SYN_FLOAT, 2, dims, SYN_F_RAW, w, sizeof w);
    syn_graph_add_initializer(&else_g, &t);
    n = syn_if_node("if_out", &then_g, &else_g);
    syn_graph_add_node(&g, &n);
    t = syn_tensor(NULL, SYN_UINT8, 1, dims4, SYN_F_RAW, "abcd", 4);
    n = syn_constant_node("c", &t);
    syn_graph_add_node(&g, &n);
    struct sbuf b = syn_model(&g);
    if (write_one(dir, "valid-features.onnx", &b, "-") < 0)
        return -1;

    uint8_t data[40] = {0};
    b = syn_safetensors("{\"__metadata__\":{\"format\":\"pt\"},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]},"
                        "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[32,40]},"
                        "\"e\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[40,40]}}  ",
                        UINT64_MAX, data, sizeof data);
    return write_one(dir, "valid-features.safetensors", &b, "-");
}

int main(int argc, char **argv)
{
    log_init(argv[0]);
    int valid = argc == 3 && strcmp(argv[1], "--valid") == 0;
    if (argc == 2 && strcmp(argv[1], "--help") == 0) {
        printf("Usage: %s [--valid] DIR\n"
               "Writes malformed model files (and with --valid, valid ones) into DIR and\n"
               "prints NAME<TAB>PHRASE per file (PHRASE: what its error must say).\n"
               "Exit status: 0 done, 1 write failed, 2 usage.\n",
               argv[0]);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("tetris-gen-model-corpus %s\n", TETRIS_VERSION);
        return 0;
    }
    if (argc != 2 + valid || argv[1 + valid][0] == '-') {
        fprintf(stderr, "usage: %s [--valid] DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1 + valid];
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        log_error("event=mkdir-failed dir=%s errno=%d", dir, errno);
        return 1;
    }
    for (size_t i = 0; i < SYN_N_BAD_CASES; i++) {
        struct sbuf b = syn_bad_cases[i].build();
        if (write_one(dir, syn_bad_cases[i].file, &b, syn_bad_cases[i].expect) < 0)
            return 1;
    }
    if (valid && write_valid(dir) < 0)
        return 1;
    return 0;
}
