#!/bin/sh
# test-paper-models-cli.sh - scripts/models/paper-models.sh without PyTorch:
# --help/--version, usage errors exit 2 and name the problem, and a missing
# PyTorch with --no-install exits 3 with a clear message and writes nothing
# to the cache. Needs neither torch nor the big models.
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
