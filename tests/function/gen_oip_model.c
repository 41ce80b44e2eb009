/* gen_oip_model.c - tetris-test-oip-model: writes ONNX models whose outputs
 * are their inputs (Identity nodes), one input of every element type the
 * Open Inference Protocol names, BYTES (ONNX strings) included. No real
 * model at hand takes strings, booleans or most integer widths; these make
 * the function decode, run and answer every datatype end to end, where any
 * change to a value would show.
 *
 * usage: tetris-test-oip-model OUT_DIR (exit 0 written, 1 write failed, 2 usage)
 *   OUT_DIR/identity_all.onnx    in_T [N, 2] -> out_T, for T in BOOL, UINT8,
 *                                ..., FP64, BF16, BYTES (batchable)
 *   OUT_DIR/identity_fixed.onnx  in_FP32 [2, 3] -> out_FP32 (fixed shape)
 *   OUT_DIR/flatten.onnx         x FP32 [N, 2] -> y, x reshaped to [2N]:
 *                                batchable by its metadata (both first
 *                                dimensions dynamic), yet y's first
 *                                dimension is not the batch */
#include <stdio.h>
#include <string.h>

#include "tests/model/model_synth.h"

static const struct {
    const char *name;
    int onnx_type;
} types[] = {
    {"BOOL", SYN_BOOL},     {"UINT8", SYN_UINT8},  {"UINT16", SYN_UINT16}, {"UINT32", SYN_UINT32},
    {"UINT64", SYN_UINT64}, {"INT8", SYN_INT8},    {"INT16", SYN_INT16},   {"INT32", SYN_INT32},
    {"INT64", SYN_INT64},   {"FP16", SYN_FLOAT16}, {"FP32", SYN_FLOAT},    {"FP64", SYN_DOUBLE},
    {"BF16", SYN_BFLOAT16}, {"BYTES", SYN_STRING},
};

/* ValueInfoProto: name, a tensor type of elem_type, dims (-1 is the
 * symbolic dimension "N", -2 "M"; ndim -1: no shape). */
static struct sbuf value_info(const char *name, int elem_type, const int64_t *dims, int ndim)
{
    struct sbuf vi = {0}, type = {0}, tensor = {0}, shape = {0};
    for (int i = 0; i < ndim; i++) {
        struct sbuf dim = {0};
        if (dims[i] < 0)
            pbw_string(&dim, 2, dims[i] == -1 ? "N" : "M");
        else
            pbw_uint(&dim, 1, (uint64_t)dims[i]);
        pbw_msg(&shape, 1, &dim);
    }
    pbw_uint(&tensor, 1, (uint64_t)elem_type);
    if (ndim >= 0)
        pbw_msg(&tensor, 2, &shape);
    pbw_msg(&type, 1, &tensor);
    pbw_string(&vi, 1, name);
    pbw_msg(&vi, 2, &type);
    return vi;
}

static void add_node(struct sbuf *graph, const char *op, const char *in, const char *in2,
                     const char *out)
{
    struct sbuf node = {0};
    pbw_string(&node, 1, in);
    if (in2 != NULL)
        pbw_string(&node, 1, in2);
    pbw_string(&node, 2, out);
    pbw_string(&node, 3, out);
    pbw_string(&node, 4, op);
    syn_graph_add_node(graph, &node);
}

static int write_model(struct sbuf *graph, const char *dir, const char *file)
{
    char path[4096];
    struct sbuf m = syn_model(graph);
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    int r = sbuf_write_file(&m, path);
    if (r < 0)
        perror(path);
    sbuf_free(&m);
    return r;
}

int main(int argc, char **argv)
{
    struct sbuf all = {0}, inputs = {0}, outputs = {0}, fixed = {0}, sum = {0};
    static const int64_t batched[] = {-1, 2}, two_by_three[] = {2, 3}, one[] = {1}, flat[] = {-2};
    static const int64_t minus_one = -1;

    if (argc == 2 && strcmp(argv[1], "--help") == 0) {
        printf("Usage: tetris-test-oip-model OUT_DIR\n"
               "Writes identity_all.onnx (an Identity of every protocol datatype, [N, 2])\n"
               "identity_fixed.onnx (FP32 [2, 3]) and flatten.onnx (FP32 [N, 2] -> [2N])\n"
               "into OUT_DIR.\n"
               "Exit status: 0 written, 1 write failed, 2 usage.\n");
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("tetris-test-oip-model %s\n", TETRIS_VERSION);
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: tetris-test-oip-model OUT_DIR\n");
        return 2;
    }
    pbw_string(&all, 2, "identity_all");
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        char in[32], out[32];
        snprintf(in, sizeof(in), "in_%s", types[i].name);
        snprintf(out, sizeof(out), "out_%s", types[i].name);
        add_node(&all, "Identity", in, NULL, out);
        struct sbuf vi = value_info(in, types[i].onnx_type, batched, 2);
        pbw_msg(&inputs, 11, &vi);
        vi = value_info(out, types[i].onnx_type, batched, 2);
        pbw_msg(&outputs, 12, &vi);
    }
    sbuf_put(&all, inputs.p, inputs.len);
    sbuf_put(&all, outputs.p, outputs.len);
    sbuf_free(&inputs);
    sbuf_free(&outputs);

    pbw_string(&fixed, 2, "identity_fixed");
    add_node(&fixed, "Identity", "in_FP32", NULL, "out_FP32");
    struct sbuf vi = value_info("in_FP32", SYN_FLOAT, two_by_three, 2);
    pbw_msg(&fixed, 11, &vi);
    vi = value_info("out_FP32", SYN_FLOAT, two_by_three, 2);
    pbw_msg(&fixed, 12, &vi);

    pbw_string(&sum, 2, "flatten");
    add_node(&sum, "Reshape", "x", "shape", "y");
    struct sbuf shape = syn_tensor("shape", SYN_INT64, 1, one, SYN_F_RAW, &minus_one, 8);
    syn_graph_add_initializer(&sum, &shape);
    vi = value_info("x", SYN_FLOAT, batched, 2);
    pbw_msg(&sum, 11, &vi);
    vi = value_info("y", SYN_FLOAT, flat, 1);
    pbw_msg(&sum, 12, &vi);

    if (write_model(&all, argv[1], "identity_all.onnx") < 0 ||
        write_model(&fixed, argv[1], "identity_fixed.onnx") < 0 ||
        write_model(&sum, argv[1], "flatten.onnx") < 0)
        return 1;
    return 0;
}
