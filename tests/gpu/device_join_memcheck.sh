#!/usr/bin/env bash
# compute-sanitizer memcheck of the device-driven hybrid join (hybrid_device.h): `strata generate` on the tiny IQ2_XS
# model (its experts take the device join) with 30% of the experts cached and moves every pass, at the default
# (auto) zero-copy share, with every miss zero-copy (staged in VRAM; also with the prefetch's copy-engine mode), and
# with the tiny Q2_0 model's MTP head at
# --spec 3 (verify windows of 4 tokens). Exit 0 only when every run is clean.
# usage: device_join_memcheck.sh BUILD MODELS_DIR
set -u
BIN=$1/engine/strata M=$2
SAN="compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3"
IDS=5,17,230,4,99,12,8,301,77,41,2,150,19,64,33,7,210,90,11,3
HEAD=$(python3 -c "import json; print(json.load(open('$M/mtp.json')).get('tiny-q2_0.gguf', ''))" 2>/dev/null)
ok=1
run() {   # NAME MODEL ENV... -- ARGS...
  local name=$1 model=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  # STRATA_PIN=copy: page-locking the mapped file in place is refused on file-backed pages (a handled fallback that
  # memcheck would report as an API error).
  env STRATA_PIN=copy "${envs[@]}" timeout 240 $SAN "$BIN" generate --backend cuda --model "$M/$model" -n 12 \
      --ignore-eos --prompt-ids $IDS --expert-cache 10-slots --expert-adapt 1 --cpu-workers 2 "$@" > "/tmp/memjoin_$name.log" 2>&1
  local rc=$?
  local joined=$(grep -c "joins on the device" "/tmp/memjoin_$name.log")
  echo "memjoin $name: rc $rc, device join $joined, $(grep -E 'ERROR SUMMARY|LEAK SUMMARY' "/tmp/memjoin_$name.log" | tr '\n' ' ')"
  [ $rc = 0 ] && [ "$joined" -ge 1 ] || { ok=0; tail -30 "/tmp/memjoin_$name.log"; }
}
run auto tiny-iq2_xs.gguf STRATA_HYBRID_DEVICE=1 --
run zc_all tiny-iq2_xs.gguf STRATA_HYBRID_DEVICE=1 STRATA_GPU_MISS_SHARE=1 --
run zc_dma tiny-iq2_xs.gguf STRATA_HYBRID_DEVICE=1 STRATA_GPU_MISS_SHARE=1 STRATA_PREFETCH_MODE=dma --
[ -n "$HEAD" ] && run mtp tiny-q2_0.gguf STRATA_HYBRID_DEVICE=1 -- --mtp "$M/$HEAD" --spec 3
[ $ok = 1 ] && echo "device join memcheck: clean" || { echo "device join memcheck: FAILED"; exit 1; }
