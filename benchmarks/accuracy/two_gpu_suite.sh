#!/usr/bin/env bash
# The 2-GPU accuracy suite (issue 8 §5) with the executor-overhead references (issue 15 §2), in one call:
#   1. schedsim calibrate on 2 ranks -> a fresh profile (GPU-side collective tables, plain-PyTorch host costs
#      by kind, unbatched/batched p2p, NCCL beside GEMMs: PROFILE_CONTRACT.md)
#   2. per case: schedsim execute --compare with that profile (prediction + measurement + comparison), and the
#      hand-written PyTorch reference of its family (benchmarks/accuracy/handwritten/, timed by the same method);
#      one summary.json/.csv per case
#   3. the gpu-marked pytest tests (eager, graph, profiler, p2p on 2 ranks), if pytest is importable
#   4. OUT/summary.{csv,json,md} over all cases, OUT/replay_h200x2.md (benchmarks/accuracy/replay_runs.py with the shipped
#      h200x2), OUT/results.tgz with everything, OUT/<profile>.yaml, OUT/log.txt
# Cases: allgather_mm chunks 1 2 4 8 16; tp_ffn tp=2; tp_allreduce_graph eager + cuda_graph; pipeline_schedules
# gpipe 1f1b interleaved_1f1b zb_h1 at p=2; offload and small_ops_graph (eager + cuda_graph) on one GPU;
# allgather_mm8 with CUDA_DEVICE_MAX_CONNECTIONS=1.
#
# Usage (repo root):
#   bash benchmarks/accuracy/two_gpu_suite.sh                 # 2 GPUs (1 GPU: the one-GPU cases only), ~10 min
#   PART=1 bash benchmarks/accuracy/two_gpu_suite.sh          # calibrate + allgather_mm c1..c16 + tp_ffn + tp_allreduce (~6 min)
#   PART=2 PROFILE=<part 1 OUT>/h200x2_calibrated.yaml bash benchmarks/accuracy/two_gpu_suite.sh
#                                                  # pipelines + one-GPU cases + maxconn1 + gpu tests (~6 min)
#   SMOKE=1 bash benchmarks/accuracy/two_gpu_suite.sh         # CPU ranks (gloo), reduced sizes: proves the script end to end
# Env: PART (1, 2 or empty = all), PROFILE (a profile YAML or name to predict with: skips calibration),
# OUT (default benchmarks/accuracy/two_gpu_out, with _part1/_part2 for a part), WORK (scratch, default
# /tmp/two_gpu_work[_partN]), CASES (subset of case names, space-separated), BUDGET (seconds after which
# remaining cases are skipped, default 380, 520 for a part), ITERS/WARMUP (default 20/5), PYTHON (python3),
# HOST_REPEAT (default 3: the host-bound sub-ms cases and offload run in that many fresh processes, execute and reference
# alternating, and the summary keeps the median over processes; a process's median moves 5-10 % between processes).
# HOST_PROCESSES (calibrate --host-processes: fresh processes that measure the host costs; default: calibrate's, 3 on CUDA).
# Each part fits in one 600 s device call; benchmarks/accuracy/executor_overhead_table.py turns both parts' summary.csv
# into the table of [evidence: executor-overhead].
set -uo pipefail
PART=${PART:-}
case "$PART" in ""|1|2) ;; *) echo "PART must be 1, 2 or empty (got '$PART')"; exit 2;; esac
SUF=${PART:+_part$PART}
OUT=${OUT:-benchmarks/accuracy/two_gpu_out$SUF}
WORK=${WORK:-/tmp/two_gpu_work$SUF}
SMOKE=${SMOKE:-0}
if [ -n "$PART" ]; then BUDGET=${BUDGET:-520}; else BUDGET=${BUDGET:-380}; fi
PROFILE=${PROFILE:-}
if [ -n "$PROFILE" ] && [[ "$PROFILE" == */* || "$PROFILE" == *.yaml ]] && [ ! -f "$PROFILE" ]; then
  echo "PROFILE=$PROFILE: no such file (pass part 1's OUT/<name>.yaml, or a shipped profile name)"; exit 2
fi
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
PY=${PYTHON:-python3}
rm -rf "$WORK" && mkdir -p "$WORK" "$OUT"
main() {
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}
if [ -d .whl ] && ! $PY -c "import pydantic" 2>/dev/null; then  # the GPU box has torch but not pydantic
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
step() {  # with each GPU's SM clock, power and temperature: kernel times follow the power state
  echo; echo "=== $* ($(date -u +%H:%M:%S), ${SECONDS}s)"
  [ "${CUDA:-0}" = 1 ] && nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu --format=csv,noheader \
    | tr '\n' ';' && echo
}
tr_n() { local n=$1; shift; $PY -m torch.distributed.run --standalone --nproc-per-node "$n" "$@"; }

if [ "$SMOKE" = 1 ]; then
  export CUDA_VISIBLE_DEVICES=""
  NGPU=2; CUDA=0; DEVOPT=(--backend gloo --device cpu); ITERS=${SMOKE_ITERS:-3}; WARMUP=1
  AG="--set M=64 --set K=64 --set N=64"; TPF="--set hidden=32 --set ffn=64 --set seq=8 --set batch=2"
  TPA="--set input_size=64 --set output_size=64 --set layers=2"; PIPE="--set m=4 --set tokens=64 --set hidden=64"
  OFF="--set rows=16 --set K=64 --set N=64"; SMALL="--set layers=4 --set H=64"
  CAL=(--quick --no-grid --gemm 64x64x64 --dtypes fp32 --iters 3 --max-bytes 65536 --factor 16)
  PROFNAME=cpu_x2_smoke
else
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c GPU); [ "$NGPU" -gt 2 ] && NGPU=2
  CUDA=1; DEVOPT=(); AG=""; TPF=""; TPA=""; PIPE="--set m=8"; OFF=""; SMALL=""
  # GEMM shapes of every case (allgather_mm's per chunk count), no default grid: calibration stays ~1.5 min
  CAL=(--no-grid --dtypes fp32,bf16,fp16 --iters 10 --max-bytes 268435456 --factor 4
       --gemm 16384x8192x8192 --gemm 8192x4096x8192 --gemm 4096x2048x8192 --gemm 2048x1024x8192
       --gemm 1024x512x8192 --gemm 4096x16384x4096 --gemm 4096x4096x16384 --gemm 4096x8192x4096
       --gemm 4096x4096x8192 --gemm 2048x8192x8192 --gemm 32x1024x1024 --gemm 4096x2048x512 --gemm 4096x512x2048
       --gemm 1x1024x1024 schedules/offload.yaml schedules/small_ops_graph.yaml schedules/tp_allreduce_graph.yaml)
  PROFNAME=h200x2_calibrated
fi
[ "$NGPU" -ge 1 ] || { echo "no GPU found (use SMOKE=1 on CPU)"; exit 2; }
PROF=$WORK/$PROFNAME.yaml

step env
[ "$CUDA" = 1 ] && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None)"

if [ -n "$PROFILE" ]; then
  step "profile $PROFILE (given: no calibration)"
  if [ -f "$PROFILE" ]; then PROF=$WORK/$(basename "$PROFILE"); cp "$PROFILE" "$PROF"
    [ -f "${PROFILE%.yaml}.json" ] && cp "${PROFILE%.yaml}.json" "$WORK/"
  else PROF=$PROFILE; fi
else
  step "calibrate on $NGPU rank(s)"
  [ -n "${HOST_PROCESSES:-}" ] && CAL+=(--host-processes "$HOST_PROCESSES")
  timeout 240 $PY -m torch.distributed.run --standalone --nproc-per-node "$NGPU" -m schedsim calibrate "${CAL[@]}" \
    "${DEVOPT[@]}" --name "$PROFNAME" --base h200 --out "$PROF" || echo "calibrate FAILED ($?)"
  [ -f "$PROF" ] || { echo "no calibrated profile: predicting with the shipped h200"; PROF=h200; }
fi

# part 1: allgather_mm, tp_ffn, tp_allreduce; part 2: pipelines, one-GPU cases, maxconn1, gpu tests
in_part() { [ -z "$PART" ] || [ "$PART" = "$1" ]; }
want() { [ -z "${CASES:-}" ] || [[ " $CASES " == *" $1 "* ]]; }
HOST_REPEAT=${HOST_REPEAT:-3}
# run_case NAME NPROC SCHEDULE "SETS" "EXECUTE FLAGS" REF_SCRIPT "REF FLAGS" [ENV=VALUE] [PROCESSES]
run_case() {
  local name=$1 n=$2 sched=$3 sets=$4 xflags=$5 ref=$6 rflags=$7 envset=${8:-} reps=${9:-1}
  want "$name" || return 0
  local d=$WORK/$name note="" r
  mkdir -p "$d"
  if [ "$n" -gt "$NGPU" ]; then note="skipped: needs $n GPUs"
  elif [ "$CUDA" = 0 ] && [[ "$xflags" == *--cuda-graph* ]]; then note="skipped: CUDA graphs need GPUs (SMOKE)"
  elif [ "$SECONDS" -gt "$BUDGET" ]; then note="skipped: time budget (BUDGET=${BUDGET}s) spent"
  fi
  if [ -z "$note" ]; then
    step "case $name: execute --compare"
    # shellcheck disable=SC2086
    env $envset timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node "$n" -m schedsim execute \
      "schedules/$sched.yaml" $sets $xflags "${DEVOPT[@]}" --compare --profile "$PROF" --iters "$ITERS" \
      --warmup "$WARMUP" --timeout 60 --out "$d/execute" || echo "execute FAILED ($?)"
    if [ -n "$ref" ]; then
      # the reference times the same iterations of its run as execute's uninstrumented ones: those follow
      # WARMUP + ITERS instrumented iterations, and under sustained load the GPU's clock falls (power limit,
      # [evidence: accuracy-h200] "Latest"), so equal numbers of earlier iterations keep the comparison fair
      step "case $name: hand-written reference"
      # shellcheck disable=SC2086
      env $envset timeout 90 $PY -m torch.distributed.run --standalone --nproc-per-node "$n" \
        "benchmarks/accuracy/handwritten/$ref" $sets $rflags --iters "$ITERS" --warmup "$((WARMUP + ITERS))" \
        --out "$d/handwritten.json" \
        || echo "reference FAILED ($?)"
    fi
    # further processes of a host-bound case, alternating: execute (no prediction), then the reference
    for r in $(seq 2 "$reps"); do
      [ "$SECONDS" -gt "$BUDGET" ] && break
      mkdir -p "$d/rep$r"; step "case $name: process $r of $reps"
      # shellcheck disable=SC2086
      env $envset timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node "$n" -m schedsim execute \
        "schedules/$sched.yaml" $sets $xflags "${DEVOPT[@]}" --profile "$PROF" --iters "$ITERS" \
        --warmup "$WARMUP" --timeout 60 --out "$d/rep$r/execute" > "$d/rep$r/execute.log" 2>&1 \
        || echo "execute FAILED ($?)"
      # shellcheck disable=SC2086
      [ -n "$ref" ] && { env $envset timeout 90 $PY -m torch.distributed.run --standalone --nproc-per-node "$n" \
        "benchmarks/accuracy/handwritten/$ref" $sets $rflags --iters "$ITERS" --warmup "$((WARMUP + ITERS))" \
        --out "$d/rep$r/handwritten.json" > "$d/rep$r/ref.log" 2>&1 || echo "reference FAILED ($?)"; }
      rm -f "$d/rep$r/execute/trace.json"
    done
  fi
  $PY benchmarks/accuracy/suite_summary.py case "$d" "$name" --note "$note" || true
}

G="--no-gantt"
if in_part 1; then
  for c in 1 2 4 8 16; do
    run_case "allgather_mm_c$c" 2 allgather_mm "$AG --set chunks=$c" "$G" allgather_mm.py ""
  done
  run_case tp_ffn_tp2 2 tp_ffn "$TPF --set tp=2" "$G" tp_ffn.py "" "" $HOST_REPEAT
  run_case tp_allreduce_eager 2 tp_allreduce_graph "$TPA" "--eager $G" tp_allreduce.py "" "" $HOST_REPEAT
  run_case tp_allreduce_graph 2 tp_allreduce_graph "$TPA" "--cuda-graph $G" tp_allreduce.py "--graph" "" $HOST_REPEAT
fi
if in_part 2; then
  for s in gpipe 1f1b interleaved_1f1b zb_h1; do
    run_case "pipeline_${s}_p2" 2 pipeline_schedules "$PIPE --set p=2 --set schedule=$s" "$G" "pipeline_$s.py" ""
  done
  run_case offload_1gpu 1 offload "$OFF" "--eager $G" offload.py "" "" $HOST_REPEAT
  run_case small_ops_eager_1gpu 1 small_ops_graph "$SMALL" "--eager $G" small_ops.py "" "" $HOST_REPEAT
  run_case small_ops_graph_1gpu 1 small_ops_graph "$SMALL" "--cuda-graph $G" small_ops.py "--graph" "" $HOST_REPEAT
  # the compare Gantt of allgather_mm8 (predicted over measured) is drawn for this case
  run_case allgather_mm8_maxconn1 2 allgather_mm8 "$AG" "--max-connections 1" allgather_mm.py "--set chunks=8" \
    CUDA_DEVICE_MAX_CONNECTIONS=1
fi

# the tests take ~70 s on 2 H200s; start them only while they fit (TESTS_BY, default 400 s into the run)
if in_part 2 && [ "$CUDA" = 1 ] && $PY -c "import pytest" 2>/dev/null && [ "$SECONDS" -lt "${TESTS_BY:-400}" ]; then
  step "gpu-marked tests"
  timeout 170 $PY -m pytest -q -rA -m gpu -p no:cacheprovider tests/executor/test_gpu.py > "$WORK/gpu_tests.txt" 2>&1
  echo "pytest exit $?" >> "$WORK/gpu_tests.txt"
  tail -25 "$WORK/gpu_tests.txt"; cp "$WORK/gpu_tests.txt" "$OUT/"
fi

step "summary"
$PY benchmarks/accuracy/suite_summary.py collect "$WORK" "$OUT"
# the same cases re-predicted with the shipped h200x2 and the model of this checkout (CPU, seconds)
$PY benchmarks/accuracy/replay_runs.py "$WORK" --profile h200x2 --md "$OUT/replay_h200x2.md" || true
[ -f "$PROF" ] && cp "$PROF" "$OUT/" && { [ -f "${PROF%.yaml}.json" ] && cp "${PROF%.yaml}.json" "$OUT/"; }
find "$WORK" -name 'kineto_rank*.json.gz' -size +15M -delete
tar czf "$OUT/results.tgz" -C "$WORK" . && ls -la "$OUT"
echo "done in ${SECONDS}s"
}
main 2>&1 | tee "$OUT/log.txt"
exit "${PIPESTATUS[0]}"
