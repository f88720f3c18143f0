#!/bin/sh
# Shim record cost per call: the same program with and without LD_PRELOAD.
set -eu
OUT=${OUT:-../../bin/ncclshim}
SHIM=$(cd "$OUT" && pwd)/liblaggard_nccl.so
CALLS=${CALLS:-2000000}
dir=$(mktemp -d "${TMPDIR:-/tmp}/lgbench.XXXXXX")
trap 'rm -rf "$dir"' EXIT
echo "without shim:        $(LAGGARD_SHM_DIR=$dir "$OUT/bench" "$CALLS")"
echo "with shim + reader:  $(LAGGARD_SHM_DIR=$dir LD_PRELOAD=$SHIM "$OUT/bench" "$CALLS")"
echo "with shim, ring full (drop path): $(LAGGARD_SHM_DIR=$dir LGBENCH_NOREADER=1 LD_PRELOAD=$SHIM "$OUT/bench" "$CALLS")"
echo "with shim + reader, Send to 8 peers: $(LAGGARD_SHM_DIR=$dir LGBENCH_SEND=1 LD_PRELOAD=$SHIM "$OUT/bench" "$CALLS")"
