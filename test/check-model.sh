#!/usr/bin/env bash
# check-model.sh: model-check the standby horizon protocol
# (test/model/replica.pml) with spin: the model must pass an exhaustive
# search, and each deliberately broken variant must fail it.  Run by
# "make check-model" and "make test"; needs spin and gcc (Debian: spin).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=$PWD/test/model/replica.pml

. test/packages.sh
need_packages spin gcc

WORK=$(mktemp -d /tmp/stream_seq_model.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cp "$MODEL" "$WORK/"
cd "$WORK"

# verify FLAGS: build and run the verifier; prints its summary line
verify() {
	spin -a "$@" replica.pml >/dev/null
	gcc -O2 -DSAFETY -DCOLLAPSE -DMEMLIM=4000 -w -o pan pan.c
	./pan -m200000 -w24 >pan.out 2>&1 || true
}

status=0
verify
if grep -q "errors: 0" pan.out && ! grep -q "Search not completed\|MEMLIM" pan.out; then
	echo "ok - replica.pml: exhaustive search, no violation ($(awk '/states, stored/ {print $1}' pan.out) states, $(awk '/elapsed time/ {print $4}' pan.out) s)"
else
	echo "not ok - replica.pml:"
	cat pan.out
	status=1
fi
for variant in BROKEN_NO_ROUND BROKEN_NO_PREDATES BROKEN_LOG_LATER BROKEN_PREDATES_ARRAY_ONLY; do
	rm -f replica.pml.trail
	verify -D$variant
	if grep -q "assertion violated" pan.out; then
		echo "ok - $variant is caught: $(spin -t -D$variant replica.pml 2>/dev/null | grep -o 'skipped:.*' | head -1)"
	else
		echo "not ok - $variant passed the model check"
		cat pan.out
		status=1
	fi
done
exit $status
