#!/bin/sh
# Runs every C test case in its own process under LD_PRELOAD of the shim.
set -u
OUT=${OUT:-../../bin/ncclshim}
SHIM=$(cd "$OUT" && pwd)/liblaggard_nccl.so
dir=$(mktemp -d "${TMPDIR:-/tmp}/lgshim.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail=0
run() { # name, env...
	name=$1; shift
	mkdir -p "$dir/$name"
	if env LAGGARD_SHM_DIR="$dir/$name" LD_PRELOAD="$SHIM" "$@" "$OUT/test_shim" "$name"; then
		echo "ok   $name"
	else
		echo "FAIL $name"; fail=1
	fi
}
run basic LAGGARD_JOB=job-basic RANK=2 WORLD_SIZE=4 LOCAL_RANK=0
run split
run full LAGGARD_NCCL_RING_SLOTS=64
run threads LAGGARD_NCCL_RING_SLOTS=4096
run pause
run fork
run p2p
run churn LAGGARD_NCCL_RING_SLOTS=64
run orphan
# the ring directory does not exist: the shim must just forward
if env LAGGARD_SHM_DIR="$dir/missing" LD_PRELOAD="$SHIM" "$OUT/test_shim" nodir && [ ! -e "$dir/missing" ]; then
	echo "ok   nodir"
else
	echo "FAIL nodir"; fail=1
fi
# the shim disabled: forwards only, no ring
mkdir -p "$dir/disabled"
if env LAGGARD_SHM_DIR="$dir/disabled" LAGGARD_NCCL_DISABLE=1 LD_PRELOAD="$SHIM" "$OUT/test_shim" nodir; then
	echo "ok   disabled"
else
	echo "FAIL disabled"; fail=1
fi
# without the shim the program's own checks on the ring must fail (the
# tests really read what the shim wrote)
mkdir -p "$dir/noshim"
if env LAGGARD_SHM_DIR="$dir/noshim" "$OUT/test_shim" split 2>/dev/null; then
	echo "FAIL noshim (passed without the shim)"; fail=1
else
	echo "ok   noshim"
fi
exit $fail
