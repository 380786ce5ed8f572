#!/usr/bin/env bash
# Every H200 measurement of issue 4, in one call on a one-GPU machine:
#   1. schedsim calibrate (GEMM grid incl. every shipped schedule's shapes and seed 000's,
#      copies, launch overheads, copy contention) -> h200_calibrated.yaml
#   2. predict (calibrated profile) + execute --compare for matmul_streams, offload and
#      small_ops_graph (eager and --cuda-graph); one --profiler run (Kineto trace kept)
#   3. --check of allgather_mm / allgather_mm8 on the GPU (world size 1: one-rank NCCL)
#   4. executor overhead: the same schedules through a hand-written PyTorch script
# Usage (repo root; OUT = where results go, default benchmarks/h200/out):
#   bash benchmarks/h200/run_all.sh            [STEPS="calibrate exec check overhead"]
# Everything lands in $OUT/work and is packed into $OUT/results.tgz (the device tool returns
# at most 8 files), with the full log in $OUT/log.txt.
set -uo pipefail
OUT=${OUT:-benchmarks/h200/out}
W=$OUT/work
mkdir -p "$W"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
if [ -d .whl ] && ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
STEPS=${STEPS:-"calibrate exec check overhead"}
TR="torchrun --nproc-per-node 1 -m schedsim"
PROF=$W/h200_calibrated.yaml
has() { [[ " $STEPS " == *" $1 "* ]]; }
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
run() { timeout "${T:-300}" "$@" || echo "FAILED ($?): $*"; }

step env
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"

if has calibrate; then
  step calibrate
  SCHEDS=""
  for f in allgather_mm allgather_mm8 matmul_streams offload small_ops_graph tp_ffn tp_allreduce_graph; do
    [ -f schedules/$f.yaml ] && SCHEDS="$SCHEDS schedules/$f.yaml"
  done
  T=420 run $TR calibrate $SCHEDS --name h200_calibrated --base h200 --out "$PROF" \
     --gemm 16384x8192x8192 --gemm 2048x1024x8192 --iters 20
elif [ -f schedsim/hardware/profiles/h200_calibrated.yaml ]; then
  cp schedsim/hardware/profiles/h200_calibrated.yaml "$PROF"
fi
[ -f "$PROF" ] || PROF=h200

if has exec; then
  for s in matmul_streams offload small_ops_graph; do
    step "predict + execute $s (eager)"
    run python3 -m schedsim predict schedules/$s.yaml --profile "$PROF" --out "$W/$s/predicted" --launch eager
    run $TR execute schedules/$s.yaml --eager --out "$W/$s/eager" --compare --profile "$PROF" --iters 20 --warmup 5
  done
  step "execute small_ops_graph --cuda-graph"
  run python3 -m schedsim predict schedules/small_ops_graph.yaml --profile "$PROF" --launch cuda_graph \
      --out "$W/small_ops_graph/predicted_graph"
  run $TR execute schedules/small_ops_graph.yaml --cuda-graph --out "$W/small_ops_graph/graph" --compare \
      --profile "$PROF" --iters 20 --warmup 5
  step "execute offload --profiler"
  run $TR execute schedules/offload.yaml --eager --profiler --out "$W/offload/profiler" --compare --profile "$PROF" \
      --iters 10 --warmup 3 --no-gantt
  step "execute matmul_streams --profiler --cuda-graph (mapping limits under graphs)"
  run $TR execute schedules/matmul_streams.yaml --cuda-graph --profiler --out "$W/matmul_streams/graph_profiler" \
      --compare --profile "$PROF" --iters 10 --warmup 3 --no-gantt
fi

if has check; then
  step "check allgather_mm (world 1, chunks 4) and allgather_mm8 (world 1) on the GPU"
  run $TR execute schedules/allgather_mm.yaml --set world_size=1 --set chunks=4 --check --out "$W/check_allgather_mm" \
      --compare --profile "$PROF" --iters 5 --warmup 2 --no-gantt
  run $TR execute schedules/allgather_mm8.yaml --set world_size=1 --check --out "$W/check_allgather_mm8" \
      --compare --profile "$PROF" --iters 10 --warmup 3 --no-gantt
  [ -f schedules/tp_ffn.yaml ] && run $TR execute schedules/tp_ffn.yaml --set tp=1 --check \
      --out "$W/check_tp_ffn" --compare --profile "$PROF" --iters 5 --warmup 2 --no-gantt
  step "tp_allreduce_graph at world size 1 (NCCL captured in a CUDA graph; no --check family)"
  [ -f schedules/tp_allreduce_graph.yaml ] && run $TR execute schedules/tp_allreduce_graph.yaml --set world_size=1 \
      --out "$W/tp_allreduce_graph_w1" --compare --profile "$PROF" --iters 10 --warmup 3 --no-gantt
fi

if has overhead; then
  step "executor overhead: hand-written PyTorch"
  run python3 benchmarks/h200/handwritten.py --out "$W/handwritten.json" --iters 20 --warmup 5
  step "executor overhead: schedsim execute again, same process order (eager + graph, no compare)"
  for s in matmul_streams offload small_ops_graph; do
    run $TR execute schedules/$s.yaml --eager --out "$W/$s/overhead" --iters 20 --warmup 5 --no-gantt
  done
  run $TR execute schedules/small_ops_graph.yaml --cuda-graph --out "$W/small_ops_graph/overhead_graph" \
      --iters 20 --warmup 5 --no-gantt
fi

step pack
if [ -f "$W/offload/profiler/kineto_rank0.json.gz" ]; then
  cp "$W/offload/profiler/kineto_rank0.json.gz" "$W/kineto_execute_offload_rank0.json.gz"
  cp "$W/offload/profiler/predicted/timeline.json" "$W/kineto_execute_offload_predicted_timeline.json"
  cp "$W/offload/profiler/timeline.json" "$W/kineto_execute_offload_measured_timeline.json"
fi
find "$W" -name 'kineto_rank*.json.gz' -size +15M -delete
tar czf "$OUT/results.tgz" -C "$W" . && ls -la "$OUT"
