/* ort_status.c - what a program that runs ONNX Runtime needs before and
 * around it (ort_adapter.h's ort_telemetry_default_off and ort_check). A
 * file of its own because it needs no ONNX Runtime symbol, only the API
 * table it is handed: a program that loads ONNX Runtime at run time
 * (tetris-derive, which may derive with another version's library) links
 * it without linking ONNX Runtime. */
#include <stdlib.h>

#include "agent/ort_adapter.h"

void ort_telemetry_default_off(void)
{
    setenv("ORT_DISABLE_TELEMETRY", "1", 0); /* fails only without memory: then it stays on */
}

int ort_check(const OrtApi *api, OrtStatus *status, const char *what, tetris_error *err)
{
    if (status == NULL)
        return 0;
    int code = TETRIS_E_RUNTIME;
    switch (api->GetErrorCode(status)) {
    case ORT_NO_SUCHFILE: code = TETRIS_E_NOTFOUND; break;
    case ORT_NO_MODEL:
    case ORT_INVALID_PROTOBUF:
    case ORT_INVALID_GRAPH: code = TETRIS_E_FORMAT; break;
    default: break;
    }
    int r = tetris_fail(err, code, 0, "onnxruntime: %s: %s", what, api->GetErrorMessage(status));
    api->ReleaseStatus(status);
    return r;
}
