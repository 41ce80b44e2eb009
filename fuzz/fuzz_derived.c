/* fuzz_derived.c - libFuzzer harness for the derived-form index entry
 * decoder (protocol/derived.h), which every instance runs on what it finds
 * in the store's derived/ directory. An entry that decodes must encode and
 * decode to the same entry. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_common.h"
#include "protocol/derived.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    derived_entry e, back;
    tetris_error err;
    if (derived_entry_decode((const char *)data, size, &e, &err) < 0) {
        if (err.code != TETRIS_E_FORMAT && err.code != TETRIS_E_NOMEM)
            abort();
        return 0;
    }
    char *text = derived_entry_encode(&e);
    if (text == NULL)
        abort();
    if (derived_entry_decode(text, strlen(text), &back, &err) < 0 ||
        memcmp(&back, &e, sizeof(e)) != 0)
        abort();
    free(text);
    return 0;
}
