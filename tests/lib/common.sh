# tests/lib/common.sh - what every shell test shares. Source it first:
#
#   set -eu                       # shell options are the test's own choice
#   . "$(dirname "$0")/../lib/common.sh"
#
# It gives
#   ROOT, BIN, MODELS   the repository, the programs under test ($TETRIS_BIN,
#                       default bin/), the real ONNX models ($TETRIS_MODELS)
#   PROG                the test's name
#   WORK                a scratch directory on tmpfs, removed at exit (kept,
#                       and named, when TETRIS_KEEP_WORK=1)
#   fail, skip, note    the outcome: FAIL (exit 1, with the tails of
#                       $WORK/*.log), SKIP (exit 77: the test cannot run
#                       here, see tests/run-tests.sh), progress lines
#   KILL_ON_EXIT, at_exit  processes killed, then commands run, at exit
# and the helpers below: a test's Debian packages, bounded waits, exit
# statuses, smaps sums, ports, metrics, the node daemon, the fake apiserver
# and a Prometheus server. It sets no shell options and works
# under set -e and set -u.
# shellcheck shell=sh disable=SC2034

# Once per test: a helper library that sources it again (tests/lib/csi.sh
# and tests/lib/function.sh together) keeps the test's WORK and exit list.
[ -z "${_TETRIS_TEST_COMMON:-}" ] || return 0
_TETRIS_TEST_COMMON=1

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${TETRIS_BIN:-$ROOT/bin}"
MODELS="${TETRIS_MODELS:-$ROOT/.deps/models}"
PROG="$(basename "$0" .sh)"
# Under ASan: ONNX Runtime's own leaks are not ours (see lsan.supp).
export LSAN_OPTIONS="suppressions=$ROOT/tests/lib/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# Instances use a derived form the store has but ask for none in the
# background: a form made between a test's cold and warm start would
# change the warm start's outputs to the optimised graph's. The tests of
# derived forms ask for them (--derived make, or auto set explicitly).
export TETRIS_DERIVED="${TETRIS_DERIVED:-use}"

_shm=/dev/shm
[ -d "$_shm" ] && [ -w "$_shm" ] || _shm="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$_shm/tetris-$PROG.XXXXXX")" || {
    echo "FAIL $PROG: cannot make a scratch directory in $_shm" >&2
    exit 1
}

KILL_ON_EXIT=""
_AT_EXIT=""

# at_exit CMD: CMD runs when the test exits, after KILL_ON_EXIT's processes
# are gone; the last one registered runs first.
at_exit() {
    _AT_EXIT="$1
$_AT_EXIT"
}

# Best effort and never fatal: the test's exit status stands.
_test_cleanup() {
    set +e
    for _p in $KILL_ON_EXIT; do kill -KILL "$_p" 2>/dev/null; done
    wait 2>/dev/null
    eval "$_AT_EXIT"
    if [ "${TETRIS_KEEP_WORK:-0}" = 1 ]; then
        echo "# $PROG: scratch directory kept: $WORK" >&2
    else
        chmod -R u+w "$WORK" 2>/dev/null
        rm -rf "$WORK"
    fi
}
trap _test_cleanup EXIT
# A reader that went away (run-tests piped into head) is a signal too: the
# scratch directory still goes.
trap 'exit 1' INT TERM HUP PIPE

fail() {
    echo "FAIL $PROG: $*" >&2
    for _f in "$WORK"/*.log; do
        [ -s "$_f" ] || continue
        # A sanitizer report's head names the bug; its tail is the legend.
        if grep -q 'ERROR: AddressSanitizer\|runtime error:' "$_f"; then
            echo "--- $_f (sanitizer report)" >&2
            grep -m 1 -A 40 'ERROR: AddressSanitizer\|runtime error:' "$_f" >&2
        fi
        echo "--- $_f (tail)" >&2
        tail -n 20 "$_f" >&2
    done
    exit 1
}

# skip REASON: the test cannot run here (a missing facility, not a bug).
# The reason goes to stderr and to $TETRIS_TEST_SKIP_FILE, where
# tests/run-tests.sh reads it.
skip() {
    echo "SKIP $PROG: $*" >&2
    [ -z "${TETRIS_TEST_SKIP_FILE:-}" ] || printf '%s\n' "$*" >"$TETRIS_TEST_SKIP_FILE"
    exit 77
}

note() { echo "# $PROG: $*"; }

# release_only PROGRAM WHY: skip when $BIN/PROGRAM is a sanitizer build,
# for tests that measure what ASan changes (memory, timing of mappings).
release_only() {
    if ldd "$BIN/$1" 2>/dev/null | grep -q libasan; then
        skip "measures release binaries only: $2"
    fi
}

# asan_memory_as_release: for tests that measure a process's memory.
# Under ASan, freed blocks wait in its quarantine (up to 256 MiB) before
# they are reused, so memory the program has given back still counts as
# anonymous; without the quarantine a sanitizer build's memory is the
# program's plus the shadow the test accounts for. No effect on release builds.
asan_memory_as_release() {
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
}

# need_models: the real models are there (scripts/deps.sh fetches them).
need_models() {
    ls "$MODELS"/*.onnx >/dev/null 2>&1 || fail "no real models in $MODELS (run scripts/deps.sh)"
}

# need_package PACKAGE...: installs the Debian packages a test needs that
# are not installed yet (a test's own tools, too heavy or too rare for every
# build's scripts/deps.sh); SKIPs only when there is no apt-get or it fails
# (no archive), as a missing tool is installed, never a reason to check less.
need_package() {
    _missing=""
    for _p in "$@"; do
        dpkg-query -W -f='${Status}' "$_p" 2>/dev/null | grep -q "install ok installed" ||
            _missing="$_missing $_p"
    done
    [ -n "$_missing" ] || return 0
    command -v apt-get >/dev/null 2>&1 || skip "no apt-get to install$_missing"
    # A first try without the index's update, which is slow; a stale or
    # missing index is updated once. Another install's lock is waited for.
    _apt="apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $_apt $_missing >"$WORK/apt.log" 2>&1 ||
        { apt-get update -qq >>"$WORK/apt.log" 2>&1 &&
            DEBIAN_FRONTEND=noninteractive $_apt $_missing >>"$WORK/apt.log" 2>&1; } ||
        skip "apt-get install$_missing failed: $(tail -n 1 "$WORK/apt.log")"
}

# paper_model SPEC: sets PAPER_MODEL_DIR to the cache directory of a paper
# model (SPEC as scripts/models/paper-models.sh takes it: NAME[:VARIANTS]),
# exporting it the first time (minutes; installs Debian's PyTorch when
# missing). SKIPs only when PyTorch is unavailable, fails otherwise: a
# missing model is made, never a reason to check less.
paper_model() {
    _rc=0
    PAPER_MODEL_DIR=$(TETRIS_BIN="$BIN" "$ROOT/scripts/models/paper-models.sh" --dir "$1" \
        2>"$WORK/paper-models.log") || _rc=$?
    [ $_rc -ne 3 ] || skip "PyTorch unavailable: $(tail -n 1 "$WORK/paper-models.log")"
    [ $_rc -eq 0 ] && [ -d "$PAPER_MODEL_DIR" ] ||
        fail "scripts/models/paper-models.sh $1: $(tail -n 3 "$WORK/paper-models.log")"
}

# wait_until SECONDS 'CONDITION': evaluates the shell condition every 0.1 s,
# at most SECONDS * 10 times; returns 1 when it never held. The bound only
# keeps a broken program from hanging the run: no test asserts on time.
wait_until() {
    _wu_limit=$(($1 * 10))
    shift
    _wu_i=0
    while ! eval "$*" >/dev/null 2>&1; do
        _wu_i=$((_wu_i + 1))
        [ $_wu_i -lt $_wu_limit ] || return 1
        sleep 0.1
    done
    return 0
}

# wait_output PID FILE WHAT ERRFILE: waits until the background process PID
# has written FILE; fails with ERRFILE's content when it exits first.
wait_output() {
    wait_until 60 "[ -s '$2' ] || ! kill -0 $1" || fail "no result from $3"
    [ -s "$2" ] || fail "$3 died: $(cat "$4" 2>/dev/null)"
}

# held_start NAME CMD...: CMD, which holds what it loaded until its stdin
# closes (--hold), started with its stdin on a fifo this shell keeps open
# (fd 3); its stdout in $WORK/NAME.out, stderr in $WORK/NAME.err; sets
# HELD_PID and returns once CMD printed its result. One at a time.
held_start() {
    _hs_name=$1
    shift
    rm -f "$WORK/$_hs_name.in" "$WORK/$_hs_name.out"
    mkfifo "$WORK/$_hs_name.in"
    "$@" <"$WORK/$_hs_name.in" >"$WORK/$_hs_name.out" 2>"$WORK/$_hs_name.err" &
    HELD_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $HELD_PID"
    exec 3>"$WORK/$_hs_name.in"
    wait_output $HELD_PID "$WORK/$_hs_name.out" "$_hs_name" "$WORK/$_hs_name.err"
}

# held_end NAME: closes the held process's stdin; fails unless it exits 0.
held_end() {
    exec 3>&-
    wait "$HELD_PID" || fail "$1 exited non-zero: $(tail -n 3 "$WORK/$1.err")"
}

# status CMD...: prints CMD's exit status (its output in $WORK/status.out
# and $WORK/status.err).
status() {
    _rc=0
    "$@" >"$WORK/status.out" 2>"$WORK/status.err" || _rc=$?
    echo $_rc
}

# json_get JSON KEY: a top-level value of a one-line JSON object.
json_get() {
    printf '%s\n' "$1" | jq -r ".$2"
}

# assert_shared JSON WHAT: a load report (tetris-agent load, tetris-onnx-run)
# that did not fall back and maps every tensor but the small ones (under
# AGENT_MIN_MAPPED_BYTES = 4096, a page: read privately).
assert_shared() {
    printf '%s\n' "$1" | jq -e '.fell_back == false and .mapped_bytes > 0 and
        .mapped_bytes + .private_bytes == .bytes and .private_bytes < 4096 * .tensors' \
        >/dev/null || fail "$2: not served from the store: $1"
}

# smaps_kb PID FILE FIELD: FIELD (Rss, ShmemPmdMapped, THPeligible...)
# summed over PID's mappings of FILE (a path as /proc/PID/smaps names it).
smaps_kb() {
    awk -v f="$2" -v k="$3:" '/^[0-9a-f]+-[0-9a-f]+ / { on = ($6 == f) }
        on && $1 == k { n += $2 } END { print n + 0 }' "/proc/$1/smaps"
}

# free_port: a loopback TCP port no socket uses right now, below the
# kernel's ephemeral range, so that no outgoing connection of this or any
# other process can take it before the test's server binds it.
free_port() {
    _low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    [ "$_low" -gt 12000 ] || _low=32768
    while :; do
        _port=$((10000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % (_low - 10000)))
        ss -Htan "sport = :$_port" | grep -q . || { echo "$_port"; return 0; }
    done
}

# metric_at URL NAME: the value of the sample NAME (with its labels, if
# any) in URL/metrics.
metric_at() {
    curl -sS --max-time 20 "$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'
}

# reclaimer_start STORE LOG ARGS...: tetris-reclaimer serving STORE, ARGS
# after --store, its output appended to LOG; returns once it serves. It
# does not inherit fds 3 and 4, which tests hold open as the stdin of
# holders (a holder lets go when its stdin closes). Sets RECLAIMER_PID and,
# when it listens for HTTP, RECLAIMER_PORT (--listen) and
# RECLAIMER_TENANT_PORT (--tenant-listen); the daemon is killed at exit.
reclaimer_start() {
    _store=$1
    _log=$2
    shift 2
    _served=$(grep -c "event=serving" "$_log" 2>/dev/null || true)
    "$BIN/tetris-reclaimer" --store "$_store" "$@" >>"$_log" 2>&1 3>&- 4>&- &
    RECLAIMER_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $RECLAIMER_PID"
    wait_until 60 "[ \"\$(grep -c event=serving '$_log')\" -gt ${_served:-0} ] || ! kill -0 $RECLAIMER_PID" ||
        fail "tetris-reclaimer did not start serving $_store"
    kill -0 "$RECLAIMER_PID" 2>/dev/null || fail "tetris-reclaimer died: $(tail -n 5 "$_log")"
    RECLAIMER_PORT=$(grep -o 'event=http-listening.*tenants=0 port=[0-9]*' "$_log" | tail -n 1 | sed 's/.*port=//')
    RECLAIMER_TENANT_PORT=$(grep -o 'event=http-listening.*tenants=1 port=[0-9]*' "$_log" | tail -n 1 | sed 's/.*port=//')
}

# reclaimer_stop: SIGTERM to the daemon reclaimer_start started; it must
# exit 0.
reclaimer_stop() {
    kill -TERM "$RECLAIMER_PID"
    _rc=0
    wait "$RECLAIMER_PID" || _rc=$?
    [ $_rc -eq 0 ] || fail "tetris-reclaimer exited $_rc on SIGTERM"
}

# fake_apiserver_start OBJECTS NAMESPACE: tetris-test-fake-apiserver
# serving the objects in the JSON file OBJECTS (re-read on every request;
# requests appended to $WORK/api.requests), and $WORK/kubeconfig for it
# with NAMESPACE as its context's (a token is fine over http to loopback).
# Sets API_PID; the server is killed at exit.
fake_apiserver_start() {
    rm -f "$WORK/api.port"
    "$BIN/tetris-test-fake-apiserver" --objects "$1" --port-file "$WORK/api.port" \
        --request-log "$WORK/api.requests" 2>>"$WORK/api.log" &
    API_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $API_PID"
    wait_until 30 "[ -s '$WORK/api.port' ] || ! kill -0 $API_PID" && [ -s "$WORK/api.port" ] ||
        fail "fake apiserver did not start"
    cat >"$WORK/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- {name: fake, cluster: {server: 'http://127.0.0.1:$(cat "$WORK/api.port")'}}
contexts:
- {name: fake, context: {cluster: fake, user: me, namespace: $2}}
current-context: fake
users:
- {name: me, user: {token: t0k3n}}
KC
}

# prometheus_start CONFIG: a Prometheus server (Debian's) with CONFIG on a
# free loopback port, its data under $WORK; sets PROM_URL and PROM_PID (the
# server is killed at exit).
prometheus_start() {
    for _try in 1 2 3 4 5; do
        _port=$(free_port)
        prometheus --config.file="$1" --storage.tsdb.path="$WORK/prometheus" \
            --web.listen-address="127.0.0.1:$_port" >"$WORK/prometheus.log" 2>&1 &
        PROM_PID=$!
        KILL_ON_EXIT="$KILL_ON_EXIT $PROM_PID"
        if wait_until 60 "curl -sf http://127.0.0.1:$_port/-/ready || ! kill -0 $PROM_PID" &&
            kill -0 "$PROM_PID" 2>/dev/null; then
            PROM_URL="http://127.0.0.1:$_port"
            return 0
        fi
        kill -KILL "$PROM_PID" 2>/dev/null
        wait "$PROM_PID" 2>/dev/null || true
    done
    fail "prometheus did not start"
}
