#!/bin/sh
# run.sh - scheduler extender benchmark: filter + prioritize latency (p50,
# p99) for 10, 100, 1000 and 5000 nodes holding 10k tensors each, both
# request forms. Called by bench/run-bench.sh; prints a Markdown table.
# Environment: TETRIS_BIN (required), BENCH_QUICK=1 (fewer samples, no 5000).
set -eu
BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the tetris programs}"
echo
echo "### Scheduler extender: one scheduling cycle (parse request, decide, serialise reply) per sample"
echo
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    "$BIN/tetris-bench-extender" --nodes 10,100,1000 --samples 30
else
    "$BIN/tetris-bench-extender"
fi
echo
echo "Each node holds 10 whole models of 1,000 tensors (10k tensors) drawn from a pool of 40; the pod's model has 1,000 tensors. Inventories are installed in the cache as if polled; HTTP transport is not included in the decisions. NodeNames = nodeCacheCapable: true; Nodes = full Node objects in every request. Manifest change = loading a new version of the pod's manifest, which computes its θ on every node; inventory change CPU = decoding one changed 10k-tensor inventory document and computing θ on it (thread CPU time, HTTP excluded). Build RSS Δ = the process's RSS growth while the whole cluster (digest pool, manifest, inventories) is built."
echo
echo "Memory: inventories counted = the bytes the cached inventories hold, counted in the data structures (each node's id set, θ memo, cache entry and strings; the map's own table is not counted); digest table counted = the digest -> id table all inventories share; heap Δ = mallinfo2() uordblks grown while the inventories are built; RSS Δ = the RSS grown meanwhile, which also moves with what the allocator keeps."
echo
echo "Poll: the first nodes (up to 100) poll a local daemon-like /inventory server over HTTP on loopback (as tetris-reclaimer serves it: a cached document, ETag, 304 to If-None-Match, two server threads); poller CPU = the polling thread's CPU (libcurl, 304 or decode + intern + θ), poller + daemon = the whole process's. Changed = every poll a new generation of a 10k-tensor document. Per node per minute = per poll x polls a minute at the extender's default --refresh."
