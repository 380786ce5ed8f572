#!/usr/bin/env bash
# One GPU, ~8 min: rule 4c (the ragged end of a GEMM's last wave, which a waiting kernel fills: gpu.wave_tail_fill)
# on cases it was not fitted on. Calibrates this GPU (the schedules' GEMMs; calibrate fits wave_tail_fill to one
# about-one-wave GEMM run on 8 streams, executor/calibrate_waves.py), times the same 8-stream probe at more GEMM
# shapes (fp32 and bf16, OUT/wave_tail_shapes.json), then `schedsim execute --compare` with that profile:
# allgather_mm on one rank (M=16384) at chunks 2, 4, 8, 16 and 8 with one connection; matmul_streams at chunks 4, 8
# and 16; small_ops_graph as a CUDA graph and eagerly. Keeps every run in OUT/runs.tgz to replay offline
# (benchmarks/accuracy_replay.py, with and without the fitted f).
#   OUT=dir [PROBE=0] [CASES="..."] bash benchmarks/heldout_wave_tail.sh
set -uo pipefail
OUT=${OUT:-heldout_wave_tail_out}; W=/tmp/hwt_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=$W/h200x1_calibrated.yaml
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
. benchmarks/heldout_one_gpu.sh
calibrate_one_gpu --dtypes fp32,bf16 --gemm 2048x1024x8192 --gemm 1024x512x8192 --gemm 4096x2048x8192 \
  --gemm 512x256x8192 schedules/small_ops_graph.yaml
grep -E "^\[waves\]|wave_tail_us|^  tail:" -A3 $W/calibrate.log "$PROF" | cut -c1-300
echo "=== wave tail at more shapes ($(date -u +%H:%M:%S))"
[ "${PROBE:-1}" = 0 ] || timeout 120 python3 - > $W/wave_tail_shapes.log 2>&1 <<'PY'
import json, torch
from executor.calibrate import longest_kernel_ctas
from executor.calibrate_nccl import kernel_events
from executor.calibrate_waves import measure_wave_tail
dev = torch.device("cuda", 0)
out = []
for shape in [("fp32", 2048, 1024, 8192), ("fp32", 1024, 512, 8192), ("fp32", 4096, 2048, 8192),
              ("bf16", 2048, 1024, 8192), ("bf16", 4096, 2048, 8192), ("bf16", 8192, 4096, 8192),
              ("bf16", 2048, 2048, 2048), ("bf16", 1024, 1024, 4096)]:
    for per in (4, 8):
        rec = measure_wave_tail(torch, dev, shape, None, print, per_stream=per)
        out.append(rec)
json.dump(out, open("/tmp/hwt_work/wave_tail_shapes.json", "w"), indent=1)
PY
cat $W/wave_tail_shapes.log 2>/dev/null
CASES=${CASES:-"ag_c2 ag_c4 ag_c8 ag_c16 ag_c32 ag_c8_conn1 ms_c4 ms_c8 ms_c16 ms_c32 so_graph so_eager"}
for c in $CASES; do
  case $c in
    ag_c8_conn1) run "$c" allgather_mm $AG --set chunks=8 --max-connections 1 ;;
    ag_c*) run "$c" allgather_mm $AG --set chunks=${c#ag_c} ;;
    ms_c*) run "$c" matmul_streams --set chunks=${c#ms_c} ;;
    so_graph) run so_graph small_ops_graph --cuda-graph ;;
    so_eager) run so_eager small_ops_graph --eager --measure-host ;;
  esac
done
cp "$PROF" "${PROF%.yaml}.json" $W/calibrate.log $W/wave_tail_shapes.json "$OUT/" 2>/dev/null
tar czf "$OUT/runs.tgz" -C $W . 2>/dev/null
echo "=== done ($(date -u +%H:%M:%S))"
