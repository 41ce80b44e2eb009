/* test_inventory.c - protocol/inventory: a node inventory encodes to the
 * documented bytes and decodes back to what was encoded, for the shared
 * store and a tenant's; the ETag is the quoted generation; every malformed
 * document (not JSON, wrong types, missing fields, bad digests, duplicate
 * keys) is refused with an error naming the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/inventory.h"
#include "tests/lib/unit.h"

#define HEX_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HEX_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static inventory_tensor two[2];

static void setup(void)
{
    memset(two[0].digest.bytes, 0xaa, sizeof two[0].digest.bytes);
    two[0].bytes = 4096;
    memset(two[1].digest.bytes, 0xbb, sizeof two[1].digest.bytes);
    two[1].bytes = 1u << 30;
}

START_TEST(shared_store_round_trips)
{
    inventory_doc doc = {.node = "node-1",
                         .tenant = "",
                         .generation = 1795313081642,
                         .capacity_bytes = 8589934592,
                         .resident_bytes = 440467456,
                         .evictable_bytes = 4096,
                         .n_tensors = 2,
                         .tensors = two};
    size_t len;
    tetris_error err = {0};
    char *text = inventory_encode(&doc, &len, &err);
    ck_assert_msg(text != NULL, "%s", err.msg);
    ck_assert_str_eq(text, "{\"node\":\"node-1\",\"generation\":1795313081642,"
                           "\"capacity_bytes\":8589934592,\"resident_bytes\":440467456,"
                           "\"evictable_bytes\":4096,\"tensors\":[{\"digest\":\"" HEX_A
                           "\",\"bytes\":4096},"
                           "{\"digest\":\"" HEX_B "\",\"bytes\":1073741824}]}\n");
    ck_assert_uint_eq(len, strlen(text));
    inventory_doc *back = NULL;
    ck_assert_msg(inventory_decode(text, len, &back, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(back->node, "node-1");
    ck_assert_str_eq(back->tenant, "");
    ck_assert_uint_eq(back->generation, doc.generation);
    ck_assert_uint_eq(back->capacity_bytes, doc.capacity_bytes);
    ck_assert_uint_eq(back->resident_bytes, doc.resident_bytes);
    ck_assert_uint_eq(back->evictable_bytes, doc.evictable_bytes);
    ck_assert_uint_eq(back->n_tensors, 2);
    for (size_t i = 0; i < 2; i++) {
        ck_assert(tensor_digest_equal(&back->tensors[i].digest, &two[i].digest));
        ck_assert_uint_eq(back->tensors[i].bytes, two[i].bytes);
    }
    inventory_doc_free(back);
    free(text);
}
END_TEST

START_TEST(tenant_store_round_trips)
{
    inventory_doc doc = {.node = "n\"1", .tenant = "alpha", .generation = 7};
    size_t len;
    tetris_error err = {0};
    char *text = inventory_encode(&doc, &len, &err);
    ck_assert_str_eq(text, "{\"node\":\"n\\\"1\",\"tenant\":\"alpha\",\"generation\":7,"
                           "\"capacity_bytes\":0,\"resident_bytes\":0,\"evictable_bytes\":0,"
                           "\"tensors\":[]}\n");
    inventory_doc *back = NULL;
    ck_assert_msg(inventory_decode(text, len, &back, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(back->node, "n\"1");
    ck_assert_str_eq(back->tenant, "alpha");
    ck_assert_uint_eq(back->n_tensors, 0);
    inventory_doc_free(back);
    free(text);
}
END_TEST

/* A daemon from before evictable_bytes: nothing is counted as evictable. */
START_TEST(evictable_bytes_are_optional)
{
    static const char old[] = "{\"node\":\"n\",\"generation\":1,\"capacity_bytes\":10,"
                              "\"resident_bytes\":9,\"tensors\":[]}";
    inventory_doc *back = NULL;
    tetris_error err = {0};
    ck_assert_msg(inventory_decode(old, strlen(old), &back, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(back->evictable_bytes, 0);
    inventory_doc_free(back);
}
END_TEST

START_TEST(etag_is_the_quoted_generation)
{
    char etag[INVENTORY_ETAG_MAX];
    inventory_etag(18446744073709551615u, etag);
    ck_assert_str_eq(etag, "\"18446744073709551615\"");
    inventory_etag(0, etag);
    ck_assert_str_eq(etag, "\"0\"");
}
END_TEST

START_TEST(names_must_be_utf8)
{
    inventory_doc doc = {.node = "\xff", .tenant = ""};
    size_t len;
    tetris_error err;
    ck_assert_ptr_null(inventory_encode(&doc, &len, &err));
    ck_assert_int_eq(err.code, TETRIS_E_INVAL);
}
END_TEST

#define HEAD "\"node\":\"n\",\"generation\":1,\"capacity_bytes\":0,\"resident_bytes\":0"

static const struct {
    const char *json;
    const char *expect;
} bad[] = {
    {"", "inventory: not JSON"},
    {"[]", "not a JSON object"},
    {"{\"generation\":1,\"capacity_bytes\":0,\"resident_bytes\":0,\"tensors\":[]}",
     "node is missing"},
    {"{\"node\":5,\"generation\":1,\"capacity_bytes\":0,\"resident_bytes\":0,\"tensors\":[]}",
     "node is not a string"},
    {"{" HEAD ",\"tenant\":[],\"tensors\":[]}", "tenant is not a string"},
    {"{\"node\":\"n\",\"generation\":-1,\"capacity_bytes\":0,\"resident_bytes\":0,\"tensors\":[]}",
     "generation is not a non-negative integer"},
    {"{\"node\":\"n\",\"generation\":1,\"capacity_bytes\":0.5,\"resident_bytes\":0,\"tensors\":[]}",
     "capacity_bytes is not a non-negative integer"},
    {"{\"node\":\"n\",\"generation\":1,\"capacity_bytes\":0,\"tensors\":[]}",
     "resident_bytes is missing"},
    {"{" HEAD "}", "tensors is missing"},
    {"{" HEAD ",\"tensors\":{}}", "tensors is not an array"},
    {"{" HEAD ",\"tensors\":[7]}", "tensors[0] is not an object"},
    {"{" HEAD ",\"tensors\":[{\"bytes\":1}]}", "tensors[0].digest is missing"},
    {"{" HEAD ",\"tensors\":[{\"digest\":1,\"bytes\":1}]}", "tensors[0].digest is not a string"},
    {"{" HEAD ",\"tensors\":[{\"digest\":\"" HEX_A "0\",\"bytes\":1}]}", "tensors[0]: digest"},
    {"{" HEAD ",\"tensors\":[{\"digest\":\"" HEX_A "\"}]}", "tensors[0].bytes is missing"},
    {"{" HEAD ",\"tensors\":[{\"digest\":\"" HEX_A "\",\"bytes\":-4}]}",
     "tensors[0].bytes is not a non-negative integer"},
    {"{" HEAD ",\"generation\":2,\"tensors\":[]}", "duplicate"},
    {"{" HEAD ",\"evictable_bytes\":\"1\",\"tensors\":[]}",
     "evictable_bytes is not a non-negative integer"},
    {"{" HEAD ",\"evictable_bytes\":1,\"tensors\":[]}", "evictable_bytes exceeds resident_bytes"},
};

START_TEST(malformed_inventories_are_refused)
{
    inventory_doc *doc = NULL;
    tetris_error err = {0};
    ck_assert_int_eq(inventory_decode(bad[_i].json, strlen(bad[_i].json), &doc, &err),
                     -TETRIS_E_FORMAT);
    ck_assert_ptr_null(doc);
    ck_assert_msg(strstr(err.msg, bad[_i].expect) != NULL, "case %d: \"%s\" not in: %s", _i,
                  bad[_i].expect, err.msg);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, shared_store_round_trips);
    tcase_add_test(tc, tenant_store_round_trips);
    tcase_add_test(tc, evictable_bytes_are_optional);
    tcase_add_test(tc, etag_is_the_quoted_generation);
    tcase_add_test(tc, names_must_be_utf8);
    tcase_add_loop_test(tc, malformed_inventories_are_refused, 0,
                        (int)(sizeof bad / sizeof bad[0]));
}

UNIT_MAIN("inventory")
