#!/bin/sh
# lint.sh - the checks `make lint` runs over the tracked tree:
#   layers    every #include "module/file.h" is allowed by scripts/lint/layers.txt
#   headers   every C file opens with a comment saying what it is for
#   modules   every module folder with C sources has a module.mk that lists
#             only its own sources (tests/, bench/, fuzz/ excepted)
#   programs  every program (PROGRAMS in a module.mk) has its main in a file
#             named after it, first in its _SRCS (tetris-webhook:
#             scheduler-ext/webhook/tetris-webhook.c), that reads its command
#             line with common/options.h: it includes it, or a header of its
#             folder whose .c does (reclaimer/config.h); no file but
#             common/daemon_run.c waits for signals, so every daemon runs
#             through that loop (two of the agent's excepted, see below)
#   circles   no files of one module call each other round a circle
#   includes  a .c file with a header of its own includes it first
#   commits   commit subjects since the conventions were written are <= 72
#             characters (skipped outside a git checkout)
#   format    lines of C changed since LINT_BASE (default HEAD: the
#             uncommitted change) are as .clang-format lays them out
# Usage: [LINT_BASE=REV] lint.sh [--help|--version]. Prints one line per finding as
# `lint=CHECK file=PATH[:LINE] msg="..."` on stderr.
# Exit status: 0 clean, 1 findings, 2 usage.
set -u
case "${1:-}" in
    --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --version) echo "lint.sh ${TETRIS_VERSION:-0.1.0}"; exit 0 ;;
    "") ;;
    *) echo "lint.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/../.." || exit 1
LAYERS=scripts/lint/layers.txt
# Commits after this one follow docs/STYLE.md's commit rules.
CONVENTIONS_SINCE=843cc43

# Checks print their findings on stdout (they run in pipelines, so no
# counter survives them); the end of the script counts and relays them.
finding() { # CHECK WHERE MESSAGE
    printf 'lint=%s file=%s msg="%s"\n' "$1" "$2" "$3"
}

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    c_files=$(git ls-files '*.c' '*.h')
    mk_files=$(git ls-files '*module.mk')
else
    c_files=$(find . -name '*.[ch]' ! -path './.deps/*' ! -path './build/*' | sed 's|^\./||')
    mk_files=$(find . -name module.mk | sed 's|^\./||')
fi

# module_of PATH: the longest module in layers.txt that holds PATH, or "".
modules=$(sed -n 's/^\([a-z][a-z/-]*\):.*/\1/p' "$LAYERS")
module_of() {
    best=""
    for m in $modules; do
        case "$1" in "$m"/*) [ ${#m} -gt ${#best} ] && best=$m ;; esac
    done
    echo "$best"
}
allowed_of() { sed -n "s|^$1:[[:space:]]*||p" "$LAYERS"; }

check_layers() {
    for f in $c_files; do
        from=$(module_of "$f")
        [ -n "$from" ] || continue
        allowed="$from $(allowed_of "$from")"
        grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
            sed 's/^\([0-9]*\):.*"\(.*\)".*/\1 \2/' |
            while read -r line inc; do
                to=$(module_of "$inc")
                [ -n "$to" ] || continue
                ok=0
                for a in $allowed; do [ "$a" = "$to" ] && ok=1; done
                [ $ok -eq 1 ] || echo "$f:$line $from $to $inc"
            done
    done | while read -r where from to inc; do
        finding layers "$where" "$from may not include $inc ($to); see $LAYERS"
    done
}

check_headers() {
    for f in $c_files; do
        head -c 2 "$f" | grep -q '^/\*' || finding headers "$f:1" "no opening comment saying what the file is for"
    done
}

check_modules() {
    for f in $c_files; do
        m=$(module_of "$f")
        [ -n "$m" ] && [ ! -f "$m/module.mk" ] && finding modules "$m" "module has C sources but no module.mk"
    done | sort -u
    for mk in $mk_files; do
        dir=${mk%/module.mk}
        case "$dir" in tests|bench|fuzz) continue ;; esac
        grep -o '[A-Za-z0-9_./-]*\.c\b' "$mk" | sort -u | while read -r src; do
            case "$src" in tests/*) continue ;; esac
            [ "$(module_of "$src")" = "$dir" ] ||
                finding modules "$mk" "lists $src, which belongs to another module"
        done
    done
}

# uses_options MAIN: MAIN, or a file of its folder behind a header MAIN
# includes, includes common/options.h.
uses_options() {
    grep -q '^#include "common/options.h"' "$1" && return 0
    for h in $(sed -n "s|^#include \"\($(dirname "$1")/[^\"]*\)\.h\".*|\1|p" "$1"); do
        [ -f "$h.c" ] && grep -q '^#include "common/options.h"' "$h.c" && return 0
    done
    return 1
}

# A wait for a signal, or a handler for a stop signal: the run loop's work.
SIGNAL_WAITS='\b(sigwait|sigtimedwait|sigwaitinfo|signalfd|sigsuspend|pause)[[:space:]]*\(|\b(sigaction|signal)[[:space:]]*\([[:space:]]*SIG(TERM|INT|HUP)\b'
# They wait for signals but run no daemon: the agent's --hold ends a command
# when stdin closes or SIGTERM comes, and exec's supervisor forwards every
# signal to the child it runs.
NOT_DAEMON_LOOPS="agent/hold.c agent/supervise.c"

check_programs() {
    for mk in $mk_files; do
        sed -n 's/^PROGRAMS[[:space:]]*+=[[:space:]]*//p' "$mk" | tr ' ' '\n' | grep . |
            while read -r prog; do
                main=$(sed -n "s|^$prog""_SRCS[[:space:]]*:=[[:space:]]*\([^[:space:]\\]*\).*|\1|p" "$mk")
                if [ "$(basename "${main:-none}")" != "$prog.c" ]; then
                    finding programs "$mk" "$prog's main is '${main:-none}', want DIR/$prog.c first in $prog""_SRCS"
                elif ! uses_options "$main"; then
                    finding programs "$main" "$prog does not read its command line with common/options.h"
                fi
            done
    done
    for f in $c_files; do
        case "$f" in tests/* | fuzz/* | common/daemon_run.c | *.h) continue ;; esac
        case " $NOT_DAEMON_LOOPS " in *" $f "*) continue ;; esac
        grep -nE "$SIGNAL_WAITS" "$f" | cut -d: -f1 | while read -r line; do
            finding programs "$f:$line" "waits for signals itself: a daemon's loop is common/daemon_run.h"
        done
    done
}

# check_circles: no two files of one module call each other, directly or
# round a longer circle: the shared part moves below both (docs/STYLE.md).
# A file calls another when it names one of the other's non-static
# functions followed by "(" (the tree's layout: a definition starts its
# line with its type and does not end with ";"); tsort finds the circles.
check_circles() {
    for m in $modules; do
        srcs=$(printf '%s\n' $c_files | grep "^$m/[^/]*\.c$")
        [ "$(printf '%s\n' $srcs | grep -c .)" -gt 1 ] || continue
        for f in $srcs; do
            awk -v f="$f" '/^[A-Za-z_][A-Za-z0-9_ *]*[ *][a-z_][a-z0-9_]*\(/ && !/^static/ &&
                !/;[[:space:]]*$/ { s = $0; sub(/\(.*/, "", s); n = split(s, w, /[ *]+/); print "D", w[n], f }' "$f"
            grep -o '[a-z_][a-z0-9_]*(' "$f" | sort -u | sed "s|(\$| $f|; s|^|C |"
        done | awk '$1 == "D" { def[$2] = $3; next }
                    { calls[NR] = $2 " " $3 }
                    END { for (i in calls) { split(calls[i], c, " ");
                              if ((c[1] in def) && def[c[1]] != c[2]) print c[2], def[c[1]] } }' |
            sort -u | tsort 2>&1 >/dev/null | sed -n 's/^tsort: //p' | grep -v 'input contains a loop' |
            tr '\n' ' ' | sed 's/ *$/\n/' | while read -r loop; do
                [ -n "$loop" ] && finding circles "$m" "files call each other in a circle: $loop"
            done
    done
}

# check_includes: the own header first, so that it is known to stand alone
# (docs/STYLE.md).
check_includes() {
    for f in $c_files; do
        case "$f" in *.c) ;; *) continue ;; esac
        h="${f%.c}.h"
        [ -f "$h" ] || continue
        first=$(grep -m 1 -n '^#[[:space:]]*include' "$f")
        [ "${first#*:}" = "#include \"$h\"" ] ||
            finding includes "$f:${first%%:*}" "includes $h first (its own header)"
    done
}

check_commits() {
    git rev-parse --verify -q "$CONVENTIONS_SINCE^{commit}" >/dev/null 2>&1 || return 0
    git log --no-merges --format='%h %s' "$CONVENTIONS_SINCE..HEAD" | while read -r h s; do
        [ ${#s} -le 72 ] || finding commits "$h" "subject is ${#s} characters (at most 72)"
    done
}

# Only changed lines: the hand-wrapped code predates .clang-format, and a
# whole-tree reformat would bury history (docs/STYLE.md).
check_format() {
    command -v git-clang-format >/dev/null 2>&1 || return 0
    git rev-parse --is-inside-work-tree >/dev/null 2>&1 || return 0
    git clang-format --diff --extensions c,h "${LINT_BASE:-HEAD}" 2>/dev/null |
        sed -n 's|^+++ b/||p' | while read -r f; do
            finding format "$f" "changed lines differ from .clang-format (git clang-format ${LINT_BASE:-HEAD})"
        done
}

out=$({ check_layers; check_headers; check_modules; check_programs; check_circles; check_includes; check_commits;
    check_format; })
if [ -n "$out" ]; then
    printf '%s\n' "$out" >&2
    echo "lint=summary findings=$(printf '%s\n' "$out" | wc -l)" >&2
    exit 1
fi
echo "lint=summary findings=0" >&2
