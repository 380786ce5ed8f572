#!/usr/bin/env bash
# One GPU, ~8 min: the waves model (rules 4-4c) on chunked GEMM schedules at shapes and dtypes no rule was fitted
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
# SET=f (after rule 5's memory-bound waves and few-SM boost, calibrate's persistent-GEMM tile count and the
#   executor's spinning wait; cases no change looked at besides the first three, re-run to check the host fix):
#   allgather_mm bf16 chunks 4 and fp16 chunks 8, matmul_streams bf16 chunks 8 (looked at), then allgather_mm bf16
#   chunks 2 and 8, matmul_streams fp16 chunks 4, small_ops_graph eager T=32 (held out)
# SET=g (after the cold first calls of rule 1 and calibrate measuring them and sm_stream_GBps; cases no change
#   looked at): allgather_mm bf16 chunks 16 and fp16 chunks 2, matmul_streams bf16 chunks 4, tp_allreduce world 1
#   eager 8 layers of 2048 tokens (fp32, no table row), small_ops_graph eager T=256
# Keeps every run in OUT/runs.tgz (<case>/execute/timeline.json: replay offline with the shipped profile,
#   python benchmarks/accuracy_replay.py DIR --profile h200).
#   OUT=dir [SET=a|b|c|d|e|f|g] [CASES="..."] bash benchmarks/heldout_new_shapes.sh
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
. benchmarks/heldout_one_gpu.sh
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
