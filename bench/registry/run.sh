#!/bin/sh
# bench/registry/run.sh - models from a registry, tensor by tensor, against
# their limits in one run: Debian's docker-registry on loopback holds
# BERT-base (the paper's architecture, RANDOM weights: paper-models.sh) and
# its fine-tuned variants; per round, interleaved,
#   raw      every blob of the base artifact fetched by one curl,
#            BENCH_FETCHERS transfers at once, to /dev/null (the registry's
#            own speed here: nothing verified, nothing written)
#   pull     `tetris-agent load oci://...` into an empty store: the daemon
#            resolves, fetches what the store lacks, verifies every byte,
#            publishes; the agent maps
#   file     `tetris-agent load FILE` into an empty store: the cold local
#            ingest of the same model (page cache warm)
# each as MB/s of the model's bytes, medians over BENCH_ROUNDS; beside them
# SHA-256 over the same bytes in one thread and a tmpfs write of them (the
# machine's limits a pull pays). Then, on the store holding the base, each
# variant pulled: the bytes pulled against the ideal (the bytes of the
# variant's tensors the base does not have, from the two manifests) and
# the bytes the daemon counted as not pulled.
# Environment: TETRIS_BIN, BENCH_ROUNDS (3), BENCH_VARIANTS (3), BENCH_FETCHERS
# (4: curl's transfers at once).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${TETRIS_BIN:-$ROOT/bin}
rounds=${BENCH_ROUNDS:-3}
variants=${BENCH_VARIANTS:-3}
fetchers=${BENCH_FETCHERS:-4}
command -v docker-registry >/dev/null 2>&1 || apt-get install -y docker-registry >/dev/null 2>&1 ||
    { echo "bench/registry: docker-registry missing and not installable" >&2; exit 2; }
work=$(mktemp -d /dev/shm/tetris-bench-registry.XXXXXX)
registry=""
daemon=""
cleanup() {
    [ -z "$daemon" ] || { kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; } || true
    [ -z "$registry" ] || kill "$registry" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# The models: the cached paper models (made once, minutes, with PyTorch).
files=$("$ROOT/scripts/models/paper-models.sh" "bert-base:$variants") ||
    { echo "bench/registry: paper models unavailable" >&2; exit 2; }
base=$(printf '%s\n' "$files" | grep '/bert-base\.onnx$')
[ -n "$base" ] || { echo "bench/registry: no bert-base.onnx in: $files" >&2; exit 2; }
dir=$(dirname "$base")
model_bytes=$(stat -c %s "$base")

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
host="127.0.0.1:$port"
printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n' \
    "$work/registry" "$host" >"$work/registry.yml"
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry=$!
i=0
until curl -s -o /dev/null "http://$host/v2/"; do
    i=$((i + 1)); [ $i -lt 300 ] || { echo "registry did not start" >&2; exit 1; }; sleep 0.1
done
"$BIN/tetris-registry" push "$base" "oci://$host/models/bert-base:v1" >/dev/null 2>"$work/push.log" ||
    { echo "push: $(tail -1 "$work/push.log")" >&2; exit 1; }
v=1
while [ $v -le "$variants" ]; do
    "$BIN/tetris-registry" push --from models/bert-base "$dir/bert-base-ft$v.onnx" \
        "oci://$host/models/bert-base-ft$v:v1" >/dev/null 2>>"$work/push.log" ||
        { echo "push ft$v: $(tail -1 "$work/push.log")" >&2; exit 1; }
    v=$((v + 1))
done
accept='Accept: application/vnd.oci.image.manifest.v1+json'
manifest() { curl -sf -H "$accept" "http://$host/v2/models/$1/manifests/v1"; }
manifest bert-base >"$work/base.json"

# daemon_start STORE: a node daemon on an empty store, pulls allowed from
# the registry only; its metrics on a port of its own (metrics_port).
daemon_start() {
    mkdir -p "$1"
    metrics_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$BIN/tetris-reclaimer" --store "$1" --listen "127.0.0.1:$metrics_port" --interval 3600 \
        --registries "http://$host" >"$work/daemon.log" 2>&1 &
    daemon=$!
    i=0
    until grep -q event=serving "$work/daemon.log"; do
        i=$((i + 1)); [ $i -lt 300 ] || { echo "daemon did not start" >&2; exit 1; }; sleep 0.1
    done
}
daemon_stop() { kill "$daemon"; wait "$daemon" 2>/dev/null || true; daemon=""; }
metric() { curl -sf "http://127.0.0.1:$metrics_port/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
now_ms() { date +%s%3N; }
mbps() { awk -v b="$1" -v ms="$2" 'BEGIN { printf "%.0f", (ms > 0 ? b / 1e6 / (ms / 1000) : 0) }'; }
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# The limits, measured here: SHA-256 of the model's bytes (OpenSSL, as the
# daemon hashes; one thread, page cache warm) and writing them to tmpfs.
cat "$base" >/dev/null
t0=$(now_ms); openssl dgst -sha256 "$base" >/dev/null; sha_ms=$(($(now_ms) - t0))
t0=$(now_ms); cp "$base" "$work/copy"; tmpfs_ms=$(($(now_ms) - t0)); rm -f "$work/copy"

: >"$work/raw"; : >"$work/pull"; : >"$work/file"
r=1
while [ "$r" -le "$rounds" ]; do
    # raw: every blob by one curl, fetchers transfers at once.
    jq -r --arg u "http://$host/v2/models/bert-base/blobs/" \
        '.config.digest, .layers[].digest | "url = \"\($u)\(.)\"\noutput = \"/dev/null\""' \
        "$work/base.json" >"$work/curl.conf"
    t0=$(now_ms)
    curl -sf --parallel --parallel-max "$fetchers" -K "$work/curl.conf" \
        -w '%{size_download}\n' >"$work/raw.sizes"
    ms=$(($(now_ms) - t0))
    raw_bytes=$(awk '{ s += $1 } END { print s }' "$work/raw.sizes")
    mbps "$raw_bytes" "$ms" >>"$work/raw"; echo >>"$work/raw"
    # pull into an empty store.
    daemon_start "$work/store-pull-$r"
    t0=$(now_ms)
    "$BIN/tetris-agent" load --store "$work/store-pull-$r" "oci://$host/models/bert-base:v1" \
        >"$work/pull.json" 2>"$work/pull.log" || { echo "pull: $(tail -1 "$work/pull.log")" >&2; exit 1; }
    ms=$(($(now_ms) - t0))
    pulled=$(metric tetris_pull_bytes_total)
    mbps "$model_bytes" "$ms" >>"$work/pull"; echo >>"$work/pull"
    daemon_stop
    rm -rf "$work/store-pull-$r"
    # file: the cold local ingest of the same model.
    daemon_start "$work/store-file-$r"
    t0=$(now_ms)
    "$BIN/tetris-agent" load --store "$work/store-file-$r" "$base" >/dev/null 2>"$work/file.log" ||
        { echo "file: $(tail -1 "$work/file.log")" >&2; exit 1; }
    ms=$(($(now_ms) - t0))
    mbps "$model_bytes" "$ms" >>"$work/file"; echo >>"$work/file"
    daemon_stop
    rm -rf "$work/store-file-$r"
    r=$((r + 1))
done
m() { grep -v '^$' "$work/$1" | median; }

echo "Models from a registry: BERT-base ($model_bytes bytes, RANDOM weights) on Debian's docker-registry"
echo "on loopback; $rounds rounds interleaved, medians; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| path | MB/s | limit, same run |"
echo "|---|---:|---|"
echo "| raw blob download (one curl, $fetchers transfers at once, $raw_bytes bytes) | $(m raw) | the registry's own speed |"
echo "| pull into an empty store (resolve, fetch, verify, publish, map; daemon counted $pulled bytes) | $(m pull) | raw above; SHA-256 (OpenSSL, one thread) $(mbps "$model_bytes" "$sha_ms"); tmpfs write $(mbps "$model_bytes" "$tmpfs_ms") |"
echo "| cold local-file ingest into an empty store | $(m file) | same limits |"
echo

# Variants on the node that holds the base: what each pull fetched, against
# the bytes of its tensors the base lacks (layer sizes from the manifests).
daemon_start "$work/store-variants"
"$BIN/tetris-agent" load --store "$work/store-variants" "oci://$host/models/bert-base:v1" \
    >/dev/null 2>"$work/pull.log" || { echo "base: $(tail -1 "$work/pull.log")" >&2; exit 1; }
echo "| variant | pulled bytes | ideal (its tensors the base lacks) | not pulled (store had them) |"
echo "|---|---:|---:|---:|"
v=1
total_pulled=0
total_ideal=0
while [ $v -le "$variants" ]; do
    manifest "bert-base-ft$v" >"$work/ft.json"
    ideal=$(jq -n --slurpfile b "$work/base.json" --slurpfile f "$work/ft.json" '
        ([$b[0].layers[].digest]) as $have
        | [$f[0].layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1")
           | select(.digest as $d | $have | index($d) | not) | .size] | add // 0')
    before=$(metric tetris_pull_bytes_total)
    skipped_before=$(metric tetris_pull_skipped_bytes_total)
    "$BIN/tetris-agent" load --store "$work/store-variants" "oci://$host/models/bert-base-ft$v:v1" \
        >/dev/null 2>"$work/pull.log" || { echo "ft$v: $(tail -1 "$work/pull.log")" >&2; exit 1; }
    got=$(($(metric tetris_pull_bytes_total) - before))
    skipped=$(($(metric tetris_pull_skipped_bytes_total) - skipped_before))
    echo "| bert-base-ft$v | $got | $ideal | $skipped |"
    total_pulled=$((total_pulled + got))
    total_ideal=$((total_ideal + ideal))
    v=$((v + 1))
done
echo "| all $variants | $total_pulled | $total_ideal | |"
daemon_stop
[ "$total_pulled" -eq "$total_ideal" ] ||
    { echo "bench/registry: variants pulled $total_pulled bytes, ideal $total_ideal" >&2; exit 1; }
