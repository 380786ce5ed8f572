#!/usr/bin/env bash
# One GPU, ~7 min: rule 4b (split-K reductions as kernels of their own) and the rest of the model on cases it was not
# chosen on. Calibrates this GPU (the schedules' GEMMs, with their gemm.reduce rows from Kineto), then `schedsim
# execute --compare` with that profile of: allgather_mm on one rank (M=16384) at chunks 2, 4, 16; matmul_streams
# at chunks 4 and 16; small_ops_graph as a CUDA graph and eagerly (--measure-host); tp_allreduce_graph at world 1
# as a graph. Keeps every run (timeline.json, predicted/, Kineto) in OUT/runs.tgz to replay offline with
# benchmarks/accuracy_replay.py.
#   OUT=dir [CASES="ag_c2 ag_c4 ag_c16 ms_c4 ms_c16 so_graph so_eager tpa_graph"] bash benchmarks/heldout_rule4b.sh
set -uo pipefail
OUT=${OUT:-heldout_rule4b_out}; W=/tmp/h4b_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=$W/h200x1_calibrated.yaml
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
. benchmarks/heldout_one_gpu.sh
calibrate_one_gpu --dtypes fp32,bf16 --gemm 8192x4096x8192 --gemm 4096x2048x8192 --gemm 2048x1024x8192 \
  --gemm 1024x512x8192 --gemm 512x256x8192 --gemm 1x1024x1024 schedules/small_ops_graph.yaml \
  schedules/tp_allreduce_graph.yaml
grep -A4 "^  reduce:" "$PROF" | head -8
CASES=${CASES:-"ag_c2 ag_c4 ag_c16 ms_c4 ms_c16 so_graph so_eager tpa_graph"}
for c in $CASES; do
  case $c in
    ag_c*) run "$c" allgather_mm $AG --set chunks=${c#ag_c} --profiler ;;
    ms_c*) run "$c" matmul_streams --set chunks=${c#ms_c} --profiler ;;
    so_graph) run so_graph small_ops_graph --cuda-graph ;;
    so_eager) run so_eager small_ops_graph --eager --measure-host ;;
    tpa_graph) run tpa_graph tp_allreduce_graph --set world_size=1 --set layers=64 --set launch=cuda_graph --cuda-graph ;;
  esac
done
find $W -name 'kineto_rank*.json.gz' -size +20M -delete
cp "$PROF" "${PROF%.yaml}.json" $W/calibrate.log "$OUT/" 2>/dev/null
tar czf "$OUT/runs.tgz" -C $W . 2>/dev/null
echo "=== done ($(date -u +%H:%M:%S))"
