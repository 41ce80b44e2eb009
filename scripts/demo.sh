#!/bin/sh
# demo.sh - `make demo`: tetris on this machine, no cluster.
#
# Starts several instances of several real ONNX models twice: first the
# usual way (every instance loads its own copy of the weights), then with
# tetris (one copy per distinct tensor in a tensor store on tmpfs, mapped
# read-only by every instance). Every instance runs real inference through
# ONNX Runtime and stays alive while we measure. Prints memory (sum of PSS
# from /proc/PID/smaps_rollup) and startup time for both, and what tetris
# saved. Uses the node daemon (bin/tetris-reclaimer) when it is built,
# otherwise the agent's direct mode.
#
# Part 2 does the same at the paper's scale: BERT-base (the real
# architecture, 440 MB, RANDOM weights: no pretrained weights can be
# fetched) and three fine-tuned variants whose top 4 layers and head were
# trained on synthetic data, exported with PyTorch at first use and cached
# (scripts/models/paper-models.sh). Every instance runs real inference; the
# variants share the base's bottom layers through the store. Only where
# PyTorch cannot be installed does part 2 fall back to a SYNTHETIC model
# (random weights in BERT-base's shapes, bin/tetris-synth-model), loaded by
# `tetris-agent load --hold` without inference, and says so.
#
# Part 3 runs one model in three languages on one store, every instance an
# Open Inference Protocol server answering a real request: tetris-function
# (C) and the Node.js function (stock onnxruntime-node, under `tetris-agent
# exec`) on part 2's BERT-base ONNX export, which the store holds once for
# both; the PyTorch function (under exec) on the same weights as a
# safetensors state_dict, which shares with them what the two files store
# byte for byte and all its parameters among its own instances. Outputs are
# compared with the private runs (C and Node.js: with tetris-onnx-run's on
# the same seeded request). Without PyTorch: PP-OCRv4 rec, no Python rows.
#
# Environment: TETRIS_DEMO_INSTANCES (per real model, default 4),
# TETRIS_DEMO_PAPER_INSTANCES (part 2, default 8, spread over the base and
# its variants; 0 skips part 2), TETRIS_DEMO_SEQ (part 2's sequence length,
# default 128), TETRIS_DEMO_LANG_INSTANCES (part 3, per language, default
# 2; 0 skips part 3), TETRIS_DEMO_LANG_SEQ (part 3's sequence length,
# default 32: Debian's PyTorch multiplies with the reference BLAS, seconds
# per request), TETRIS_BIN (default bin/), TETRIS_DEMO_DIR (store parent,
# default /dev/shm), TETRIS_CACHE (where parts 2 and 3's models are
# cached).
set -eu

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${TETRIS_BIN:-$ROOT/bin}"
MODELS="$ROOT/.deps/models"
N="${TETRIS_DEMO_INSTANCES:-4}"
SYNTH_N="${TETRIS_DEMO_PAPER_INSTANCES:-8}"
LANG_N="${TETRIS_DEMO_LANG_INSTANCES:-2}"
SEQ="${TETRIS_DEMO_SEQ:-128}"
LANG_SEQ="${TETRIS_DEMO_LANG_SEQ:-32}"
case "$N$SYNTH_N$LANG_N$SEQ$LANG_SEQ" in
*[!0-9]*) echo "demo: TETRIS_DEMO_INSTANCES, TETRIS_DEMO_PAPER_INSTANCES, TETRIS_DEMO_LANG_INSTANCES, TETRIS_DEMO_SEQ and TETRIS_DEMO_LANG_SEQ must be numbers" >&2; exit 2 ;;
esac
for s in "$SEQ" "$LANG_SEQ"; do
    [ "$s" -ge 1 ] && [ "$s" -le 512 ] || { echo "demo: TETRIS_DEMO_SEQ and TETRIS_DEMO_LANG_SEQ must be 1..512 (BERT's positions)" >&2; exit 2; }
done
[ "$N" -ge 1 ] || { echo "demo: TETRIS_DEMO_INSTANCES must be at least 1" >&2; exit 2; }
# model file, instances (small models get fewer)
DEMO_MODELS="ch_PP-OCRv4_rec_infer.onnx:$N ch_PP-OCRv4_det_infer.onnx:$N
ch_ppocr_mobile_v2.0_cls_infer.onnx:2 silero_vad_v5.onnx:2 silero_vad_v6.onnx:2"

for p in tetris-agent tetris-onnx-run tetris-synth-model tetris-function; do
    [ -x "$BIN/$p" ] || { echo "demo: $BIN/$p is missing; run make first" >&2; exit 1; }
done
"$ROOT/scripts/deps.sh" # the real models (cached after the first time)

parent="${TETRIS_DEMO_DIR:-/dev/shm}"
[ -d "$parent" ] && [ -w "$parent" ] || parent="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$parent/tetris-demo.XXXXXX")"
STORE="$WORK/store"
DAEMON_PID=""
cleanup() {
    exec 3>&- 2>/dev/null || true
    for p in $(cat "$WORK"/pids 2>/dev/null) $DAEMON_PID; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    chmod -R u+w "$WORK" 2>/dev/null || true
    # The daemon's tmpfs outlives it by design: the demo's goes with it.
    for m in $(findmnt -rn -o TARGET 2>/dev/null | grep "^$WORK/"); do umount -l "$m" || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# pss_kb, store_kb, serve_start, oip_answer: measured and driven as the
# benchmarks and tests/langs do.
. "$ROOT/scripts/lib/serving.sh"

# run_phase NAME ARGS...: starts every instance (one after another, so each
# startup is timed alone), waits until each has run inference and printed
# its result, then measures. Leaves the instances running.
# Files are named $WORK/$P$phase.*: P tells the parts apart.
P=""
run_phase() {
    phase=$P$1; shift
    : >"$WORK/pids"
    mkfifo "$WORK/hold.$phase"
    exec 3<>"$WORK/hold.$phase" # the instances hold their models until this closes
    for entry in $DEMO_MODELS; do
        model=${entry%%:*}; count=${entry##*:}
        i=1
        while [ "$i" -le "$count" ]; do
            out="$WORK/$phase.$model.$i"
            manifest=""
            [ "$phase" = "${P}tetris" ] && manifest="--manifest=$WORK/$model.manifest.json"
            # shellcheck disable=SC2086
            "$BIN/tetris-onnx-run" "$MODELS/$model" "$@" $manifest --hold <"$WORK/hold.$phase" 3>&- \
                >"$out.json" 2>"$out.log" &
            echo $! >>"$WORK/pids"
            echo "$! $model $i" >>"$WORK/$phase.instances"
            while [ ! -s "$out.json" ]; do
                kill -0 $! 2>/dev/null || { echo "demo: $model failed:" >&2; cat "$out.log" >&2; exit 1; }
                sleep 0.05
            done
            [ -t 2 ] && printf '\r  %-8s started %-40s' "$phase" "$model #$i" >&2
            i=$((i + 1))
        done
    done
    [ -t 2 ] && printf '\r%70s\r' '' >&2
    while read -r pid model i; do
        total=$(pss_kb "$pid")
        store_part=0
        [ "$phase" = "${P}tetris" ] && store_part=$(pss_kb "$pid" "$STORE/")
        jq -r --arg m "$model" --arg i "$i" --arg t "$total" --arg s "$store_part" \
            '[$m, $i, $t, $s, (.load_ms + .session_ms), .run_ms, .sha256] | @tsv' \
            "$WORK/$phase.$model.$i.json"
    done <"$WORK/$phase.instances" >"$WORK/$phase.tsv"
}

stop_phase() {
    exec 3>&-
    for p in $(cat "$WORK/pids"); do wait "$p" 2>/dev/null || true; done
    : >"$WORK/pids"
}

# start_daemon STORE: the node daemon on STORE (reclaiming nothing while
# the demo runs), once its socket is there. Sets DAEMON_PID and HOW.
start_daemon() {
    mkdir -p "$1"
    if [ ! -x "$BIN/tetris-reclaimer" ]; then
        HOW="direct mode (no node daemon built): instances ingest themselves"
        return 0
    fi
    HOW="node daemon (tetris-reclaimer) ingests, instances map read-only"
    # The store on a tmpfs of the daemon's own with 2 MiB pages, as the
    # chart does (where this user may not mount: the directory as it is).
    daemon_start "$1" "$WORK/daemon.log" || { echo "demo: $DAEMON_ERROR" >&2; exit 1; }
    on=$(sed -n 's/.*event=store-tmpfs state=\([a-z-]*\) .* huge=\([a-z_-]*\).*/\1 \2/p' "$WORK/daemon.log")
    case "$on" in
    "mounted within_size" | "reused within_size") HOW="$HOW; store on a tmpfs of its own, 2 MiB pages" ;;
    *) HOW="$HOW; store on $(df --output=fstype "$1" | tail -1) with 4 KiB pages ($(grep -o 'event=store-tmpfs.*' "$WORK/daemon.log"))" ;;
    esac
}

stop_daemon() {
    [ -n "$DAEMON_PID" ] || return 0
    kill "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=""
}

# Without the daemon the instances ingest themselves (--direct).
direct_flag() { [ -n "$DAEMON_PID" ] || echo --direct; }
daemon_pss_kb() { if [ -n "$DAEMON_PID" ]; then pss_kb "$DAEMON_PID"; else echo 0; fi; }

# demo_models ARGS...: DEMO_MODELS (files under MODELS) without tetris,
# then with tetris on STORE, ARGS passed to every tetris-onnx-run; prints
# the table. Files are $WORK/$P*.
demo_models() {
    # ---- without tetris: every instance loads its own weights ----
    run_phase private --private "$@"
    stop_phase

    # ---- with tetris: one shared copy in the store ----
    # Registration, once per model (in a cluster: tetris-profiler index): the
    # manifest names every tensor by digest, so instances need not hash.
    for entry in $DEMO_MODELS; do
        model=${entry%%:*}
        "$BIN/tetris-agent" index "$MODELS/$model" -o "$WORK/$model.manifest.json" 2>/dev/null
    done
    start_daemon "$STORE"
    # shellcheck disable=SC2046
    run_phase tetris --store "$STORE" $(direct_flag) "$@"
    daemon_kb=$(daemon_pss_kb)
    how=$HOW
    # allocated pages, not file sizes: a 4-byte tensor still takes a page
    store_bytes=$(($(store_kb "$STORE") * 1024))
    fallbacks=$(cat "$WORK/${P}tetris".*.json | jq -s '[.[] | select(.fell_back)] | length')
    holders=$("$BIN/tetris-agent" inspect --store "$STORE" 2>/dev/null | tail -1)
    stop_phase
    stop_daemon
    verify=$("$BIN/tetris-agent" verify --store "$STORE" 2>/dev/null || true)
    print_table
}

# print_table: the table of the phases just run; TABLE_WHAT and
# TABLE_START name its first column and tetris's start column.
print_table() {
awk -F'\t' -v store_bytes="$store_bytes" -v daemon_kb="$daemon_kb" \
    -v what="${TABLE_WHAT:-model}" -v start="${TABLE_START:-start ms cold/warm}" '
    function mib(kb) { return sprintf("%.1f", kb / 1024) }
    FNR == 1 { phase++ }
    {
        m = $1
        if (!(m in seen)) { seen[m] = 1; order[++nm] = m }
        if (phase == 1) {
            n[m]++; priv_kb[m] += $3; priv_ms[m] += $5; priv_sha[m] = $7
        } else {
            # the store pages count once, below, not per instance
            tet_kb[m] += $3 - $4
            if ($2 == 1) cold_ms[m] = $5; else { warm_ms[m] += $5; warm_n[m]++ }
            if ($7 != priv_sha[m]) differ[m] = 1
        }
    }
    END {
        printf "%-36s %5s | %-23s | %-31s\n", "", "", "   without tetris", "        with tetris"
        printf "%-36s %5s | %10s %12s | %10s %20s\n", what, "inst", "memory MiB", "start ms", "memory MiB", start
        printf "%s\n", "-------------------------------------------------------------------------------------------------"
        for (k = 1; k <= nm; k++) {
            m = order[k]
            tp += priv_kb[m]; tt += tet_kb[m]
            warm = warm_n[m] ? sprintf("%.0f", warm_ms[m] / warm_n[m]) : "-"
            printf "%-36s %5d | %10s %12.0f | %10s %13.0f / %4s%s\n", m, n[m], mib(priv_kb[m]),
                   priv_ms[m] / n[m], mib(tet_kb[m]), cold_ms[m], warm, (m in differ) ? "  OUTPUT DIFFERS" : ""
        }
        store_kb = store_bytes / 1024
        printf "%-42s | %10s %12s | %10s   (one copy of every distinct tensor)\n", "tensor store (tmpfs)", "-", "", mib(store_kb)
        printf "%-42s | %10s %12s | %10s\n", "node daemon", "-", "", mib(daemon_kb)
        printf "%s\n", "-------------------------------------------------------------------------------------------------"
        total_t = tt + store_kb + daemon_kb
        printf "%-42s | %10s %12s | %10s\n", "total memory (sum of PSS)", mib(tp), "", mib(total_t)
        printf "\nsaved: %s MiB (%.0f%% of the memory without tetris)\n", mib(tp - total_t), 100 * (tp - total_t) / tp
        nd = 0; for (m in differ) nd++
        printf "outputs: %s\n", nd ? "SOME DIFFER (see above)" : "identical with and without tetris for every instance (SHA-256 of output bytes)"
    }' "$WORK/${P}private.tsv" "$WORK/${P}tetris.tsv"

echo "tetris mode: $how"
echo "fallbacks to a private load: $fallbacks"
echo "store while running: $holders"
echo "store check: $(echo "$verify" | tail -1)"
}

echo "tetris demo, part 1: $(echo "$DEMO_MODELS" | wc -w) real ONNX models, several instances each, real inference"
echo
demo_models
echo
echo "memory = sum of PSS over the instances (shared pages split among their users);"
echo "with tetris the store's pages are counted once, in full, as 'tensor store'."
echo "start = time until the instance is ready to serve: weights loaded (or mapped)"
echo "and the ONNX Runtime session created. cold = first instance of a model (ingests"
echo "into the store), warm = later ones (map what is already there)."

# ---- part 2: a paper-scale model ----
# The real models above are small next to ONNX Runtime's own memory; the
# paper's models are hundreds of MB. BERT-base (random weights) and its
# fine-tuned variants, exported once with PyTorch, each with real inference.
demo_paper() {
    [ "$SYNTH_N" -gt 0 ] || return 0
    paper_models
    if [ "$paper_rc" = 0 ]; then
        MODELS=$PAPER_DIR
        STORE="$WORK/bert-store"
        P=bert.
        # A private instance holds its weights and ONNX Runtime (measured: the
        # file's size + ~25 MiB): cap the count at what fits in half of the
        # memory available now.
        bytes=$(stat -c %s "$MODELS/bert-base.onnx")
        cap_to_memory "$bytes" 1.3 "private instances" || return 0
        # SYNTH_N instances over the base and its 3 variants, the base first
        DEMO_MODELS=""
        k=0
        for m in bert-base bert-base-ft1 bert-base-ft2 bert-base-ft3; do
            c=$(( SYNTH_N / 4 + (k < SYNTH_N % 4 ? 1 : 0) ))
            [ "$c" -eq 0 ] || DEMO_MODELS="$DEMO_MODELS $m.onnx:$c"
            k=$((k + 1))
        done
        echo
        echo
        echo "tetris demo, part 2: the paper's scale, $SYNTH_N instances$CAP_NOTE, real inference (sequence $SEQ)"
        echo "BERT-base (real architecture, $(( (bytes + 500000) / 1000000 )) MB, RANDOM weights) and 3 fine-tuned variants"
        echo "(top 4 layers + head trained on synthetic data, bottom 8 layers + embeddings identical)"
        echo
        demo_models --dim "$SEQ"
        echo "sharing: $(awk -F'\t' '{ s += $3; t += $4 } END { printf "each variant shares %.0f%% of its tensor bytes with bert-base", 100 * s / t }' "$MODELS/sharing.tsv" 2>/dev/null || echo "see $MODELS")"
        echo
        echo "The weights are random (no pretrained BERT can be downloaded here): the"
        echo "outputs mean nothing, but the computation, sizes and memory are BERT-base's."
        return 0
    fi
    [ "$paper_rc" = 3 ] || { echo "demo: scripts/models/paper-models.sh failed:" >&2; cat "$WORK/paper.log" >&2; exit 1; }
    echo
    echo "part 2: PyTorch is unavailable ($(paper_error)),"
    echo "so the paper-scale part falls back to a SYNTHETIC model without inference."

    # Every private instance holds its own copy: cap the count at what fits in
    # half of the memory available now.
    synth_model=$("$BIN/tetris-synth-model" bert-base 2>"$WORK/synth.log") ||
        { echo "demo: tetris-synth-model failed:" >&2; cat "$WORK/synth.log" >&2; exit 1; }
    "$BIN/tetris-agent" index "$synth_model" -o "$WORK/synth.manifest.json" 2>"$WORK/synth.log" ||
        { echo "demo: tetris-agent index $synth_model failed:" >&2; cat "$WORK/synth.log" >&2; exit 1; }
    synth_bytes=$(jq -r .tensor_bytes "$WORK/synth.manifest.json")
    cap_to_memory "$synth_bytes" 1.1 "private copies" || return 0

    echo
    echo
    echo "tetris demo, part 2 (FALLBACK): a SYNTHETIC paper-scale model (random weights in BERT-base's"
    echo "real shapes, $(( (synth_bytes + 500000) / 1000000 )) MB = $(mib "$synth_bytes") MiB), $SYNTH_N instances$CAP_NOTE, weights loaded only (no inference)"
    echo

    # synth_phase NAME ARGS...: starts SYNTH_N `tetris-agent load --hold`
    # instances one after another (each load timed alone), waits until each has
    # loaded, then measures. Leaves them running.
    synth_phase() {
        phase=$1; shift
        : >"$WORK/pids"
        mkfifo "$WORK/hold.synth.$phase"
        exec 3<>"$WORK/hold.synth.$phase"
        i=1
        while [ "$i" -le "$SYNTH_N" ]; do
            out="$WORK/synth.$phase.$i"
            "$BIN/tetris-agent" load --hold "$@" --manifest "$WORK/synth.manifest.json" "$synth_model" \
                <"$WORK/hold.synth.$phase" 3>&- >"$out.json" 2>"$out.log" &
            echo $! >>"$WORK/pids"
            until grep -q '}' "$out.json" 2>/dev/null; do
                kill -0 $! 2>/dev/null || { echo "demo: synthetic instance $i failed:" >&2; cat "$out.log" >&2; exit 1; }
                sleep 0.05
            done
            [ -t 2 ] && printf '\r  %-8s started synthetic instance #%d   ' "$phase" "$i" >&2
            i=$((i + 1))
        done
        [ -t 2 ] && printf '\r%70s\r' '' >&2
        i=1
        while read -r pid; do
            total=$(pss_kb "$pid") # an instance that died on the way ends the demo here
            store_part=0
            [ "$phase" = tetris ] && store_part=$(pss_kb "$pid" "$SYNTH_STORE/")
            jq -r --arg t "$total" --arg s "$store_part" \
                '[$t, $s, .load_ms, .fell_back] | @tsv' "$WORK/synth.$phase.$i.json"
            i=$((i + 1))
        done <"$WORK/pids" >"$WORK/synth.$phase.tsv"
    }

    # without tetris: every instance reads the file into its own memory
    synth_phase private --private
    stop_phase

    # with tetris: the node daemon ingests once, every instance maps the store
    SYNTH_STORE="$WORK/synth-store"
    start_daemon "$SYNTH_STORE"
    # shellcheck disable=SC2046
    synth_phase tetris --store "$SYNTH_STORE" $(direct_flag)
    daemon_kb=$(daemon_pss_kb)
    store_bytes=$(( $(du -sk "$SYNTH_STORE/public/tensors" | cut -f1) * 1024 ))
    stop_phase

    awk -F'\t' -v store_bytes="$store_bytes" -v daemon_kb="$daemon_kb" -v n="$SYNTH_N" \
        -v model="synthetic-bert-base (random)" '
        function mib(kb) { return sprintf("%.1f", kb / 1024) }
        FNR == 1 { phase++ }
        phase == 1 { priv_kb += $1; priv_ms += $3 }
        phase == 2 {
            tet_kb += $1 - $2 # the store pages count once, below
            if (FNR == 1) cold_ms = $3; else { warm_ms += $3; warm_n++ }
            if ($4 != "false") fallbacks++
        }
        END {
            printf "%-36s %5s | %-23s | %-31s\n", "", "", "   without tetris", "        with tetris"
            printf "%-36s %5s | %10s %12s | %10s %20s\n", "model", "inst", "memory MiB", "load ms", "memory MiB", "load ms cold/warm"
            printf "%s\n", "-------------------------------------------------------------------------------------------------"
            warm = warm_n ? sprintf("%.0f", warm_ms / warm_n) : "-"
            printf "%-36s %5d | %10s %12.0f | %10s %13.0f / %4s\n", model, n, mib(priv_kb), priv_ms / n,
                   mib(tet_kb), cold_ms, warm
            store_kb = store_bytes / 1024
            printf "%-42s | %10s %12s | %10s   (one copy of every distinct tensor)\n", "tensor store (tmpfs)", "-", "", mib(store_kb)
            printf "%-42s | %10s %12s | %10s\n", "node daemon", "-", "", mib(daemon_kb)
            printf "%s\n", "-------------------------------------------------------------------------------------------------"
            total_t = tet_kb + store_kb + daemon_kb
            printf "%-42s | %10s %12s | %10s\n", "total memory (sum of PSS)", mib(priv_kb), "", mib(total_t)
            printf "\nsaved: %s MiB (%.0f%% of the memory without tetris; %.1fx less)\n",
                   mib(priv_kb - total_t), 100 * (priv_kb - total_t) / priv_kb, priv_kb / total_t
            printf "fallbacks to a private load: %d\n", fallbacks
        }' "$WORK/synth.private.tsv" "$WORK/synth.tetris.tsv"

    echo "tetris mode: $HOW"
    echo
    echo "load = tetris-agent's time to load the weights: read from the file (page cache"
    echo "warm) into private memory, or mapped from the store. cold = the first instance"
    echo "(the daemon ingests the model into the store), warm = the later ones. No ONNX"
    echo "Runtime here: with inference each instance would add its runtime's own memory"
    echo "(part 1), the same with and without tetris."
}

# paper_models: BERT-base and its 3 variants (scripts/models/paper-models.sh:
# exported with PyTorch at first use, then cached), once for parts 2 and 3.
# Sets paper_rc (its exit status; 3: PyTorch unavailable) and PAPER_DIR.
paper_models() {
    [ -z "${paper_rc:-}" ] || return 0
    paper_rc=0
    "$ROOT/scripts/models/paper-models.sh" bert-base:3 >"$WORK/paper.list" 2>"$WORK/paper.log" || paper_rc=$?
    PAPER_DIR=$(dirname "$(head -1 "$WORK/paper.list")")
}

# paper_error: why paper-models.sh failed (its last msg="...", quotes and all).
paper_error() { sed -n 's/.* msg="\(.*\)"$/\1/p' "$WORK/paper.log" | tail -n 1; }

# cap_to_memory BYTES FACTOR WHAT: caps SYNTH_N at the instances of BYTES x
# FACTOR each that fit in half of the memory available now, CAP_NOTE saying
# so; with fewer than two it says that part 2 is skipped and returns 1.
cap_to_memory() {
    fit=$(awk -v b="$1" -v f="$2" '/^MemAvailable:/ { print int($2 * 1024 / 2 / (b * f)) }' /proc/meminfo)
    CAP_NOTE=""
    if [ "$fit" -lt "$SYNTH_N" ]; then
        [ "$fit" -ge 2 ] || { echo; echo "part 2 skipped: too little memory available for two $3"; return 1; }
        CAP_NOTE=" (capped from $SYNTH_N: memory available)"
        SYNTH_N=$fit
    fi
}

# ---- part 3: one model, three languages ----
# Functions in C, Node.js and Python, every one an Open Inference Protocol
# server answering a real request, on one model and one store:
# tetris-function (C) and the Node.js function (stock onnxruntime-node,
# under `tetris-agent exec`) on BERT-base's ONNX export, the PyTorch
# function (under exec) on the same weights as a safetensors state_dict.
# The ONNX model's tensors are one copy for C and Node.js; the PyTorch
# instances share all their parameters among themselves and, with the
# ONNX instances, those the two files store byte for byte (embeddings,
# biases, LayerNorms: the exporter stores every Linear weight transposed).
# Without PyTorch: PP-OCRv4 rec for C and Node.js, and no Python rows.

# lang_start PHASE KIND I: instance I of KIND (c, node, python), private
# (PHASE private) or on the store (tetris), asked the seeded request;
# appends "pid launcher kind i ms sha256" to $WORK/lang.PHASE.instances,
# ms from starting the process to its answer.
lang_start() {
    _phase=$1 _kind=$2 _i=$3
    _out="$WORK/lang.$_phase.$_kind.$_i"
    _file=$LANG_ONNX _manifest=$LANG_ONNX_MANIFEST
    [ "$_kind" != python ] || { _file=$LANG_ST; _manifest=$LANG_ST_MANIFEST; }
    case $_kind in
    c) set -- "$BIN/tetris-function" --model "$_file" --listen 127.0.0.1:0 ;;
    node) set -- node "$ROOT/function/node/index.js" ;;
    python) set -- "$SERVING_PY" "$ROOT/function/python/index.py" ;;
    esac
    if [ "$_phase" = private ]; then
        if [ "$_kind" = c ]; then set -- "$@" --private; else set -- env TETRIS_MODEL="$_file" port=0 "$@"; fi
    elif [ "$_kind" = c ]; then
        # shellcheck disable=SC2046
        set -- "$@" --store "$STORE" --manifest "$_manifest" $(direct_flag)
    else
        # shellcheck disable=SC2046
        set -- env port=0 "$BIN/tetris-agent" exec --store "$STORE" --manifest "$_manifest" $(direct_flag) \
            --model "$_file" -- "$@"
    fi
    [ -t 2 ] && printf '\r  %-8s starting %-40s' "$_phase" "$(lang_label "$_kind") #$_i" >&2
    _t0=$(now_ms)
    serve_start "$_out" "$@" || { echo "demo: $_kind instance $_i ($_phase): $SERVE_ERROR" >&2; exit 1; }
    echo "$SERVE_LAUNCHER" >>"$WORK/pids"
    _sha=$(oip_answer "http://127.0.0.1:$SERVE_PORT" "$LANG_NAME" "$WORK/lang.req.json" "$_out.resp") || exit 1
    echo "$SERVE_PID $SERVE_LAUNCHER $_kind $_i $(($(now_ms) - _t0)) ${_sha%% *}" >>"$WORK/lang.$_phase.instances"
}

lang_label() {
    case $1 in
    c) echo "C: tetris-function" ;;
    node) echo "Node.js: function/node (exec)" ;;
    python) echo "PyTorch: function/python (exec)" ;;
    esac
}

# lang_measure PHASE: every instance's row for print_table; a function
# under exec counts its exec too (it holds the store's references).
lang_measure() {
    while read -r pid launcher kind i ms sha; do
        total=$(pss_kb "$pid")
        [ "$launcher" = "$pid" ] || total=$((total + $(pss_kb "$launcher")))
        store_part=0
        [ "$1" = private ] || store_part=$(pss_kb "$pid" "$STORE/")
        printf '%s\t%s\t%s\t%s\t%s\t-\t%s\n' "$(lang_label "$kind")" "$i" "$total" "$store_part" "$ms" "$sha"
    done <"$WORK/lang.$1.instances" >"$WORK/lang.$1.tsv"
}

# stop_instances: SIGTERM to every instance (exec passes it on), waits.
stop_instances() {
    for p in $(cat "$WORK/pids"); do kill -TERM "$p" 2>/dev/null || true; done
    for p in $(cat "$WORK/pids"); do wait "$p" 2>/dev/null || true; done
    : >"$WORK/pids"
}

# store_files PID: the store's files PID maps, one per line, sorted.
store_files() {
    awk -v pre="$STORE/" 'index($6, pre) == 1 { print $6 }' "/proc/$1/maps" | sort -u
}
files_bytes() { xargs -r stat -c %s | awk '{ b += $1 } END { print b + 0 }'; }
first_pid() { awk -v k="$2" '$3 == k && $4 == 1 { print $1 }' "$WORK/lang.$1.instances"; }

demo_languages() {
    [ "$LANG_N" -gt 0 ] || return 0
    echo
    echo
    if ! command -v node >/dev/null 2>&1 || ! (cd "$WORK" && node -e "require('onnxruntime-node')") 2>/dev/null; then
        echo "part 3 skipped: Node.js with onnxruntime-node is missing (scripts/deps.sh installs both)"
        return 0
    fi
    paper_models
    LANG_KINDS="c node python"
    if [ "$paper_rc" = 0 ]; then
        LANG_NAME=bert-base LANG_ONNX="$PAPER_DIR/bert-base.onnx" LANG_ST="$PAPER_DIR/bert-base.safetensors"
        "$SERVING_PY" -c 'import torch, numpy' 2>/dev/null || LANG_KINDS="c node"
    else
        [ "$paper_rc" = 3 ] || { echo "demo: scripts/models/paper-models.sh failed:" >&2; cat "$WORK/paper.log" >&2; exit 1; }
        LANG_NAME=ch_PP-OCRv4_rec_infer LANG_ONNX="$ROOT/.deps/models/ch_PP-OCRv4_rec_infer.onnx" LANG_ST=""
        LANG_KINDS="c node"
    fi
    # Registration, once per model file, as in parts 1 and 2.
    LANG_ONNX_MANIFEST="$WORK/lang.onnx.manifest.json" LANG_ST_MANIFEST="$WORK/lang.safetensors.manifest.json"
    "$BIN/tetris-agent" index "$LANG_ONNX" -o "$LANG_ONNX_MANIFEST" 2>/dev/null
    [ -z "$LANG_ST" ] || "$BIN/tetris-agent" index "$LANG_ST" -o "$LANG_ST_MANIFEST" 2>/dev/null
    bytes=$(stat -c %s "$LANG_ONNX")
    # A private set (one instance of each language) holds about 4 copies of
    # the weights (PyTorch's private copy and its runtime are the larger).
    fit=$(awk -v b="$bytes" '/^MemAvailable:/ { print int($2 * 1024 / 2 / (4 * b)) }' /proc/meminfo)
    CAP_NOTE=""
    if [ "$fit" -lt "$LANG_N" ]; then
        [ "$fit" -ge 1 ] || { echo "part 3 skipped: too little memory available for one private instance of each language"; return 0; }
        CAP_NOTE=" (capped from $LANG_N: memory available)"
        LANG_N=$fit
    fi
    echo "tetris demo, part 3: one model, three languages, $LANG_N instances per language$CAP_NOTE, each answering a real request"
    if [ "$paper_rc" = 0 ]; then
        echo "C (tetris-function) and Node.js (onnxruntime-node) on bert-base.onnx, PyTorch on bert-base.safetensors:"
        echo "BERT-base (real architecture, RANDOM weights), the same weights in both files, sequence $LANG_SEQ"
        [ "$LANG_KINDS" != "c node" ] || echo "(no Python rows: $SERVING_PY cannot import torch and numpy)"
    else
        echo "C (tetris-function) and Node.js (onnxruntime-node) on $LANG_NAME.onnx; no Python rows:"
        echo "PyTorch is unavailable ($(paper_error)), and with it BERT-base"
    fi
    echo
    # One seeded request for every instance; tetris-onnx-run's private
    # answer is what C and Node.js must give.
    "$BIN/tetris-onnx-run" "$LANG_ONNX" --private --dim "$LANG_SEQ" --seed 1 --oip-request "$WORK/lang.req.json" \
        >"$WORK/lang.want.json" 2>"$WORK/lang.want.log" ||
        { echo "demo: tetris-onnx-run $LANG_ONNX failed:" >&2; cat "$WORK/lang.want.log" >&2; exit 1; }
    P=lang.
    STORE="$WORK/lang-store"
    : >"$WORK/pids"

    # ---- without tetris: every instance loads its own weights ----
    for kind in $LANG_KINDS; do
        i=1
        while [ "$i" -le "$LANG_N" ]; do lang_start private "$kind" "$i"; i=$((i + 1)); done
    done
    lang_measure private
    stop_instances

    # ---- with tetris: one store for the three languages ----
    start_daemon "$STORE"
    onnx_store_kb=0
    for kind in $LANG_KINDS; do
        i=1
        while [ "$i" -le "$LANG_N" ]; do lang_start tetris "$kind" "$i"; i=$((i + 1)); done
        [ "$kind" != node ] || onnx_store_kb=$(store_kb "$STORE")
    done
    [ -t 2 ] && printf '\r%70s\r' '' >&2
    lang_measure tetris
    daemon_kb=$(daemon_pss_kb)
    how=$HOW
    store_bytes=$(($(store_kb "$STORE") * 1024))
    holders=$("$BIN/tetris-agent" inspect --store "$STORE" 2>/dev/null | tail -1)
    fallbacks=$({ cat "$WORK"/lang.tetris.c.*.out | jq -r 'select(.event == "ready") | .fell_back'
        grep -h 'prog=tetris-agent event=view ' "$WORK"/lang.tetris.*.log 2>/dev/null |
            sed -n 's/.* fallback=\([a-z-]*\).*/\1/p' | sed 's/^none$/false/'; } | grep -vc '^false$' || true)
    c_files="$WORK/lang.c.files" node_files="$WORK/lang.node.files"
    store_files "$(first_pid tetris c)" >"$c_files"
    store_files "$(first_pid tetris node)" >"$node_files"
    both=$(comm -12 "$c_files" "$node_files" | files_bytes)
    if [ "$LANG_KINDS" = "c node python" ]; then
        store_files "$(first_pid tetris python)" | comm -12 - "$c_files" | comm -12 - "$node_files" >"$WORK/lang.all.files"
        all3=$(files_bytes <"$WORK/lang.all.files")
        py_ingested=$(sed -n 's/.*prog=tetris-agent event=load .* ingested_bytes=\([0-9]*\).*/\1/p' "$WORK/lang.tetris.python.1.log" | head -n 1)
    fi
    stop_instances
    stop_daemon
    verify=$("$BIN/tetris-agent" verify --store "$STORE" 2>/dev/null || true)
    TABLE_WHAT="function" TABLE_START="start ms 1st/later"
    print_table
    TABLE_WHAT="" TABLE_START=""

    want=$(jq -r .sha256 "$WORK/lang.want.json")
    onnx_rows=$(cat "$WORK/lang.private.tsv" "$WORK/lang.tetris.tsv" | grep -v '^PyTorch' | cut -f7 | sort -u)
    if [ "$onnx_rows" = "$want" ]; then
        echo "C and Node.js: every answer has tetris-onnx-run --private's output bytes for the request (sha256 $(echo "$want" | cut -c1-16)...)"
    else
        echo "C and Node.js: ANSWERS DIFFER from tetris-onnx-run --private's ($want): $(echo "$onnx_rows" | tr '\n' ' ')"
    fi
    onnx_tensor_bytes=$(jq -r .tensor_bytes "$LANG_ONNX_MANIFEST")
    echo "one copy for C and Node.js: the store held $(mib $((onnx_store_kb * 1024))) MiB once they all ran: $(basename "$LANG_ONNX")'s"
    echo "  $(mib "$onnx_tensor_bytes") MiB of tensors once, not twice; a C and a Node.js instance map $(mib "$both") MiB of the same files"
    if [ "$LANG_KINDS" = "c node python" ]; then
        # distinct tensors (the store keeps one copy of each): all of the
        # PyTorch model's, and those the ONNX model has too
        # shellcheck disable=SC2046
        set -- $(jq -r -n --slurpfile o "$LANG_ONNX_MANIFEST" --slurpfile s "$LANG_ST_MANIFEST" '
            ($o[0].tensors | map({key: .digest, value: 1}) | from_entries) as $in
            | ($s[0].tensors | map({key: .digest, value: .nbytes}) | from_entries) as $st
            | "\([$st[]] | add) \([$st | to_entries[] | select($in[.key]) | .value] | add // 0)"')
        st_bytes=$1 by_digest=$2
        echo "store bytes shared across languages: $(mib "$by_digest") MiB. Of the PyTorch model's $(mib "$st_bytes") MiB of distinct"
        echo "  tensors, these have the ONNX model's digests (embeddings, biases, LayerNorms: the same bytes)"
        echo "  and were in the store already; the first PyTorch instance had the daemon ingest the other"
        echo "  $(mib "$py_ingested") MiB (its Linear weights, which the ONNX export stores transposed). A C, a Node.js and"
        echo "  a PyTorch instance map $(mib "$all3") MiB of the same store files at once; the PyTorch instances"
        echo "  share all their parameters with each other."
    fi
    echo
    echo "memory = sum of PSS as above; a Node.js or PyTorch instance with tetris counts"
    echo "its tetris-agent exec too (the process that holds the store's references)."
    echo "start = from starting the process (with exec: the model's load and its view)"
    echo "to its first answer, inference included. With tetris the first C instance"
    echo "has the daemon ingest the ONNX model; the Node.js instances find every tensor"
    if [ "$LANG_KINDS" = "c node python" ]; then
        echo "there, and the first PyTorch instance has the daemon ingest what is missing."
        echo "PyTorch computes with its own kernels: its answers are compared with its"
        echo "private run's, C's and Node.js's with tetris-onnx-run's."
    else
        echo "there."
    fi
}

demo_paper
demo_languages
