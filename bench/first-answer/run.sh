#!/bin/sh
# run.sh (bench/first-answer) - the time from a process's start to its first
# answer, stock ONNX Runtime against tetris cold and warm starts, beside the
# node's limits measured in the same run: the start targets of the speed work.
#
# A start here is the whole of it: from before the process is spawned to
# the moment its first inference's outputs are on its stdout (tetris-onnx-run
# --runs 1 prints its JSON line right after the first run; the process's
# exit and teardown are not counted; both readings are taken in one
# process, bench/first-answer/launch.py, so that the harness's own forks
# are not counted either). Modes, one process each, interleaved
# per round:
#   stock     ONNX Runtime opens the file itself at its defaults
#             (optimisation `all`, pre-packing on, its telemetry on:
#             ORT_DISABLE_TELEMETRY=0): the private start
#   quiet     the same with ONNX Runtime's telemetry off, as tetris's
#             programs run it (agent/ort_adapter.h): how much of a gap to
#             stock is the telemetry's, in the limits and parts tables
#   private   ONNX Runtime opens the file itself at tetris's settings
#             (optimisation off, no pre-packing): a baseline for the load,
#             in the parts table only
#   cold      the first instance on a node: an empty store, the node daemon
#             hashes and publishes every tensor, the session runs on the
#             plain weights (--derived off, the default)
#   warm      every tensor resident: map them, plain weights
#   derived   every tensor resident and the store's derived form made
#             (--derived use): the optimised graph and its packs mapped
# Before each round the daemon is stopped and its store emptied (not
# timed), so every cold start is a real one; the derived form is then made
# once (tetris-onnx-run --derived make, not timed). The daemon mounts its
# store as a tmpfs of 2 MiB pages, as the chart does (the directory as it
# is where this user may not mount).
#
# Each start's ratio to stock is given twice: of the medians, and round
# by round (the median and range of each round's start over that round's
# stock start: the machine's drift between rounds cancels out of it).
# Limits, per model, printed beside the figures: SHA-256 of its bytes on
# one core (openssl's loop), a tmpfs write of its bytes (cp, one core), a
# read of the file from the page cache, and stock's session and first
# inference alone (from its own JSON). Targets (the issue's): warm and
# derived at most 0.25x stock's start on BERT-base and at most 1.0x on every
# small real model; cold at most 1.0x.
#
# Usage: bench/first-answer/run.sh [MODEL...]  Default: the small real models
# the build installs and, when the paper-model cache has it (or can make it:
# scripts/models/paper-models.sh), BERT-base at sequence 128.
# Environment: TETRIS_BIN (programs, default bin/), BENCH_REPS (rounds,
# default 5), BENCH_DIM (tetris-onnx-run --dim for every model; default: 128
# for a model named bert-*, the model's own or tetris-onnx-run's otherwise).
set -eu
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${TETRIS_BIN:-$ROOT/bin}"
REPS="${BENCH_REPS:-5}"
case "$REPS" in '' | *[!0-9]* | 0) echo "bench/first-answer: BENCH_REPS must be a positive number" >&2; exit 2 ;; esac
say() { echo "bench/first-answer: $*" >&2; }
. "$ROOT/scripts/lib/serving.sh"
if [ $# -eq 0 ]; then
    for m in ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx \
        ch_ppocr_mobile_v2.0_cls_infer.onnx silero_vad_v5.onnx; do
        set -- "$@" "$ROOT/.deps/models/$m"
    done
    if bert=$("$ROOT/scripts/models/paper-models.sh" bert-base 2>/dev/null | grep '/bert-base.onnx$'); then
        set -- "$@" "$bert"
    else
        say "no BERT-base (scripts/models/paper-models.sh bert-base failed): small models only"
    fi
fi
parent=/dev/shm; [ -w "$parent" ] || parent="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$parent/tetris-bench-first-answer.XXXXXX")"
# tetris-derive reads the store's public directory as an unprivileged user,
# as on a node where the store's parents are 0755.
chmod 0711 "$WORK"
STORE="$WORK/store"
DAEMON_PID=""
stop_daemon() {
    [ -z "$DAEMON_PID" ] || { kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null || true; }
    DAEMON_PID=""
    for m in $(findmnt -rn -o TARGET 2>/dev/null | grep "^$WORK/" | sort -r); do umount -l "$m" || true; done
}
cleanup() {
    stop_daemon
    chmod -R u+w "$WORK" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# fresh_daemon: a node daemon on an empty store
fresh_daemon() {
    stop_daemon
    rm -rf "$STORE"
    daemon_start "$STORE" "$WORK/daemon.log" || { say "$DAEMON_ERROR"; exit 1; }
}

# round_ratios MODE: MODE's start over stock's of the same round, every
# round: "median (lowest-highest)", or n/a
round_ratios() {
    [ -s "$WORK/$name.$1" ] || { echo n/a; return; }
    paste "$WORK/$name.$1" "$WORK/$name.stock" | awk '{ printf "%.3f\n", $1 / $2 }' | sort -g |
        awk '{ v[NR] = $1 } END { printf "%.2f (%.2f-%.2f)", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR] }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "n/a" && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
now_us() { echo $(($(date +%s%N) / 1000)); }
# us_ms FILE...: the median of the microseconds in FILEs, in ms
us_ms() { awk '{ printf "%.1f\n", $1 / 1000 }' "$@" | median; }
# field MODE KEY: the median of KEY in the model $name's MODE starts
field() { for f in "$WORK/$name.$1"[0-9]*.json; do jq -r ".$2" "$f"; done | median; }

# answer OUT ARGS...: one tetris-onnx-run --runs 1 of ARGS, in the
# environment ANSWER_ENV adds (VAR=VALUE words); its JSON to OUT.json, its
# log to OUT.log; prints the ms from before its spawn to its first
# answer's line on stdout (launch.py: both readings in one process).
ANSWER_ENV=""
answer() {
    out=$1; shift
    # shellcheck disable=SC2086
    env $ANSWER_ENV "$SERVING_PY" "$ROOT/bench/first-answer/launch.py" "$out.json" "$out.log" \
        "$BIN/tetris-onnx-run" "$@" --runs 1 $DIM >"$out.ms" &&
        jq -e .sha256 "$out.json" >/dev/null 2>&1 ||
        { say "tetris-onnx-run $* gave no answer:"; cat "$out.log" >&2; exit 1; }
    cat "$out.ms"
}
# expect OUT WHAT PATTERN: the start's log must show PATTERN
expect() {
    grep -q "$3" "$1.log" || { say "$(basename "$1") was not $2:"; cat "$1.log" >&2; exit 1; }
}

# SHA-256 per core: openssl's own loop over 256 KiB blocks (the store's
# chunks are larger; the rate is flat above 16 KiB), bytes per second.
sha_rate=$(taskset -c 0 openssl speed -evp sha256 -bytes 262144 -seconds 2 2>/dev/null |
    awk '/^sha256/ { sub(/k$/, "", $NF); print $NF * 1000 }')
[ -n "$sha_rate" ] || { say "openssl speed gave no SHA-256 rate"; exit 1; }

{
    echo "| model | MB | SHA-256, one core ms | tmpfs write ms | read from page cache ms | stock session ms | stock first inference ms | stock start, telemetry off ms |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} >"$WORK/limits.md"
{
    echo "| model | stock start ms | cold start ms | cold / stock | warm start ms | warm / stock | derived start ms | derived / stock | target (warm, derived) | same output as stock (derived) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"
} >"$WORK/starts.md"
{
    echo "| model | mode | load ms | session ms | first inference ms | rest of the start ms |"
    echo "|---|---|---:|---:|---:|---:|"
} >"$WORK/parts.md"
{
    echo "| model | cold / stock | warm / stock | derived / stock |"
    echo "|---|---|---|---|"
} >"$WORK/rounds.md"

for model in "$@"; do
    [ -r "$model" ] || { say "$model: not readable"; exit 1; }
    name=$(basename "$model")
    case "$name" in bert-*) DIM="--dim ${BENCH_DIM:-128}" ;; *) DIM=${BENCH_DIM:+--dim $BENCH_DIM} ;; esac
    bytes=$(stat -L -c %s "$model")
    manifest="$WORK/$name.manifest.json"
    "$BIN/tetris-agent" index "$model" -o "$manifest" 2>/dev/null
    set -- --store "$STORE" --manifest "$manifest"
    cat "$model" "$model" >/dev/null # in the page cache, as for every mode
    for mode in stock quiet private cold warm derived; do : >"$WORK/$name.$mode"; done
    : >"$WORK/$name.write"; : >"$WORK/$name.read"
    r=1
    while [ "$r" -le "$REPS" ]; do
        fresh_daemon
        answer "$WORK/$name.cold$r" "$model" "$@" --derived off >>"$WORK/$name.cold"
        expect "$WORK/$name.cold$r" "a cold start" 'event=load .* store=miss'
        answer "$WORK/$name.warm$r" "$model" "$@" --derived off >>"$WORK/$name.warm"
        expect "$WORK/$name.warm$r" "a warm start" 'event=load .* store=hit'
        # shellcheck disable=SC2086
        "$BIN/tetris-onnx-run" "$model" "$@" --derived make $DIM >/dev/null 2>"$WORK/make.log" ||
            { say "$name: --derived make failed: $(tail -n 1 "$WORK/make.log")"; exit 1; }
        # A model the daemon cannot derive (its log says why) has no derived
        # column: measuring its fallback as "derived" would be wrong.
        if grep -q 'event=derive-requested .*result=made' "$WORK/make.log"; then
            answer "$WORK/$name.derived$r" "$model" "$@" --derived use >>"$WORK/$name.derived"
            jq -e '.derived == true' "$WORK/$name.derived$r.json" >/dev/null ||
                { say "$name: start $r did not open the derived form"; exit 1; }
        else
            sed -n 's/.*event=derive-failed .*msg=\(.*\)$/\1/p' "$WORK/daemon.log" | head -n 1 >"$WORK/$name.underivable"
        fi
        ANSWER_ENV=ORT_DISABLE_TELEMETRY=0
        answer "$WORK/$name.stock$r" "$model" --private --graph-opt all --prepack >>"$WORK/$name.stock"
        ANSWER_ENV=""
        answer "$WORK/$name.quiet$r" "$model" --private --graph-opt all --prepack >>"$WORK/$name.quiet"
        answer "$WORK/$name.private$r" "$model" --private >>"$WORK/$name.private"
        # the limits, in the same rounds: a tmpfs write and a read of the bytes
        t0=$(now_us); taskset -c 0 cp "$model" "$STORE/write-limit"; sync -f "$STORE" 2>/dev/null || true
        echo $(($(now_us) - t0)) >>"$WORK/$name.write"; rm -f "$STORE/write-limit"
        t0=$(now_us); taskset -c 0 cat "$model" >/dev/null
        echo $(($(now_us) - t0)) >>"$WORK/$name.read"
        r=$((r + 1))
    done
    stock=$(median <"$WORK/$name.stock")
    cold=$(median <"$WORK/$name.cold")
    warm=$(median <"$WORK/$name.warm")
    derived=$(median <"$WORK/$name.derived")
    stock_sha=$(jq -r .sha256 "$WORK/$name.stock1.json")
    same=yes
    for f in "$WORK/$name".derived[0-9]*.json; do
        [ -e "$f" ] || { same="no form: $(head -c 120 "$WORK/$name.underivable")"; break; }
        [ "$(jq -r .sha256 "$f")" = "$stock_sha" ] || same=no
    done
    target="<= 1.0"; [ "$bytes" -lt 100000000 ] || target="<= 0.25"
    echo "| $name | $(round_ratios cold) | $(round_ratios warm) | $(round_ratios derived) |" >>"$WORK/rounds.md"
    echo "| $name | $stock | $cold | $(ratio "$cold" "$stock") | $warm | $(ratio "$warm" "$stock") | $derived | $(ratio "$derived" "$stock") | $target | $same |" >>"$WORK/starts.md"
    awk -v n="$name" -v b="$bytes" -v r="$sha_rate" -v w="$(us_ms "$WORK/$name.write")" \
        -v rd="$(us_ms "$WORK/$name.read")" -v s="$(field stock session_ms)" -v f="$(field stock first_run_ms)" \
        -v q="$(median <"$WORK/$name.quiet")" \
        'BEGIN { printf "| %s | %.1f | %.1f | %s | %s | %.1f | %.1f | %s |\n", n, b / 1e6, b / r * 1000, w, rd, s, f, q }' >>"$WORK/limits.md"
    for mode in stock quiet private cold warm derived; do
        [ -s "$WORK/$name.$mode" ] || continue
        l=$(field "$mode" load_ms); s=$(field "$mode" session_ms); f=$(field "$mode" first_run_ms)
        t=$(median <"$WORK/$name.$mode")
        awk -v n="$name" -v m="$mode" -v l="$l" -v s="$s" -v f="$f" -v t="$t" \
            'BEGIN { printf "| %s | %s | %.1f | %.1f | %.1f | %.1f |\n", n, m, l, s, f, t - l - s - f }' >>"$WORK/parts.md"
    done
done

pages=$(sed -n 's/.*event=store-tmpfs state=\([a-z-]*\) .*/\1/p' "$WORK/daemon.log")
echo "Start to first answer (ms, from before the spawn to the answer on stdout); $REPS rounds, interleaved; medians."
echo "Target: warm and derived <= 0.25x stock on BERT-base (the models over 100 MB), <= 1.0x on the small"
echo "models; cold <= 1.0x stock."
echo
cat "$WORK/starts.md"
echo
echo "The same ratios round by round (each start over stock's of its round; the machine's drift"
echo "between rounds cancels): median (lowest-highest):"
echo
cat "$WORK/rounds.md"
echo
echo "The node's limits for the same bytes (one core each; medians of the same rounds):"
echo
cat "$WORK/limits.md"
echo
echo "Where each start goes (medians): load (the agent: connect, register, ingest or map), ONNX"
echo "Runtime's session, the first inference, and the rest (exec, dynamic linking, process set-up);"
echo "quiet: stock with ONNX Runtime's telemetry off, as tetris's programs run; private: ONNX Runtime"
echo "opening the file at tetris's settings (optimisation off, no pre-packing):"
echo
cat "$WORK/parts.md"
echo
echo "Store tmpfs: ${pages:-unknown}; 1 thread; BERT at sequence ${BENCH_DIM:-128}; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)."
