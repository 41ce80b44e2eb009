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
# Environment: TETRIS_DEMO_INSTANCES (per real model, default 4),
# TETRIS_DEMO_PAPER_INSTANCES (part 2, default 8, spread over the base and
# its variants; 0 skips part 2), TETRIS_DEMO_SEQ (part 2's sequence length,
# default 128), TETRIS_BIN (default bin/), TETRIS_DEMO_DIR (store parent,
# default /dev/shm), TETRIS_CACHE (where part 2's models are cached).
set -eu

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${TETRIS_BIN:-$ROOT/bin}"
MODELS="$ROOT/.deps/models"
N="${TETRIS_DEMO_INSTANCES:-4}"
SYNTH_N="${TETRIS_DEMO_PAPER_INSTANCES:-8}"
SEQ="${TETRIS_DEMO_SEQ:-128}"
case "$N$SYNTH_N$SEQ" in
*[!0-9]*) echo "demo: TETRIS_DEMO_INSTANCES, TETRIS_DEMO_PAPER_INSTANCES and TETRIS_DEMO_SEQ must be numbers" >&2; exit 2 ;;
esac
[ "$SEQ" -ge 1 ] && [ "$SEQ" -le 512 ] || { echo "demo: TETRIS_DEMO_SEQ must be 1..512 (BERT's positions)" >&2; exit 2; }
[ "$N" -ge 1 ] || { echo "demo: TETRIS_DEMO_INSTANCES must be at least 1" >&2; exit 2; }
# model file, instances (small models get fewer)
DEMO_MODELS="ch_PP-OCRv4_rec_infer.onnx:$N ch_PP-OCRv4_det_infer.onnx:$N
ch_ppocr_mobile_v2.0_cls_infer.onnx:2 silero_vad_v5.onnx:2 silero_vad_v6.onnx:2"

for p in tetris-agent tetris-onnx-run tetris-synth-model; do
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

# pss_kb PID [PREFIX]: the process's PSS in kB, or only that of its
# mappings of files under PREFIX.
pss_kb() {
    if [ $# -eq 1 ]; then
        awk '/^Pss:/ { print $2 }' "/proc/$1/smaps_rollup"
    else
        awk -v pre="$2" '/^[0-9a-f]+-[0-9a-f]+ / { in_store = index($6, pre) == 1 }
                         /^Pss:/ && in_store { kb += $2 } END { print kb + 0 }' "/proc/$1/smaps"
    fi
}

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
    "$BIN/tetris-reclaimer" --store "$1" --listen "" --interval 3600 --store-tmpfs huge \
        2>"$WORK/daemon.log" &
    DAEMON_PID=$!
    i=0
    while [ ! -S "$1/public/ingest.sock" ]; do
        kill -0 $DAEMON_PID 2>/dev/null || { cat "$WORK/daemon.log" >&2; exit 1; }
        i=$((i + 1)); [ $i -lt 200 ] || { echo "demo: daemon did not start" >&2; exit 1; }
        sleep 0.05
    done
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
    store_bytes=$(( $(du -sk "$STORE/public/tensors" | cut -f1) * 1024 ))
    fallbacks=$(cat "$WORK/${P}tetris".*.json | jq -s '[.[] | select(.fell_back)] | length')
    holders=$("$BIN/tetris-agent" inspect --store "$STORE" 2>/dev/null | tail -1)
    stop_phase
    stop_daemon
    verify=$("$BIN/tetris-agent" verify --store "$STORE" 2>/dev/null || true)
    print_table
}

# print_table: the table of the phases just run.
print_table() {
awk -F'\t' -v store_bytes="$store_bytes" -v daemon_kb="$daemon_kb" '
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
        printf "%-36s %5s | %10s %12s | %10s %20s\n", "model", "inst", "memory MiB", "start ms", "memory MiB", "start ms cold/warm"
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
[ "$SYNTH_N" -gt 0 ] || exit 0

# cap_to_memory BYTES FACTOR WHAT: caps SYNTH_N at the instances of BYTES x
# FACTOR each that fit in half of the memory available now, CAP_NOTE saying
# so; with fewer than two, part 2 is skipped.
cap_to_memory() {
    fit=$(awk -v b="$1" -v f="$2" '/^MemAvailable:/ { print int($2 * 1024 / 2 / (b * f)) }' /proc/meminfo)
    CAP_NOTE=""
    if [ "$fit" -lt "$SYNTH_N" ]; then
        [ "$fit" -ge 2 ] || { echo; echo "part 2 skipped: too little memory available for two $3"; exit 0; }
        CAP_NOTE=" (capped from $SYNTH_N: memory available)"
        SYNTH_N=$fit
    fi
}

paper_rc=0
"$ROOT/scripts/models/paper-models.sh" bert-base:3 >"$WORK/paper.list" 2>"$WORK/paper.log" || paper_rc=$?
if [ "$paper_rc" = 0 ]; then
    MODELS=$(dirname "$(head -1 "$WORK/paper.list")")
    STORE="$WORK/bert-store"
    P=bert.
    # A private instance holds its weights and ONNX Runtime (measured: the
    # file's size + ~25 MiB): cap the count at what fits in half of the
    # memory available now.
    bytes=$(stat -c %s "$MODELS/bert-base.onnx")
    cap_to_memory "$bytes" 1.3 "private instances"
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
    exit 0
fi
[ "$paper_rc" = 3 ] || { echo "demo: scripts/models/paper-models.sh failed:" >&2; cat "$WORK/paper.log" >&2; exit 1; }
echo
echo "part 2: PyTorch is unavailable ($(grep -o 'msg="[^"]*"' "$WORK/paper.log" | tail -1)),"
echo "so the paper-scale part falls back to a SYNTHETIC model without inference."

# Every private instance holds its own copy: cap the count at what fits in
# half of the memory available now.
synth_model=$("$BIN/tetris-synth-model" bert-base 2>"$WORK/synth.log") ||
    { echo "demo: tetris-synth-model failed:" >&2; cat "$WORK/synth.log" >&2; exit 1; }
"$BIN/tetris-agent" index "$synth_model" -o "$WORK/synth.manifest.json" 2>"$WORK/synth.log" ||
    { echo "demo: tetris-agent index $synth_model failed:" >&2; cat "$WORK/synth.log" >&2; exit 1; }
synth_bytes=$(jq -r .tensor_bytes "$WORK/synth.manifest.json")
cap_to_memory "$synth_bytes" 1.1 "private copies"

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
