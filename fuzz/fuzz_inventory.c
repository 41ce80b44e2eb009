/* fuzz_inventory.c - libFuzzer harness for the node inventory decoder
 * (protocol/inventory.h), which the scheduler extender runs on whatever a
 * node's URL answers. A document that decodes must encode and decode to
 * the same inventory. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_common.h"
#include "protocol/inventory.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    inventory_doc *doc = NULL;
    tetris_error err;
    if (inventory_decode((const char *)data, size, &doc, &err) < 0) {
        if (err.code != TETRIS_E_FORMAT && err.code != TETRIS_E_NOMEM)
            abort();
        return 0;
    }
    size_t len;
    char *text = inventory_encode(doc, &len, &err);
    if (text == NULL)
        abort();
    inventory_doc *back = NULL;
    if (inventory_decode(text, len, &back, &err) < 0)
        abort();
    if (strcmp(back->node, doc->node) != 0 || strcmp(back->tenant, doc->tenant) != 0 ||
        back->generation != doc->generation || back->capacity_bytes != doc->capacity_bytes ||
        back->resident_bytes != doc->resident_bytes ||
        back->evictable_bytes != doc->evictable_bytes || back->n_tensors != doc->n_tensors ||
        memcmp(back->tensors, doc->tensors, doc->n_tensors * sizeof *doc->tensors) != 0)
        abort();
    inventory_doc_free(back);
    inventory_doc_free(doc);
    free(text);
    return 0;
}
