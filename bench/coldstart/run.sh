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
# Last, time to first inference on a real ONNX model (ONNX Runtime): load +
# session + first run, private, cold through the daemon and warm.
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
ONNX="${COLDSTART_ONNX:-$ROOT/.deps/models/ch_PP-OCRv4_rec_infer.onnx}"
parent=/dev/shm; [ -w "$parent" ] || parent="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$parent/tetris-bench-cold.XXXXXX")"
DPID=""
cleanup() {
    [ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
    mountpoint -q "$WORK/huge" 2>/dev/null && umount "$WORK/huge"
    chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"
}
trap cleanup EXIT

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# ms CMD...: wall milliseconds of CMD (output discarded)
ms() { t0=$(now_ms); "$@" >/dev/null 2>&1; echo $(( $(now_ms) - t0 )); }
json_ms() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" | awk '{ printf "%.0f", $1 }'; }

start_daemon() { # start_daemon STORE WORKERS(0 = allowance)
    "$BIN/tetris-reclaimer" --store "$1" --listen "" --capacity 0 --workers "$2" \
        >/dev/null 2>"$WORK/daemon.log" &
    DPID=$!
    i=0
    while [ ! -S "$1/public/ingest.sock" ]; do
        i=$((i + 1)); [ $i -gt 100 ] && { cat "$WORK/daemon.log" >&2; exit 1; }
        sleep 0.05
    done
}
stop_daemon() { kill "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=""; }
fresh_store() { rm -rf "$WORK/store"; mkdir "$WORK/store"; }

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

fresh_store; start_daemon "$WORK/store" 0
N=$(sed -n 's/.*event=ingest-workers workers=\([0-9]*\).*/\1/p' "$WORK/daemon.log")
stop_daemon

cold() { # cold WORKERS [--manifest M]: a cold load through the daemon, ms in T
    fresh_store; start_daemon "$WORK/store" "$1"; shift
    T=$(ms "$BIN/tetris-agent" load --store "$WORK/store" "$@" "$MODEL")
}
cold 1 --manifest "$WORK/manifest.json"; d1=$T; stop_daemon
cold "$N" --manifest "$WORK/manifest.json"; dN=$T
warm=$(ms "$BIN/tetris-agent" load --store "$WORK/store" --manifest "$WORK/manifest.json" "$MODEL")
stop_daemon
cold "$N"; dNn=$T
# A warm start without a manifest: the agent hashes (on N workers) or the
# daemon does (and discards its temp copies); auto probes one tensor.
wna=$(ms "$BIN/tetris-agent" load --store "$WORK/store" --digests agent "$MODEL")
wnd=$(ms "$BIN/tetris-agent" load --store "$WORK/store" --digests daemon "$MODEL")
wnauto=$(ms "$BIN/tetris-agent" load --store "$WORK/store" "$MODEL")
stop_daemon
cold "$N" --digests agent; dNna=$T; stop_daemon
fresh_store; x1=$(ms "$BIN/tetris-agent" load --direct --workers 1 --store "$WORK/store" --manifest "$WORK/manifest.json" "$MODEL")
fresh_store; xN=$(ms "$BIN/tetris-agent" load --direct --workers "$N" --store "$WORK/store" --manifest "$WORK/manifest.json" "$MODEL")
fresh_store; xNn=$(ms "$BIN/tetris-agent" load --direct --workers "$N" --store "$WORK/store" "$MODEL")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
bound1=$((sha1 + w4k))
boundN=$(( (sha1 + w4k) / N ))
echo "Model: $KIND, $(basename "$MODEL"), $bytes bytes; workers N = $N (the daemon's CPU allowance)."
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
echo "| tetris load | ms | / SHA-256 one core | / bound for its workers |"
echo "|---|---:|---:|---:|"
echo "| private (tetris-agent --private) | $priv | $(ratio "$priv" "$sha1") | |"
echo "| cold, daemon, 1 worker, manifest | $d1 | $(ratio "$d1" "$sha1") | $(ratio "$d1" "$bound1") |"
echo "| cold, daemon, $N workers, manifest | $dN | $(ratio "$dN" "$sha1") | $(ratio "$dN" "$boundN") |"
echo "| cold, daemon, $N workers, no manifest (daemon hashes, default) | $dNn | $(ratio "$dNn" "$sha1") | |"
echo "| cold, daemon, $N workers, no manifest, --digests agent (hash twice) | $dNna | $(ratio "$dNna" "$sha1") | |"
echo "| cold, --direct, 1 worker, manifest | $x1 | $(ratio "$x1" "$sha1") | $(ratio "$x1" "$bound1") |"
echo "| cold, --direct, $N workers, manifest | $xN | $(ratio "$xN" "$sha1") | $(ratio "$xN" "$boundN") |"
echo "| cold, --direct, $N workers, no manifest | $xNn | $(ratio "$xNn" "$sha1") | |"
echo "| warm, daemon, manifest | $warm | $(ratio "$warm" "$sha1") | |"
echo "| warm, no manifest, --digests agent | $wna | $(ratio "$wna" "$sha1") | |"
echo "| warm, no manifest, --digests daemon | $wnd | $(ratio "$wnd" "$sha1") | |"
echo "| warm, no manifest, --digests auto (default) | $wnauto | $(ratio "$wnauto" "$sha1") | |"
echo
echo "Cold, no manifest / manifest (daemon): $(ratio "$dNn" "$dN") (hashing twice: $(ratio "$dNna" "$dN")); warm, no manifest, daemon / agent hashing: $(ratio "$wnd" "$wna"); 1 worker / $N workers (daemon): $(ratio "$d1" "$dN")."

# Time to first inference: load + session + the first run, on a real model.
if [ -f "$ONNX" ]; then
    first() { # first ARGS...: "load session run total" in ms
        "$BIN/tetris-onnx-run" "$ONNX" "$@" 2>/dev/null >"$WORK/run.json"
        l=$(json_ms load_ms <"$WORK/run.json"); s=$(json_ms session_ms <"$WORK/run.json")
        r=$(json_ms run_ms <"$WORK/run.json")
        echo "$l | $s | $r | $((l + s + r))"
    }
    "$BIN/tetris-agent" index "$ONNX" -o "$WORK/onnx.json" 2>/dev/null
    echo
    echo "First inference, $(basename "$ONNX") (real model, ONNX Runtime, 1 thread):"
    echo
    echo "| start | load ms | session ms | first run ms | total ms |"
    echo "|---|---:|---:|---:|---:|"
    p=$(first --private)
    echo "| private | $p |"
    fresh_store; start_daemon "$WORK/store" 0
    c=$(first --store "$WORK/store" --manifest "$WORK/onnx.json")
    # Warm starts, the store's mappings populated three ways (the agent's
    # --populate): on first touch, by mmap, by madvise right after it.
    wn=$(first --store "$WORK/store" --manifest "$WORK/onnx.json" --populate none)
    wm=$(first --store "$WORK/store" --manifest "$WORK/onnx.json" --populate map)
    wa=$(first --store "$WORK/store" --manifest "$WORK/onnx.json" --populate madvise)
    stop_daemon
    echo "| tetris cold (daemon) | $c |"
    echo "| tetris warm, --populate none | $wn |"
    echo "| tetris warm, --populate map (MAP_POPULATE) | $wm |"
    echo "| tetris warm, --populate madvise (default) | $wa |"
    run_of() { echo "$1" | awk -F' [|] ' '{ print $3 }'; }
    load_of() { echo "$1" | awk -F' [|] ' '{ print $1 }'; }
    pr=$(run_of "$p")
    echo
    echo "Warm first run minus private first run (private first run: $pr ms), and the load it costs:"
    for v in "none:$wn" "map:$wm" "madvise:$wa"; do
        r=$(run_of "${v#*:}"); l=$(load_of "${v#*:}")
        echo "- --populate ${v%%:*}: $((r - pr)) ms ($(ratio "$((r - pr))" "$pr") of the run), load $l ms"
    done
fi
