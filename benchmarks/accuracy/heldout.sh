#!/usr/bin/env bash
# One-GPU held-out accuracy runs (issue 8): each calibrates this GPU at its cases' shapes, then runs
# `schedsim execute --compare` of cases no rule was fitted on; runs.tgz replays offline with
# benchmarks/accuracy/replay_runs.py.
#   OUT=dir [VARS...] bash benchmarks/accuracy/heldout.sh NAME
# Under each NAME, its comment says what it measures, the variables it reads and how long it runs.
# Every one runs from the repository root on the GPU machine and sources benchmarks/device_env.sh.
AG="--set world_size=1 --set M=16384"  # allgather_mm on one rank

x1() {
# One-GPU cases outside the accuracy suite's table (issue 8): calibrate on this GPU, then `schedsim execute
# --compare` with that profile of: tp_allreduce_graph at world 1, 64 layers, as a CUDA graph (held out for the
# timed-graph term, which came from chains of GEMMs and add_); the same eagerly with 2048-wide layers, 96 of them,
# --measure-host (held out for the collective host cost, chosen on the 1024-wide 64-layer case); small_ops_graph
# as a CUDA graph (a suite case: per-op spans of the timed graph). ~6 min, one H200.
#   OUT=dir [EXECS=2] [HOST_PROCESSES=3] [CASES=...] [GEMMS="--gemm MxNxK ..."] bash benchmarks/accuracy/heldout.sh x1
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
}

new_shapes() {
# One GPU, ~8 min: the waves model (rules cta-count, split-k and wave-tail) on chunked GEMM schedules at shapes and dtypes no rule was fitted
# on (issue 8's held-out check). Calibrates this GPU at the cases' GEMM shapes (calibrate fits their gemm.tail rows,
# executor/calibrate_waves.py), then `schedsim execute --compare` with that profile:
#   ms_bf16_c8   matmul_streams dtype=bf16 chunks=8            (2048x1024x8192 bf16 x 64)
#   ms_M4k_c8    matmul_streams M=4096 chunks=8                (1024x1024x8192 fp32 x 64)
#   ms_K4k_c16   matmul_streams K=4096 chunks=16               (1024x512x4096 fp32 x 256)
#   ms_K2k_c8    matmul_streams K=2048 chunks=8                (2048x1024x2048 fp32 x 64)
#   ag_M8k_c8    allgather_mm world 1 M=8192 N=4096 chunks=8   (1024x512x8192 fp32 x 64)
#   ag_bf16_c16  allgather_mm world 1 M=16384 dtype=bf16 chunks=16 (1024x512x8192 bf16 x 256)
# SET=b (the second held-out set, run after the 2026-12-03 rule changes; calibrate at fp32, bf16 and fp16):
#   ms_fp16_c8   matmul_streams dtype=fp16 chunks=8            (2048x1024x8192 fp16 x 64: no fp16 row anywhere)
#   ag_bf16_c8   allgather_mm world 1 M=16384 dtype=bf16 chunks=8 (2048x1024x8192 bf16 x 64)
#   ms_N4k_c8    matmul_streams N=4096 chunks=8                (2048x512x8192 fp32 x 64)
#   ms_K1k_c8    matmul_streams K=1024 chunks=8                (2048x1024x1024 fp32 x 64)
#   ag_bf16_c16_mh, so_eager_mh: allgather_mm bf16 chunks 16 and small_ops_graph eager with --measure-host
# SET=c (host-bound eager cases, run after gemm.call rows: calibrate times each short GEMM's host call), every
#   case with --measure-host: allgather_mm bf16 chunks 16 (twice) and 32 (512x256x8192 bf16 x 1024),
#   matmul_streams bf16 chunks 16, small_ops_graph eager, tp_allreduce_graph world 1 eager (64 layers)
# SET=d (the launch inside the call, launch.call_launch_fraction, and the end-event bound of timed eager runs,
#   2026-12-03; none of these shapes or dtypes was looked at while building them), every case with --measure-host:
#   matmul_streams fp16 chunks 16 and bf16 chunks 8, allgather_mm fp16 chunks 16, small_ops_graph eager at
#   T=64 and at H=2048, tp_allreduce_graph world 1 eager at 32 layers of 8 tokens, and
#   small_ops_graph as a timed CUDA graph (unchanged by both: a check)
# SET=e (after the split-K launch order and the shipped call_launch_fraction; cases no change looked at), every
#   case with --measure-host: matmul_streams bf16 chunks 32, allgather_mm fp16 chunks 8 and bf16 chunks 4,
#   small_ops_graph eager at T=16 and at T=128, tp_allreduce_graph world 1 eager at 48 layers of 32 tokens
# SET=f (after rule hbm-share's memory-bound waves and few-SM boost, calibrate's persistent-GEMM tile count and the
#   executor's spinning wait; cases no change looked at besides the first three, re-run to check the host fix):
#   allgather_mm bf16 chunks 4 and fp16 chunks 8, matmul_streams bf16 chunks 8 (looked at), then allgather_mm bf16
#   chunks 2 and 8, matmul_streams fp16 chunks 4, small_ops_graph eager T=32 (held out)
# SET=g (after the cold first calls of rule host-issue and calibrate measuring them and sm_stream_GBps; cases no change
#   looked at): allgather_mm bf16 chunks 16 and fp16 chunks 2, matmul_streams bf16 chunks 4, tp_allreduce world 1
#   eager 8 layers of 2048 tokens (fp32, no table row), small_ops_graph eager T=256
# Keeps every run in OUT/runs.tgz (<case>/execute/timeline.json: replay offline with the shipped profile,
#   python benchmarks/accuracy/replay_runs.py DIR --profile h200).
#   OUT=dir [SET=a|b|c|d|e|f|g] [CASES="..."] bash benchmarks/accuracy/heldout.sh new_shapes
set -uo pipefail
OUT=${OUT:-heldout_new_shapes_out}; W=/tmp/hns_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=$W/h200x1_calibrated.yaml
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
if [ "${SET:-a}" = g ]; then
  GEMMS="--dtypes bf16,fp16 --gemm 1024x512x8192 --gemm 4096x2048x8192 --gemm 8192x4096x8192"
  DEFAULT_CASES="ag_bf16_c16_g ms_bf16_c4_g ag_fp16_c2_g tp_ar_t2048_g so_T256_g"
elif [ "${SET:-a}" = f ]; then
  GEMMS="--dtypes bf16,fp16 --gemm 8192x4096x8192 --gemm 4096x2048x8192 --gemm 2048x1024x8192"
  DEFAULT_CASES="ag_bf16_c4_mh ag_fp16_c8_mh ms_bf16_c8_mh ag_bf16_c2_mh ag_bf16_c8_mh ms_fp16_c4_mh so_T32_mh"
elif [ "${SET:-a}" = e ]; then
  GEMMS="--dtypes fp32,bf16,fp16 --gemm 512x256x8192 --gemm 2048x1024x8192 --gemm 4096x2048x8192 --gemm 16x1024x1024
    --gemm 128x1024x1024 --gemm 32x2048x1024 schedules/tp_allreduce_graph.yaml"
  DEFAULT_CASES="ms_bf16_c32_mh ag_fp16_c8_mh ag_bf16_c4_mh so_T16_mh so_T128_mh tp_ar_t32_mh"
elif [ "${SET:-a}" = d ]; then
  GEMMS="--dtypes fp32,bf16,fp16 --gemm 1024x512x8192 --gemm 2048x1024x8192 --gemm 64x1024x1024 --gemm 32x2048x2048
    --gemm 8x2048x1024 schedules/tp_allreduce_graph.yaml"
  DEFAULT_CASES="ms_fp16_c16_mh ag_fp16_c16_mh ms_bf16_c8_mh so_T64_mh so_H2k_mh tp_ar_t8_mh so_graph"
elif [ "${SET:-a}" = c ]; then
  GEMMS="--dtypes fp32,bf16 --gemm 1024x512x8192 --gemm 512x256x8192 schedules/tp_allreduce_graph.yaml"
  DEFAULT_CASES="ag_bf16_c16_mh ag_bf16_c16_mh2 ag_bf16_c32_mh ms_bf16_c16_mh so_eager_mh tp_ar_eager_mh"
elif [ "${SET:-a}" = b ]; then
  GEMMS="--dtypes fp32,bf16,fp16 --gemm 2048x1024x8192 --gemm 2048x512x8192 --gemm 2048x1024x1024 --gemm 1024x512x8192"
  DEFAULT_CASES="ms_fp16_c8 ag_bf16_c8 ms_N4k_c8 ms_K1k_c8 ag_bf16_c16_mh so_eager_mh"
else
  GEMMS="--dtypes fp32,bf16 --gemm 2048x1024x8192 --gemm 1024x1024x8192 --gemm 1024x512x4096 --gemm 2048x1024x2048
    --gemm 1024x512x8192"
  DEFAULT_CASES="ms_bf16_c8 ms_M4k_c8 ms_K4k_c16 ms_K2k_c8 ag_M8k_c8 ag_bf16_c16"
fi
# shellcheck disable=SC2086
calibrate_one_gpu $GEMMS schedules/small_ops_graph.yaml
[ "$PROF" = h200 ] || cp "$PROF" "${PROF%.yaml}.json" $W/calibrate.log "$OUT/" 2>/dev/null
grep -E "^\[waves\]|wave_tail_us|^  tail:|^  call:" -A6 "$PROF" | cut -c1-200
CASES=${CASES:-$DEFAULT_CASES}
for c in $CASES; do
  case $c in
    ms_bf16_c8) run "$c" matmul_streams --set dtype=bf16 --set chunks=8 ;;
    ms_M4k_c8) run "$c" matmul_streams --set M=4096 --set chunks=8 ;;
    ms_K4k_c16) run "$c" matmul_streams --set K=4096 --set chunks=16 ;;
    ms_K2k_c8) run "$c" matmul_streams --set K=2048 --set chunks=8 ;;
    ag_M8k_c8) run "$c" allgather_mm --set world_size=1 --set M=8192 --set N=4096 --set chunks=8 ;;
    ag_bf16_c16) run "$c" allgather_mm $AG --set dtype=bf16 --set chunks=16 ;;
    ms_fp16_c8) run "$c" matmul_streams --set dtype=fp16 --set chunks=8 ;;
    ag_bf16_c8) run "$c" allgather_mm $AG --set dtype=bf16 --set chunks=8 ;;
    ms_N4k_c8) run "$c" matmul_streams --set N=4096 --set chunks=8 ;;
    ms_K1k_c8) run "$c" matmul_streams --set K=1024 --set chunks=8 ;;
    ag_bf16_c16_mh*) run "$c" allgather_mm $AG --set dtype=bf16 --set chunks=16 --measure-host ;;
    ag_bf16_c32_mh) run "$c" allgather_mm $AG --set dtype=bf16 --set chunks=32 --measure-host ;;
    ms_bf16_c16_mh) run "$c" matmul_streams --set dtype=bf16 --set chunks=16 --measure-host ;;
    tp_ar_eager_mh) run "$c" tp_allreduce_graph --set world_size=1 --set layers=64 --eager --measure-host ;;
    so_eager_mh) run "$c" small_ops_graph --eager --measure-host ;;
    ms_fp16_c16_mh) run "$c" matmul_streams --set dtype=fp16 --set chunks=16 --measure-host ;;
    ag_fp16_c16_mh) run "$c" allgather_mm $AG --set dtype=fp16 --set chunks=16 --measure-host ;;
    ms_bf16_c8_mh) run "$c" matmul_streams --set dtype=bf16 --set chunks=8 --measure-host ;;
    so_T64_mh) run "$c" small_ops_graph --set T=64 --eager --measure-host ;;
    so_H2k_mh) run "$c" small_ops_graph --set H=2048 --eager --measure-host ;;
    tp_ar_t8_mh) run "$c" tp_allreduce_graph --set world_size=1 --set layers=32 --set tokens=8 --eager --measure-host ;;
    so_graph) run "$c" small_ops_graph --cuda-graph ;;
    ms_bf16_c32_mh) run "$c" matmul_streams --set dtype=bf16 --set chunks=32 --measure-host ;;
    ag_fp16_c8_mh) run "$c" allgather_mm $AG --set dtype=fp16 --set chunks=8 --measure-host ;;
    ag_bf16_c4_mh) run "$c" allgather_mm $AG --set dtype=bf16 --set chunks=4 --measure-host ;;
    so_T16_mh) run "$c" small_ops_graph --set T=16 --eager --measure-host ;;
    so_T128_mh) run "$c" small_ops_graph --set T=128 --eager --measure-host ;;
    ag_bf16_c16_g) run "$c" allgather_mm $AG --set dtype=bf16 --set chunks=16 --measure-host ;;
    ms_bf16_c4_g) run "$c" matmul_streams --set dtype=bf16 --set chunks=4 --measure-host ;;
    ag_fp16_c2_g) run "$c" allgather_mm $AG --set dtype=fp16 --set chunks=2 --measure-host ;;
    tp_ar_t2048_g) run "$c" tp_allreduce_graph --set world_size=1 --set layers=8 --set tokens=2048 --eager --measure-host ;;
    so_T256_g) run "$c" small_ops_graph --set T=256 --eager --measure-host ;;
    ag_bf16_c2_mh) run "$c" allgather_mm $AG --set dtype=bf16 --set chunks=2 --measure-host ;;
    ag_bf16_c8_mh) run "$c" allgather_mm $AG --set dtype=bf16 --set chunks=8 --measure-host ;;
    ms_fp16_c4_mh) run "$c" matmul_streams --set dtype=fp16 --set chunks=4 --measure-host ;;
    so_T32_mh) run "$c" small_ops_graph --set T=32 --eager --measure-host ;;
    tp_ar_t32_mh) run "$c" tp_allreduce_graph --set world_size=1 --set layers=48 --set tokens=32 --eager --measure-host ;;
  esac
done
cp "$PROF" "${PROF%.yaml}.json" $W/calibrate.log "$OUT/" 2>/dev/null
tar czf "$OUT/runs.tgz" -C $W . 2>/dev/null
echo "=== done ($(date -u +%H:%M:%S))"
}

rule4b() {
# One GPU, ~7 min: rule split-k (split-K reductions as kernels of their own) and the rest of the model on cases it was not
# chosen on. Calibrates this GPU (the schedules' GEMMs, with their gemm.reduce rows from Kineto), then `schedsim
# execute --compare` with that profile of: allgather_mm on one rank (M=16384) at chunks 2, 4, 16; matmul_streams
# at chunks 4 and 16; small_ops_graph as a CUDA graph and eagerly (--measure-host); tp_allreduce_graph at world 1
# as a graph. Keeps every run (timeline.json, predicted/, Kineto) in OUT/runs.tgz to replay offline with
# benchmarks/accuracy/replay_runs.py.
#   OUT=dir [CASES="ag_c2 ag_c4 ag_c16 ms_c4 ms_c16 so_graph so_eager tpa_graph"] bash benchmarks/accuracy/heldout.sh rule4b
set -uo pipefail
OUT=${OUT:-heldout_rule4b_out}; W=/tmp/h4b_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=$W/h200x1_calibrated.yaml
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
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
}

wave_tail() {
# One GPU, ~8 min: rule wave-tail (the ragged end of a GEMM's last wave, which a waiting kernel fills: gpu.wave_tail_fill)
# on cases it was not fitted on. Calibrates this GPU (the schedules' GEMMs; calibrate fits wave_tail_fill to one
# about-one-wave GEMM run on 8 streams, executor/calibrate_waves.py), times the same 8-stream probe at more GEMM
# shapes (fp32 and bf16, OUT/wave_tail_shapes.json), then `schedsim execute --compare` with that profile:
# allgather_mm on one rank (M=16384) at chunks 2, 4, 8, 16 and 8 with one connection; matmul_streams at chunks 4, 8
# and 16; small_ops_graph as a CUDA graph and eagerly. Keeps every run in OUT/runs.tgz to replay offline
# (benchmarks/accuracy/replay_runs.py, with and without the fitted f).
#   OUT=dir [PROBE=0] [CASES="..."] bash benchmarks/accuracy/heldout.sh wave_tail
set -uo pipefail
OUT=${OUT:-heldout_wave_tail_out}; W=/tmp/hwt_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=$W/h200x1_calibrated.yaml
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
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
}

wave_tail_short() {
# One GPU, ~3 min: rule wave-tail (gpu.wave_tail_us) on short GEMMs, where a fixed tail is a large part of the wave. Times
# the 8-stream probe of executor/calibrate_waves.py at short fp32 and bf16 shapes (OUT/wave_tail_short.json), then
# `schedsim execute --compare` with the shipped h200 of allgather_mm (one rank, M=16384) and matmul_streams at
# chunks 16 and 32. Keeps every run in OUT/runs.tgz to replay offline (benchmarks/accuracy/replay_runs.py).
#   OUT=dir [PROBE=0] [CASES="ag_c16 ag_c32 ms_c16 ms_c32"] bash benchmarks/accuracy/heldout.sh wave_tail_short
set -uo pipefail
OUT=${OUT:-heldout_wave_tail_short_out}; W=/tmp/hwts_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=h200
echo "=== wave tail at short shapes ($(date -u +%H:%M:%S))"
[ "${PROBE:-1}" = 0 ] || timeout 150 python3 - <<'PY'
import json, torch
from executor.calibrate_waves import measure_wave_tail
dev = torch.device("cuda", 0)
out = []
for shape in [("fp32", 512, 256, 8192), ("fp32", 1024, 256, 8192), ("fp32", 512, 512, 8192), ("fp32", 1024, 512, 8192),
              ("fp32", 2048, 1024, 8192), ("bf16", 1024, 512, 8192), ("bf16", 2048, 2048, 2048),
              ("bf16", 4096, 4096, 1024), ("fp32", 2048, 2048, 1024)]:
    for rep in range(2):
        out.append(measure_wave_tail(torch, dev, shape, None, print, per_stream=8))
json.dump(out, open("/tmp/hwts_work/wave_tail_short.json", "w"), indent=1)
PY
for c in ${CASES:-ag_c16 ag_c32 ms_c16 ms_c32}; do
  case $c in
    ag_c*) run "$c" allgather_mm $AG --set chunks=${c#ag_c} ;;
    ms_c*) run "$c" matmul_streams --set chunks=${c#ms_c} ;;
  esac
done
cp $W/wave_tail_short.json "$OUT/" 2>/dev/null
tar czf "$OUT/runs.tgz" -C $W . 2>/dev/null
echo "=== done ($(date -u +%H:%M:%S))"
}

graph_shapes() {
# small_ops_graph as a CUDA graph at shapes held out from rules graph-forks and graph-nodes (issue 8), beside the five it was checked on,
# with a calibration on this GPU that measures every case's GEMM (graph rows and fork rows): ~7 min, one H200.
#   OUT=dir bash benchmarks/accuracy/heldout.sh graph_shapes
S=small_ops_graph; G=--cuda-graph; TP=tp_allreduce_graph; TPG="--set launch=cuda_graph --cuda-graph"
export GEMMS="--gemm 24x768x768 --gemm 48x1536x1536 --gemm 128x1024x1024 --gemm 16x1024x1024"
export CASES="$S|--set T=24 --set H=768 --set layers=96 $G|new_24x768;$S|--set T=48 --set H=1536 $G|new_48x1536;\
$S|--set T=128 --set H=1024 $G|new_128x1024;$S|--set T=16 --set H=1024 --set dtype=fp32 $G|new_16x1024_fp32;\
$S|--set T=16 --set H=512 --set layers=128 $G|so_16x512;$S|$G|so_32x1024;$S|--set T=64 --set H=2048 $G|so_64x2048;\
$S|--set T=8 --set H=256 --set layers=128 $G|so_8x256;$S|--set T=16 --set H=2048 $G|so_16x2048;\
$TP|--set world_size=1 --set layers=64 $TPG|tp_1024;\
$TP|--set world_size=1 --set layers=96 --set input_size=2048 --set output_size=2048 $TPG|tp_2048"
PROBE=0 exec bash benchmarks/probes/run.sh l2_residency
}

graph_shapes2() {
# A second set of small_ops_graph shapes held out from rules cta-count, graph-forks and graph-nodes (issue 8), as CUDA graphs, plus the suite's
# eager small_ops with the process's own host costs and T16 H512 again; a calibration on this GPU that measures
# every case's GEMM. ~6 min, one H200.   OUT=dir bash benchmarks/accuracy/heldout.sh graph_shapes2
S=small_ops_graph; G=--cuda-graph
export GEMMS="--gemm 32x2048x2048 --gemm 8x1024x1024 --gemm 64x512x512 --gemm 32x512x512"
export CASES="$S|--set T=32 --set H=2048 $G|new_32x2048;$S|--set T=8 --set H=1024 --set layers=128 $G|new_8x1024;\
$S|--set T=64 --set H=512 --set layers=128 $G|new_64x512;$S|--set T=32 --set H=512 --set dtype=fp32 $G|new_32x512_fp32;\
$S|--set T=16 --set H=512 --set layers=128 $G|so_16x512;$S|--measure-host|so_eager"
PROBE=0 exec bash benchmarks/probes/run.sh l2_residency
}

case "${1:-}" in
  x1|new_shapes|rule4b|wave_tail|wave_tail_short|graph_shapes|graph_shapes2) name=$1; shift; "$name" "$@" ;;
  *) echo "usage: [VAR=...] bash benchmarks/accuracy/heldout.sh NAME [ARGS...]; NAME is one of: x1 new_shapes rule4b wave_tail wave_tail_short graph_shapes graph_shapes2" >&2; exit 2 ;;
esac
