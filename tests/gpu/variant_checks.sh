#!/usr/bin/env bash
# cuda_ops_test for A/B switches of the engine (issue #7): the whole test once as built, then the named groups once
# per VAR=VALUE given (each an engine switch read from the environment), against the CPU backend each time.
# Logs and JSON under $OUT (default /tmp/variant_checks); one summary line a run on stdout; rc 1 if any check failed.
# usage: tests/gpu/variant_checks.sh BUILD_DIR GROUPS VAR=VALUE ...   (GROUPS comma-separated: moe,shared_expert)
set -u
BIN=${1:?build dir}/engine/cuda_ops_test
GROUPS_CSV=${2:?groups}
shift 2
OUT=${OUT:-/tmp/variant_checks}
mkdir -p "$OUT"
rc=0
summary() { grep -E 'checks,' "$1" | tail -1; grep -E "FAIL|error" "$1" | head -5; }
timeout 240 "$BIN" "$OUT/default.json" > "$OUT/default.log" 2>&1 || rc=1
echo "default (all groups): $(summary "$OUT/default.log")"
for assign in "$@"; do
  for g in ${GROUPS_CSV//,/ }; do
    name="${assign//[^A-Za-z0-9_=]/_}_$g"
    env "$assign" timeout 120 "$BIN" "$OUT/$name.json" --only "$g" > "$OUT/$name.log" 2>&1 || rc=1
    echo "$assign $g: $(summary "$OUT/$name.log")"
  done
done
exit $rc
