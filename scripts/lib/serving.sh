# scripts/lib/serving.sh - inference functions driven from the shell: what
# scripts/demo.sh, bench/languages/run.sh and tests/langs/ share (sourced;
# POSIX sh; sets no shell options; the caller sets ROOT, the repository).
# One way to start a function (tetris-function, the Node.js or the Python
# function, privately or under `tetris-agent exec`), to ask it, and to
# measure its memory, so that the demo, the benchmark and the tests count
# the same thing.
#
#   serve_start OUT CMD...     runs CMD in the background (stdout in OUT.out,
#                              stderr in OUT.log) until the function logs
#                              that it serves: event=serving (the Node.js
#                              and Python functions) or event=ready
#                              (tetris-function), not tetris-agent's lines.
#                              Sets SERVE_LAUNCHER (the process started:
#                              exec, env or the function), SERVE_PID (the
#                              function's own pid: its line's pid=, else the
#                              launcher), SERVE_PORT (its port=, if any).
#                              Returns 1 with SERVE_ERROR when CMD exits
#                              first or does not serve within SERVE_TIMEOUT
#                              seconds (default 120; then it is left
#                              running).
#                              Polls every SERVE_POLL seconds (default 0.05).
#   oip_answer URL MODEL REQ OUT  POSTs the request REQ to
#                              URL/v2/models/MODEL/infer, the answer in OUT;
#                              prints its outputs' "<sha256> <bytes>" as
#                              tetris-onnx-run prints them. Anything but 200:
#                              a message on stderr, status 1.
#   daemon_start STORE LOG [ARG...]
#                              the node daemon ($BIN/tetris-reclaimer) on
#                              STORE (made if missing), stderr in LOG, with
#                              --listen "" --interval 3600 --store-tmpfs huge
#                              (a tmpfs of 2 MiB pages of its own, as the
#                              chart mounts it; where this user may not
#                              mount, the directory as it is) and ARGs, until
#                              its socket is there. Sets DAEMON_PID; returns
#                              1 with DAEMON_ERROR when it exits first or has
#                              no socket within 30 s.
#   now_ms                     the wall clock in milliseconds
#   pss_kb PID [PREFIX]        PSS of the process (smaps_rollup), or of its
#                              mappings of files under PREFIX (kB)
#   rss_kb PID PREFIX          RSS of its mappings of files under PREFIX
#   rollup_kb PID FIELD        a field of /proc/PID/smaps_rollup (kB)
#   store_kb STORE             the store's allocated tensor pages (kB): a
#                              4-byte tensor still takes a page
# and SERVING_PY, the python that has Debian's PyTorch and numpy
# (TETRIS_PYTHON, default /usr/bin/python3: `python3` on PATH may be
# another), and NODE_PATH (default .deps/node_modules, where
# scripts/deps.sh links onnxruntime-node).
# shellcheck shell=sh disable=SC2034

SERVING_PY="${TETRIS_PYTHON:-$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)}"
export NODE_PATH="${NODE_PATH:-$ROOT/.deps/node_modules}"

now_ms() { echo $(($(date +%s%N) / 1000000)); }

daemon_start() {
    _ds_store=$1 _ds_log=$2
    shift 2
    DAEMON_ERROR=""
    mkdir -p "$_ds_store"
    "$BIN/tetris-reclaimer" --store "$_ds_store" --listen "" --interval 3600 --store-tmpfs huge \
        "$@" 2>"$_ds_log" &
    DAEMON_PID=$!
    _ds_polls=600
    while [ ! -S "$_ds_store/public/ingest.sock" ]; do
        if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
            DAEMON_ERROR="the node daemon exited: $(tail -n 3 "$_ds_log")"
            return 1
        fi
        _ds_polls=$((_ds_polls - 1))
        [ "$_ds_polls" -gt 0 ] || {
            DAEMON_ERROR="the node daemon has no socket after 30 s"
            return 1
        }
        sleep 0.05
    done
}

serve_start() {
    _sv_out=$1
    shift
    SERVE_PID="" SERVE_PORT="" SERVE_ERROR=""
    "$@" >"$_sv_out.out" 2>"$_sv_out.log" &
    SERVE_LAUNCHER=$!
    _sv_polls=$(awk -v t="${SERVE_TIMEOUT:-120}" -v p="${SERVE_POLL:-0.05}" 'BEGIN { print int(t / p) + 1 }')
    while :; do
        _sv_line=$(sed -n '/ prog=tetris-agent /d; / event=serving\( \|$\)/p; / event=ready\( \|$\)/p' "$_sv_out.log" | tail -n 1)
        [ -z "$_sv_line" ] || break
        if ! kill -0 "$SERVE_LAUNCHER" 2>/dev/null; then
            SERVE_ERROR="exited before serving: $(tail -n 5 "$_sv_out.log")"
            return 1
        fi
        _sv_polls=$((_sv_polls - 1))
        [ "$_sv_polls" -gt 0 ] || {
            SERVE_ERROR="no serving line within ${SERVE_TIMEOUT:-120} s"
            return 1
        }
        sleep "${SERVE_POLL:-0.05}"
    done
    SERVE_PORT=$(printf '%s\n' "$_sv_line" | sed -n 's/.* port=\([0-9]*\).*/\1/p')
    SERVE_PID=$(printf '%s\n' "$_sv_line" | sed -n 's/.* pid=\([0-9]*\).*/\1/p')
    [ -n "$SERVE_PID" ] || SERVE_PID=$SERVE_LAUNCHER
}

oip_answer() {
    _oa_code=$(curl -s -o "$4" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "@$3" "$1/v2/models/$2/infer") || {
        echo "POST $1/v2/models/$2/infer: curl failed" >&2
        return 1
    }
    [ "$_oa_code" = 200 ] || {
        echo "POST $1/v2/models/$2/infer: HTTP $_oa_code: $(head -c 300 "$4")" >&2
        return 1
    }
    node "$ROOT/scripts/lib/oip-sha256.js" "$4"
}

pss_kb() {
    if [ $# -eq 1 ]; then
        awk '/^Pss:/ { print $2 }' "/proc/$1/smaps_rollup"
    else
        awk -v pre="$2" '/^[0-9a-f]+-[0-9a-f]+ / { in_store = index($6, pre) == 1 }
                         /^Pss:/ && in_store { kb += $2 } END { print kb + 0 }' "/proc/$1/smaps"
    fi
}

rss_kb() {
    awk -v pre="$2" '/^[0-9a-f]+-[0-9a-f]+ / { in_store = index($6, pre) == 1 }
                     /^Rss:/ && in_store { kb += $2 } END { print kb + 0 }' "/proc/$1/smaps"
}

rollup_kb() {
    awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/smaps_rollup"
}

store_kb() {
    du -sk "$1/public/tensors" | cut -f1
}
