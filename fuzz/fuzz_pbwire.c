/* fuzz_pbwire.c - libFuzzer harness for the protocol buffers reader
 * (common/pbwire.h) and the CSI messages decoded with it
 * (protocol/csi.h): what the kubelet, or anything that reaches the
 * plugin's socket, sends tetris-csi. Any bytes either read as fields that
 * lie inside the input, or fail with a format error; every decoder gives
 * back strings of bounded, NUL-free UTF-8 or fails without leaving
 * anything allocated (LeakSanitizer sees a leak), never crashes. Nested
 * LEN fields are walked as messages too, as the decoders do. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/pbwire.h"
#include "common/utf8.h"
#include "fuzz/fuzz_common.h"
#include "protocol/csi.h"

static void walk(const uint8_t *data, size_t size, int depth)
{
    pb_reader r;
    struct pb_field f;
    tetris_error err;
    int rc;
    pb_reader_init(&r, data, size);
    while ((rc = pb_next(&r, &f, &err)) > 0) {
        if (f.number == 0 || f.number > PB_MAX_FIELD_NUMBER)
            abort();
        if (f.wire_type == PB_WT_LEN) {
            if (f.data < data || f.len > size || f.data + f.len > data + size)
                abort();
            if (depth < 4)
                walk(f.data, f.len, depth + 1);
        }
    }
    if (rc < 0 && err.code != TETRIS_E_FORMAT)
        abort();
}

static void check_string(const char *s)
{
    if (s == NULL || strlen(s) > CSI_MAX_STRING || !utf8_valid(s, strlen(s)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tetris_error err;
    walk(data, size, 0);

    struct csi_publish_request p;
    if (csi_decode_publish(data, size, &p, &err) == 0) {
        check_string(p.volume_id);
        check_string(p.target_path);
        check_string(p.fs_type);
        if (p.n_context > CSI_MAX_MAP_ENTRIES)
            abort();
        for (size_t i = 0; i < p.n_context; i++) {
            check_string(p.context[i].key);
            check_string(p.context[i].value);
        }
        csi_publish_request_free(&p);
    } else if (err.code != TETRIS_E_FORMAT && err.code != TETRIS_E_NOMEM) {
        abort();
    }
    struct csi_unpublish_request u;
    if (csi_decode_unpublish(data, size, &u, &err) == 0) {
        check_string(u.volume_id);
        check_string(u.target_path);
        csi_unpublish_request_free(&u);
    }
    struct csi_registration_status st;
    if (csi_decode_registration_status(data, size, &st, &err) == 0) {
        check_string(st.error);
        csi_registration_status_free(&st);
    }
    return 0;
}
