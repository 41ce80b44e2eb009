# tests/langs/lib.sh - what the tests of the Node.js and Python functions
# share (sourced; sources tests/lib/common.sh and scripts/lib/serving.sh,
# whose helpers the demo and the benchmarks use too): starting an instance
# (under `tetris-agent exec` or privately) and waiting for its serving
# line, OIP requests and the SHA-256 of their outputs, the memory of a set
# of instances measured as scripts/demo.sh measures it (serving.sh's
# pss_kb, rss_kb, rollup_kb, store_kb), and hostile copies of a real view.
#
#   inst_start NAME CMD...     serve_start with stderr in $WORK/NAME.log:
#                              sets INST_PID (the function's own pid),
#                              INST_PORT and INST_LAUNCHER (the process
#                              started: exec, or the function); fails the
#                              test when it does not serve
#   oip_sha URL MODEL REQ OUT  oip_answer, failing the test unless 200
#   http_status METHOD URL [BODY-FILE]  the HTTP status; body in $WORK/http.body
#   bad_requests URL MODEL GOOD-REQ  malformed requests get 4xx with
#                              {"error": ...}, the function keeps serving
#   store_listing STORE        every path, size, mode and content hash
#   bad_views VIEW STORE DIR   hostile copies of VIEW under DIR, listed in
#                              DIR/cases as "name<TAB>expected message"
# shellcheck shell=sh disable=SC2034,SC2016
. "$(dirname "$0")/../lib/common.sh"
. "$ROOT/scripts/lib/serving.sh"

# SANITIZED=1 for an ASan build of the programs under test: its exec
# supervisors and daemon take more memory than a release build's, so the
# tests compare totals that include them only on release builds.
SANITIZED=0
if ldd "$BIN/tetris-agent" 2>/dev/null | grep -q libasan; then
    SANITIZED=1
    asan_memory_as_release
fi
PY=$SERVING_PY
# the views `tetris-agent exec` writes go into the scratch directory
export TMPDIR="$WORK"

need_node() {
    command -v node >/dev/null 2>&1 || fail "node is not installed (scripts/deps.sh installs nodejs)"
    (cd "$WORK" && node -e "require('onnxruntime-node')") 2>"$WORK/node-require.err" ||
        fail "onnxruntime-node does not load from $NODE_PATH (scripts/deps.sh): $(cat "$WORK/node-require.err")"
}

need_numpy() {
    "$PY" -c 'import numpy' 2>/dev/null || fail "$PY cannot import numpy (scripts/deps.sh installs python3-numpy)"
}

inst_start() {
    _name=$1
    shift
    _rc=0
    serve_start "$WORK/$_name" "$@" || _rc=$?
    KILL_ON_EXIT="$KILL_ON_EXIT $SERVE_LAUNCHER"
    [ $_rc -eq 0 ] || fail "$_name: $SERVE_ERROR"
    INST_PID=$SERVE_PID INST_PORT=$SERVE_PORT INST_LAUNCHER=$SERVE_LAUNCHER
}

oip_sha() {
    oip_answer "$@" 2>"$WORK/oip.err" || fail "$(cat "$WORK/oip.err")"
}

http_status() {
    if [ $# -ge 3 ]; then
        curl -s -o "$WORK/http.body" -w '%{http_code}' -X "$1" --data-binary "@$3" "$2" || echo 000
    else
        curl -s -o "$WORK/http.body" -w '%{http_code}' -X "$1" "$2" || echo 000
    fi
}

bad_requests() {
    _u=$1/v2/models/$2
    _in=$(jq -r '.inputs[0].name' "$3")
    _expect() { # STATUS WHAT METHOD URL [BODY]
        _want=$1 _what=$2
        shift 2
        _got=$(http_status "$@")
        [ "$_got" = "$_want" ] || fail "$_what: HTTP $_got, want $_want: $(head -c 300 "$WORK/http.body")"
        jq -e '.error | type == "string" and length > 0' "$WORK/http.body" >/dev/null ||
            fail "$_what: no {\"error\": ...} body: $(head -c 300 "$WORK/http.body")"
    }
    printf '{"inputs": [' >"$WORK/r.trunc"
    _expect 400 "malformed JSON" POST "$_u/infer" "$WORK/r.trunc"
    jq '.inputs[0].name = "no-such-input"' "$3" >"$WORK/r.name"
    _expect 400 "unknown input" POST "$_u/infer" "$WORK/r.name"
    jq '.inputs[0].datatype = "UINT8"' "$3" >"$WORK/r.dtype"
    _expect 400 "wrong datatype" POST "$_u/infer" "$WORK/r.dtype"
    jq '.inputs[0].data |= .[1:]' "$3" >"$WORK/r.count"
    _expect 400 "one element short" POST "$_u/infer" "$WORK/r.count"
    jq '.inputs[0].data[0] = "x"' "$3" >"$WORK/r.value"
    _expect 400 "a string for a number" POST "$_u/infer" "$WORK/r.value"
    jq '.inputs[0].shape |= [.[0]]' "$3" >"$WORK/r.rank"
    _expect 400 "wrong rank" POST "$_u/infer" "$WORK/r.rank"
    jq '.inputs = []' "$3" >"$WORK/r.missing"
    _expect 400 "input $_in missing" POST "$_u/infer" "$WORK/r.missing"
    jq '.outputs = [{"name": "no-such-output"}]' "$3" >"$WORK/r.out"
    _expect 400 "unknown output" POST "$_u/infer" "$WORK/r.out"
    _expect 404 "unknown model" POST "$1/v2/models/no-such-model/infer" "$3"
    _expect 404 "unknown version" GET "$_u/versions/7"
    _expect 404 "unknown route" GET "$1/v3"
    _expect 405 "GET infer" GET "$_u/infer"
    head -c $((9 * 1024 * 1024)) /dev/zero | tr '\0' ' ' >"$WORK/r.big"
    _expect 413 "body over TETRIS_MAX_BODY_BYTES" POST "$_u/infer" "$WORK/r.big"
    [ "$(http_status GET "$1/_/health")" = 200 ] || fail "not serving after bad requests"
    [ "$(http_status GET "$1/v2/health/ready")" = 200 ] || fail "not ready after bad requests"
}

store_listing() {
    (cd "$1" && find . -path ./public/ingest.sock -prune -o -printf '%p %s %m\n' | sort &&
        find . -type f -exec sha256sum {} + | sort)
}

# bad_views VIEW STORE DIR: copies of VIEW (a live view, its links into
# STORE/public) that a reader must refuse, each for one reason.
bad_views() {
    _v=$1 _pub=$2/public _d=$3
    mkdir -p "$_d"
    : >"$_d/cases"
    _copy() { cp -a "$_v" "$_d/$1"; }
    _index() { # CASE JQ-FILTER: rewrite the copy's tensors.json
        chmod u+w "$_d/$1/tensors.json"
        jq "$2" "$_d/$1/tensors.json" >"$_d/$1/tensors.json.new"
        mv "$_d/$1/tensors.json.new" "$_d/$1/tensors.json"
        chmod 0444 "$_d/$1/tensors.json"
    }
    # the first tensor stored in a file of its own
    _rel=$(jq -r '[.tensors[] | select(.shared and .file != null)][0].file' "$_v/tensors.json")

    _copy group-writable
    chmod g+w "$_d/group-writable/tensors.json"
    printf 'group-writable\twritable by group or others\n' >>"$_d/cases"

    _copy dir-world-writable
    chmod 0777 "$_d/dir-world-writable"
    printf 'dir-world-writable\twritable by group or others\n' >>"$_d/cases"

    _copy outside-store
    cp "$_v/$_rel" "$_d/outside-copy"
    ln -sfn "$_d/outside-copy" "$_d/outside-store/$_rel"
    printf 'outside-store\toutside the store\n' >>"$_d/cases"

    # truncated: the whole store copied (links re-pointed), one file cut short
    _copy truncated
    mkdir -p "$_d/fake-store"
    cp -a "$_pub/tensors" "$_d/fake-store/"
    find "$_d/truncated/tensors" -type l | while read -r _l; do
        ln -sfn "$_d/fake-store/tensors/${_l#"$_d/truncated/tensors/"}" "$_l"
    done
    _target="$_d/fake-store/${_rel}"
    chmod u+w "$_target"
    truncate -s $(($(stat -c %s "$_target") / 2)) "$_target"
    _index truncated ".store = \"$_d/fake-store\""
    printf 'truncated\tshorter than\n' >>"$_d/cases"

    _copy malformed-json
    chmod u+w "$_d/malformed-json/tensors.json"
    printf '{"format": "tetris-model-view/1", "tensors": [' >"$_d/malformed-json/tensors.json"
    chmod 0444 "$_d/malformed-json/tensors.json"
    printf 'malformed-json\tmalformed JSON\n' >>"$_d/cases"

    _first='(.tensors | map(.file != null) | index(true)) as $i'
    _copy dotdot
    _index dotdot "$_first | .tensors[\$i].file = \"../../etc/passwd\""
    printf 'dotdot\tclimbs out of the view\n' >>"$_d/cases"

    _copy wrong-length
    _index wrong-length "$_first | .tensors[\$i].length += 4"
    printf 'wrong-length\tis not\n' >>"$_d/cases"
}
