#!/bin/sh
# test-paper-models-cli.sh - scripts/models/paper-models.sh without PyTorch:
# --help/--version, usage errors exit 2 and name the problem, and a missing
# PyTorch with --no-install exits 3 with a clear message and writes nothing
# to the cache; two callers of one model export it once; the background
# export of `make test` covers every model the tests ask for. Needs neither
# torch nor the big models.
set -eu
. "$(dirname "$0")/../lib/common.sh"
S="$ROOT/scripts/models/paper-models.sh"
export TETRIS_CACHE="$WORK/cache"

"$S" --help >"$WORK/help.out" || fail "--help exited $?"
grep -q 'RANDOM' "$WORK/help.out" || fail "--help does not say the weights are random"
grep -q 'Exit status' "$WORK/help.out" || fail "--help does not document exit codes"
"$S" --version | grep -q '^paper-models.sh ' || fail "--version"

# usage: status 2 and a message naming the bad argument
usage_case() {
    want=$1; shift
    set +e
    "$S" "$@" >"$WORK/out" 2>"$WORK/err.log"
    rc=$?
    set -e
    [ "$rc" = 2 ] || fail "$* exited $rc, want 2"
    grep -q -- "$want" "$WORK/err.log" || fail "$*: message lacks '$want': $(cat "$WORK/err.log")"
    [ ! -s "$WORK/out" ] || fail "$*: printed on stdout"
}
usage_case "unknown model 'gpt2'" gpt2
usage_case "unknown option '--bogus'" --bogus
usage_case "VARIANTS must be a number" bert-base:x
usage_case "VARIANTS missing" bert-base:
usage_case "--steps must be a positive number" --steps 0 bert-base
usage_case "--steps needs a value" --steps

# no PyTorch: a python that cannot import it stands in for a machine without it
cat >"$WORK/python-without-torch" <<'PY'
#!/bin/sh
echo "ModuleNotFoundError: No module named 'torch'" >&2
exit 1
PY
chmod +x "$WORK/python-without-torch"
set +e
TETRIS_PYTHON="$WORK/python-without-torch" "$S" --no-install bert-base:1 >"$WORK/out" 2>"$WORK/err.log"
rc=$?
set -e
[ "$rc" = 3 ] || fail "without PyTorch: exited $rc, want 3"
grep -q 'event=error msg="PyTorch is not installed' "$WORK/err.log" || fail "unclear error: $(cat "$WORK/err.log")"
[ ! -s "$WORK/out" ] || fail "without PyTorch: printed a model path"
[ ! -e "$TETRIS_CACHE/paper-models" ] || fail "without PyTorch: wrote to the cache"
note "usage errors exit 2; no PyTorch exits 3 with a clear message"

# Two callers of one model at once (make test's background export and a
# test): one exports, the other waits on the model's lock and finds it
# done. A stand-in python "exports" (a file, a line in a count, a second's
# pause); without programs to check with, the script marks it unchecked.
cat >"$WORK/python-exporter" <<'PY'
#!/bin/sh
[ "$1" = -c ] && exit 0
out=$3
echo export >>"$EXPORT_COUNT"
sleep 1
echo onnx >"$out/bert-base.onnx"
PY
chmod +x "$WORK/python-exporter"
mkdir "$WORK/nobin"
export EXPORT_COUNT="$WORK/exports"
for i in 1 2; do
    TETRIS_PYTHON="$WORK/python-exporter" TETRIS_BIN="$WORK/nobin" "$S" --no-install bert-base \
        >"$WORK/path.$i" 2>"$WORK/export.$i.log" &
    eval "pid$i=\$!"
done
# shellcheck disable=SC2154
wait "$pid1" || fail "first caller: $(cat "$WORK/export.1.log")"
# shellcheck disable=SC2154
wait "$pid2" || fail "second caller: $(cat "$WORK/export.2.log")"
[ "$(wc -l <"$EXPORT_COUNT")" = 1 ] || fail "two callers exported $(wc -l <"$EXPORT_COUNT") times"
cmp -s "$WORK/path.1" "$WORK/path.2" && [ -s "$(cat "$WORK/path.1")" ] ||
    fail "the callers printed $(cat "$WORK/path.1") and $(cat "$WORK/path.2")"
note "two callers of one model: one export, the same file"

# make test exports in the background what the tests ask for: every spec a
# test names is in scripts/build-test-tools.sh's list (else that test
# exports it itself, in the foreground).
specs=" $(sed -n 's/^PAPER_MODEL_SPECS="\(.*\)"$/\1/p' "$ROOT/scripts/build-test-tools.sh") "
asked=$(grep -rhoE '^[[:space:]]*paper_model [a-z0-9:-]+' "$ROOT/tests" --include='*.sh' | awk '{ print $2 }'
    sed -n 's/^for name in \(.*\); do$/\1/p' "$ROOT/tests/models/test-paper-models-derived.sh")
[ -n "$asked" ] || fail "found no paper_model calls in tests/"
for s in $asked; do
    case $specs in *" $s "*) ;; *) fail "tests ask for paper model $s; build-test-tools.sh does not export it" ;; esac
done
note "the background export covers every paper model the tests ask for"
