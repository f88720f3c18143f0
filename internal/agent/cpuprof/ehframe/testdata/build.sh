#!/bin/sh
# Regenerates the committed test binaries (CI has no compiler need):
#   chain       -O2 -fomit-frame-pointer, full symbols
#   chain-mixed same with frame pointers kept in a and c
set -e
cd "$(dirname "$0")"
printf '{ chain_memcpy; c; a; main; };\n' > dyn.list
for v in chain:"" chain-mixed:-DFP_MIXED; do
	out=${v%%:*}; def=${v#*:}
	gcc -O2 -fomit-frame-pointer -fno-toplevel-reorder -fno-reorder-functions $def \
		-Wl,--build-id -Wl,--dynamic-list=dyn.list -o "$out" chain.c
done
rm -f dyn.list
