#!/bin/sh
# test-lint.sh - `make lint` (scripts/lint/lint.sh) finds what it promises:
# a forbidden include across layers, a C file without its opening comment,
# a module without module.mk, a module.mk listing another module's source,
# two files of a module calling each other, a file not including its own
# header first, a file that waits for signals outside the daemons' run loop,
# and is clean on a tree that
# keeps the rules. Runs on a scratch git tree.
set -eu
. "$(dirname "$0")/../lib/common.sh"

mkdir -p "$WORK/scripts/lint" "$WORK/common" "$WORK/tensorstore" "$WORK/agent"
cp "$ROOT/scripts/lint/lint.sh" "$ROOT/scripts/lint/layers.txt" "$WORK/scripts/lint/"
cp "$ROOT/.clang-format" "$WORK/"
cd "$WORK"
git init -q . && git config user.email t@example.org && git config user.name t
printf '/* a.h - common. */\n' >common/a.h
printf '/* s.c - store. */\n#include "tensorstore/s.h"\n\n#include "common/a.h"\n' >tensorstore/s.c
printf '/* g.c - agent. */\n#include "tensorstore/s.h"\n' >agent/g.c
printf '/* s.h - store. */\n' >tensorstore/s.h
printf 'LIB_SRCS += tensorstore/s.c\n' >tensorstore/module.mk
printf 'LIB_SRCS += agent/g.c\n' >agent/module.mk
printf '# none\n' >common/module.mk
git add -A && git commit -qm base

lint() { scripts/lint/lint.sh 2>"$WORK/out"; }
lint || { cat "$WORK/out" >&2; fail "a tree that keeps the rules has findings"; }

printf '/* s.c - store. */\n#include "agent/g.h"\n' >tensorstore/s.c
git add -A
if lint; then fail "tensorstore including agent passed"; fi
grep -q 'lint=layers file=tensorstore/s.c:2' "$WORK/out" || fail "no layers finding: $(cat "$WORK/out")"
git checkout -q -- . 2>/dev/null; git reset -q --hard

printf 'int x;\n' >common/b.c
git add -A
if lint; then fail "a file without its opening comment passed"; fi
grep -q 'lint=headers file=common/b.c' "$WORK/out" || fail "no headers finding"
git reset -q --hard; rm -f common/b.c

rm agent/module.mk; git add -A
if lint; then fail "a module without module.mk passed"; fi
grep -q 'lint=modules file=agent ' "$WORK/out" || fail "no missing-module.mk finding"
git reset -q --hard

printf 'LIB_SRCS += tensorstore/s.c agent/g.c\n' >tensorstore/module.mk; git add -A
if lint; then fail "a module.mk listing another module's source passed"; fi
grep -q 'lint=modules file=tensorstore/module.mk' "$WORK/out" || fail "no foreign-source finding"
git reset -q --hard

printf '/* t.c - store. */\nint t_one(void)\n{\n    return t_two();\n}\n' >tensorstore/t.c
printf '/* u.c - store. */\nint t_two(void)\n{\n    return 2;\n}\n' >tensorstore/u.c
printf 'LIB_SRCS += tensorstore/s.c tensorstore/t.c tensorstore/u.c\n' >tensorstore/module.mk
git add -A
lint || { cat "$WORK/out" >&2; fail "one file calling another was taken for a circle"; }
printf '/* u.c - store. */\nint t_two(void)\n{\n    return t_one() + 1;\n}\n' >tensorstore/u.c
git add -A
if lint; then fail "two files calling each other passed"; fi
grep -q 'lint=circles file=tensorstore .*tensorstore/t.c' "$WORK/out" || fail "no circles finding: $(cat "$WORK/out")"
git reset -q --hard; rm -f tensorstore/t.c tensorstore/u.c

printf '/* v.c - store. */\n#include <stdio.h>\n\n#include "tensorstore/v.h"\n' >tensorstore/v.c
printf '/* v.h - store. */\n' >tensorstore/v.h
printf 'LIB_SRCS += tensorstore/s.c tensorstore/v.c\n' >tensorstore/module.mk
git add -A
if lint; then fail "a file not including its own header first passed"; fi
grep -q 'lint=includes file=tensorstore/v.c:2' "$WORK/out" || fail "no includes finding: $(cat "$WORK/out")"
git reset -q --hard; rm -f tensorstore/v.c tensorstore/v.h

# A loop of its own that waits for signals: only common/daemon_run.c may
# (and the agent's two files that run no daemon).
printf '/* w.c - store. */\n#include <signal.h>\nvoid w(sigset_t *s, int *g);\nvoid w(sigset_t *s, int *g)\n{\n    sigwait(s, g);\n}\n' >tensorstore/w.c
cp tensorstore/w.c agent/hold.c
printf 'LIB_SRCS += tensorstore/s.c tensorstore/w.c\n' >tensorstore/module.mk
printf 'LIB_SRCS += agent/g.c agent/hold.c\n' >agent/module.mk
git add -A
if lint; then fail "a file waiting for signals itself passed"; fi
grep -q 'lint=programs file=tensorstore/w.c:6' "$WORK/out" || fail "no programs finding: $(cat "$WORK/out")"
! grep -q 'file=agent/hold.c' "$WORK/out" || fail "the agent's hold is no daemon: $(cat "$WORK/out")"
git reset -q --hard; rm -f tensorstore/w.c agent/hold.c

scripts/lint/lint.sh --bogus 2>/dev/null && fail "a bad argument passed"
[ $? -eq 2 ] || fail "a bad argument did not exit 2"
echo "ok lint"
