#!/usr/bin/env bash
# One-GPU cases outside the accuracy suite's table (issue 8): calibrate on this GPU, then `schedsim execute
# --compare` with that profile of: tp_allreduce_graph at world 1, 64 layers, as a CUDA graph (held out for the
# timed-graph term, which came from chains of GEMMs and add_); the same eagerly with 2048-wide layers, 96 of them,
# --measure-host (held out for the collective host cost, chosen on the 1024-wide 64-layer case); small_ops_graph
# as a CUDA graph (a suite case: per-op spans of the timed graph). ~6 min, one H200.
#   OUT=dir [EXECS=2] [HOST_PROCESSES=3] [CASES=...] [GEMMS="--gemm MxNxK ..."] bash benchmarks/heldout_x1.sh
set -uo pipefail
OUT=${OUT:-heldout_x1_out}; EXECS=${EXECS:-2}; W=/tmp/hx1_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh  # multicast off, carried wheels, PYTHONPATH
PROF=$W/h200x1_calibrated.yaml
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim calibrate --no-grid \
  --dtypes fp32,bf16 --iters 10 --max-bytes 67108864 --factor 4 --gemm 1x1024x1024 --gemm 1x2048x1024 \
  --gemm 1x2048x2048 --gemm 32x1024x1024 --gemm 16x512x512 ${GEMMS:-} --host-processes "${HOST_PROCESSES:-3}" schedules/small_ops_graph.yaml \
  --name h200x1_calibrated --base h200 --out "$PROF" > $W/calibrate.log 2>&1 || { echo "calibrate failed"; tail -20 $W/calibrate.log; }
[ -f "$PROF" ] || PROF=h200x2
TPA="--set world_size=1 --set layers=64"; TPW="--set world_size=1 --set layers=96 --set input_size=2048 --set output_size=2048"
# CASES: "schedule:--set ...:execute flags:tag" separated by ";" (the default: the three above)
CASES=${CASES:-"tp_allreduce_graph:$TPA --set launch=cuda_graph:--cuda-graph:tpa_graph;tp_allreduce_graph:$TPW --set launch=eager:--measure-host:tpw_eager;small_ops_graph::--cuda-graph:small_ops_graph"}
IFS=';' read -r -a CASELIST <<< "$CASES"
for case in "${CASELIST[@]}"; do
  IFS=: read -r sched sets flags tag <<< "$case"
  mkdir -p $W/$tag
  for rep in $(seq "$EXECS"); do
    d=$W/$tag/x$rep
    # shellcheck disable=SC2086
    python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute "schedules/$sched.yaml" $sets \
      $flags --no-gantt --compare --profile "$PROF" --iters 20 --warmup 5 --out "$d" > "$d.log" 2>&1 \
      || { echo "$tag $rep failed"; tail -5 "$d.log"; continue; }
    grep -E "without per-op|per-op duration" "$d.log" | sed "s/^/$tag $rep: /"
  done
done
cp "$PROF" "${PROF%.yaml}.json" "$OUT/" 2>/dev/null
tar czf "$OUT/results.tgz" -C $W . 2>/dev/null
