#!/bin/sh
# run.sh (bench/coldstart) - cold start against the limits of the node,
# every figure beside a baseline measured in the same run.
#
# Limits: SHA-256 of the model's bytes on one core (openssl speed: the
# library the store hashes with), a tmpfs write of them on one core (4 KiB pages,
# and 2 MiB pages where a huge=within_size tmpfs can be mounted), the
# private load split into its read (a plain read(2) of the file) and the
# rest (page faults and copies of the private buffers). Then tetris's cold
# load through the node daemon with 1 worker and with N (its CPU allowance),
# with and without a manifest, the same in --direct mode, and a warm load.
# "bound" is (SHA-256 + tmpfs write) per core divided by the workers used:
# what ingest would take with nothing but hashing and writing.
# Every tetris load runs on the two kinds of tmpfs the daemon can mount for
# its store (--store-tmpfs plain and huge), in the same run.
# Last, time to first inference on a real ONNX model (ONNX Runtime): load +
# session + first run and the instance's page tables, private, cold through
# the daemon and warm, on both kinds of tmpfs. Needs root (mount).
# Usage: bench/coldstart/run.sh [MODEL]   (TETRIS_BIN: programs; default
# model: the SYNTHETIC bert-large, bert-base with BENCH_QUICK=1)
set -eu
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${TETRIS_BIN:-$ROOT/bin}"
QUICK="${BENCH_QUICK:-0}"
if [ $# -ge 1 ]; then
    MODEL="$1"
    KIND="given"
else
    arch=bert-large; [ "$QUICK" = 1 ] && arch=bert-base
    MODEL="$("$BIN/tetris-synth-model" "$arch" 2>/dev/null)"
    KIND="SYNTHETIC $arch"
fi
# The first inference runs on the paper-scale BERT-base (RANDOM weights,
# exported once with PyTorch and cached), or a small real model where
# PyTorch cannot be had.
ONNX="${COLDSTART_ONNX:-}"
if [ -z "$ONNX" ]; then
    ONNX=$("$ROOT/scripts/models/paper-models.sh" bert-base:3 2>/dev/null | head -1) ||
        ONNX="$ROOT/.deps/models/ch_PP-OCRv4_rec_infer.onnx"
fi
parent=/dev/shm; [ -w "$parent" ] || parent="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$parent/tetris-bench-cold.XXXXXX")"
DPID=""
cleanup() {
    [ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
    mountpoint -q "$WORK/huge" 2>/dev/null && umount "$WORK/huge"
    mountpoint -q "$WORK/store" 2>/dev/null && umount "$WORK/store"
    chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"
}
trap cleanup EXIT

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# ms CMD...: wall milliseconds of CMD (output discarded)
ms() { t0=$(now_ms); "$@" >/dev/null 2>&1; echo $(( $(now_ms) - t0 )); }
json_ms() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" | awk '{ printf "%.0f", $1 }'; }

start_daemon() { # start_daemon STORE WORKERS(0 = allowance): on a tmpfs of kind $TMPFS
    "$BIN/tetris-reclaimer" --store "$1" --listen "" --capacity 0 --workers "$2" \
        --store-tmpfs "$TMPFS" >/dev/null 2>"$WORK/daemon.log" &
    DPID=$!
    i=0
    while [ ! -S "$1/public/ingest.sock" ]; do
        i=$((i + 1)); [ $i -gt 100 ] && { cat "$WORK/daemon.log" >&2; exit 1; }
        sleep 0.05
    done
}
stop_daemon() { kill "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=""; }
# fresh_store: an empty store on a fresh tmpfs of kind $TMPFS (plain: 4 KiB
# pages, huge: huge=within_size), mounted the way the daemon mounts its own.
fresh_store() {
    ! mountpoint -q "$WORK/store" 2>/dev/null || umount "$WORK/store"
    rm -rf "$WORK/store"; mkdir "$WORK/store"
    "$BIN/tetris-reclaimer" --store "$WORK/store" --store-tmpfs "$TMPFS" --mount-only \
        2>"$WORK/mount.log" || { cat "$WORK/mount.log" >&2; exit 1; }
    grep -q 'state=mounted' "$WORK/mount.log" || MOUNT_NOTE="$(grep -o 'msg=.*' "$WORK/mount.log")"
}
shmem_huge_kb() { awk '/^ShmemHugePages:/ { print $2 }' /proc/meminfo; }

bytes=$(stat -c %s "$MODEL")
cat "$MODEL" >/dev/null # in the page cache: every figure reads from memory
"$BIN/tetris-agent" index "$MODEL" -o "$WORK/manifest.json" 2>/dev/null

# SHA-256 per core: openssl's own loop over 256 KiB blocks (the store's
# chunk size), without file I/O, as the time these bytes would take.
rate=$(taskset -c 0 openssl speed -evp sha256 -bytes 262144 -seconds 2 2>/dev/null |
    awk '/^sha256/ { sub(/k$/, "", $NF); print $NF * 1000 }')
sha1=$(awk -v b="$bytes" -v r="$rate" 'BEGIN { printf "%.0f", b / r * 1000 }')
w4k=$(ms taskset -c 0 cp "$MODEL" "$WORK/copy4k"); rm -f "$WORK/copy4k"
w2m="n/a"
mkdir "$WORK/huge"
if mount -t tmpfs -o huge=within_size,size=$((bytes * 2)) tmpfs "$WORK/huge" 2>/dev/null; then
    w2m=$(ms taskset -c 0 cp "$MODEL" "$WORK/huge/copy"); rm -f "$WORK/huge/copy"
fi
rd=$(ms cat "$MODEL")
priv=$("$BIN/tetris-agent" load --private "$MODEL" 2>/dev/null | json_ms load_ms)

TMPFS=plain
MOUNT_NOTE=""
fresh_store; start_daemon "$WORK/store" 0
N=$(sed -n 's/.*event=ingest-workers workers=\([0-9]*\).*/\1/p' "$WORK/daemon.log")
stop_daemon

cold() { # cold WORKERS [--manifest M]: a cold load through the daemon, ms in T,
    # ShmemHugePages it gained (MiB) in HG
    fresh_store; h0=$(shmem_huge_kb); start_daemon "$WORK/store" "$1"; shift
    T=$(ms "$BIN/tetris-agent" load --store "$WORK/store" "$@" "$MODEL")
    HG=$(( ($(shmem_huge_kb) - h0) / 1024 ))
}
direct() { # direct WORKERS [ARGS]: a cold --direct load, ms in T
    fresh_store; w=$1; shift
    T=$(ms "$BIN/tetris-agent" load --direct --workers "$w" --store "$WORK/store" "$@" "$MODEL")
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# loads KIND: every load of the table on a store of tmpfs KIND; sets
# <name>_<KIND> variables.
loads() {
    TMPFS=$1
    cold 1 --manifest "$WORK/manifest.json"; eval "d1_$1=$T"; stop_daemon
    cold "$N" --manifest "$WORK/manifest.json"; eval "dN_$1=$T"; eval "huge_$1=$HG"
    eval "warm_$1=$(ms "$BIN/tetris-agent" load --store "$WORK/store" --manifest "$WORK/manifest.json" "$MODEL")"
    stop_daemon
    cold "$N"; eval "dNn_$1=$T"
    # A warm start without a manifest: the agent hashes (on N workers) or the
    # daemon does (and discards its temp copies); auto probes one tensor.
    eval "wna_$1=$(ms "$BIN/tetris-agent" load --store "$WORK/store" --digests agent "$MODEL")"
    eval "wnd_$1=$(ms "$BIN/tetris-agent" load --store "$WORK/store" --digests daemon "$MODEL")"
    eval "wnauto_$1=$(ms "$BIN/tetris-agent" load --store "$WORK/store" "$MODEL")"
    stop_daemon
    cold "$N" --digests agent; eval "dNna_$1=$T"; stop_daemon
    direct 1 --manifest "$WORK/manifest.json"; eval "x1_$1=$T"
    direct "$N" --manifest "$WORK/manifest.json"; eval "xN_$1=$T"
    direct "$N"; eval "xNn_$1=$T"
}
loads plain
loads huge

bound1=$((sha1 + w4k))
boundN=$(( (sha1 + w4k) / N ))
bound1h=$sha1; boundNh=$sha1
if [ "$w2m" != n/a ]; then bound1h=$((sha1 + w2m)); boundNh=$(( (sha1 + w2m) / N )); fi
echo "Model: $KIND, $(basename "$MODEL"), $bytes bytes; workers N = $N (the daemon's CPU allowance)."
[ -z "$MOUNT_NOTE" ] || echo "Mount: $MOUNT_NOTE"
echo
echo "| limit, one core | ms | GB/s |"
echo "|---|---:|---:|"
echo "| SHA-256 of the bytes | $sha1 | $(ratio "$bytes" "$((sha1 * 1000000))") |"
echo "| tmpfs write, 4 KiB pages | $w4k | $(ratio "$bytes" "$((w4k * 1000000))") |"
if [ "$w2m" = n/a ]; then
    echo "| tmpfs write, 2 MiB pages (huge=within_size) | n/a (no mount) | |"
else
    echo "| tmpfs write, 2 MiB pages (huge=within_size) | $w2m | $(ratio "$bytes" "$((w2m * 1000000))") |"
fi
echo "| private load: read(2) of the file | $rd | |"
echo "| private load: the rest (faults, copies) | $((priv - rd)) | |"
echo
echo "Loads on the store's two kinds of tmpfs (the daemon's --store-tmpfs plain and huge)."
echo "\"bound\" = (SHA-256 + tmpfs write of that page size, one core) / the workers used."
echo
echo "| tetris load | 4 KiB ms | / SHA-256 | / bound | 2 MiB ms | / SHA-256 | / bound |"
echo "|---|---:|---:|---:|---:|---:|---:|"
row() { # row LABEL VAR [B1 B2]: one line, both kinds
    a=$(eval echo "\$${2}_plain"); b=$(eval echo "\$${2}_huge")
    ba=""; bb=""
    [ $# -ge 4 ] && { ba=$(ratio "$a" "$3"); bb=$(ratio "$b" "$4"); }
    echo "| $1 | $a | $(ratio "$a" "$sha1") | $ba | $b | $(ratio "$b" "$sha1") | $bb |"
}
echo "| private (tetris-agent --private) | $priv | $(ratio "$priv" "$sha1") | | | | |"
row "cold, daemon, 1 worker, manifest" d1 "$bound1" "$bound1h"
row "cold, daemon, $N workers, manifest" dN "$boundN" "$boundNh"
row "cold, daemon, $N workers, no manifest (daemon hashes, default)" dNn
row "cold, daemon, $N workers, no manifest, --digests agent (hash twice)" dNna
row "cold, --direct, 1 worker, manifest" x1 "$bound1" "$bound1h"
row "cold, --direct, $N workers, manifest" xN "$boundN" "$boundNh"
row "cold, --direct, $N workers, no manifest" xNn
row "warm, daemon, manifest" warm
row "warm, no manifest, --digests agent" wna
row "warm, no manifest, --digests daemon" wnd
row "warm, no manifest, --digests auto (default)" wnauto
echo
echo "ShmemHugePages gained by one cold ingest: $huge_plain MiB (4 KiB tmpfs), $huge_huge MiB (huge=within_size)."
for k in plain huge; do
    dN=$(eval echo "\$dN_$k"); dNn=$(eval echo "\$dNn_$k"); dNna=$(eval echo "\$dNna_$k")
    xN=$(eval echo "\$xN_$k"); xNn=$(eval echo "\$xNn_$k"); d1=$(eval echo "\$d1_$k")
    echo "$k: cold daemon / SHA-256 one core: $(ratio "$dN" "$sha1"); no manifest / manifest: daemon $(ratio "$dNn" "$dN") (hashing twice: $(ratio "$dNna" "$dN")), --direct $(ratio "$xNn" "$xN"); 1 worker / $N workers (daemon): $(ratio "$d1" "$dN")."
done

# Time to first inference: load + session + the first run, on a real model,
# and the page tables the instance holds (VmPTE, while it holds the session).
if [ -f "$ONNX" ]; then
    first() { # first ARGS...: "load | session | run | total | VmPTE kB"
        rm -f "$WORK/run.json" "$WORK/hold.in"; mkfifo "$WORK/hold.in"
        "$BIN/tetris-onnx-run" "$ONNX" --hold "$@" <"$WORK/hold.in" >"$WORK/run.json" 2>/dev/null &
        rp=$!
        exec 4>"$WORK/hold.in"
        while ! grep -q '"run_ms"' "$WORK/run.json" 2>/dev/null; do
            kill -0 "$rp" 2>/dev/null || { echo "tetris-onnx-run $* failed" >&2; exit 1; }
            sleep 0.05
        done
        pte=$(awk '/^VmPTE:/ { print $2 }' "/proc/$rp/status")
        exec 4>&-
        wait "$rp" || true
        l=$(json_ms load_ms <"$WORK/run.json"); s=$(json_ms session_ms <"$WORK/run.json")
        r=$(json_ms run_ms <"$WORK/run.json")
        echo "$l | $s | $r | $((l + s + r)) | $pte"
    }
    "$BIN/tetris-agent" index "$ONNX" -o "$WORK/onnx.json" 2>/dev/null
    echo
    echo "First inference, $(basename "$ONNX") (real model, ONNX Runtime, 1 thread):"
    echo
    echo "| start | store tmpfs | load ms | session ms | first run ms | total ms | page tables kB |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    p=$(first --private)
    echo "| private | - | $p |"
    run_of() { echo "$1" | awk -F' [|] ' '{ print $3 }'; }
    load_of() { echo "$1" | awk -F' [|] ' '{ print $1 }'; }
    pr=$(run_of "$p")
    : >"$WORK/deltas"
    for k in plain huge; do
        TMPFS=$k
        label=$([ $k = plain ] && echo "4 KiB" || echo "huge=within_size")
        fresh_store; start_daemon "$WORK/store" 0
        c=$(first --store "$WORK/store" --manifest "$WORK/onnx.json")
        echo "| tetris cold (daemon) | $label | $c |"
        # Warm starts, the store's mappings populated three ways (the agent's
        # --populate): on first touch, by mmap, by madvise right after it.
        for pop in none map madvise; do
            w=$(first --store "$WORK/store" --manifest "$WORK/onnx.json" --populate "$pop")
            echo "| tetris warm, --populate $pop | $label | $w |"
            r=$(run_of "$w"); l=$(load_of "$w")
            echo "- $label, --populate $pop: $((r - pr)) ms ($(ratio "$((r - pr))" "$pr") of the run), load $l ms" >>"$WORK/deltas"
        done
        stop_daemon
    done
    echo
    echo "Warm first run minus private first run (private first run: $pr ms), and the load it costs:"
    cat "$WORK/deltas"
fi
