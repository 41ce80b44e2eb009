#!/bin/sh
# csi-sanity, the CSI community's conformance suite (built from its source
# tarball by scripts/build-csi-sanity.sh, once, outside the work tree),
# against tetris-csi on a real node daemon: the Identity and Node tests.
# csi-sanity assumes a Controller service (it runs the Controller suite
# whatever GetPluginCapabilities says, and its "should remove target path"
# makes its volume with CreateVolume); tetris-csi is a node plugin for
# inline volumes, which have none, so those specs are skipped by name
# (CONTROLLER_SKIP) and the count of specs run is checked. Needs root
# (mounts); skipped without the tarball.
set -eu
. "$(dirname "$0")/../lib/common.sh"
[ "$(id -u)" = 0 ] || skip "needs root: tetris-csi mounts"
rc=0
sanity=$("$ROOT/scripts/build-csi-sanity.sh" 2>"$WORK/build.log") || rc=$?
[ $rc -ne 3 ] || skip "no csi-test source tarball (TETRIS_CSI_TEST_SRC, default ../shared/csi)"
[ $rc -eq 0 ] || fail "building csi-sanity failed: $(tail -n 5 "$WORK/build.log")"

store="$WORK/store"
mkdir -p "$store" "$WORK/models" "$WORK/pods/sanity"
at_exit "grep -o ' $WORK[^ ]* ' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null || true"
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
"$BIN/tetris-csi" --store "$store" --csi-socket "$WORK/csi.sock" --registry-dir "" \
    --pods-dir "$WORK/pods" --models-dir "$WORK/models" --node-id node-a >"$WORK/csi.log" 2>&1 &
CSI_PID=$!
KILL_ON_EXIT="$KILL_ON_EXIT $CSI_PID"
wait_until 60 "grep -q event=started '$WORK/csi.log' || ! kill -0 $CSI_PID" &&
    kill -0 "$CSI_PID" || fail "tetris-csi did not start"

CONTROLLER_SKIP='Controller Service|should remove target path'
"$sanity" --csi.endpoint "unix://$WORK/csi.sock" --csi.mountdir "$WORK/pods/sanity/target" \
    --csi.stagingdir "$WORK/pods/sanity/staging" --ginkgo.skip "$CONTROLLER_SKIP" --ginkgo.no-color \
    --ginkgo.junit-report "$WORK/junit.xml" >"$WORK/sanity.log" 2>&1 || {
    grep -E "^\s*\[FAIL\]|Ran [0-9]+ of|FAIL!" "$WORK/sanity.log" | head -20 >&2
    fail "csi-sanity failed (its log: $WORK/sanity.log with TETRIS_KEEP_WORK=1)"
}
summary=$(grep -E "Ran [0-9]+ of [0-9]+ Specs" "$WORK/sanity.log" | tail -n 1)
ran=$(echo "$summary" | sed -n 's/.*Ran \([0-9]*\) of.*/\1/p')
[ "${ran:-0}" -ge 10 ] || fail "csi-sanity ran too few specs: $summary"
kill -0 "$CSI_PID" || fail "tetris-csi died under csi-sanity"
note "csi-sanity: $summary"
