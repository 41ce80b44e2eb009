#!/bin/sh
# Derived forms (protocol/derived.h) through the real node daemon and real
# ONNX Runtime on the real models: the daemon makes the optimised,
# pre-packed form once (tetris-derive, a child), with its ORT-format part
# for these models of small pre-packed weights; later instances open it
# (the ORT-format part, or the graph and data of an entry without one) and
# answer byte for byte what stock ONNX Runtime at `all` with pre-packing
# answers; a form ORT cannot reopen is not published; a form
# under a wrong identity, or for another runtime, is not used (one log
# line) and the instance runs on the plain weights; a full store refuses
# a form and maps nothing wrong; instances share one copy (PSS); a hostile
# graph fails its own derivation and the daemon goes on; the derivation
# child runs as an unprivileged user.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
[ -x "$BIN/tetris-derive" ] || fail "tetris-derive not built in $BIN"
store="$WORK/store"
mkdir -p "$store"
# The derivation child (uid 65534) reads the store's public directory by
# its name, as on a node, where the store's parents are 0755.
chmod 0711 "$WORK"
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
pub="$store/public"

run() { "$BIN/tetris-onnx-run" "$@"; }

# 1. Made once, then used: outputs equal stock ONNX Runtime's `all` + pre-packing.
for m in ch_PP-OCRv4_rec_infer.onnx ch_PP-OCRv4_det_infer.onnx \
    ch_ppocr_mobile_v2.0_cls_infer.onnx hello_deepa.onnx; do
    stock=$(run "$MODELS/$m" --private --graph-opt all --prepack 2>/dev/null | jq -r .sha256)
    plain=$(run "$MODELS/$m" --private 2>/dev/null | jq -r .sha256)
    # Two instances ask at once for the first model: one derivation, the
    # other ask waits for it and is answered from the index.
    twin=""
    if [ "$m" = ch_PP-OCRv4_rec_infer.onnx ]; then
        run "$MODELS/$m" --store "$store" --derived make >/dev/null 2>"$WORK/err.twin" &
        twin=$!
    fi
    first=$(run "$MODELS/$m" --store "$store" --derived make 2>"$WORK/err") ||
        fail "$m make: $(cat "$WORK/err")"
    if [ -n "$twin" ]; then
        wait "$twin" || fail "$m: the concurrent ask failed: $(cat "$WORK/err.twin")"
        grep -q "event=derive-requested.*result=made" "$WORK/err.twin" ||
            fail "$m: the concurrent ask got no form: $(cat "$WORK/err.twin")"
        [ "$(grep -c "event=derived .*label=.*$m" "$WORK/daemon.log")" = 1 ] ||
            fail "$m: concurrent asks derived more than once: $(grep "event=derive" "$WORK/daemon.log")"
        grep -q "event=derive-existing.*label=.*$m" "$WORK/daemon.log" ||
            fail "$m: the second ask was not answered from the index"
        echo "ok $m: two concurrent asks, one derivation, the other answered from the index"
    fi
    [ "$(json_get "$first" derived)" = false ] || fail "$m: a form before one was made"
    [ "$(json_get "$first" sha256)" = "$plain" ] || fail "$m: the first instance's output differs"
    grep -q "event=derive-requested.*result=made" "$WORK/err" || fail "$m: no form made: $(cat "$WORK/err")"
    out=$(run "$MODELS/$m" --store "$store" 2>"$WORK/err") || fail "$m: $(cat "$WORK/err")"
    [ "$(json_get "$out" derived)" = true ] || fail "$m: the form was not used: $(cat "$WORK/err")"
    # Inline: what the store did not serve, on the form as on the plain weights.
    [ "$(json_get "$out" inline_tensors)" = "$(json_get "$first" inline_tensors)" ] ||
        fail "$m: $(json_get "$out" inline_tensors) inline tensors on the form, $(json_get "$first" inline_tensors) on the plain weights"
    [ "$(json_get "$out" sha256)" = "$stock" ] ||
        fail "$m: derived output $(json_get "$out" sha256) != stock all+prepack $stock"
    # Pre-packed weights of at most 1 MiB: the form has its ORT-format
    # part, and the instance opened that; more (rec's 4 MB): the graph and
    # data alone (derived.h, DERIVED_ORT_MAX_PREPACKED_BYTES).
    made=$(grep "event=derived .*label=.*$m" "$WORK/daemon.log" | head -n 1)
    packed=$(echo "$made" | sed 's/.* prepacked_bytes=\([0-9]*\) .*/\1/')
    ort_bytes=$(echo "$made" | sed 's/.* ort_bytes=\([0-9]*\) .*/\1/')
    want_ort=false
    [ "$packed" -gt 1048576 ] || want_ort=true
    [ "$want_ort" = "$([ "$ort_bytes" -gt 0 ] && echo true || echo false)" ] ||
        fail "$m: $packed pre-packed bytes and an ORT-format part of $ort_bytes bytes"
    [ "$(json_get "$out" derived_ort)" = "$want_ort" ] ||
        fail "$m: derived_ort is not $want_ort: $(cat "$WORK/err")"
    # det's entry (the newest now), for the sharing check of its part below
    [ "$m" != ch_PP-OCRv4_det_infer.onnx ] || cp "$(ls -t "$pub/derived"/* | head -n 1)" "$WORK/entry.det"
    echo "ok $m: derived form used ($packed pre-packed bytes; ORT-format part: $ort_bytes bytes, used: $want_ort), output = stock ONNX Runtime all + pre-packing ($stock)"
done
[ -s "$WORK/entry.det" ] || fail "no derived entry for ch_PP-OCRv4_det_infer.onnx"

# 1b. The child that parsed those graphs was not root: the kernel's view
# of it (/proc/self/status, read by the child after its drop, before it
# read the graph), checked by the daemon and logged.
n_made=$(grep -c "event=derived " "$WORK/daemon.log")
[ "$n_made" = 4 ] || fail "expected 4 forms made, the daemon logged $n_made"
[ "$(grep "event=derived " "$WORK/daemon.log" |
    grep -c "child_uid=65534 child_gid=65534 child_capabilities=none")" = 4 ] ||
    fail "a derivation ran privileged: $(grep "event=derived " "$WORK/daemon.log")"
echo "ok every derivation ran as 65534:65534 without groups or capabilities"

# 2. ONNX Runtime 1.29 cannot reopen its optimised Silero VAD v5 (If
# branches): tetris-derive refuses it, nothing is published, the
# instance runs on the plain weights.
m=silero_vad_v5.onnx
n_before=$(ls "$pub/derived" | wc -l)
run "$MODELS/$m" --store "$store" --derived make >/dev/null 2>"$WORK/err" || fail "$m: $(cat "$WORK/err")"
grep -q "event=derive-request-failed" "$WORK/err" || fail "$m: a form ORT cannot open was accepted"
[ "$(ls "$pub/derived" | wc -l)" = "$n_before" ] || fail "$m: an entry was written"
grep -q "event=derive-failed.*silero_vad_v5" "$WORK/daemon.log" || fail "$m: daemon did not log it"
echo "ok $m: a form ONNX Runtime cannot reopen is refused, nothing published"

m=ch_PP-OCRv4_rec_infer.onnx
plain_store=$(run "$MODELS/$m" --store "$store" --derived off 2>/dev/null | jq -r .sha256)
# The rec model's form was made first: the oldest entry.
entry=$(ls -tr "$pub/derived"/* | head -n 1)
[ -n "$entry" ] || fail "no entry for $m"
cp "$entry" "$WORK/entry.orig"

# rewrite_entry JQ: the entry replaced (as the daemon's owner would) by JQ of it.
rewrite_entry() {
    jq -c "$1" "$WORK/entry.orig" >"$WORK/entry.new"
    chmod 0444 "$WORK/entry.new"
    mv -f "$WORK/entry.new" "$entry"
}
# identity TRANSFORM RUNTIME CPU SOURCE_HEX: derived_identity() in shell.
identity() {
    { printf 'tetris-derived-v1\000%s\000%s\000%s\000' "$1" "$2" "$3"
      printf '%s' "$4" | xxd -r -p; } | sha256sum | cut -c1-64
}

# 3. A wrong identity: not used, one log line, the plain weights' output.
rewrite_entry '.identity = "sha256:" + ("0" * 64)'
out=$(run "$MODELS/$m" --store "$store" 2>"$WORK/err")
[ "$(json_get "$out" derived)" = false ] || fail "a form under a wrong identity was used"
[ "$(grep -c 'event=derived-ignored' "$WORK/err")" = 1 ] || fail "wrong identity: $(cat "$WORK/err")"
[ "$(json_get "$out" sha256)" = "$plain_store" ] || fail "wrong identity: output differs from plain"
echo "ok a form under a wrong identity is not used (one log line)"

# 4. Another runtime, or another CPU, under a consistent identity. Entries
# are named by their identity: one for another runtime or CPU, named as
# the daemon names it, is not the instance's to find (one log line: no
# form for its own); written under the instance's own name, it names
# another identity and is refused (one log line). Plain weights either way.
src=$(jq -r .source "$WORK/entry.orig" | cut -c8-)
tr=$(jq -r .transform "$WORK/entry.orig")
rt=$(jq -r .runtime "$WORK/entry.orig")
cpu=$(jq -r .cpu "$WORK/entry.orig")
[ "$(basename "$entry")" = "$(identity "$tr" "$rt" "$cpu" "$src")" ] ||
    fail "the entry is not named by its identity: $entry"
for case in runtime cpu; do
    if [ $case = runtime ]; then r2="onnxruntime 1.22.0"; c2=$cpu; else r2=$rt; c2="$cpu amx_tile"; fi
    id=$(identity "$tr" "$r2" "$c2" "$src")
    jq -c ".runtime = \"$r2\" | .cpu = \"$c2\" | .identity = \"sha256:$id\"" "$WORK/entry.orig" >"$WORK/other"
    chmod 0444 "$WORK/other"
    mv -f "$WORK/other" "$pub/derived/$id"
    rm -f "$entry"
    out=$(run "$MODELS/$m" --store "$store" 2>"$WORK/err")
    [ "$(json_get "$out" derived)" = false ] || fail "$case mismatch: the form was used"
    [ "$(grep -c 'event=derived-none' "$WORK/err")" = 1 ] || fail "$case mismatch: $(cat "$WORK/err")"
    [ "$(json_get "$out" sha256)" = "$plain_store" ] || fail "$case mismatch: output differs"
    cp "$pub/derived/$id" "$WORK/entry.other"
    rm -f "$pub/derived/$id"
    cp "$WORK/entry.other" "$entry"
    out=$(run "$MODELS/$m" --store "$store" 2>"$WORK/err")
    [ "$(json_get "$out" derived)" = false ] || fail "$case mismatch under our name: the form was used"
    [ "$(grep -c 'event=derived-ignored.*another identity' "$WORK/err")" = 1 ] ||
        fail "$case mismatch under our name: $(cat "$WORK/err")"
    [ "$(json_get "$out" sha256)" = "$plain_store" ] || fail "$case mismatch: output differs"
    echo "ok a form for another $case is not found (or refused under our name): plain weights, one log line"
done
rm -f "$entry"
cp "$WORK/entry.orig" "$WORK/entry.keep"
rewrite_entry '.'

# 5. N instances share one copy of what they read of the form (PSS of its
# mapping): det's ORT-format part, rec's graph and data.
mkfifo "$WORK/hold"
# hold_three WANT_ORT: three holders of the form; pids in $pids.
hold_three() {
    pids=""
    rm -f "$WORK"/out.[123] # a holder truncates its own only once the fifo opens
    for i in 1 2 3; do
        "$BIN/tetris-onnx-run" "$MODELS/$m" --store "$store" --hold <"$WORK/hold" >"$WORK/out.$i" 2>"$WORK/err.$i" &
        pids="$pids $!"
        KILL_ON_EXIT="$KILL_ON_EXIT $!"
    done
    exec 3>"$WORK/hold"
    i=0
    for p in $pids; do
        i=$((i + 1))
        wait_output "$p" "$WORK/out.$i" "holder $i" "$WORK/err.$i"
        [ "$(json_get "$(cat "$WORK/out.$i")" derived)" = true ] || fail "holder $i: no form: $(grep derive "$WORK/err.$i")"
        [ "$(json_get "$(cat "$WORK/out.$i")" derived_ort)" = "$1" ] ||
            fail "holder $i: derived_ort is not $1: $(cat "$WORK/out.$i")"
        [ "$(json_get "$(cat "$WORK/out.$i")" sha256)" = "$stock" ] || fail "holder $i: output differs from stock"
    done
}
# shared_copy DIGEST WHAT: the holders' mappings of the tensor DIGEST add
# up to one copy (the three PSS to one RSS: each maps the same pages).
shared_copy() {
    rss=0
    pss=0
    for p in $pids; do
        rp=$(awk -v d="$1" '$0 ~ d { on = 1; next } /^[0-9a-f]+-[0-9a-f]+ / { on = 0 }
            on && /^Rss:/ { r += $2 } on && /^Pss:/ { s += $2 } END { print r + 0, s + 0 }' "/proc/$p/smaps")
        rss=$((rss + ${rp% *}))
        pss=$((pss + ${rp#* }))
    done
    [ "$rss" -gt 0 ] || fail "the holders map nothing of the $2"
    [ $((pss * 3)) -le $((rss + 3 * 8)) ] ||
        fail "$2 not shared: pss=${pss}kB rss(sum)=${rss}kB: $(grep -A 3 "$1" /proc/${pids##* }/smaps)"
    echo "ok 3 instances hold one copy of the $2: PSS ${pss} kB for RSS ${rss} kB summed"
}
m=ch_PP-OCRv4_det_infer.onnx
stock=$(run "$MODELS/$m" --private --graph-opt all --prepack 2>/dev/null | jq -r .sha256)
hold_three true
shared_copy "$(jq -r .ort.digest "$WORK/entry.det" | cut -c8-)" "form's ORT-format part ($m)"
exec 3>&-
for p in $pids; do wait "$p" || true; done
m=ch_PP-OCRv4_rec_infer.onnx
stock=$(run "$MODELS/$m" --private --graph-opt all --prepack 2>/dev/null | jq -r .sha256)
data=$(jq -r .data.digest "$WORK/entry.orig" | cut -c8-)
hold_three false
shared_copy "$data" "derived data ($m)"

# 5b. An instance on the form maps none of the plain weights (it keeps
# their references: the form is made of them); one on the plain weights
# maps them. Whole-process RSS and PSS (smaps_rollup) of both, measured.
graph=$(jq -r .graph.digest "$WORK/entry.orig" | cut -c8-)
"$BIN/tetris-onnx-run" "$MODELS/$m" --store "$store" --derived off --hold <"$WORK/hold" \
    >"$WORK/out.plain" 2>"$WORK/err.plain" 3>&- &
plain_pid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $plain_pid"
wait_output "$plain_pid" "$WORK/out.plain" "plain holder" "$WORK/err.plain"
plain_maps() { grep "$pub/tensors/" "/proc/$1/maps" | grep -v -e "$data" -e "$graph" | wc -l; }
rollup() { awk '/^Rss:/ { r = $2 } /^Pss:/ { p = $2 } END { print "RSS " r " kB, PSS " p " kB" }' "/proc/$1/smaps_rollup"; }
for p in $pids; do
    [ "$(plain_maps "$p")" = 0 ] || fail "an instance on the form maps plain weights: $(plain_maps "$p") mappings"
done
[ "$(plain_maps "$plain_pid")" -gt 0 ] || fail "the plain instance maps no plain weights"
echo "ok on the form: no plain-weight mapping ($(rollup ${pids##* })); on the plain weights: $(plain_maps "$plain_pid") mappings ($(rollup "$plain_pid"))"

# 5c. The form's references are registered again after a daemon restart,
# like the instance's own (a watcher per connection).
reclaimer_stop
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
i=0
for p in $pids; do
    i=$((i + 1))
    wait_until 30 "[ \$(grep -c 'event=daemon-reregistered label=derived' '$WORK/err.$i') -ge 1 ]" ||
        fail "holder $i did not register its form again: $(cat "$WORK/err.$i")"
done
"$BIN/tetris-agent" inspect --store "$store" >"$WORK/inspect" 2>&1
[ "$(grep " live " "$WORK/inspect" | grep -c derived)" -ge 3 ] ||
    fail "the new daemon holds no form references: $(cat "$WORK/inspect")"
echo "ok after a daemon restart the form's references are registered again ($(grep " live " "$WORK/inspect" | grep -c derived) holders)"
exec 3>&-
for p in $pids $plain_pid; do wait "$p" || true; done

# 6. A hostile graph fails its own derivation; the daemon goes on.
head -c 65536 /dev/urandom >"$WORK/garbage.onnx"
python3 - "$pub/ingest.sock" "$WORK/garbage.onnx" >"$WORK/hostile" <<'EOF'
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
msg = json.dumps({"op": "derive", "label": "hostile", "transform": "ort-optimize-all-prepack"}).encode()
with open(sys.argv[2], "rb") as f:
    socket.send_fds(s, [struct.pack("<I", len(msg)) + msg], [f.fileno()])
n = struct.unpack("<I", s.recv(4, socket.MSG_WAITALL))[0]
print(s.recv(n, socket.MSG_WAITALL).decode())
EOF
jq -e '.ok == false' "$WORK/hostile" >/dev/null || fail "hostile graph: $(cat "$WORK/hostile")"
kill -0 "$RECLAIMER_PID" || fail "the daemon died of a hostile graph"
out=$(run "$MODELS/$m" --store "$store" 2>"$WORK/err")
[ "$(json_get "$out" derived)" = true ] || fail "after the hostile graph: $(cat "$WORK/err")"
echo "ok a hostile graph gets $(jq -r .error "$WORK/hostile"), the daemon serves on"
reclaimer_stop

# 7. A full store refuses the form and maps nothing wrong.
store2="$WORK/store2"
mkdir -p "$store2"
reclaimer_start "$store2" "$WORK/daemon2.log" --listen "" --interval 3600 --capacity 14M
out=$(run "$MODELS/$m" --store "$store2" --derived make 2>"$WORK/err") || fail "full: $(cat "$WORK/err")"
[ "$(json_get "$out" sha256)" = "$plain_store" ] || fail "full store: output differs"
grep -q "event=derive-failed.*code=full" "$WORK/daemon2.log" || fail "full store: $(tail -n 3 "$WORK/daemon2.log")"
[ -z "$(ls "$store2/public/derived" 2>/dev/null)" ] || fail "full store: an entry was written"
out=$(run "$MODELS/$m" --store "$store2" 2>"$WORK/err")
[ "$(json_get "$out" derived)" = false ] || fail "full store: a form was used"
[ "$(json_get "$out" sha256)" = "$plain_store" ] || fail "full store: output differs"
echo "ok a full store refuses the form (full), instances run on the plain weights"
reclaimer_stop

# 8. A store with room for the form but not for its ORT-format part keeps
# the form without it (one log line); instances open the graph and data.
m=ch_PP-OCRv4_det_infer.onnx
stock=$(run "$MODELS/$m" --private --graph-opt all --prepack 2>/dev/null | jq -r .sha256)
store3="$WORK/store3"
mkdir -p "$store3"
reclaimer_start "$store3" "$WORK/daemon3.log" --listen "" --interval 3600 --capacity 13M
run "$MODELS/$m" --store "$store3" --derived make >/dev/null 2>"$WORK/err" || fail "no room for ORT: $(cat "$WORK/err")"
grep -q "event=derive-ort-dropped.*code=full" "$WORK/daemon3.log" ||
    fail "no room for ORT: $(grep event=derive "$WORK/daemon3.log" "$WORK/err")"
e3=$(ls "$store3/public/derived"/*)
[ "$(jq -r 'has("ort")' "$e3")" = false ] || fail "no room for ORT: the entry names an ORT-format part"
out=$(run "$MODELS/$m" --store "$store3" 2>"$WORK/err")
[ "$(json_get "$out" derived)" = true ] && [ "$(json_get "$out" derived_ort)" = false ] ||
    fail "no room for ORT: $(cat "$WORK/err")"
[ "$(json_get "$out" sha256)" = "$stock" ] || fail "no room for ORT: output differs from stock"
echo "ok a store without room for the ORT-format part keeps the form without it: graph and data, output = stock"
