#!/usr/bin/env bash
# One device call's worth of GPU work (issue #7): builds every CUDA target once, writes the synthetic full-size model
# (in parallel with the build), then runs the named steps, each with its own time limit, results under /tmp/round/NAME/STEP,
# packed into $OUT/round-NAME.tgz (the device tool returns at most 8 files). Steps:
#   checks     tests/gpu/run.sh (ops, tiny-model parity, expert-cache parity, matmul speed; memcheck when SANITIZER=1)
#   quick      with PREBUILT too: cuda_ops_test --only $OPS_ONLY (every group when unset), tiny-model parity and
#              expert-cache parity
#   gdn        tests/gpu/gdn_fused.sh         attn     tests/gpu/attention_long.sh
#   cpupool    bench/cpu_pool/run.sh          hybrid   tests/gpu/hybrid_speed.sh + hybrid_checks.sh
#   graphs     tests/gpu/graphs_check.sh      decode   bench/decode/run_h200.sh (budget: the step's limit - 30 s)
#   devjoin    moe_decode_test (matrix tables) + tests/gpu/device_join_parity.py (the device-driven hybrid join,
#              tiny models; TARGETS must include moe_decode_test)
#   memjoin    compute-sanitizer memcheck of the device join alone: tiny iq2_xs, 30% cached, moves every pass, at
#              the auto share and with every miss zero-copy (staged), and with MTP verify windows
#   kernels    tests/gpu/kernel_times.py: Nsight Compute's time of every kernel of one decode pass (synthetic model)
#   detail     tests/gpu/kernel_detail.sh: Nsight Compute's sections (stall reasons, occupancy) of the largest kernels
#   phases     bench/cuda_kernels: staged_phases (the staged projection step by step) and kernel_boundary
#   timeline   tests/gpu/graph_timeline.sh: every kernel of decode passes timed as they run (graphs, dependent
#              launches; our CUPTI tracer, TARGETS must include strata_kernel_trace): what each kernel adds to a pass,
#              the gaps; gpu, pc12 after a decode step (its routing profile), and gpu with each environment of
#              TIMELINE_AB ("A=1,B=2 C=0": two variants)
#   t1         bench/cuda_kernels/t1_ops.sh   t1dec    tests/gpu/t1_ops_decode.sh
#   matmul     tests/gpu/matmul_t1.sh         pool     tests/gpu/cpu_pool.sh (the pool + one hybrid decode)
#   prompt     cuda_matmul_speed --prompt (prompt-chunk matmuls, f32 tiled and tensor-core kernels) and dot_host_test
#   specprof   tests/gpu/spec_profile.sh: GPU time per op of a plain decode and of drafted windows (synthetic model)
#   spec       tests/gpu/spec_parity.py: MTP and prompt-lookup speculation give plain greedy's tokens (tiny models, demo)
#   card       tests/gpu/card_memory.sh: --expert-cache auto sized as on a 12 GB card (STRATA_CUDA_VRAM_MIB), an 8K
#              prompt and decode at 16K / 32K context, f32 and f16 KV: nvidia-smi's peak must stay under the card
#   abbin      tests/gpu/ab_binaries.sh: decode A/B of $PREBUILT/engine/strata_base (an older build carried beside the
#              executables) against build-gpu/engine/strata, interleaved (SETTINGS, REPEAT as the script)
#   kernelsab  tests/gpu/kernel_times.py (Nsight, 6 passes) of $PREBUILT/engine/strata_base, then of the head build with
#              each kernel's change against the base's
#   kernelsenv tests/gpu/kernel_times.py (Nsight, 6 passes) of the head build as it is, then with the environment
#              AB_ENV (e.g. AB_ENV="STRATA_CUDA_PDL=0"), each kernel's change against the first
#   winmem     compute-sanitizer memcheck of cuda_ops_test's window_bits groups (the kernels of verify windows)
#   kv         cuda_ops_test --only kv_f16 / kv_q8, tiny-model parity with STRATA_KV=f16 and q8 (both backends' KV
#              in that format), expert-cache parity with q8
#   chunks     tests/gpu/prefill_chunks.sh: prompt tok/s and peak GPU memory at chunk sizes 256 … 4,096 (gpu, pc12)
#   prefill    tests/gpu/prefill_profile.sh: a 2,048-token prompt with STRATA_CUDA_PROFILE=1 (gpu and pc12): the prompt
#              chunks' GPU time by op
#   head       the output head and greedy choice: cuda_ops_test's Q6_K-rows, argmax and fused-quantization groups,
#              cuda_matmul_speed --head with and without the Q6_K head kernel, serve greedy GPU = CPU (tiny models)
# SYN_EXPERTS=iq2_xs: the synthetic model with IQ2_XS experts (/tmp/syn-iq2_xs.gguf) instead of Q2_0. A random MTP
# head is written beside it (/tmp/syn-q2_0-mtp.gguf): DECODE_ARGS="--mtp /tmp/syn-q2_0-mtp.gguf --settings gpu,gpu/mtp"
# measures what a draft-and-verify window costs.
# usage: [TARGETS="strata cuda_ops_test ..."] tests/gpu/round.sh NAME STEP[:SECONDS] ...   (TARGETS: build only those)
#        PREBUILT=build-cuda/carry: no build; the executables of $PREBUILT/engine (packed here by
#        tests/gpu/pack_prebuilt.sh for sm_90 and carried
#        with the call) go to build-gpu/engine (saves ~160 s of a call; the checks step needs a real build)
set -u
cd "$(dirname "$0")/../.."
NAME=$1; shift
ROOT=/tmp/round/$NAME
PACK=${OUT:-.}
SYN_EXPERTS=${SYN_EXPERTS:-q2_0}   # the synthetic model's expert format: q2_0 or iq2_xs
MODEL=/tmp/syn-$SYN_EXPERTS.gguf
rm -rf "$ROOT"; mkdir -p "$ROOT"
# At the end the synthetic model is finished (a later round of the same call must not find half a file), then packed.
trap '[ "${SYN_WAITED:-1}" = 1 ] || wait "$SYN_PID" 2>/dev/null; tar -czf "$PACK/round-$NAME.tgz" -C "$ROOT" .' EXIT
python3 -c "import gguf" 2>/dev/null || {
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/gguf-*.whl && export PYTHONPATH=/tmp/site; }
export PYTHONPATH=${PYTHONPATH:-}
START=$(date +%s)
( git log -1 --format='%H %s' 2>/dev/null; cat .snap/commit.txt 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  lscpu | grep -E "Model name|^CPU\(s\)" ) > "$ROOT/machine.txt"
# Steps on the tiny models only: they run while the synthetic model is still being written, and a round of only
# these does not write it at all (a check-only call then ends when its checks do).
tiny_step() { case $1 in checks|quick|devjoin|memjoin|cpupool|graphs|t1|head|phases|prompt|winmem|kv) return 0 ;; esac; return 1; }
NEED_SYN=0
for spec in "$@"; do tiny_step "${spec%%:*}" || NEED_SYN=1; done
if [ $NEED_SYN = 1 ] && [ ! -f "$MODEL" ]; then
  ( time timeout 200 python3 engine/tools/make_synthetic.py "$MODEL" --experts "$SYN_EXPERTS" --workers 8 \
                         --mtp-out "${MODEL%.gguf}-mtp.gguf" ) > "$ROOT/make_synthetic.log" 2>&1 &
  SYN_PID=$!
else
  true & SYN_PID=$!
fi
if [ -n "${PREBUILT:-}" ]; then
  mkdir -p build-gpu/engine && find "$PREBUILT/engine" -maxdepth 1 -type f -executable -exec cp {} build-gpu/engine/ \;
  ls build-gpu/engine > "$ROOT/build.log"
else
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$ROOT/build.log" 2>&1 &&
    cmake --build build-gpu -j "$(nproc)" ${TARGETS:+--target $TARGETS} >> "$ROOT/build.log" 2>&1 || { tail -40 "$ROOT/build.log"; echo "round: build FAILED"; exit 1; }
fi
echo "round: built in $(( $(date +%s) - START )) s"
SYN_WAITED=0
for spec in "$@"; do
  step=${spec%%:*}; limit=${spec#*:}; [ "$limit" = "$spec" ] && limit=120
  tiny_step "$step" || [ $SYN_WAITED = 1 ] || { wait $SYN_PID; tail -3 "$ROOT/make_synthetic.log"; SYN_WAITED=1; }
  dir=$ROOT/$step; mkdir -p "$dir"
  echo "== $step (limit $limit s, at $(( $(date +%s) - START )) s)"
  case $step in
    checks)  cmd=(env OUT=$dir BUILD=build-gpu SKIP_SANITIZER=$([ "${SANITIZER:-0}" = 1 ] && echo 0 || echo 1) bash tests/gpu/run.sh .gpu-models) ;;
    quick)   cmd=(bash -c "build-gpu/engine/cuda_ops_test $dir/ops.json ${OPS_ONLY:+--only $OPS_ONLY} | grep -E 'FAIL|checks'; python3 tests/gpu/parity.py --strata build-gpu/engine/strata --models .gpu-models --out $dir/parity.json | tail -3; python3 tests/gpu/cache_parity.py --strata build-gpu/engine/strata --models .gpu-models --out $dir/cache_parity.json | tail -3") ;;
    gdn)     cmd=(env OUT=$dir bash tests/gpu/gdn_fused.sh build-gpu "$MODEL") ;;
    attn)    cmd=(env OUT=$dir bash tests/gpu/attention_long.sh build-gpu "$MODEL") ;;
    cpupool) cmd=(env OUT=$dir WORKERS=1,2,4,6,8 bash bench/cpu_pool/run.sh build-gpu) ;;
    hybrid)  cmd=(bash -c "OUT=$dir bash tests/gpu/hybrid_speed.sh build-gpu $MODEL; OUT=$dir/checks bash tests/gpu/hybrid_checks.sh") ;;
    t1)      cmd=(env OUT=$dir bash bench/cuda_kernels/t1_ops.sh build-gpu) ;;
    t1dec)   cmd=(env OUT=$dir bash tests/gpu/t1_ops_decode.sh build-gpu "$MODEL") ;;
    matmul)  cmd=(env OUT=$dir bash tests/gpu/matmul_t1.sh build-gpu "$MODEL") ;;
    pool)    cmd=(env OUT=$dir bash tests/gpu/cpu_pool.sh build-gpu "$MODEL") ;;
    prefill) cmd=(env OUT=$dir bash tests/gpu/prefill_profile.sh build-gpu "$MODEL") ;;
    chunks)  cmd=(env OUT=$dir bash tests/gpu/prefill_chunks.sh build-gpu "$MODEL") ;;
    specprof) cmd=(env OUT=$dir bash tests/gpu/spec_profile.sh build-gpu "$MODEL") ;;
    spec)    cmd=(python3 tests/gpu/spec_parity.py --strata build-gpu/engine/strata --models .gpu-models --out $dir/spec_parity.json) ;;
    card)    cmd=(env OUT=$dir bash tests/gpu/card_memory.sh build-gpu "$MODEL") ;;
    kv)      cmd=(bash -c "for g in kv_f16 kv_q8; do build-gpu/engine/cuda_ops_test $dir/ops_\$g.json --only \$g | grep -E 'FAIL|checks'; done; for kv in f16 q8; do STRATA_KV=\$kv python3 tests/gpu/parity.py --strata build-gpu/engine/strata --models .gpu-models --out $dir/parity_kv\$kv.json | tail -1; done; STRATA_KV=q8 python3 tests/gpu/cache_parity.py --strata build-gpu/engine/strata --models .gpu-models --out $dir/cache_parity_kvq8.json | tail -1") ;;
    abbin)   cmd=(env OUT=$dir bash tests/gpu/ab_binaries.sh "${PREBUILT:-build-gpu}/engine/strata_base" build-gpu/engine/strata "$MODEL") ;;
    winmem)  cmd=(compute-sanitizer --tool memcheck --error-exitcode 3 build-gpu/engine/cuda_ops_test $dir/ops_window_memcheck.json --only window_bits) ;;
    prompt)  cmd=(bash -c "build-gpu/engine/dot_host_test | tail -1; build-gpu/engine/cuda_matmul_speed $dir/prompt_speed.json --prompt") ;;
    graphs)  cmd=(env OUT=$dir SKIP_OPS=1 bash tests/gpu/graphs_check.sh build-gpu) ;;
    devjoin) cmd=(bash -c "build-gpu/engine/moe_decode_test | grep -E 'tables|FAIL|failed'; python3 tests/gpu/device_join_parity.py --strata build-gpu/engine/strata --models .gpu-models --out $dir/device_join.json") ;;
    memjoin) cmd=(bash tests/gpu/device_join_memcheck.sh build-gpu .gpu-models) ;;
    detail)  cmd=(env OUT=$dir bash tests/gpu/kernel_detail.sh build-gpu "$MODEL") ;;
    phases)  cmd=(bash -c "build-gpu/engine/staged_phases 200 && build-gpu/engine/kernel_boundary 1000") ;;
    timeline) cmd=(env OUT=$dir MODEL=$MODEL PROFILE=$ROOT/decode/routing.profile bash tests/gpu/graph_timeline.sh build-gpu) ;;
    kernels) cmd=(python3 tests/gpu/kernel_times.py --strata build-gpu/engine/strata --model "$MODEL" --out $dir/kernel_times.json) ;;
    kernelsenv) cmd=(bash -c "python3 tests/gpu/kernel_times.py --passes 6 --strata build-gpu/engine/strata --model $MODEL --out $dir/kernel_times_off.json | head -1 && env ${AB_ENV:-} python3 tests/gpu/kernel_times.py --passes 6 --strata build-gpu/engine/strata --model $MODEL --out $dir/kernel_times_on.json --against $dir/kernel_times_off.json") ;;
    kernelsab) cmd=(bash -c "python3 tests/gpu/kernel_times.py --passes 6 --strata ${PREBUILT:-build-gpu}/engine/strata_base --model $MODEL --out $dir/kernel_times_base.json | head -1 && python3 tests/gpu/kernel_times.py --passes 6 --strata build-gpu/engine/strata --model $MODEL --out $dir/kernel_times.json --against $dir/kernel_times_base.json") ;;
    head)    cmd=(bash -c "for g in matmul_q6k_rows argmax_rows fused_quant_bits; do build-gpu/engine/cuda_ops_test --only \$g | grep -E 'FAIL|checks'; done; build-gpu/engine/cuda_matmul_speed --head; STRATA_CUDA_Q6K_T1=0 build-gpu/engine/cuda_matmul_speed --head; python3 tests/gpu/serve_greedy_check.py --strata build-gpu/engine/strata --models .gpu-models") ;;
    decode)  cmd=(env OUT=$dir SYN_MODEL=$MODEL BUDGET_S=$(( limit - 30 )) bash bench/decode/run_h200.sh build-gpu ${DECODE_ARGS:-}) ;;
    *) echo "round: unknown step $step"; continue ;;
  esac
  timeout "$limit" "${cmd[@]}" > "$dir/stdout.txt" 2>&1; echo "rc $?" >> "$dir/stdout.txt"
  grep -E "^-- |rc [0-9]|FAIL|tok/s|GB/s|summary|ok$| -> |a pass:|mean pass" "$dir/stdout.txt" | head -40
done
echo "round: done in $(( $(date +%s) - START )) s"
