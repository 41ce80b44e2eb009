#!/bin/sh
# paper-models.sh - the paper's Table 4 models as real ONNX architectures with
# RANDOM weights (BERT-base, BERT-large QA, ResNet-152, VGG19) and fine-tuned
# variants of them, exported at build/benchmark time with Debian's PyTorch
# (installed here with apt-get when missing) and cached outside the tree.
# Each exported model is checked with tetris-onnx-run and indexed with
# tetris-agent; for every variant the bytes it shares with its base (same
# SHA-256 digests) are reported. Each base model's state_dict is also
# written as NAME.safetensors (PyTorch's parameter names), for functions
# that run it in PyTorch. Prints the paths of the models on stdout.
set -eu

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PROG=paper-models.sh
CACHE="${TETRIS_CACHE:-$HOME/.cache/tetris}/paper-models"
BIN="${TETRIS_BIN:-$ROOT/bin}"
# Debian's PyTorch is for Debian's python, whatever python3 is first in PATH
PY="${TETRIS_PYTHON:-$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)}"
DEFAULT_SPECS="bert-base:3 bert-large resnet152:2 vgg19:2"

usage() {
    cat <<EOF
Usage: $PROG [--no-install] [--steps N] [--dir] [MODEL[:VARIANTS]]...

Exports real architectures of the paper's models with RANDOM initial weights
to ONNX (no pretrained weights are available), plus VARIANTS fine-tuned
variants of each (NAME-ft1, ...): the top layers trained for N SGD steps on
synthetic data, the bottom layers bit-identical to the base, so the tensor
store shares them. Runs once; later calls print the cached files. Next to each base model
NAME.onnx: NAME.safetensors, its PyTorch state_dict (parameter names as in
scripts/models/bert.py or torchvision).

MODEL: bert-base (12 layers, hidden 768, 440 MB, 2-class classifier head),
       bert-large (24 layers, hidden 1024, 1.34 GB, question-answering head),
       resnet152 (230 MB), vgg19 (548 MB).
       Default: $DEFAULT_SPECS
Variants train: BERT the top third of the layers and the head; ResNet-152
the fc layer; VGG19 the dense classifier.

Options:
  --no-install  do not apt-get install PyTorch; exit 3 if it is missing
  --steps N     SGD steps per variant (default 3)
  --dir         print each model's cache directory instead of its files
  --help, --version

Inputs: BERT input_ids int64 [batch, sequence] (sequence <= 512; give it
with tetris-onnx-run/tetris-function --dim), CNNs image float [batch,3,224,224].

Environment: TETRIS_CACHE (default ~/.cache/tetris; models under
paper-models/), TETRIS_BIN (programs used to check, default bin/),
TETRIS_PYTHON (default /usr/bin/python3, Debian's).
Exit status: 0 ok, 1 failure, 2 usage, 3 PyTorch unavailable.
EOF
}

log() { echo "prog=$PROG $*" >&2; }
die() { log "event=error msg=\"$1\""; exit "${2:-1}"; }
progress() { if [ -t 2 ]; then printf '\r\033[K[models] %s' "$*" >&2; fi; }
progress_done() { if [ -t 2 ]; then printf '\r\033[K' >&2; fi; }

install=1 steps=3 print_dir=0 specs=""
while [ $# -gt 0 ]; do
    case $1 in
    --help | -h) usage; exit 0 ;;
    --version) echo "$PROG ${TETRIS_VERSION:-0.1.0}"; exit 0 ;;
    --no-install) install=0 ;;
    --steps) [ $# -ge 2 ] || { echo "$PROG: --steps needs a value" >&2; exit 2; }; steps=$2; shift ;;
    --steps=*) steps=${1#--steps=} ;;
    --dir) print_dir=1 ;;
    -*) echo "$PROG: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) specs="$specs $1" ;;
    esac
    shift
done
case $steps in '' | *[!0-9]* | 0) echo "$PROG: --steps must be a positive number" >&2; exit 2 ;; esac
[ -n "$specs" ] || specs=$DEFAULT_SPECS
for s in $specs; do
    case ${s%%:*} in bert-base | bert-large | resnet152 | vgg19) ;; *)
        echo "$PROG: unknown model '$s' (bert-base, bert-large, resnet152 or vgg19, optionally :VARIANTS)" >&2; exit 2 ;;
    esac
    case $s in *:) echo "$PROG: '$s': VARIANTS missing after ':'" >&2; exit 2 ;; *:*[!0-9]*) echo "$PROG: '$s': VARIANTS must be a number" >&2; exit 2 ;; esac
done

# torch_ok: PyTorch (and torchvision for the CNNs) import.
need_vision=0
case "$specs" in *resnet152* | *vgg19*) need_vision=1 ;; esac
torch_ok() {
    if [ $need_vision = 1 ]; then
        "$PY" -c 'import torch, torchvision' 2>/dev/null
    else
        "$PY" -c 'import torch' 2>/dev/null
    fi
}
if ! torch_ok; then
    [ $install = 1 ] || die "PyTorch is not installed (apt-get install python3-torch python3-torchvision, or run without --no-install)" 3
    command -v apt-get >/dev/null 2>&1 || die "PyTorch is not installed and there is no apt-get to install it" 3
    pkgs="python3-torch"
    [ $need_vision = 0 ] || pkgs="$pkgs python3-torchvision"
    log "event=apt-install packages=\"$pkgs\" note=\"about 280 Debian packages, once\""
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    { apt-get update -qq &&
        apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 $pkgs >/dev/null; } ||
        die "apt-get install $pkgs failed: PyTorch unavailable" 3
    torch_ok || die "PyTorch installed but '$PY -c \"import torch\"' fails" 3
fi

# The cache key: what determines the bytes (the exporter, the spec, the
# number of steps and the PyTorch build).
versions=$(dpkg-query -W -f='${Version} ' python3-torch python3-torchvision 2>/dev/null || "$PY" -c 'import torch; print(torch.__version__)')
script_sum=$(cat "$ROOT/scripts/models/export.py" "$ROOT/scripts/models/bert.py" | sha256sum | cut -c1-64)

# shared_line BASE_MANIFEST VARIANT_MANIFEST: "<shared bytes> <variant bytes>",
# shared = the variant's tensor bytes whose digest the base also has.
shared_line() {
    jq -r -n --slurpfile b "$1" --slurpfile v "$2" '
        ($b[0].tensors | map({key: .digest, value: 1}) | from_entries) as $in
        | [$v[0].tensors[] | select($in[.digest]) | .nbytes] | add // 0
        | "\(.) \($v[0].tensor_bytes)"'
}

mkdir -p "$CACHE"
for s in $specs; do
    name=${s%%:*} k=0
    case $s in *:*) k=${s#*:} ;; esac
    key=$(printf '%s %s %s %s\n' "$script_sum" "$s" "$steps" "$versions" | sha256sum | cut -c1-16)
    dir="$CACHE/$name-$k-$key"
    # One export of a model at a time: `make test` exports in the background
    # while a test may ask for the same model; the second caller waits here,
    # then finds it done.
    exec 9>"$dir.lock"
    flock 9 || die "cannot lock $dir.lock"
    if [ ! -f "$dir/.done" ]; then
        rm -rf "$dir.tmp"
        mkdir -p "$dir.tmp"
        log "event=export model=$name variants=$k dir=$dir weights=random"
        "$PY" "$ROOT/scripts/models/export.py" --out "$dir.tmp" --steps "$steps" "$s" ||
            { rc=$?; rm -rf "$dir.tmp"; [ $rc = 3 ] && exit 3; die "exporting $s failed"; }
        # Check: ONNX Runtime runs each model (tetris-onnx-run, private
        # session, a short sequence for BERT), and tetris-agent indexes it.
        if [ -x "$BIN/tetris-onnx-run" ] && [ -x "$BIN/tetris-agent" ]; then
            for m in "$dir.tmp"/*.onnx; do
                mn=$(basename "$m" .onnx)
                progress "checking $mn with tetris-onnx-run"
                "$BIN/tetris-onnx-run" "$m" --private --dim 32 --threads 0 >"$dir.tmp/$mn.run.json" 2>"$dir.tmp/$mn.run.log" ||
                    { progress_done; cat "$dir.tmp/$mn.run.log" >&2; rm -rf "$dir.tmp"; die "ONNX Runtime cannot run $mn"; }
                "$BIN/tetris-agent" index "$m" -o "$dir.tmp/$mn.manifest.json" 2>>"$dir.tmp/$mn.run.log" ||
                    { rm -rf "$dir.tmp"; die "tetris-agent index $mn failed"; }
                progress_done
                log "event=checked model=$mn tensor_bytes=$(jq -r .tensor_bytes "$dir.tmp/$mn.manifest.json") run_ms=$(jq -r .run_ms "$dir.tmp/$mn.run.json") output_sha256=$(jq -r .sha256 "$dir.tmp/$mn.run.json")"
            done
            # The base's state_dict as safetensors (for PyTorch functions):
            # indexed too, and how many of its bytes have the digest of an
            # ONNX initializer (those a store holds once for both).
            "$BIN/tetris-agent" index "$dir.tmp/$name.safetensors" -o "$dir.tmp/$name.safetensors.manifest.json" \
                2>>"$dir.tmp/$name.run.log" || { rm -rf "$dir.tmp"; die "tetris-agent index $name.safetensors failed"; }
            # shellcheck disable=SC2046
            set -- $(shared_line "$dir.tmp/$name.manifest.json" "$dir.tmp/$name.safetensors.manifest.json")
            log "event=shared-with-onnx model=$name.safetensors shared_bytes=$1 tensor_bytes=$2"
            i=1
            : >"$dir.tmp/sharing.tsv"
            while [ "$i" -le "$k" ]; do
                # shellcheck disable=SC2046
                set -- $(shared_line "$dir.tmp/$name.manifest.json" "$dir.tmp/$name-ft$i.manifest.json")
                printf '%s\t%s\t%s\t%s\n' "$name-ft$i" "$name" "$1" "$2" >>"$dir.tmp/sharing.tsv"
                log "event=shared variant=$name-ft$i base=$name shared_bytes=$1 tensor_bytes=$2 shared_pct=$(awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", 100 * a / b }')"
                i=$((i + 1))
            done
        else
            log "event=unchecked msg=\"$BIN/tetris-onnx-run or tetris-agent missing (run make): models exported but not run\""
        fi
        touch "$dir.tmp/.done"
        rm -rf "$dir"
        mv "$dir.tmp" "$dir"
    fi
    exec 9>&-
    if [ $print_dir = 1 ]; then
        echo "$dir"
    else
        echo "$dir/$name.onnx"
        i=1
        while [ "$i" -le "$k" ]; do echo "$dir/$name-ft$i.onnx"; i=$((i + 1)); done
    fi
done
