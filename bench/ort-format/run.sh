#!/bin/sh
# run.sh (bench/ort-format) - ONNX Runtime's own ORT model format as a start
# path, against tetris's derived form and stock ONNX Runtime, in one run.
#
# Why: an instance should open a graph optimised once, with optimisation
# off, in whichever form starts fastest. tetris's derived form is ONNX
# (the graph optimised at `all` once per node, its initializers and their
# pre-packed forms in one external data file in the store); ONNX Runtime's
# ORT format is a FlatBuffers file a session can read in place from a
# buffer the caller keeps, its initializers used where they lie. This
# measures the two side by side.
#
# Per model, first (not timed as starts): the ORT file, made once at level
# `all` (tetris-bench-ort-format --make), twice, to see whether the bytes
# are the same, and once more asking for the pre-packed weights in a data
# file of their own (--save-prepacked), to see whether ONNX Runtime writes
# any; the derived form, made by a node daemon on a private store
# (tetris-onnx-run --derived make). The daemon's store is a tmpfs of its
# own, of 2 MiB pages as the chart mounts it (BENCH_TMPFS=plain: 4 KiB
# pages), and the ORT files lie on a tmpfs mounted alike (where this user
# may not mount, both are directories as they are). Then, in rounds,
# one process per start, the modes in a rotated order each round:
#   stock       tetris-onnx-run --private --graph-opt all --prepack: ONNX
#               Runtime opens the .onnx file at its defaults, its telemetry
#               on (ORT_DISABLE_TELEMETRY=0; the baseline of
#               bench/first-answer)
#   stock-bench the same start in tetris-bench-ort-format (its baseline)
#   ort         the ORT file mapped read-only, MAP_SHARED, by the program and
#               handed over with session.use_ort_model_bytes_directly and
#               session.use_ort_model_bytes_for_initializers; optimisation off
#   ort-copy    the same without ..._for_initializers (initializers copied)
#   ort-mmap    ONNX Runtime maps the file itself
#               (session.use_memory_mapped_ort_model), initializers in place
#   ort-noprepack  as ort with pre-packing off: the format holds no
#               pre-packed weights, so this is the start whose weights are
#               all shared pages (and whose kernels read them unpacked)
#   derived     tetris-onnx-run --store --manifest --derived use: tetris's
#               fastest start (bench/first-answer's "derived"): for a model
#               of small pre-packed weights the form's ORT-format part,
#               read in place from the store (protocol/derived.h)
#   derived-graph  the same with the form's index entry rewritten without
#               its ORT-format part (as root, the store's owner): the
#               form's graph and data file, as a form of large pre-packed
#               weights is opened; only for a form that has that part
# A start is timed from before the spawn to its first answer on stdout
# (bench/first-answer/launch.py); beside it, from each process's own JSON,
# the time to a ready session (derived: the agent's load, then the
# session) and the first inference alone. Pre-packing is on in every mode
# but ort-noprepack.
# The ORT modes are divided by stock-bench, stock and derived by stock:
# each by the baseline of its own program. Outputs are compared with
# stock's SHA-256 (seeded inputs, tetris-onnx-run's); where an ORT mode's
# differ, one more start of it, not timed, says by how much (--against
# the outputs of an untimed stock-bench start).
#
# Then, since a start without pre-packing may pay for it later, the
# inference after the start: in BENCH_REPS rounds, one process per mode
# runs BENCH_RUNS times (tetris-onnx-run's and tetris-bench-ort-format's
# --runs); the median of the means of the runs after the first.
#
# Then the memory: two processes per mode hold their session at once (after
# one inference); per process, from /proc/PID/smaps_rollup and status, its
# anonymous memory (its own copies: weights loaded, pre-packed weights), the
# tmpfs pages it maps (RssShmem: the ORT file, the store) and its share of
# them (Pss_Shmem: half of RssShmem when the two share every page).
#
# Usage: bench/ort-format/run.sh [MODEL...]  Default: the small real models
# the build installs and, unless BENCH_QUICK=1, BERT-base at sequence 128
# when the paper-model cache has it (or can make it:
# scripts/models/paper-models.sh).
# Environment: TETRIS_BIN (programs, default bin/), BENCH_REPS (rounds,
# default 5, 3 with BENCH_QUICK=1), BENCH_RUNS (runs of the inference
# table, default 10; 0: no such table), BENCH_DIM (--dim for every model;
# default 128 for a model named bert-*, the programs' own otherwise),
# BENCH_TMPFS (huge, default, or plain: the pages of the store and of the
# ORT files).
# Exit status: 0, 1 a start failed or gave no answer, 2 usage.
set -eu
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${TETRIS_BIN:-$ROOT/bin}"
QUICK="${BENCH_QUICK:-0}"
if [ "$QUICK" = 1 ]; then REPS="${BENCH_REPS:-3}"; else REPS="${BENCH_REPS:-5}"; fi
case "$REPS" in '' | *[!0-9]* | 0) echo "bench/ort-format: BENCH_REPS must be a positive number" >&2; exit 2 ;; esac
TMPFS="${BENCH_TMPFS:-huge}"
case "$TMPFS" in
huge) HUGE_OPTION=",huge=within_size" ;;
plain) HUGE_OPTION="" ;;
*) echo "bench/ort-format: BENCH_TMPFS must be huge or plain" >&2; exit 2 ;;
esac
RUNS="${BENCH_RUNS:-10}"
case "$RUNS" in '' | *[!0-9]* | 1) echo "bench/ort-format: BENCH_RUNS must be 0 or at least 2" >&2; exit 2 ;; esac
say() { echo "bench/ort-format: $*" >&2; }
. "$ROOT/scripts/lib/serving.sh"
BENCH="$BIN/tetris-bench-ort-format"
RUN="$BIN/tetris-onnx-run"
for p in "$BENCH" "$RUN" "$BIN/tetris-agent" "$BIN/tetris-reclaimer"; do
    [ -x "$p" ] || { say "$p is missing (run make)"; exit 2; }
done
if [ $# -eq 0 ]; then
    for m in ch_ppocr_mobile_v2.0_cls_infer.onnx ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx; do
        set -- "$@" "$ROOT/.deps/models/$m"
    done
    if [ "$QUICK" = 1 ]; then
        say "BENCH_QUICK=1: the small models only"
    elif bert=$("$ROOT/scripts/models/paper-models.sh" bert-base 2>/dev/null | grep '/bert-base.onnx$'); then
        set -- "$@" "$bert"
    else
        say "no BERT-base (scripts/models/paper-models.sh bert-base failed): small models only"
    fi
fi
MODES="stock stock-bench ort ort-copy ort-mmap ort-noprepack derived derived-graph"
parent=/dev/shm; [ -w "$parent" ] || parent="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$parent/tetris-bench-ort-format.XXXXXX")"
# tetris-derive reads the store's public directory as an unprivileged user,
# as on a node where the store's parents are 0755.
chmod 0711 "$WORK"
STORE="$WORK/store"
DAEMON_PID=""
HOLDERS=""
cleanup() {
    exec 3>&-
    for p in $HOLDERS; do kill "$p" 2>/dev/null || true; done
    [ -z "$DAEMON_PID" ] || { kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null || true; }
    for m in $(findmnt -rn -o TARGET 2>/dev/null | grep "^$WORK/" | sort -r); do umount -l "$m" || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
daemon_start "$STORE" "$WORK/daemon.log" --store-tmpfs "$TMPFS" || { say "$DAEMON_ERROR"; exit 1; }
# The ORT files on a tmpfs like the store's: the same pages under both forms.
mkdir "$WORK/ort"
mount -t tmpfs -o "mode=0755$HUGE_OPTION" tetris-bench-ort "$WORK/ort" 2>/dev/null ||
    say "cannot mount a tmpfs: the ORT files on $WORK/ort as it is"

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "n/a" && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
# Per model and mode: the ms of every start in $WORK/ms.NAME.MODE, each
# start's JSON in $WORK/start.NAME.MODE.R.json.
# field MODE EXPR: the median over the model $name's MODE starts of the jq
# EXPR on their JSON
field() { for f in "$WORK/start.$name.$1".[0-9]*.json; do jq -r "$2" "$f"; done | median; }

# cmdline MODE: the command line of one start of the model $model in MODE
cmdline() {
    case $1 in
    stock) echo "env ORT_DISABLE_TELEMETRY=0 $RUN $model --private --graph-opt all --prepack" ;;
    stock-bench) echo "$BENCH --mode stock $model" ;;
    ort*) echo "$BENCH --mode $1 $ort" ;;
    derived*) echo "$RUN $model --store $STORE --manifest $manifest --derived use" ;;
    esac
}
# entry_for MODE: the model's derived entry as MODE reads it: without its
# ORT-format part for derived-graph, as the daemon wrote it otherwise
entry_for() {
    [ -n "$entry" ] || return 0
    src="$WORK/$name.entry"
    [ "$1" != derived-graph ] || src="$WORK/$name.entry-graph"
    cp "$src" "$WORK/entry.tmp" && chmod 0444 "$WORK/entry.tmp" && mv -f "$WORK/entry.tmp" "$entry"
}
# start MODE R: start number R of MODE, timed by launch.py
start() {
    out="$WORK/start.$name.$1.$2"
    entry_for "$1"
    # shellcheck disable=SC2046,SC2086
    "$SERVING_PY" "$ROOT/bench/first-answer/launch.py" "$out.json" "$out.log" $(cmdline "$1") $DIM \
        >"$out.ms" && jq -e .sha256 "$out.json" >/dev/null 2>&1 ||
        { say "$name $1: no answer:"; cat "$out.log" >&2; exit 1; }
    cat "$out.ms" >>"$WORK/ms.$name.$1"
}

# hold MODE: two processes holding a session of MODE at once; their pids in
# $held
hold() {
    rm -f "$WORK/hold.fifo" "$WORK/hold.1" "$WORK/hold.2"
    mkfifo "$WORK/hold.fifo"
    held=""
    entry_for "$1"
    for i in 1 2; do
        # shellcheck disable=SC2046,SC2086
        $(cmdline "$1") $DIM --hold >"$WORK/hold.$i" 2>"$WORK/hold.$i.log" <"$WORK/hold.fifo" &
        held="$held $!"
    done
    HOLDERS=$held
    exec 3>"$WORK/hold.fifo"
    for i in 1 2; do
        n=0
        until [ -s "$WORK/hold.$i" ]; do
            n=$((n + 1))
            [ $n -lt 6000 ] || { say "$name $1: no answer from a holder: $(tail -n 1 "$WORK/hold.$i.log")"; exit 1; }
            sleep 0.05
        done
    done
    for p in $held; do kill -0 "$p" 2>/dev/null || { say "$name $1: a holder exited"; exit 1; }; done
}
# release: the holders see their stdin close and exit
release() {
    exec 3>&-
    for p in $held; do wait "$p" 2>/dev/null || true; done
    HOLDERS=""
}
status_kb() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }

{
    echo "| model | ONNX MB | ORT MB | make ms | a second make, same bytes | --save-prepacked: data file bytes, ORT MB |"
    echo "|---|---:|---:|---:|---|---|"
} >"$WORK/made.md"
{
    echo "| model | mode | start ms | / its stock | session ready ms | of which the agent's load ms | first inference ms | same output as stock |"
    echo "|---|---|---:|---:|---:|---:|---:|---|"
} >"$WORK/starts.md"
{
    echo "| model | stock run ms | ort run ms | ort / stock | ort-noprepack run ms | ort-noprepack / stock | derived run ms | derived / stock | derived-graph run ms | derived-graph / stock |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$WORK/runs.md"
{
    echo "| model | mode | anonymous MB | tmpfs mapped MB (RssShmem) | tmpfs PSS MB (Pss_Shmem) | PSS MB |"
    echo "|---|---|---:|---:|---:|---:|"
} >"$WORK/memory.md"

for model in "$@"; do
    [ -r "$model" ] || { say "$model: not readable"; exit 1; }
    name=$(basename "$model" .onnx)
    case "$name" in bert-*) DIM="--dim ${BENCH_DIM:-128}" ;; *) DIM=${BENCH_DIM:+--dim $BENCH_DIM} ;; esac
    ort="$WORK/ort/$name.ort"
    manifest="$WORK/$name.manifest.json"

    # The ORT file, twice, then with the pre-packed weights asked for.
    "$BENCH" --make "$ort" "$model" >"$WORK/make1.json" 2>"$WORK/make.log" &&
        "$BENCH" --make "$WORK/ort/again.ort" "$model" >/dev/null 2>>"$WORK/make.log" &&
        "$BENCH" --make "$WORK/ort/prepacked.ort" --save-prepacked "$model" >"$WORK/make3.json" 2>>"$WORK/make.log" ||
        { say "$name: the ORT file could not be made: $(tail -n 1 "$WORK/make.log")"; exit 1; }
    if cmp -s "$ort" "$WORK/ort/again.ort"; then same=yes
    elif [ "$(stat -c %s "$ort")" = "$(stat -c %s "$WORK/ort/again.ort")" ]; then same="no (same size)"
    else same="no (other size)"; fi
    awk -v n="$name" -v o="$(stat -L -c %s "$model")" -v b="$(jq .bytes "$WORK/make1.json")" \
        -v t="$(jq .make_ms "$WORK/make1.json")" -v s="$same" -v d="$(jq .data_bytes "$WORK/make3.json")" \
        -v p="$(jq .bytes "$WORK/make3.json")" \
        'BEGIN { printf "| %s | %.1f | %.1f | %.0f | %s | %d, %.1f |\n", n, o / 1e6, b / 1e6, t, s, d, p / 1e6 }' >>"$WORK/made.md"
    rm -f "$WORK/ort/again.ort" "$WORK/ort/prepacked.ort" "$WORK/ort/prepacked.ort.data"
    cat "$WORK/make.log" >>"$WORK/makes.log"

    # The derived form, by the node daemon.
    "$BIN/tetris-agent" index "$model" -o "$manifest" 2>/dev/null
    # shellcheck disable=SC2086
    "$RUN" "$model" --store "$STORE" --manifest "$manifest" --derived make $DIM >/dev/null 2>"$WORK/derive.log" ||
        { say "$name: --derived make failed: $(tail -n 1 "$WORK/derive.log")"; exit 1; }
    modes=$MODES
    grep -q 'event=derive-requested .*result=made' "$WORK/derive.log" ||
        { say "$name: no derived form: $(grep derive "$WORK/daemon.log" | tail -n 1)"; modes=$(echo "$MODES" | sed 's/ derived.*//'); }
    # The form's entry (the newest), and the same without its ORT-format
    # part for derived-graph: only where it has one and we may rewrite it.
    entry=$(ls -t "$STORE/public/derived"/* 2>/dev/null | head -n 1)
    if [ -n "$entry" ] && jq -e 'has("ort")' "$entry" >/dev/null && [ -w "$STORE/public/derived" ]; then
        cp "$entry" "$WORK/$name.entry"
        jq -c 'del(.ort)' "$entry" >"$WORK/$name.entry-graph"
    else
        entry=""
        modes=$(echo "$modes" | sed 's/ derived-graph//')
    fi

    cat "$model" "$model" "$ort" >/dev/null # in the page cache, as for every mode
    for mode in $modes; do : >"$WORK/ms.$name.$mode"; done
    r=1
    while [ "$r" -le "$REPS" ]; do
        # rotate the order: no mode always first after another's teardown
        order=$(echo "$modes" | awk -v k="$r" '{ for (i = 0; i < NF; i++) printf "%s ", $((i + k - 1) % NF + 1) }')
        for mode in $order; do start "$mode" "$r"; done
        r=$((r + 1))
    done
    if [ -e "$WORK/ms.$name.derived" ] && ! jq -e -s 'all(.[]; .derived == true)' "$WORK/start.$name.derived".[0-9]*.json >/dev/null; then
        say "$name: a derived start did not open the derived form"; exit 1
    fi
    if [ -e "$WORK/ms.$name.derived-graph" ] &&
        ! jq -e -s 'all(.[]; .derived == true and .derived_ort == false)' "$WORK/start.$name.derived-graph".[0-9]*.json >/dev/null; then
        say "$name: a derived-graph start did not open the form's graph"; exit 1
    fi
    stock_sha=$(jq -r .sha256 "$WORK/start.$name.stock.1.json")
    for mode in $modes; do
        case $mode in stock | derived*) base=stock ;; *) base=stock-bench ;; esac
        t=$(median <"$WORK/ms.$name.$mode")
        ready=$(field "$mode" '.load_ms + .session_ms')
        load=$(field "$mode" .load_ms)
        first=$(field "$mode" .first_run_ms)
        differ=$(for f in "$WORK/start.$name.$mode".[0-9]*.json; do jq -r .sha256 "$f"; done | grep -cvx "$stock_sha" || true)
        if [ "$differ" = 0 ]; then out=yes; else out="no ($differ of $REPS starts)"; fi
        case $differ/$mode in
        0/* | */stock* | */derived*) ;;
        *)
            # shellcheck disable=SC2046,SC2086
            [ -s "$WORK/$name.want" ] || $(cmdline stock-bench) $DIM --outputs "$WORK/$name.want" \
                >/dev/null 2>"$WORK/against.log" || { say "$name: $(tail -n 1 "$WORK/against.log")"; exit 1; }
            # shellcheck disable=SC2046,SC2086
            $(cmdline "$mode") $DIM --against "$WORK/$name.want" >"$WORK/against.json" 2>"$WORK/against.log" ||
                { say "$name $mode --against: $(tail -n 1 "$WORK/against.log")"; exit 1; }
            out="$out: $(jq -r '"\(.elements_differ) \(.elements) \(.max_abs_diff)"' "$WORK/against.json" |
                awk '{ printf "%d of %d elements, largest difference %.2g", $1, $2, $3 }')"
            ;;
        esac
        echo "| $name | $mode | $t | $(ratio "$t" "$(median <"$WORK/ms.$name.$base")") | $ready | $load | $first | $out |" >>"$WORK/starts.md"
    done

    if [ "$RUNS" -ge 2 ]; then
        run_modes=$(for m in stock ort ort-noprepack derived derived-graph; do case " $modes " in *" $m "*) echo $m ;; esac; done)
        for mode in $run_modes; do : >"$WORK/run.$name.$mode"; done
        r=1
        while [ "$r" -le "$REPS" ]; do
            for mode in $(echo "$run_modes" | awk -v k="$r" '{ m[NR] = $1 } END { for (i = 0; i < NR; i++) print m[(i + k - 1) % NR + 1] }'); do
                # shellcheck disable=SC2046,SC2086
                $(cmdline "$mode") $DIM --runs "$RUNS" >"$WORK/runs.json" 2>"$WORK/runs.log" ||
                    { say "$name $mode --runs: $(tail -n 1 "$WORK/runs.log")"; exit 1; }
                jq -r '(.run_ms * .runs - .first_run_ms) / (.runs - 1)' "$WORK/runs.json" >>"$WORK/run.$name.$mode"
            done
            r=$((r + 1))
        done
        stock_run=$(median <"$WORK/run.$name.stock")
        row="| $name | $stock_run"
        for mode in ort ort-noprepack derived derived-graph; do
            t=n/a
            [ ! -e "$WORK/run.$name.$mode" ] || t=$(median <"$WORK/run.$name.$mode")
            row="$row | $t | $(ratio "$t" "$stock_run")"
        done
        echo "$row |" >>"$WORK/runs.md"
    fi

    for mode in stock ort ort-copy ort-mmap ort-noprepack derived derived-graph; do
        case " $modes " in *" $mode "*) ;; *) continue ;; esac
        hold "$mode"
        for p in $held; do
            echo "$(rollup_kb "$p" Anonymous) $(status_kb "$p" RssShmem) $(rollup_kb "$p" Pss_Shmem) $(rollup_kb "$p" Pss)"
        done | awk -v n="$name" -v m="$mode" '{ a += $1; r += $2; s += $3; p += $4 }
            END { printf "| %s | %s | %.1f | %.1f | %.1f | %.1f |\n", n, m, a / NR / 1024, r / NR / 1024, s / NR / 1024, p / NR / 1024 }' >>"$WORK/memory.md"
        release
    done
    entry_for derived
done

echo "What ONNX Runtime $(jq -r .runtime "$WORK/make1.json" | sed 's/^onnxruntime //') writes for --make (optimisation all; MB = 10^6 bytes):"
echo
cat "$WORK/made.md"
echo
echo "ONNX Runtime's warnings while making them, once each:"
echo
# its lines without their colours and timestamp, "[W:onnxruntime:, FILE:LINE FUNCTION] "
sed 's/\x1b\[[0-9;]*m//g; s/^.*\] //' "$WORK/makes.log" | sort -u | sed 's/^/- /'
echo
echo "Starts, from before the spawn to the first answer on stdout; $REPS rounds, the modes' order rotated"
echo "each round; medians. \"/ its stock\": ort modes by stock-bench, derived modes by stock (the baseline of"
echo "the same program); session ready: from the start of main (derived: the agent's load, then"
echo "the session; the others have no agent):"
echo
cat "$WORK/starts.md"
echo
if [ "$RUNS" -ge 2 ]; then
    echo "Inference after the start: $REPS rounds of one process per mode, $RUNS runs of the same inputs"
    echo "each; the median of the means of the runs after the first (ms). ort-noprepack's kernels read"
    echo "weights that are not pre-packed:"
    echo
    cat "$WORK/runs.md"
    echo
fi
echo "Memory per process, two processes holding a session of the same mode at once (after one"
echo "inference); MB = MiB; shared pages show as tmpfs PSS = half of tmpfs mapped:"
echo
cat "$WORK/memory.md"
echo
ort_huge=$(findmnt -n -o OPTIONS "$WORK/ort" 2>/dev/null | grep -o 'huge=[a-z_]*' | cut -d= -f2 || true)
pages=$(sed -n 's/.*event=store-tmpfs state=\([a-z-]*\) .* huge=\([a-z_]*\).*/\1, huge=\2/p' "$WORK/daemon.log")
echo "Store tmpfs: ${pages:-unknown}; ORT files on a tmpfs: $(jq -r .tmpfs "$WORK/start.$name.ort.1.json"), huge=${ort_huge:-never}; 1 intra-op thread; BERT at sequence ${BENCH_DIM:-128}; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)."
