#!/usr/bin/env bash
# Round step `timeline`: tests/gpu/graph_timeline.py on the synthetic model (through our CUPTI tracer when it was
# built or carried): every expert on the GPU; as a 12 GB PC (4,100 slots, 6 workers) when PROFILE (a decode step's
# routing profile) exists; then all on the GPU again with each environment variant of TIMELINE_AB (space-separated,
# each "A=1,B=2"). Results: $OUT/timeline_*.json.
# usage: OUT=DIR MODEL=SYN.gguf [PROFILE=routing.profile] [TIMELINE_PC12=0] [TIMELINE_AB="X=1 Y=0"]
#        tests/gpu/graph_timeline.sh BUILD
set -u
BUILD=${1:-build-gpu}
# Our CUPTI tracer when it was built (or carried), else Nsight Systems (graph_timeline.py finds it)
TRACER=$BUILD/engine/libstrata_kernel_trace.so
[ -f "$TRACER" ] || TRACER=
run() {   # name, then graph_timeline.py's arguments
  local name=$1; shift
  echo "-- timeline $name"
  python3 tests/gpu/graph_timeline.py --strata "$BUILD/engine/strata" --model "$MODEL" --out "$OUT/timeline_$name.json" \
    ${TRACER:+--tracer "$TRACER"} "$@" |
    head -100
}
run gpu
[ "${TIMELINE_PC12:-1}" = 1 ] && [ -n "${PROFILE:-}" ] && [ -f "$PROFILE" ] &&
  run pc12 --extra "--expert-cache 4100-slots --cpu-workers 6 --routing-profile $PROFILE"
i=0
for v in ${TIMELINE_AB:-}; do
  i=$((i + 1))
  run "gpu_ab$i" --env "${v//,/ }"
done
