/* fuzz_webhook.c - libFuzzer harness for tetris-webhook's AdmissionReview
 * decoder and the patch built from what it decodes (webhook.h), which run
 * on whatever reaches POST /mutate. An input is refused with
 * TETRIS_E_FORMAT, or its pod is selected or not, denied for what it says
 * of its tenant or not, its patch is built or refused (format, tenant),
 * and the answer is JSON that echoes the uid. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_common.h"
#include "common/log.h"
#include "scheduler-ext/webhook/webhook.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const served[] = {"openfaas-fn"};
    static const char *const tenants[] = {"alpha"};
    static const struct webhook_config configs[] = {
        {.store_dir = "/dev/shm/tetris", .store_subdir = "", .scheduler_name = "tetris-scheduler"},
        {.store_dir = "/s",
         .store_subdir = "public",
         .namespaces = served,
         .n_namespaces = 1,
         .tenants = tenants,
         .n_tenants = 1},
        {.store_dir = "/s", .store_subdir = "public", .csi_driver = "csi.tetris.io"},
    };
    /* The tenant each config's namespace names. */
    static const char *const ns_tenants[] = {NULL, "alpha", NULL};
    webhook_review rv;
    tetris_error err;
    if (webhook_review_parse((const char *)data, size, &rv, &err) < 0) {
        if (err.code != TETRIS_E_FORMAT && err.code != TETRIS_E_NOMEM)
            abort();
        return 0;
    }
    for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) {
        webhook_selection sel;
        webhook_select(&configs[c], &rv, &sel);
        if (!sel.selected && sel.reason == NULL)
            abort();
        json_t *patch = NULL;
        const char *tenant = NULL;
        bool denied = false;
        if (sel.selected &&
            webhook_tenant_decide(&configs[c], &sel, ns_tenants[c], &tenant, &err) < 0) {
            if (err.code != TETRIS_E_DENIED)
                abort();
            denied = true;
        }
        if (sel.selected && !denied) {
            webhook_pod_facts f = {.model = sel.model,
                                   .tenant = tenant,
                                   .manifest_configmap = sel.model,
                                   .model_path = sel.model,
                                   .model_ref = sel.model_ref};
            int r = webhook_patch_build(&configs[c], &rv, &f, &patch, &err);
            if (r < 0 && err.code != TETRIS_E_FORMAT && err.code != TETRIS_E_INVAL &&
                err.code != TETRIS_E_NOMEM)
                abort();
            if (r == 0 && !json_is_array(patch))
                abort();
        }
        size_t len = 0;
        char *answer = denied ? webhook_response_deny(&rv, err.msg, &len)
                              : webhook_response_encode(&rv, patch, &len);
        json_t *doc = answer != NULL ? json_loadb(answer, len, 0, NULL) : NULL;
        const char *uid = json_string_value(
            json_object_get(json_object_get(doc, "response"), "uid"));
        if (answer != NULL && (uid == NULL || strcmp(uid, rv.uid) != 0))
            abort();
        json_decref(doc);
        free(answer);
        json_decref(patch);
    }
    webhook_review_release(&rv);
    return 0;
}
