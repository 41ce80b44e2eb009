#!/bin/sh
# test-hostile-links.sh - a root node daemon follows no link and writes
# only into a store that is its own.
#  - A store root that is a symbolic link, belongs to another uid, is
#    writable by others (0777) or has the old layout (format 1) is
#    refused: exit 3 and a message naming the reason; the directory the
#    link points to is untouched.
#  - In a served store, links planted in every directory (the root,
#    public/, tensors/, a fanout directory, and each of private/'s) to
#    files and directories outside the store are never followed: ingests,
#    reclaim, a full repair and the state file go on, and every file
#    outside the store keeps its bytes.
set -eu
. "$(dirname "$0")/../lib/reclaimer.sh"

[ "$(id -u)" = 0 ] || skip "needs root to make directories of another uid"

OUT="$WORK/outside"
mkdir -p "$OUT/dir"
echo "precious" >"$OUT/file"
echo "precious too" >"$OUT/dir/0000000000000000000000000000000000000000000000000000000000000000"
cp "$OUT/file" "$OUT/dir/junk"
outside_sums() { find "$OUT" -type f -exec sha256sum {} + | sort; ls -lA "$OUT" "$OUT/dir" | grep -v total; }
outside_sums >"$WORK/outside.before"

# refused DIR REASON: the daemon refuses to serve DIR, exits 3 and says REASON.
refused() {
    _rc=$(status "$RECLAIMER" --store "$1" --listen 127.0.0.1:0 --once)
    [ "$_rc" = 3 ] || fail "store $1: exit $_rc, want 3: $(tail -n 3 "$WORK/status.err")"
    grep -q "event=store-refused" "$WORK/status.err" || fail "store $1: no store-refused line"
    grep -q "$2" "$WORK/status.err" || fail "store $1: message lacks '$2': $(tail -n 1 "$WORK/status.err")"
}

ln -s "$OUT/dir" "$WORK/linked"
refused "$WORK/linked" "symbolic link"
mkdir "$WORK/theirs" && chown 65534:65534 "$WORK/theirs"
refused "$WORK/theirs" "belongs to uid 65534"
mkdir "$WORK/open" && chmod 0777 "$WORK/open"
refused "$WORK/open" "lets group or others write"
mkdir -p "$WORK/old/tensors" "$WORK/old/locks"
printf '{"format": "tetris-store", "version": 1, "capacity_bytes": 0}\n' >"$WORK/old/.tetris-store"
refused "$WORK/old" "old store layout"
[ -z "$(ls -A "$WORK/theirs")" ] && [ -z "$(ls -A "$WORK/open")" ] || fail "a refused store was written to"
echo "ok $PROG: link, foreign, 0777 and old-layout roots refused"

# A served store, then links everywhere in it.
synth "$WORK/m1.safetensors" 6 65536 1
synth "$WORK/m2.safetensors" 6 65536 2
start_daemon --interval 1 --keep-alive 0 --scrub-rate 0
hold "$WORK/m1.safetensors" "$WORK/h1.json"
H1=$HOLD_PID
# m2's digests, to plant links where its tensors will go.
"$PROBE" manifest "$WORK/m2.safetensors" >"$WORK/m2.manifest"
hexes=$(grep -o '"digest": *"sha256:[0-9a-f]*"' "$WORK/m2.manifest" | grep -o '[0-9a-f]\{64\}')
[ -n "$hexes" ] || fail "no digests in the manifest: $(head -c 300 "$WORK/m2.manifest")"
first=$(echo "$hexes" | head -n 1)
second=$(echo "$hexes" | sed -n 2p)
P="$STORE/public"
V="$STORE/private"
ln -s "$OUT/file" "$STORE/planted"
ln -s "$OUT/file" "$P/planted"
ln -s "$OUT/dir" "$P/tensors/zz"
# A fanout directory that is a link out of the store (in place of the one
# the daemon made at start, unless m1 has tensors there), and a tensor
# name that is a link to a file outside.
fan=$(printf %.2s "$second")
rmdir "$P/tensors/$fan" 2>/dev/null || true
[ -e "$P/tensors/$fan" ] || ln -s "$OUT/dir" "$P/tensors/$fan"
mkdir -p "$P/tensors/$(printf %.2s "$first")"
ln -s "$OUT/file" "$P/tensors/$(printf %.2s "$first")/$first"
for d in tmp holders locks quarantine; do
    ln -s "$OUT/file" "$V/$d/planted"
    ln -s "$OUT/dir" "$V/$d/planted-dir"
done
ln -s "$OUT/file" "$V/holders/1-planted.ref"
rm -f "$V/locks/$(printf %.3s "$first")"
ln -s "$OUT/file" "$V/locks/$(printf %.3s "$first")"
ln -s "$OUT/file" "$V/tmp/$first.0123456789abcdef"
rm -f "$V/reclaimer.state"
ln -s "$OUT/file" "$V/reclaimer.state"

# Ingests and passes go on; nothing outside changes.
hold "$WORK/m2.safetensors" "$WORK/h2.json"
H2=$HOLD_PID
# The tensor whose fanout directory is a link is refused (loaded
# privately by the client) unless a full repair removed the link first;
# the others are served.
grep -q '"fallback":false' "$WORK/h2.json" || fail "m2 fell back: $(cat "$WORK/h2.json")"
grep -Eq '"ingested":(5,"rejected":1|6,"rejected":0)' "$WORK/h2.json" || fail "m2: $(cat "$WORK/h2.json")"
[ -f "$P/tensors/$(printf %.2s "$first")/$first" ] && [ ! -L "$P/tensors/$(printf %.2s "$first")/$first" ] ||
    fail "the planted tensor link was not replaced by the tensor"
release "$H1"
release "$H2"
wait_passes 3
daemon_alive || fail "daemon died among the links: $(tail -n 5 "$DAEMON_LOG")"
"$BIN/tetris-agent" verify --store "$STORE" >"$WORK/verify.out" 2>&1 || fail "verify: $(cat "$WORK/verify.out")"
# Repair removes links where it cleans (the links themselves, never what
# they point to); elsewhere they are ignored.
[ ! -L "$V/tmp/planted" ] && [ ! -L "$V/holders/1-planted.ref" ] && [ ! -L "$P/tensors/zz" ] ||
    fail "repair left a planted link: $(ls -l "$V/tmp" "$V/holders" "$P/tensors" | grep -- '->')"
stop_daemon
outside_sums >"$WORK/outside.after"
cmp -s "$WORK/outside.before" "$WORK/outside.after" ||
    fail "files outside the store changed: $(diff "$WORK/outside.before" "$WORK/outside.after")"
[ -L "$V/reclaimer.state" ] && fail "the state file is still a link"
echo "ok $PROG: links in every store directory neither followed nor fatal; outside untouched"
