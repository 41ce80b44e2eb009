/* fuzz_tenant_map.c - libFuzzer harness for tetris-csi's tenant map
 * (reclaimer/csi/tenant_map.h), which decides every pod's store: any text
 * parses into a map whose every answer is the shared store or a valid
 * tenant name, or fails with a format error naming the file, never
 * crashes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_common.h"
#include "reclaimer/csi/tenant_map.h"
#include "tensorstore/store.h"

/* Identities to ask every map that parses: names, wildcards, nothing. */
static const char *const identities[][2] = {
    {"team-a", "default"}, {"team-a", "*"}, {"*", "*"}, {"", ""}, {"team-b", ""}, {"a", "b.c"},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tenant_map *m = NULL;
    tetris_error err;
    if (tenant_map_parse((const char *)data, size, "map", &m, &err) < 0) {
        if (err.code != TETRIS_E_FORMAT && err.code != TETRIS_E_NOMEM)
            abort();
        if (err.code == TETRIS_E_FORMAT && strncmp(err.msg, "map:", 4) != 0)
            abort();
        if (m != NULL)
            abort();
        return 0;
    }
    if (tenant_map_rules(m) > TENANT_MAP_MAX_RULES)
        abort();
    for (size_t i = 0; i < sizeof(identities) / sizeof(identities[0]); i++) {
        const char *tenant = NULL;
        if (tenant_map_lookup(m, identities[i][0], identities[i][1], &tenant) && tenant != NULL &&
            store_tenant_check(tenant, NULL) < 0)
            abort();
    }
    tenant_map_free(m);
    return 0;
}
