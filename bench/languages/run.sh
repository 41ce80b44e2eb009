#!/bin/bash
# run.sh (bench/languages) - one model served by a function in each
# language, private against shared through the tensor store, in one run:
# memory per instance and time from the process's start to its first
# answer.
#
#   C        tetris-function (libtetris, ONNX Runtime's C API) on bert-base.onnx
#   Node.js  function/node (stock onnxruntime-node) on bert-base.onnx,
#            shared: under `tetris-agent exec` (a model view)
#   Python   function/python (stock PyTorch) on bert-base.safetensors,
#            shared: under `tetris-agent exec`
#
# BERT-base is the real architecture with RANDOM weights
# (scripts/models/paper-models.sh, exported with PyTorch once and cached).
# For each language: N private instances one after another, then N on a
# fresh store through the node daemon (on a tmpfs of its own with 2 MiB
# pages where it may mount one, as the chart and `make demo` do): the first
# is cold (the daemon ingests the model), the others warm (every tensor
# resident). Every instance answers the same seeded Open Inference Protocol
# request (tetris-onnx-run --oip-request) and then a second one; C's and
# Node.js's outputs must be tetris-onnx-run --private's, Python's its
# private instances'.
#
# Start to first answer: from starting the process (under exec: the load,
# the view, then the function) to the end of its first answer, inference
# included. Memory per instance: the instances' PSS (smaps_rollup) outside
# the store, their exec supervisors', and the store's allocated pages once,
# divided by N; the node daemon apart (one per node). Beside them, measured
# in the same run: the runtime alone (the process started and stopped:
# `tetris-function --version`, node requiring onnxruntime-node, python
# importing torch), the next answer (the inference alone), and reading and
# hashing the weights (page cache warm), the bound of a cold ingest.
# Without PyTorch: PP-OCRv4 rec, C and Node.js only, and a line says so.
#
# Usage: bench/languages/run.sh   Markdown on stdout.
# Environment: TETRIS_BIN (required), BENCH_QUICK=1 (N = 2, 3 repetitions),
# BENCH_LANG_INSTANCES (N, default 4), BENCH_REPS (runtime-alone
# repetitions, default 5), BENCH_STORE_ROOT (default /dev/shm),
# BENCH_LANG_SEQ (BERT's sequence length, default 32: Debian's PyTorch
# multiplies with the reference BLAS, seconds per request at 128 tokens).
# Exit status: 0 done, 1 a measurement failed, 2 setup error.
set -uo pipefail
BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the tetris programs}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    N=${BENCH_LANG_INSTANCES:-2}; REPS=${BENCH_REPS:-3}
else
    N=${BENCH_LANG_INSTANCES:-4}; REPS=${BENCH_REPS:-5}
fi
SEQ=${BENCH_LANG_SEQ:-32}
STORE_ROOT="${BENCH_STORE_ROOT:-/dev/shm}"
WORK="$(mktemp -d "$STORE_ROOT/tetris-bench-languages.XXXXXX")" || exit 2
STORE="$WORK/store"
PIDS=()
DAEMON=""
. "$ROOT/scripts/lib/serving.sh"
export TMPDIR="$WORK" # the views exec writes
# shellcheck disable=SC2034 # serve_start's: a start's time is seen within 20 ms
SERVE_POLL=0.02

die() { progress_done; echo "bench/languages: $*" >&2; exit "${2:-2}"; }
progress() { if [ -t 2 ]; then printf '\r\033[K[bench/languages] %s' "$*" >&2; fi; }
progress_done() { if [ -t 2 ]; then printf '\r\033[K' >&2; fi; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%.0f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

stop_instances() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    PIDS=()
}
stop_daemon() {
    [ -n "$DAEMON" ] || return 0
    kill "$DAEMON" 2>/dev/null
    wait "$DAEMON" 2>/dev/null
    DAEMON=""
    # the daemon's tmpfs outlives it by design: ours goes here
    ! mountpoint -q "$STORE" 2>/dev/null || umount "$STORE"
}
cleanup() {
    stop_instances
    stop_daemon
    chmod -R u+w "$WORK" 2>/dev/null
    rm -rf "$WORK"
    progress_done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for p in tetris-function tetris-agent tetris-onnx-run tetris-reclaimer; do
    [ -x "$BIN/$p" ] || die "$BIN/$p is missing (run make)"
done
command -v node >/dev/null 2>&1 && node -e "require('onnxruntime-node')" 2>/dev/null ||
    die "Node.js with onnxruntime-node is missing (scripts/deps.sh installs both)"

LOAD_START=$(cut -d' ' -f1 /proc/loadavg)

# ---- the model ----
KINDS="c node python"
rc=0
dir=$("$ROOT/scripts/models/paper-models.sh" --dir bert-base:3 2>"$WORK/paper.log") || rc=$?
if [ $rc = 0 ]; then
    ONNX="$dir/bert-base.onnx" ST="$dir/bert-base.safetensors" NAME=bert-base
    KIND="bert-base (real architecture, RANDOM weights), sequence $SEQ"
    "$SERVING_PY" -c 'import torch, numpy' 2>/dev/null || { KINDS="c node"; NO_PY="$SERVING_PY cannot import torch and numpy"; }
elif [ $rc = 3 ]; then
    NAME=ch_PP-OCRv4_rec_infer ONNX="$ROOT/.deps/models/ch_PP-OCRv4_rec_infer.onnx" ST=""
    KIND="real ch_PP-OCRv4_rec_infer.onnx (BERT-base needs PyTorch)"
    KINDS="c node"; NO_PY="PyTorch is unavailable: $(sed -n 's/.* msg="\(.*\)"$/\1/p' "$WORK/paper.log" | tail -n 1)"
else
    die "scripts/models/paper-models.sh failed: $(tail -n 3 "$WORK/paper.log")"
fi
# registration (as tetris-profiler index would): tensor identities, so that
# no start hashes the model
"$BIN/tetris-agent" index "$ONNX" -o "$WORK/onnx.manifest.json" 2>/dev/null || die "tetris-agent index $ONNX failed"
[ -z "$ST" ] || "$BIN/tetris-agent" index "$ST" -o "$WORK/st.manifest.json" 2>/dev/null || die "tetris-agent index $ST failed"
bytes=$(stat -c %s "$ONNX")
# N private instances of one language at a time: at most 1.5 copies of the
# weights each (PyTorch's private instance), within half of MemAvailable
fit=$(awk -v b="$bytes" '/^MemAvailable:/ { print int($2 * 1024 / 2 / (1.5 * b)) }' /proc/meminfo)
NOTE=""
if [ "$fit" -lt "$N" ]; then
    [ "$fit" -ge 2 ] || die "too little memory available for two private instances"
    NOTE=" (capped from $N: memory available)"
    N=$fit
fi
"$BIN/tetris-onnx-run" "$ONNX" --private --dim "$SEQ" --seed 1 --oip-request "$WORK/req.json" \
    >"$WORK/want.json" 2>"$WORK/want.log" || die "tetris-onnx-run $ONNX: $(tail -n 3 "$WORK/want.log")"
WANT=$(jq -r .sha256 "$WORK/want.json")

# ---- the limits, in the same run ----
ms_of() { local t0; t0=$(now_ms); "$@" >/dev/null 2>&1; echo $(($(now_ms) - t0)); }
cat "$ONNX" ${ST:+"$ST"} >/dev/null # page cache warm: no figure reads the disk
read_ms=$(ms_of cat "$ONNX")
sha_ms=$(ms_of sha256sum "$ONNX")
# runtime_alone KIND: median ms of the runtime started and stopped
runtime_alone() {
    local r ms=()
    for r in $(seq "$REPS"); do
        case $1 in
        c) ms+=("$(ms_of "$BIN/tetris-function" --version)") ;;
        node) ms+=("$(ms_of node -e "require('onnxruntime-node')")") ;;
        python) ms+=("$(ms_of "$SERVING_PY" -c 'import torch, numpy')") ;;
        esac
    done
    median "${ms[@]}"
}

# ---- instances ----
# start KIND PHASE I: instance I, asked the request twice; appends
# "pid launcher first_answer_ms next_answer_ms sha256" to $WORK/KIND.PHASE.
start() {
    local kind=$1 phase=$2 i=$3 file=$ONNX manifest="$WORK/onnx.manifest.json" out t0 t1 sha sha2
    local cmd=()
    [ "$kind" != python ] || { file=$ST; manifest="$WORK/st.manifest.json"; }
    case $kind in
    c) cmd=("$BIN/tetris-function" --model "$file" --listen 127.0.0.1:0) ;;
    node) cmd=(node "$ROOT/function/node/index.js") ;;
    python) cmd=("$SERVING_PY" "$ROOT/function/python/index.py") ;;
    esac
    if [ "$phase" = private ]; then
        if [ "$kind" = c ]; then cmd+=(--private); else cmd=(env TETRIS_MODEL="$file" port=0 "${cmd[@]}"); fi
    elif [ "$kind" = c ]; then
        cmd+=(--store "$STORE" --manifest "$manifest")
    else
        cmd=(env port=0 "$BIN/tetris-agent" exec --store "$STORE" --manifest "$manifest" --model "$file" -- "${cmd[@]}")
    fi
    out="$WORK/$kind.$phase.$i"
    progress "$kind $phase: instance $i/$N"
    t0=$(now_ms)
    serve_start "$out" "${cmd[@]}" || { PIDS+=("$SERVE_LAUNCHER"); echo "bench/languages: $kind $phase $i: $SERVE_ERROR" >&2; return 1; }
    PIDS+=("$SERVE_LAUNCHER")
    sha=$(oip_answer "http://127.0.0.1:$SERVE_PORT" "$NAME" "$WORK/req.json" "$out.resp") || return 1
    t1=$(now_ms)
    sha2=$(oip_answer "http://127.0.0.1:$SERVE_PORT" "$NAME" "$WORK/req.json" "$out.resp2") || return 1
    [ "$sha2" = "$sha" ] || { echo "bench/languages: $kind $phase $i: a second answer differs from the first" >&2; return 1; }
    echo "$SERVE_PID $SERVE_LAUNCHER $((t1 - t0)) $(($(now_ms) - t1)) ${sha%% *}" >>"$WORK/$kind.$phase"
}

# measure KIND PHASE: "own_kb exec_kb store_pss_kb" per instance into
# $WORK/KIND.PHASE.mem (own: the function's PSS outside the store).
measure() {
    local pid launcher first next sha own sup s
    while read -r pid launcher first next sha; do
        s=0
        [ "$2" = private ] || s=$(pss_kb "$pid" "$STORE/")
        own=$(($(pss_kb "$pid") - s))
        sup=0
        [ "$launcher" = "$pid" ] || sup=$(pss_kb "$launcher")
        echo "$own $sup $s"
    done <"$WORK/$1.$2" >"$WORK/$1.$2.mem"
}

start_daemon() {
    mkdir -p "$STORE"
    daemon_start "$STORE" "$WORK/daemon.log" || die "$DAEMON_ERROR"
    DAEMON=$DAEMON_PID
    TMPFS_NOTE=$(sed -n 's/.*event=store-tmpfs state=\([a-z-]*\) .* huge=\([a-z_-]*\).*/\1 \2/p' "$WORK/daemon.log")
}

# run_kind KIND: both phases of one language; sets STORE_KB_<KIND>,
# DAEMON_KB_<KIND> and the runtime figure.
failed=0
run_kind() {
    local kind=$1 i
    : >"$WORK/$kind.private"; : >"$WORK/$kind.shared"
    for i in $(seq "$N"); do start "$kind" private "$i" || return 1; done
    measure "$kind" private
    stop_instances
    start_daemon
    for i in $(seq "$N"); do start "$kind" shared "$i" || return 1; done
    measure "$kind" shared
    eval "STORE_KB_$kind=$(store_kb "$STORE")"
    eval "DAEMON_KB_$kind=$(pss_kb "$DAEMON")"
    eval "FALLBACKS_$kind=$(cat "$WORK/$kind".shared.*.log | grep -c 'event=fallback\|event=view-fallback\|event=private-fallback')"
    stop_instances
    stop_daemon
    rm -rf "$STORE"
    eval "ALONE_$kind=$(runtime_alone "$kind")"
}
for kind in $KINDS; do
    run_kind "$kind" || { stop_instances; stop_daemon; failed=1; }
done
progress_done

lang_name() { case $1 in c) echo C ;; node) echo Node.js ;; python) echo Python ;; esac; }
label() {
    case $1 in
    c) echo "C: tetris-function, bert-base.onnx" ;;
    node) echo "Node.js: function/node (onnxruntime-node $(node -p "require('onnxruntime-node/package.json').version" 2>/dev/null)), bert-base.onnx; shared under exec" ;;
    python) echo "Python: function/python (PyTorch $("$SERVING_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)), bert-base.safetensors; shared under exec" ;;
    esac | sed "s/bert-base\.onnx/$NAME.onnx/"
}

echo "Machine: $(nproc) cores ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)), $(($(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) / 1048576)) GiB RAM; load average $LOAD_START at the start, $(cut -d' ' -f1 /proc/loadavg) at the end."
echo "Model: $KIND; $N instances per language and mode$NOTE, one after another; 1 intra-op thread each."
[ -z "${NO_PY:-}" ] || echo "No Python rows: $NO_PY."
echo "Store: $(case "${TMPFS_NOTE:-}" in "mounted within_size" | "reused within_size") echo "a tmpfs of the daemon's own, 2 MiB pages" ;; *) echo "the directory as it is ($STORE_ROOT): the daemon could not mount its tmpfs" ;; esac)."
echo "Limits: reading the $((bytes / 1000000)) MB ONNX file from the page cache $read_ms ms, SHA-256 of it (sha256sum, one core) $sha_ms ms."
echo
echo "| language, function, model | private: MiB per instance | shared: instance's own (outside the store) | shared: its exec | store, once (MiB) | shared: MiB per instance, store / $N included | saved per instance | node daemon (MiB) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for kind in $KINDS; do
    [ -s "$WORK/$kind.shared.mem" ] || continue
    eval "skb=\$STORE_KB_$kind dkb=\$DAEMON_KB_$kind"
    awk -v n="$N" -v skb="$skb" -v dkb="$dkb" -v label="$(label "$kind")" -v exec="$([ "$kind" = c ] && echo no || echo yes)" '
        function mib(k) { return sprintf("%.1f", k / 1024) }
        FNR == 1 { f++ }
        f == 1 { priv += $1 }
        f == 2 { own += $1; sup += $2 }
        END {
            per = (own + sup + skb) / n
            printf "| %s | %s | %s | %s | %s | %s | %s (%.0f%%) | %s |\n", label, mib(priv / n), mib(own / n),
                   exec == "yes" ? mib(sup / n) : "-", mib(skb), mib(per), mib(priv / n - per), 100 * (priv / n - per) / (priv / n), mib(dkb)
        }' "$WORK/$kind.private.mem" "$WORK/$kind.shared.mem"
done
echo
echo "| language | private: start to first answer, ms (median of $N) | shared cold: first instance, empty store | shared warm: median of $((N - 1)), tensors resident | warm / private | next answer, ms (median of all) | runtime alone, ms (median of $REPS) | outputs |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
for kind in $KINDS; do
    [ -s "$WORK/$kind.shared" ] || continue
    priv=$(median $(cut -d' ' -f3 "$WORK/$kind.private"))
    cold=$(head -n 1 "$WORK/$kind.shared" | cut -d' ' -f3)
    warm=$(median $(tail -n +2 "$WORK/$kind.shared" | cut -d' ' -f3))
    next=$(median $(cat "$WORK/$kind.private" "$WORK/$kind.shared" | cut -d' ' -f4))
    shas=$(cat "$WORK/$kind.private" "$WORK/$kind.shared" | cut -d' ' -f5 | sort -u)
    eval "alone=\$ALONE_$kind fb=\$FALLBACKS_$kind"
    if [ "$kind" = python ]; then
        [ "$(echo "$shas" | wc -l)" = 1 ] && outputs="identical, private and shared" || { outputs="DIFFER"; failed=1; }
    else
        [ "$shas" = "$WANT" ] && outputs="identical to tetris-onnx-run --private" || { outputs="DIFFER"; failed=1; }
    fi
    [ "$fb" = 0 ] || { outputs="$outputs; $fb FELL BACK to private"; failed=1; }
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$(lang_name "$kind")" "$priv" "$cold" "$warm" \
        "$(awk -v a="$warm" -v b="$priv" 'BEGIN { printf "%.2f", a / b }')" "$next" "$alone" "$outputs"
done
exit $failed
