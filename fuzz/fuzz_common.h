/* fuzz_common.h - what every harness shares, included first by each:
 * libFuzzer's entry points declared once, and the set-up before the first
 * input (LLVMFuzzerInitialize, defined here: only error logs, which would
 * otherwise drown the fuzzer's output, and /dev/null for the listings);
 * then the checks of the model parsers' harnesses: errors are well formed,
 * and an accepted model goes through manifest JSON and back unchanged and
 * can be listed.
 *
 * A harness is one translation unit built into its own binary
 * (fuzz/module.mk), so the one non-inline definition here is that
 * binary's only one. */
#ifndef TETRIS_FUZZ_COMMON_H
#define TETRIS_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "model/manifest.h"
#include "model/model.h"

/* Each harness defines LLVMFuzzerTestOneInput; 0 for every input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static FILE *fuzz_devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_set_level(LOG_LEVEL_ERROR);
    fuzz_devnull = fopen("/dev/null", "w");
    if (fuzz_devnull == NULL)
        abort();
    return 0;
}

/* The input as a C string in text[cap]: its first cap - 1 bytes (a NUL
 * among them ends it early, as it would a header or an argument). */
static inline void fuzz_text(const uint8_t *data, size_t size, char *text, size_t cap)
{
    size_t n = size < cap - 1 ? size : cap - 1;
    memcpy(text, data, n);
    text[n] = '\0';
}

/* A rejected input is a format error (or an I/O one for external data) and
 * the message names the input. */
static inline void fuzz_check_error(const tetris_error *err, const char *what)
{
    if (err->code != TETRIS_E_FORMAT && err->code != TETRIS_E_NOTFOUND &&
        err->code != TETRIS_E_IO)
        abort();
    if (strstr(err->msg, what) == NULL)
        abort();
}

static inline void fuzz_round_trip(model *m)
{
    tetris_error err;
    for (size_t i = 0; i < m->n_tensors; i++)
        m->tensors[i].has_digest = true; /* digests need files; zero is fine */
    if (model_print(m, fuzz_devnull, &err) < 0)
        abort();
    char *json = manifest_to_json(m, &err);
    if (json == NULL)
        abort();
    model *back = NULL;
    if (manifest_parse(json, strlen(json), &back, &err) < 0) {
        fprintf(stderr, "round trip failed: %s\n", err.msg);
        abort();
    }
    if (back->n_tensors != m->n_tensors || back->total_bytes != m->total_bytes)
        abort();
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *a = &m->tensors[i], *b = &back->tensors[i];
        if (strcmp(a->name, b->name) != 0 || a->offset != b->offset ||
            a->length != b->length || a->meta.nbytes != b->meta.nbytes ||
            a->encoding != b->encoding || a->meta.crc32 != b->meta.crc32)
            abort();
    }
    model_free(back);
    free(json);
}

#endif
