#!/bin/sh
# test-python-view.sh - the Python package (python/tetris: the standard
# library and numpy) maps a model view's tensors without a copy: on a
# SYNTHETIC safetensors model in BERT-tiny's shapes (tetris-synth-model),
# N processes under `tetris-agent exec` with the real node daemon open the
# view, every array is read-only, lies inside the view's mappings and has
# the bytes its digest names, all together equal to a private read of the
# file; the store's pages are shared by the N processes and they take
# clearly less memory than N private reads. Untrusted or broken views are
# refused (ViewError, exit 3) with a message naming the problem, and the
# store is left as it was.
set -eu
. "$(dirname "$0")/lib.sh"
need_numpy
[ -x "$BIN/tetris-reclaimer" ] || fail "tetris-reclaimer not built in $BIN"

N=3
MODEL="$WORK/bert-tiny.safetensors"
PROBE="$ROOT/tests/langs/view_probe.py"
STORE="$WORK/store"
mkdir "$STORE"
"$BIN/tetris-synth-model" bert-tiny -o "$MODEL" >/dev/null 2>"$WORK/synth.log" || fail "tetris-synth-model bert-tiny"
W=$(stat -c %s "$MODEL")

# ---- N private reads: the baseline ----
private_kb=0 pids=""
i=1
while [ $i -le $N ]; do
    inst_start "private$i" env TETRIS_MODEL="$MODEL" "$PY" "$PROBE" private
    pids="$pids $INST_PID"
    i=$((i + 1))
done
want=$(jq -r .sha256 "$WORK/private1.out")
for p in $pids; do private_kb=$((private_kb + $(pss_kb "$p"))); done
for p in $pids; do kill -TERM "$p"; done
for p in $pids; do wait "$p" || fail "private probe $p: exit status $? on SIGTERM"; done
note "$N private reads: PSS $private_kb kB"

# ---- N views under tetris-agent exec, through the daemon ----
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600
inst_pids="" launchers=""
i=1
while [ $i -le $N ]; do
    inst_start "view$i" "$BIN/tetris-agent" exec --store "$STORE" --model "$MODEL" -- "$PY" "$PROBE" view
    grep -q 'prog=tetris-agent event=view .*shared=true fallback=none' "$WORK/view$i.log" ||
        fail "instance $i: the view is not the store's: $(grep 'event=view' "$WORK/view$i.log")"
    [ "$(jq -r .sha256 "$WORK/view$i.out")" = "$want" ] ||
        fail "instance $i: the view's tensors differ from a private read of the file"
    [ "$(jq -r .bytes "$WORK/view$i.out")" = "$(jq -r .bytes "$WORK/private1.out")" ] ||
        fail "instance $i: maps $(jq -r .bytes "$WORK/view$i.out") bytes, the file holds $(jq -r .bytes "$WORK/private1.out")"
    inst_pids="$inst_pids $INST_PID"
    launchers="$launchers $INST_LAUNCHER"
    i=$((i + 1))
done
note "$N views: read-only arrays inside the mappings, digests right, bytes equal a private read"

view_kb=0
for p in $inst_pids; do
    s=$(pss_kb "$p" "$STORE/")
    r=$(rss_kb "$p" "$STORE/")
    # every page was read, through the store's files
    [ "$r" -ge $((W / 1024 * 9 / 10)) ] || fail "process $p maps only $r kB of the store (model: $((W / 1024)) kB)"
    [ $((s * N)) -le $((r + r / 10)) ] ||
        fail "process $p: store PSS $s kB of RSS $r kB: the pages are not shared by the $N processes"
    [ "$(rollup_kb "$p" Pss_Shmem)" -ge "$s" ] || fail "process $p: Pss_Shmem below its store PSS"
    view_kb=$((view_kb + $(pss_kb "$p") - s))
done
sup_kb=0
for p in $launchers; do sup_kb=$((sup_kb + $(pss_kb "$p"))); done
daemon_kb=$(pss_kb "$RECLAIMER_PID")
skb=$(store_kb "$STORE")
total_kb=$((view_kb + skb + daemon_kb + sup_kb))
note "$N views: PSS without the store $view_kb kB + store $skb kB + daemon $daemon_kb kB + exec $sup_kb kB = $total_kb kB (private: $private_kb kB; model $((W / 1024)) kB)"
inst_saved=$((private_kb - view_kb - skb))
[ $inst_saved -ge $(((N - 1) * W / 1024 / 2)) ] ||
    fail "$N views and the store save $inst_saved kB over $N private reads: less than half of $((N - 1)) copies of the $((W / 1024)) kB model"
[ $SANITIZED = 1 ] || [ $total_kb -lt $private_kb ] || fail "$N views with the daemon and their supervisors take $total_kb kB, private reads $private_kb kB"

# ---- views that must not be trusted ----
view=$(sed -n 's/.*prog=tetris-agent event=view dir="\{0,1\}\([^" ]*\).*/\1/p' "$WORK/view1.log" | head -n 1)
[ -f "$view/tensors.json" ] || fail "no view directory in the exec log ($view)"
bad_views "$view" "$STORE" "$WORK/bad"
store_listing "$STORE" >"$WORK/store.before"
while IFS="$(printf '\t')" read -r case want_msg; do
    rc=0
    env TETRIS_MODEL_VIEW="$WORK/bad/$case" "$PY" "$PROBE" view >/dev/null 2>"$WORK/bad.$case.err" || rc=$?
    [ $rc -eq 3 ] || fail "bad view $case: exit $rc, want 3: $(cat "$WORK/bad.$case.err")"
    grep -qF -- "$want_msg" "$WORK/bad.$case.err" || fail "bad view $case: message lacks \"$want_msg\": $(cat "$WORK/bad.$case.err")"
done <"$WORK/bad/cases"
rc=0
env -u TETRIS_MODEL_VIEW "$PY" "$PROBE" view >/dev/null 2>"$WORK/noview.err" || rc=$?
[ $rc -eq 3 ] && grep -q 'TETRIS_MODEL_VIEW is not set' "$WORK/noview.err" || fail "no view: exit $rc: $(cat "$WORK/noview.err")"
store_listing "$STORE" >"$WORK/store.after"
cmp -s "$WORK/store.before" "$WORK/store.after" || fail "the store changed while bad views were read"
note "$(wc -l <"$WORK/bad/cases") untrusted views refused (ViewError), store unchanged"

for p in $launchers; do kill -TERM "$p"; done
for p in $launchers; do wait "$p" || fail "tetris-agent exec $p: exit status $? after SIGTERM"; done
[ ! -e "$view" ] || fail "the view $view outlived its exec"
reclaimer_stop
echo "ok Python: $N processes share $skb kB of tensors: $total_kb kB against $private_kb kB private"
