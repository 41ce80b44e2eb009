/* fuzz_pin_file.c - libFuzzer harness for the pin file (reclaimer/
 * pin_file.h), which the daemon reads before every reclaim pass: any text
 * parses into pins that name a valid digest and tenant, or fails with a
 * format error naming the file and line, never crashes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_common.h"
#include "reclaimer/pin_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pin *pins = NULL;
    size_t n = 0;
    tetris_error err;
    if (pin_file_parse((const char *)data, size, "pins", &pins, &n, &err) < 0) {
        if (err.code != TETRIS_E_FORMAT && err.code != TETRIS_E_NOMEM)
            abort();
        if (err.code == TETRIS_E_FORMAT && strncmp(err.msg, "pins:", 5) != 0)
            abort();
        if (pins != NULL)
            abort();
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (pins[i].tenant[0] != '\0' && store_tenant_check(pins[i].tenant, NULL) < 0)
            abort();
    free(pins);
    return 0;
}
