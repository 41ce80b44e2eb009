#!/bin/bash
# run-bench.sh - the benchmarks behind BENCHMARKS.md (`make bench`).
#
# Every figure is printed next to its baseline, measured in the same run:
#   memory     N instances sharing one store vs N private copies
#   warm       warm start from a populated store vs private load (warm page cache)
#   ingest     cold ingest throughput into an empty store, per core
#   concurrent 32 simultaneous cold loads vs one cold load, and one copy
#   variants   k synthetic fine-tuned variants sharing a backbone
#   hugepages  the store on tmpfs huge=within_size vs a default tmpfs
# then every other area's bench/*/run.sh.
#
# The large models are SYNTHETIC (tetris-synth-model: real BERT shapes,
# seeded random weights); the real model is the largest ONNX model the build
# installed; the memory section also runs BERT-base's real architecture
# with RANDOM weights (scripts/models/paper-models.sh, PyTorch at first use). Tables are Markdown, on stdout; progress goes to stderr on a TTY.
#
# Environment:
#   TETRIS_BIN              programs under test (required; `make bench` sets it)
#   BENCH_QUICK=1           fewer instances and repetitions, for iteration
#   BENCH_SECTIONS          subset, e.g. "memory warm" (default: all)
#   BENCH_REPS              repetitions for medians (default 5, quick 3)
#   BENCH_PRIVATE_BUDGET_MIB  most memory private baselines may use at once
#                           (default 6144, never more than half of MemAvailable)
#   BENCH_STORE_ROOT        tmpfs for the stores (default /dev/shm)
#   TETRIS_CACHE            where synthetic models are cached
# Exit status: 0 all sections ran, 1 a section failed, 2 usage/setup error.
set -uo pipefail

BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the tetris programs}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
AGENT="$BIN/tetris-agent"
ONNX_RUN="$BIN/tetris-onnx-run"
SYNTH="$BIN/tetris-synth-model"
QUICK="${BENCH_QUICK:-0}"
SECTIONS="${BENCH_SECTIONS:-memory warm ingest concurrent variants hugepages others}"
if [ "$QUICK" = 1 ]; then
    REPS="${BENCH_REPS:-3}"; COUNTS="1 2 4 8"; CONCURRENT=8; VARIANTS=4
else
    REPS="${BENCH_REPS:-5}"; COUNTS="1 2 4 8 16 32"; CONCURRENT=32; VARIANTS=8
fi
VARIANT_SHARED_LAYERS=8 # of bert-base's 12: embeddings + 8 layers shared
STORE_ROOT="${BENCH_STORE_ROOT:-/dev/shm}"
WORK="$(mktemp -d /tmp/tetris-bench.XXXXXX)" || exit 2
STORES="$STORE_ROOT/tetris-bench.$$"
AGENT_LOG="$WORK/agent.log"
FIFO="$WORK/hold.fifo"
HOLDERS=()
DAEMON_PID=
MOUNTS=()
failed=0

# ---- plumbing ---------------------------------------------------------------

progress() { if [ -t 2 ]; then printf '\r\033[K[bench] %s' "$*" >&2; fi; }
progress_done() { if [ -t 2 ]; then printf '\r\033[K' >&2; fi; }
warn() { progress_done; echo "bench: $*" >&2; }
die() { warn "$*"; exit 2; }

cleanup() {
    stop_holders
    stop_daemon
    exec 9>&- 2>/dev/null
    rm -rf "$STORES"
    local m
    for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
pct_of() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", 100 * a / b }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
pct_saved() { awk -v t="$1" -v p="$2" 'BEGIN { if (p <= 0) { print "n/a"; exit } v = 100 * (1 - t / p); if (v > -0.05 && v < 0.05) v = 0; printf "%.1f", v }'; }
# median [-p PRECISION] VALUES...
median() {
    local prec=1
    [ "$1" = -p ] && { prec=$2; shift 2; }
    printf '%s\n' "$@" | sort -g | awk -v p="$prec" '{ v[NR] = $1 }
        END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.*f\n", p, m }'
}
jfield() { jq -r ".$2" "$1"; }
mem_available_kb() { awk '/^MemAvailable:/ { print $2 }' /proc/meminfo; }
meminfo_kb() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }

# cpu_now: CPU_S = user+sys seconds of this shell's finished children (the
# second line of `times`, which must run in this shell, not a subshell).
cpu_now() {
    times >"$WORK/times"
    CPU_S=$(awk 'NR == 2 { n = split($0, f, " "); s = 0
                   for (i = 1; i <= n; i++) { split(f[i], p, "m"); sub("s", "", p[2]); s += p[1] * 60 + p[2] }
                   print s }' "$WORK/times")
}

# fresh_store NAME: an empty directory for a store; prints its path.
fresh_store() {
    rm -rf "${STORES:?}/$1"
    mkdir -p "$STORES/$1" && echo "$STORES/$1"
}
# unmount DIR: one of our tmpfs mounts, forgotten by the cleanup once gone.
unmount() {
    umount "$1" || return 1
    local m kept=()
    for m in "${MOUNTS[@]}"; do [ "$m" = "$1" ] || kept+=("$m"); done
    MOUNTS=("${kept[@]}")
}
store_bytes() { du -s -B1 "$1/public/tensors" 2>/dev/null | cut -f1 || echo 0; }
store_files() { find "$1/public/tensors" -type f 2>/dev/null | wc -l; }

# agent_once OUT ARGS...: one `tetris-agent load`, its JSON in OUT; sets
# WALL_MS. A store or direct load that fell back to private memory is a
# failure here: its numbers would not measure tetris.
agent_once() {
    local out=$1 t0; shift
    t0=$(now_ms)
    "$AGENT" load "$@" >"$out" 2>>"$AGENT_LOG" || { warn "tetris-agent load $* failed (see below)"; tail -3 "$AGENT_LOG" >&2; return 1; }
    WALL_MS=$(( $(now_ms) - t0 ))
    if [ "$(jfield "$out" fell_back)" != false ]; then
        warn "tetris-agent load $* fell back to private memory: $(jfield "$out" fallback_reason)"
        return 1
    fi
}

# ---- the node daemon: ingests for store-mode loads, records their holders ----

# start_daemon STORE: tetris-reclaimer on STORE, reclaiming nothing during
# the benchmark (keep-alive of a day); returns once its socket is there.
start_daemon() {
    "$BIN/tetris-reclaimer" --store "$1" --listen "" --scrub-rate 0 --keep-alive 86400 \
        --interval 3600 2>>"$WORK/daemon.log" 9>&- &
    DAEMON_PID=$!
    until [ -S "$1/public/ingest.sock" ]; do
        if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
            warn "tetris-reclaimer exited at start"; tail -3 "$WORK/daemon.log" >&2; DAEMON_PID=; return 1
        fi
        sleep 0.05
    done
}

stop_daemon() {
    [ -n "$DAEMON_PID" ] || return 0
    kill -TERM "$DAEMON_PID" 2>/dev/null
    wait "$DAEMON_PID" 2>/dev/null
    DAEMON_PID=
}

# ---- holders: `tetris-agent load --hold` (or `tetris-onnx-run --hold`)
# processes, each an instance keeping a model loaded; stdin on one FIFO ------

open_fifo() { [ -p "$FIFO" ] || mkfifo "$FIFO"; exec 9<>"$FIFO"; }

# start_holder OUT RUNNER ARGS...: an instance in the background, its pid
# joins HOLDERS. RUNNER: agent (tetris-agent load: the weights only) or onnx
# (tetris-onnx-run: an ONNX Runtime session that has run one inference).
start_holder() {
    local out=$1 runner=$2; shift 2
    : >"$out" # emptied here, not in the child: wait_loaded must not see an old file
    case $runner in
    agent) "$AGENT" load --hold "$@" <"$FIFO" >>"$out" 2>>"$AGENT_LOG" 9>&- & ;;
    onnx) "$ONNX_RUN" --hold "$@" <"$FIFO" >>"$out" 2>>"$AGENT_LOG" 9>&- & ;;
    esac
    HOLDERS+=($!)
}

# wait_loaded OUT PID: until the holder printed its JSON (it flushes when loaded).
wait_loaded() {
    until grep -q '}' "$1" 2>/dev/null; do
        if ! kill -0 "$2" 2>/dev/null; then
            warn "holder $2 exited before loading"; tail -3 "$AGENT_LOG" >&2; return 1
        fi
        sleep 0.05
    done
}

# Closing the FIFO's last writer is EOF on every holder's stdin: they unload
# and exit. Stragglers get SIGTERM after 30 s.
stop_holders() {
    [ ${#HOLDERS[@]} -gt 0 ] || return 0
    exec 9>&-
    local pid waited=0
    for pid in "${HOLDERS[@]}"; do
        while kill -0 "$pid" 2>/dev/null && [ $waited -lt 600 ]; do sleep 0.05; waited=$((waited + 1)); done
        kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    HOLDERS=()
    open_fifo
}

# holder_mem PID STORE: "<kB outside the store> <kB of store mappings>".
# Outside = Pss of every mapping not under STORE + the page tables (VmPTE),
# i.e. what this instance costs beyond the shared tensors.
holder_mem() {
    local pte
    pte=$(awk '/^VmPTE:/ { print $2 }' "/proc/$1/status")
    awk -v store="$2/" -v pte="${pte:-0}" '
        /^[0-9a-f]+-[0-9a-f]+ / { in_store = ($6 != "" && index($6, store) == 1); next }
        /^Pss:/ { pss += $2; if (in_store) spss += $2 }
        END { printf "%d %d\n", pss - spss + pte, spss }' "/proc/$1/smaps"
}

# holders_mem STORE: sum over HOLDERS of holder_mem, "<outside kB> <store kB>".
holders_mem() {
    local pid o s to=0 ts=0
    for pid in "${HOLDERS[@]}"; do
        read -r o s < <(holder_mem "$pid" "$1")
        to=$((to + o)); ts=$((ts + s))
    done
    echo "$to $ts"
}

# ---- models -----------------------------------------------------------------

# index_model MODEL: writes (once) and prints the path of MODEL's manifest.
# Registration-time work (DESIGN.md, data flow 1): loads below pass it so they
# do not re-hash the model file.
index_model() {
    local m
    m="$WORK/$(basename "$1").manifest.json"
    if [ ! -s "$m" ]; then
        "$AGENT" index "$1" -o "$m" 2>>"$AGENT_LOG" || { warn "tetris-agent index $1 failed"; return 1; }
    fi
    echo "$m"
}
model_bytes() { jq -r '.tensor_bytes' "$1"; }

synth() {
    progress "generating synthetic $*"
    "$SYNTH" "$@" 2>>"$WORK/synth.log" || die "tetris-synth-model $* failed: $(tail -1 "$WORK/synth.log")"
}

# The real model: the largest ONNX model the build installed.
real_model() { ls -S "$ROOT"/.deps/models/*.onnx 2>/dev/null | head -1; }

# warm_page_cache FILE: read twice, so the private baseline reads from memory.
warm_page_cache() { cat "$1" >/dev/null && cat "$1" >/dev/null; }

private_budget_kb() {
    local budget=$(( ${BENCH_PRIVATE_BUDGET_MIB:-6144} * 1024 )) half=$(( $(mem_available_kb) / 2 ))
    [ $half -lt $budget ] && budget=$half
    echo $budget
}

# ---- 1. memory of N instances -------------------------------------------------

bench_memory_model() { # LABEL RUNNER MODEL
    local label=$1 runner=$2 model=$3 manifest bytes store n out o s
    manifest=$(index_model "$model") || return 1
    bytes=$(model_bytes "$manifest")
    local -A priv=() tet=() tet_out=() tet_store=() tet_daemon=()

    # tetris: the node daemon ingests the model for the first load; then
    # every instance maps it read-only in store mode.
    store=$(fresh_store memory)
    start_daemon "$store" || return 1
    agent_once "$WORK/ingest.json" --store "$store" --manifest "$manifest" "$model" || return 1
    local started=0 max=${COUNTS##* }
    for n in $COUNTS; do
        while [ $started -lt "$n" ]; do
            progress "memory $label: tetris instance $((started + 1))/$max"
            out="$WORK/hold.$started.json"
            start_holder "$out" "$runner" --store "$store" --manifest "$manifest" "$model"
            wait_loaded "$out" "${HOLDERS[-1]}" || { stop_holders; stop_daemon; return 1; }
            [ "$(jfield "$out" fell_back)" = false ] || warn "holder $started fell back: $(jfield "$out" fallback_reason)"
            started=$((started + 1))
        done
        read -r o s < <(holders_mem "$store")
        tet_out[$n]=$((o * 1024))
        read -r o s < <(holder_mem "$DAEMON_PID" "$store")
        tet_daemon[$n]=$((o * 1024))
        tet_store[$n]=$(store_bytes "$store")
        tet[$n]=$(( tet_out[$n] + tet_daemon[$n] + tet_store[$n] ))
    done
    stop_holders
    # What sharing costs an instance that reads every weight (inference
    # does): page tables for the whole model, which the idle holders above
    # have not built.
    local pte_kb=""
    if "$BIN/tetris-bench-map" --store "$store" --manifest "$manifest" >"$WORK/map.json" 2>>"$AGENT_LOG"; then
        pte_kb=$(jfield "$WORK/map.json" vm_pte_kb)
    fi
    stop_daemon
    rm -rf "$store"

    # baseline: N private copies, as many as fit the budget (an instance
    # takes its tensors + 5%, or what the measured ones took, if more).
    local budget measured_max=0 per_kb=$(( bytes / 1024 * 21 / 20 ))
    budget=$(private_budget_kb)
    started=0
    for n in $COUNTS; do
        [ $measured_max -eq 0 ] || [ $(( priv[$measured_max] / 1024 / measured_max )) -le $per_kb ] ||
            per_kb=$(( priv[$measured_max] / 1024 / measured_max ))
        [ $(( n * per_kb )) -le "$budget" ] || break
        while [ $started -lt "$n" ]; do
            progress "memory $label: private instance $((started + 1))/$n"
            out="$WORK/priv.$started.json"
            if [ "$runner" = agent ]; then
                start_holder "$out" agent --private --manifest "$manifest" "$model"
            else
                start_holder "$out" onnx --private "$model"
            fi
            wait_loaded "$out" "${HOLDERS[-1]}" || { stop_holders; return 1; }
            started=$((started + 1))
        done
        read -r o s < <(holders_mem "/nonexistent")
        priv[$n]=$((o * 1024)); measured_max=$n
    done
    stop_holders
    progress_done
    [ $measured_max -gt 0 ] || { warn "memory $label: not even one private copy fits the budget"; return 1; }

    # Where N private copies do not fit: the paper's linear baseline
    # I * (M_tensor + M_others), per instance from the largest measured N.
    local per=$(( priv[$measured_max] / measured_max ))
    echo
    echo "### Memory: N instances of $label ($(mib "$bytes") MiB of tensors)"
    echo
    echo "| N | private: sum of Pss (MiB) | private is | tetris: store (MiB) | tetris: node daemon (MiB) | tetris: instances outside the store (MiB) | tetris total (MiB) | saved |"
    echo "|---:|---:|---|---:|---:|---:|---:|---:|"
    for n in $COUNTS; do
        local p kind=measured
        if [ -n "${priv[$n]:-}" ]; then p=${priv[$n]}; else p=$((per * n)); kind=extrapolated; fi
        printf '| %d | %s | %s | %s | %s | %s | %s | %s%% |\n' "$n" "$(mib "$p")" "$kind" \
            "$(mib "${tet_store[$n]}")" "$(mib "${tet_daemon[$n]}")" "$(mib "${tet_out[$n]}")" \
            "$(mib "${tet[$n]}")" "$(pct_saved "${tet[$n]}" "$p")"
    done
    # Per extra instance: what tetris adds beyond the instance's own private
    # memory (M_others = a private instance's Pss minus the tensor bytes).
    local first=${COUNTS%% *} last=${COUNTS##* }
    local inc=$(( (tet[$last] - tet[$first]) / (last - first) ))
    local others=$(( per - bytes ))
    echo
    printf -- '- Per extra tetris instance: %s MiB; a private instance beyond its tensors (M_others): %s MiB; difference: %s MiB = %s%% of the model (target: overhead <= 1%%).\n' \
        "$(mib $inc)" "$(mib $others)" "$(mib $((inc - others)))" "$(pct_of $((inc - others)) "$bytes")"
    [ -z "$pte_kb" ] ||
        printf -- '- An instance that reads every weight also builds page tables for the mappings: %s MiB = %s%% of the model (tetris-bench-map, all pages touched).\n' \
            "$(mib $((pte_kb * 1024)))" "$(pct_of $((pte_kb * 1024)) "$bytes")"
}

bench_memory() {
    local real large base
    large=$(synth bert-large) || return 1
    base=$(synth bert-base) || return 1
    real=$(real_model)
    if [ -n "$real" ]; then
        bench_memory_model "real $(basename "$real"), weights loaded (tetris-agent load)" agent "$real" || return 1
        bench_memory_model "real $(basename "$real"), after one inference (tetris-onnx-run, ONNX Runtime)" onnx "$real" || return 1
    else
        warn "no real ONNX model under .deps/models (run make deps)"
    fi
    bench_memory_model "synthetic-bert-base" agent "$base" || return 1
    bench_memory_model "synthetic-bert-large" agent "$large" || return 1
    # Paper scale with real inference: BERT-base's real architecture with
    # random weights, exported once with PyTorch (skipped where it cannot
    # be installed).
    local bert rc=0
    progress "exporting bert-base (PyTorch, cached)"
    bert=$("$ROOT/scripts/models/paper-models.sh" bert-base:3 2>>"$WORK/paper-models.log") || rc=$?
    progress_done
    case $rc in
    0) bench_memory_model "bert-base (real architecture, random weights), after one inference (tetris-onnx-run, sequence 256)" \
           onnx "$(echo "$bert" | head -1)" || return 1 ;;
    3) warn "PyTorch unavailable: no paper-scale real-inference row ($(tail -1 "$WORK/paper-models.log"))" ;;
    *) warn "scripts/models/paper-models.sh failed: $(tail -1 "$WORK/paper-models.log")"; return 1 ;;
    esac
}

# ---- 2. warm start ---------------------------------------------------------------

# warm_vs_private LABEL STORE MODEL MANIFEST: median load_ms and process wall
# time of store-mode loads (all tensors resident) vs private loads.
warm_vs_private() {
    local label=$1 store=$2 model=$3 manifest=$4 i
    local -a wl=() ww=() pl=() pw=()
    warm_page_cache "$model"
    for i in $(seq "$REPS"); do
        progress "warm start $label: rep $i/$REPS"
        agent_once "$WORK/warm.json" --store "$store" --manifest "$manifest" "$model" || return 1
        [ "$(jfield "$WORK/warm.json" mapped_bytes)" = "$(jfield "$WORK/warm.json" bytes)" ] ||
            warn "warm start did not map every tensor: $(jfield "$WORK/warm.json" fallback_reason)"
        wl+=("$(jfield "$WORK/warm.json" load_ms)"); ww+=("$WALL_MS")
        agent_once "$WORK/priv.json" --private --manifest "$manifest" "$model" || return 1
        pl+=("$(jfield "$WORK/priv.json" load_ms)"); pw+=("$WALL_MS")
    done
    progress_done
    WARM_LOAD=$(median "${wl[@]}"); WARM_WALL=$(median "${ww[@]}")
    PRIV_LOAD=$(median "${pl[@]}"); PRIV_WALL=$(median "${pw[@]}")
}

bench_warm() {
    local model manifest store
    model=$(synth bert-large) || return 1
    manifest=$(index_model "$model") || return 1
    store=$(fresh_store warm)
    start_daemon "$store" || return 1
    agent_once "$WORK/ingest.json" --store "$store" --manifest "$manifest" "$model" || { stop_daemon; return 1; }
    warm_vs_private synthetic-bert-large "$store" "$model" "$manifest" || { stop_daemon; return 1; }
    stop_daemon
    rm -rf "$store"
    echo
    echo "### Warm start: synthetic-bert-large ($(mib "$(model_bytes "$manifest")") MiB), median of $REPS"
    echo
    echo "| | private load, warm page cache | tetris warm start (all tensors resident) | speed-up |"
    echo "|---|---:|---:|---:|"
    printf '| load_ms (agent) | %s | %s | %sx |\n' "$PRIV_LOAD" "$WARM_LOAD" "$(ratio "$PRIV_LOAD" "$WARM_LOAD")"
    printf '| process wall ms | %s | %s | %sx |\n' "$PRIV_WALL" "$WARM_WALL" "$(ratio "$PRIV_WALL" "$WARM_WALL")"
    echo
    echo "Target: >= 10x faster (the paper: 91.6% less startup time)."
}

# ---- 3. cold ingest throughput ---------------------------------------------------

# ingest_rate ARGS...: one `tetris-agent load --direct ARGS` into an empty
# store; sets RATE_WALL (GB/s over the agent's load_ms) and RATE_CORE (GB/s
# over the process's user + system CPU time).
ingest_rate() {
    local store c0
    store=$(fresh_store ingest)
    cpu_now; c0=$CPU_S
    agent_once "$WORK/cold.json" --direct --store "$store" "$@" || return 1
    cpu_now
    RATE_WALL=$(jq -r '.ingested_bytes / .load_ms / 1e6' "$WORK/cold.json")
    RATE_CORE=$(awk -v b="$(jfield "$WORK/cold.json" ingested_bytes)" -v c="$(awk -v a="$CPU_S" -v b="$c0" 'BEGIN { print a - b }')" \
        'BEGIN { printf "%.3f", b / c / 1e9 }')
}

bench_ingest() {
    local model manifest i
    model=$(synth bert-large) || return 1
    manifest=$(index_model "$model") || return 1
    warm_page_cache "$model"
    local -a wall=() core=() nm_wall=() nm_core=()
    for i in $(seq "$REPS"); do
        progress "cold ingest: rep $i/$REPS"
        # With the manifest: read + SHA-256/CRC32 verify + publish.
        ingest_rate --manifest "$manifest" "$model" || return 1
        wall+=("$RATE_WALL"); core+=("$RATE_CORE")
        # Without: the agent first hashes the model file to learn the digests.
        ingest_rate "$model" || return 1
        nm_wall+=("$RATE_WALL"); nm_core+=("$RATE_CORE")
    done
    rm -rf "${STORES:?}/ingest"
    progress_done
    echo
    echo "### Cold ingest into an empty store: synthetic-bert-large, median of $REPS (GB = 10^9 bytes)"
    echo
    echo "| load | GB/s (wall, agent load_ms) | GB/s per core (bytes / process CPU time) |"
    echo "|---|---:|---:|"
    printf '| --direct --manifest (read, SHA-256 + CRC32 verify, publish) | %s | %s |\n' "$(median -p 2 "${wall[@]}")" "$(median -p 2 "${core[@]}")"
    printf '| --direct, no manifest (hash the model first, then the above) | %s | %s |\n' "$(median -p 2 "${nm_wall[@]}")" "$(median -p 2 "${nm_core[@]}")"
    echo
    echo "Target: >= 1 GB/s per core. CPU time is the whole process (start-up and parsing included)."
}

# ---- 4. concurrent cold loads -------------------------------------------------------

# concurrent_loads MODE: one cold load (median of REPS), then CONCURRENT cold
# loads at once into an empty store; prints a table row per figure and checks
# that exactly one copy resulted. MODE: direct (every loader ingests under
# the store's per-tensor locks) or store (the node daemon ingests for all).
concurrent_loads() {
    local mode=$1 store single t0 total i rc=0 ingested=0 files sb
    local -a flags=() singles=() pids=()
    [ "$mode" = direct ] && flags=(--direct)
    for i in $(seq "$REPS"); do
        progress "concurrent ($mode): single cold load $i/$REPS"
        store=$(fresh_store concurrent)
        [ "$mode" = direct ] || start_daemon "$store" || return 1
        agent_once "$WORK/one.json" "${flags[@]}" --store "$store" --manifest "$manifest" "$model" || return 1
        stop_daemon
        singles+=("$WALL_MS")
    done
    single=$(median -p 0 "${singles[@]}")

    progress "concurrent ($mode): $CONCURRENT cold loads at once"
    store=$(fresh_store concurrent)
    [ "$mode" = direct ] || start_daemon "$store" || return 1
    t0=$(now_ms)
    for i in $(seq "$CONCURRENT"); do
        "$AGENT" load "${flags[@]}" --store "$store" --manifest "$manifest" "$model" \
            >"$WORK/conc.$i.json" 2>>"$AGENT_LOG" 9>&- &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    total=$(( $(now_ms) - t0 ))
    stop_daemon
    progress_done
    [ $rc = 0 ] || { warn "a concurrent load failed"; tail -3 "$AGENT_LOG" >&2; return 1; }
    for i in $(seq "$CONCURRENT"); do
        [ "$(jfield "$WORK/conc.$i.json" fell_back)" = false ] || warn "concurrent load $i fell back to private memory"
        ingested=$(( ingested + $(jfield "$WORK/conc.$i.json" ingested_bytes) ))
    done
    files=$(store_files "$store")
    sb=$(store_bytes "$store")
    rm -rf "$store"
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$mode" "$single" "$total" "$(ratio "$total" "$single")" \
        "$files / $distinct" "$(mib "$sb")" \
        "$([ "$mode" = direct ] && mib $ingested || echo "n/a (daemon)")" \
        "$([ "$files" = "$distinct" ] && { [ "$mode" != direct ] || [ "$ingested" = "$bytes" ]; } && echo yes || echo NO)"
}

bench_concurrent() {
    local model manifest bytes distinct mode
    model=$(synth bert-large) || return 1
    manifest=$(index_model "$model") || return 1
    bytes=$(model_bytes "$manifest")
    distinct=$(jq '[.tensors[].digest] | unique | length' "$manifest")
    warm_page_cache "$model"
    echo
    echo "### $CONCURRENT concurrent cold loads of synthetic-bert-large ($(mib "$bytes") MiB, $distinct distinct tensors) into an empty store"
    echo
    echo "| load mode | one cold load, wall ms (median of $REPS) | $CONCURRENT at once, wall ms until the last finished | ratio | tensor files / distinct tensors | store (MiB) | ingested by all loads together (MiB) | one copy |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|"
    for mode in direct store; do
        concurrent_loads "$mode" || return 1
    done
    echo
    echo "Target: <= 1.5x one cold load, and one copy. direct: each loader ingests what is missing under the store's per-tensor locks (in random order); store: loaders ask the node daemon (tetris-reclaimer), which ingests."
}

# ---- 5. cross-model: variants sharing a backbone ---------------------------------------

bench_variants() {
    local k model manifest store out o s budget base_bytes
    local -a models=() manifests=()
    for k in $(seq "$VARIANTS"); do
        model=$(synth --variant "$k" --shared-layers $VARIANT_SHARED_LAYERS bert-base) || return 1
        manifest=$(index_model "$model") || return 1
        models+=("$model"); manifests+=("$manifest")
    done
    local -A tet_store=() tet_out=() tet_daemon=() distinct=() priv=()
    store=$(fresh_store variants)
    start_daemon "$store" || return 1
    for k in $(seq "$VARIANTS"); do
        progress "variants: tetris, variant $k/$VARIANTS"
        out="$WORK/var.$k.json"
        start_holder "$out" agent --store "$store" --manifest "${manifests[k - 1]}" "${models[k - 1]}"
        wait_loaded "$out" "${HOLDERS[-1]}" || { stop_holders; stop_daemon; return 1; }
        [ "$(jfield "$out" fell_back)" = false ] || warn "variant $k fell back: $(jfield "$out" fallback_reason)"
        read -r o s < <(holders_mem "$store")
        tet_out[$k]=$((o * 1024))
        read -r o s < <(holder_mem "$DAEMON_PID" "$store")
        tet_daemon[$k]=$((o * 1024))
        tet_store[$k]=$(store_bytes "$store")
        # What one copy of each distinct tensor of variants 1..k amounts to.
        distinct[$k]=$(jq -s '[.[].tensors[]] | unique_by(.digest) | map(.nbytes) | add' "${manifests[@]:0:k}")
    done
    stop_holders
    stop_daemon
    rm -rf "$store"
    budget=$(private_budget_kb)
    base_bytes=$(model_bytes "${manifests[0]}")
    for k in $(seq "$VARIANTS"); do
        [ $(( k * (base_bytes / 1024) * 21 / 20 )) -le "$budget" ] || break
        progress "variants: private, variant $k/$VARIANTS"
        out="$WORK/pvar.$k.json"
        start_holder "$out" agent --private --manifest "${manifests[k - 1]}" "${models[k - 1]}"
        wait_loaded "$out" "${HOLDERS[-1]}" || { stop_holders; return 1; }
        read -r o s < <(holders_mem /nonexistent)
        priv[$k]=$((o * 1024))
    done
    stop_holders
    progress_done
    local last_measured=${#priv[@]}
    [ "$last_measured" -gt 0 ] || { warn "variants: not even one private copy fits the budget"; return 1; }
    local per=$(( priv[$last_measured] / last_measured ))
    echo
    echo "### Cross-model: k synthetic fine-tuned variants of synthetic-bert-base ($(mib "$base_bytes") MiB each; embeddings + $VARIANT_SHARED_LAYERS of 12 layers shared, 4 layers + pooler fine-tuned), one instance each"
    echo
    echo "| k | private: sum of Pss (MiB) | private is | distinct tensors (MiB) | tetris: store (MiB) | tetris: node daemon (MiB) | tetris: instances outside the store (MiB) | tetris total (MiB) | saved |"
    echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|"
    for k in $(seq "$VARIANTS"); do
        local p kind=measured total=$(( tet_store[$k] + tet_daemon[$k] + tet_out[$k] ))
        if [ -n "${priv[$k]:-}" ]; then p=${priv[$k]}; else p=$((per * k)); kind=extrapolated; fi
        printf '| %d | %s | %s | %s | %s | %s | %s | %s | %s%% |\n' "$k" "$(mib "$p")" "$kind" \
            "$(mib "${distinct[$k]}")" "$(mib "${tet_store[$k]}")" "$(mib "${tet_daemon[$k]}")" \
            "$(mib "${tet_out[$k]}")" "$(mib "$total")" "$(pct_saved "$total" "$p")"
    done
}

# ---- 6. huge pages -------------------------------------------------------------------

bench_hugepages() {
    local model manifest bytes size_mb kind dir store ingest_ms shm0 shm1 touch huge
    model=$(synth bert-large) || return 1
    manifest=$(index_model "$model") || return 1
    bytes=$(model_bytes "$manifest")
    size_mb=$(( bytes / 1048576 * 12 / 10 + 64 ))
    local -a rows=()
    for kind in default huge=within_size; do
        dir="$WORK/tmpfs-${kind%%=*}"
        mkdir -p "$dir"
        local opts="size=${size_mb}m"
        [ "$kind" = default ] || opts="$opts,$kind"
        if ! mount -t tmpfs -o "$opts" tetris-bench "$dir" 2>"$WORK/mount.err"; then
            echo
            echo "Huge pages: mounting a tmpfs ($opts) was refused: $(cat "$WORK/mount.err"). Not measured."
            return 0
        fi
        MOUNTS+=("$dir")
        store="$dir/store"
        local i ingest=()
        for i in $(seq "$REPS"); do
            progress "hugepages ($kind): cold ingest $i/$REPS"
            rm -rf "$store" && mkdir -p "$store"
            shm0=$(meminfo_kb ShmemHugePages)
            agent_once "$WORK/huge.json" --direct --store "$store" --manifest "$manifest" "$model" || return 1
            shm1=$(meminfo_kb ShmemHugePages)
            ingest+=("$(jfield "$WORK/huge.json" load_ms)")
        done
        ingest_ms=$(median -p 0 "${ingest[@]}")
        start_daemon "$store" || return 1
        warm_vs_private "$kind" "$store" "$model" "$manifest" || { stop_daemon; return 1; }
        stop_daemon
        local map_ms=() touch_ms=()
        for i in $(seq "$REPS"); do
            progress "hugepages ($kind): map and touch $i/$REPS"
            "$BIN/tetris-bench-map" --store "$store" --manifest "$manifest" >"$WORK/map.json" 2>>"$AGENT_LOG" ||
                { warn "tetris-bench-map failed"; tail -1 "$AGENT_LOG" >&2; return 1; }
            map_ms+=("$(jfield "$WORK/map.json" map_ms)"); touch_ms+=("$(jfield "$WORK/map.json" touch_ms)")
        done
        touch="$(median "${map_ms[@]}") / $(median "${touch_ms[@]}")"
        huge="$(jfield "$WORK/map.json" anon_huge_kb) / $(jfield "$WORK/map.json" shmem_pmd_kb) / $(jfield "$WORK/map.json" file_pmd_kb) / $(jfield "$WORK/map.json" vm_pte_kb)"
        rows+=("$(printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |' "$kind" \
            "$(mib "$(store_bytes "$store")")" "$(( (shm1 - shm0) / 1024 ))" "$ingest_ms" \
            "$WARM_LOAD" "$WARM_WALL" "$touch" "$huge" "$PRIV_LOAD")")
        rm -rf "$store"
        unmount "$dir"
    done
    progress_done
    echo
    echo "### Huge pages: the store of synthetic-bert-large ($(mib "$bytes") MiB) on a tmpfs mounted default vs huge=within_size (medians of $REPS)"
    echo
    echo "| tmpfs | store (MiB) | ShmemHugePages gained by one ingest (MiB) | cold ingest ms (--direct) | warm start load_ms | warm start wall ms | map ms / touch every page ms (tetris-bench-map) | after the touch, kB: AnonHugePages / ShmemPmdMapped / FilePmdMapped / page tables | private load_ms (control) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "ShmemHugePages is node-wide (/proc/meminfo); the other huge-page fields are the measuring process's mappings of the store (/proc/self/smaps)."
}

# ---- other areas' benchmarks ------------------------------------------------------------

bench_others() {
    local s
    for s in "$ROOT"/bench/*/run.sh; do
        [ -f "$s" ] || continue
        echo
        echo "## $(basename "$(dirname "$s")") (bench/$(basename "$(dirname "$s")")/run.sh)"
        TETRIS_BIN="$BIN" BENCH_QUICK="$QUICK" bash "$s" || { warn "$s failed"; failed=1; }
    done
}

# ---- main ------------------------------------------------------------------------------

for p in "$AGENT" "$SYNTH" "$ONNX_RUN" "$BIN/tetris-reclaimer" "$BIN/tetris-bench-map"; do
    [ -x "$p" ] || die "$p is missing (run make)"
done
command -v jq >/dev/null || die "jq is missing (run make deps)"
mkdir -p "$STORES" || die "cannot create $STORES"
open_fifo

echo "# tetris benchmarks"
echo
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)), $(( $(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) / 1048576 )) GiB RAM, Linux $(uname -r), stores on $STORE_ROOT$([ "$QUICK" = 1 ] && echo ", BENCH_QUICK=1")."
echo "Synthetic models are random weights in real BERT shapes (tetris-synth-model); memory in MiB."

for section in $SECTIONS; do
    case $section in
    memory | warm | ingest | concurrent | variants | hugepages | others)
        "bench_$section" || { warn "section $section failed"; failed=1; stop_holders; stop_daemon; } ;;
    *) die "unknown section $section (see the header of $0)" ;;
    esac
done
exit $failed
