/* test_csi.c - the CSI and plugin-registration messages (protocol/csi.h):
 * a publish request as the kubelet sends one decodes field by field,
 * what breaks the rules is refused naming the field, and the replies
 * carry the fields at CSI's numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pbwire.h"
#include "protocol/csi.h"
#include "tests/lib/unit.h"

static void put_entry(pb_writer *w, uint32_t number, const char *k, const char *v)
{
    pb_writer e;
    pb_writer_init(&e, 1 << 16);
    pb_put_string(&e, 1, k);
    pb_put_string(&e, 2, v);
    pb_put_message(w, number, &e);
    pb_writer_free(&e);
}

/* A NodePublishVolumeRequest: volume_capability {mount {fs_type},
 * access_mode {mode}}, readonly, a secret, the volume context. */
static uint8_t *publish_request(size_t *len, const char *extra_key, const char *extra_value)
{
    pb_writer w, cap, mount, mode;
    pb_writer_init(&w, 1 << 20);
    pb_writer_init(&cap, 1 << 16);
    pb_writer_init(&mount, 1 << 16);
    pb_writer_init(&mode, 1 << 16);
    pb_put_string(&w, 1, "csi-0123");
    put_entry(&w, 2, "ignored", "publish context");
    pb_put_string(&w, 4, "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/m/mount");
    pb_put_string(&mount, 1, "ext4");
    pb_put_message(&cap, 2, &mount);
    pb_put_varint(&mode, 1, 2);
    pb_put_message(&cap, 3, &mode);
    pb_put_message(&w, 5, &cap);
    pb_put_bool(&w, 6, true);
    put_entry(&w, 7, "token", "secret");
    put_entry(&w, 8, "model", "/models/a.onnx");
    put_entry(&w, 8, CSI_CONTEXT_POD_NAMESPACE, "team-a");
    if (extra_key != NULL)
        put_entry(&w, 8, extra_key, extra_value);
    pb_put_varint(&w, 99, 7); /* from a newer CSI: skipped */
    pb_writer_free(&cap);
    pb_writer_free(&mount);
    pb_writer_free(&mode);
    uint8_t *out;
    tetris_error err;
    ck_assert_int_eq(pb_writer_finish(&w, &out, len, &err), 0);
    return out;
}

START_TEST(publish_decodes)
{
    size_t len;
    uint8_t *buf = publish_request(&len, NULL, NULL);
    struct csi_publish_request r;
    tetris_error err = {0};
    ck_assert_msg(csi_decode_publish(buf, len, &r, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(r.volume_id, "csi-0123");
    ck_assert_str_eq(r.target_path, "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/m/mount");
    ck_assert_str_eq(r.staging_target_path, "");
    ck_assert(r.has_capability);
    ck_assert_int_eq(r.access_type, CSI_ACCESS_MOUNT);
    ck_assert_str_eq(r.fs_type, "ext4");
    ck_assert_uint_eq(r.access_mode, 2);
    ck_assert(r.readonly);
    ck_assert_uint_eq(r.n_secrets, 1);
    ck_assert_uint_eq(r.n_context, 2);
    ck_assert_str_eq(csi_context_get(&r, "model"), "/models/a.onnx");
    ck_assert_str_eq(csi_context_get(&r, CSI_CONTEXT_POD_NAMESPACE), "team-a");
    ck_assert_ptr_null(csi_context_get(&r, "token"));
    csi_publish_request_free(&r);
    free(buf);

    /* the empty request: every string "", no capability */
    ck_assert_int_eq(csi_decode_publish(NULL, 0, &r, &err), 0);
    ck_assert_str_eq(r.volume_id, "");
    ck_assert(!r.has_capability);
    csi_publish_request_free(&r);
}
END_TEST

START_TEST(publish_refusals_name_the_field)
{
    size_t len;
    struct csi_publish_request r;
    tetris_error err = {0};
    uint8_t *buf = publish_request(&len, "model", "twice");
    ck_assert_int_eq(csi_decode_publish(buf, len, &r, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "volume_context: key model twice"));
    free(buf);
    buf = publish_request(&len, "bad", "\xff\xfe");
    ck_assert_int_eq(csi_decode_publish(buf, len, &r, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "UTF-8"));
    free(buf);
    char *big = malloc(CSI_MAX_STRING + 2);
    memset(big, 'a', CSI_MAX_STRING + 1);
    big[CSI_MAX_STRING + 1] = '\0';
    buf = publish_request(&len, "big", big);
    ck_assert_int_eq(csi_decode_publish(buf, len, &r, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "over the limit"));
    free(buf);
    free(big);
    /* volume_id as a varint */
    static const uint8_t varint_id[] = {0x08, 0x01};
    ck_assert_int_eq(csi_decode_publish(varint_id, sizeof(varint_id), &r, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "volume_id"));
    /* a NUL inside a string */
    static const uint8_t nul_id[] = {0x0a, 0x03, 'a', 0, 'b'};
    ck_assert_int_eq(csi_decode_publish(nul_id, sizeof(nul_id), &r, &err), -TETRIS_E_FORMAT);
    /* too many context entries */
    pb_writer w;
    pb_writer_init(&w, 1 << 20);
    for (int i = 0; i <= CSI_MAX_MAP_ENTRIES; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        put_entry(&w, 8, k, "v");
    }
    uint8_t *many;
    ck_assert_int_eq(pb_writer_finish(&w, &many, &len, &err), 0);
    ck_assert_int_eq(csi_decode_publish(many, len, &r, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than"));
    free(many);
}
END_TEST

START_TEST(unpublish_and_registration)
{
    pb_writer w;
    uint8_t *buf;
    size_t len;
    tetris_error err = {0};
    pb_writer_init(&w, 1024);
    pb_put_string(&w, 1, "v");
    pb_put_string(&w, 2, "/t");
    ck_assert_int_eq(pb_writer_finish(&w, &buf, &len, &err), 0);
    struct csi_unpublish_request u;
    ck_assert_int_eq(csi_decode_unpublish(buf, len, &u, &err), 0);
    ck_assert_str_eq(u.volume_id, "v");
    ck_assert_str_eq(u.target_path, "/t");
    csi_unpublish_request_free(&u);
    free(buf);

    pb_writer_init(&w, 1024);
    pb_put_bool(&w, 1, false);
    pb_put_string(&w, 2, "driver name taken");
    ck_assert_int_eq(pb_writer_finish(&w, &buf, &len, &err), 0);
    struct csi_registration_status st;
    ck_assert_int_eq(csi_decode_registration_status(buf, len, &st, &err), 0);
    ck_assert(!st.registered);
    ck_assert_str_eq(st.error, "driver name taken");
    csi_registration_status_free(&st);
    free(buf);
}
END_TEST

/* The replies, read back with the generic reader. */
START_TEST(replies_use_csi_field_numbers)
{
    uint8_t *buf;
    size_t len;
    tetris_error err = {0};
    pb_reader r;
    struct pb_field f;

    ck_assert_int_eq(csi_encode_plugin_info("csi.tetris.io", "0.1.0", &buf, &len, &err), 0);
    pb_reader_init(&r, buf, len);
    ck_assert_int_eq(pb_next(&r, &f, &err), 1);
    ck_assert(f.number == 1 && f.len == 13 && memcmp(f.data, "csi.tetris.io", 13) == 0);
    ck_assert_int_eq(pb_next(&r, &f, &err), 1);
    ck_assert(f.number == 2 && f.len == 5);
    free(buf);

    ck_assert_int_eq(csi_encode_probe(true, &buf, &len, &err), 0);
    static const uint8_t ready[] = {0x0a, 0x02, 0x08, 0x01};
    ck_assert(len == sizeof(ready) && memcmp(buf, ready, len) == 0);
    free(buf);

    ck_assert_int_eq(csi_encode_node_info("node-0", 256, &buf, &len, &err), 0);
    static const uint8_t info[] = {0x0a, 0x06, 'n', 'o', 'd', 'e', '-', '0', 0x10, 0x80, 0x02};
    ck_assert(len == sizeof(info) && memcmp(buf, info, len) == 0);
    free(buf);

    ck_assert_int_eq(csi_encode_registration_info("csi.tetris.io", "/p/csi.sock", &buf, &len, &err),
                     0);
    pb_reader_init(&r, buf, len);
    const char *want[] = {CSI_PLUGIN_TYPE, "csi.tetris.io", "/p/csi.sock", CSI_SUPPORTED_VERSION};
    for (uint32_t i = 0; i < 4; i++) {
        ck_assert_int_eq(pb_next(&r, &f, &err), 1);
        ck_assert_uint_eq(f.number, i + 1);
        ck_assert(f.len == strlen(want[i]) && memcmp(f.data, want[i], f.len) == 0);
    }
    free(buf);

    ck_assert_int_eq(csi_encode_controller_capabilities(&buf, &len, &err), 0);
    static const uint8_t unknown_only[] = {0x0a, 0x02, 0x0a, 0x00};
    ck_assert(len == sizeof(unknown_only) && memcmp(buf, unknown_only, len) == 0);
    free(buf);

    ck_assert_int_eq(csi_encode_node_capabilities(&buf, &len, &err), 0);
    ck_assert_uint_eq(len, 0);
    free(buf);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, publish_decodes);
    tcase_add_test(tc, publish_refusals_name_the_field);
    tcase_add_test(tc, unpublish_and_registration);
    tcase_add_test(tc, replies_use_csi_field_numbers);
}
UNIT_MAIN("csi")
