#!/usr/bin/env bash
# Operands in L2 or from HBM (issue 8): benchmarks/probe_l2_residency.py, then a calibration on this GPU and
# `schedsim execute --compare --cuda-graph` of small_ops_graph at five T x H shapes and tp_allreduce_graph at world
# 1 (1024 and 2048 wide; the 2048-wide one eagerly too), each timeline kept for replay on CPU. ~9 min, one H200.
# PROBE=0 skips the probe.
#   OUT=dir [PROBE=0] [GEMMS="--gemm MxNxK ..."] [CASES="schedule|flags|tag;..."] bash benchmarks/probe_l2_residency.sh
set -uo pipefail
OUT=${OUT:-l2_out}; W=/tmp/l2_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
[ -f schedsim/sim/_cwaves.c ] && python3 setup.py build_ext --inplace -q > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${PROBE:-1}" = 1 ]; then
  timeout 150 python3 benchmarks/probe_l2_residency.py > "$OUT/probe.log" 2>&1 || echo "probe rc $?"
  grep -E "^L2_(BYTES|SWEEP|LAYERS)" "$OUT/probe.log" | cut -c1-400
fi
PROF=$W/h200x1_calibrated.yaml
timeout 240 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim calibrate --no-grid \
  --dtypes fp32,bf16 --iters 10 --max-bytes 67108864 --factor 4 --gemm 1x1024x1024 --gemm 1x2048x1024 \
  --gemm 1x2048x2048 --gemm 32x1024x1024 --gemm 16x512x512 --gemm 64x2048x2048 --gemm 8x256x256 \
  --gemm 16x2048x2048 ${GEMMS:-} --host-processes 1 schedules/small_ops_graph.yaml \
  --name h200x1_calibrated --base h200 --out "$PROF" > $W/calibrate.log 2>&1 || { echo "calibrate failed"; tail -20 $W/calibrate.log; }
cp "$PROF" "${PROF%.yaml}.json" $W/calibrate.log "$OUT/" 2>/dev/null
[ -f "$PROF" ] || PROF=h200x2
S=small_ops_graph; TP=tp_allreduce_graph
G="--cuda-graph"; TPG="--set launch=cuda_graph --cuda-graph"
CASES=${CASES:-"$S|--set T=16 --set H=512 --set layers=128 $G|so_16x512;$S|$G|so_32x1024;$S|--set T=64 --set H=2048 $G|so_64x2048;$S|--set T=8 --set H=256 --set layers=128 $G|so_8x256;$S|--set T=16 --set H=2048 $G|so_16x2048;$TP|--set world_size=1 --set layers=64 $TPG|tp_1024;$TP|--set world_size=1 --set layers=96 --set input_size=2048 --set output_size=2048 $TPG|tp_2048;$TP|--set world_size=1 --set layers=96 --set input_size=2048 --set output_size=2048 --set launch=eager --measure-host|tp_2048_eager"}
IFS=';' read -r -a CASELIST <<< "$CASES"
for case in "${CASELIST[@]}"; do
  IFS='|' read -r sched sets tag <<< "$case"
  d=$W/$tag
  # shellcheck disable=SC2086
  timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute "schedules/$sched.yaml" \
    $sets --no-gantt --compare --profile "$PROF" --iters 20 --warmup 5 --out "$d" \
    > "$d.log" 2>&1 || { echo "$tag failed"; tail -5 "$d.log"; }
  grep -E "without per-op|per-op duration" "$d.log" | sed "s/^/$tag: /"
done
tar czf "$OUT/cases.tgz" -C $W . 2>/dev/null
