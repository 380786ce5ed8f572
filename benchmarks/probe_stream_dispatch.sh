#!/usr/bin/env bash
# One GPU, ~3 min: how the GPU dispatches kernels queued on several streams (issue 8, rule 3). allgather_mm on
# one rank (world_size=1, M=16384: the 2-rank run's GEMM shapes, fp32, one wave of 128 CTAs per GEMM on an
# H200) at chunks 4, 8, 16 and 8 with CUDA_DEVICE_MAX_CONNECTIONS=1, and matmul_streams at chunks 8, each under
# `schedsim execute --compare --profiler` with the shipped h200: event spans (timeline.json), the GPU's own
# kernel start/end (Kineto: timeline_kernels.json, profiler_ops.json) and the prediction, to replay offline with
# benchmarks/accuracy_replay.py and to read which queued kernel the GPU starts when SMs free up.
# CASES may add so_graph / so_eager: small_ops_graph as a CUDA graph and eagerly (--measure-host).
#   OUT=dir [PROFILE=h200] [CASES="c4 c8 c16 c8conn1 ms8"] bash benchmarks/probe_stream_dispatch.sh
set -uo pipefail
OUT=${OUT:-probe_stream_dispatch_out}; PROFILE=${PROFILE:-h200}; mkdir -p "$OUT"
. benchmarks/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
CASES=${CASES:-"c4 c8 c16 c8conn1 ms8"}
run() {  # run TAG ENV SCHEDULE ARGS...
  local tag=$1 envset=$2 sched=$3; shift 3
  echo "=== $tag ($(date -u +%H:%M:%S))"
  env $envset timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute \
    "schedules/$sched.yaml" "$@" --no-gantt --compare --profiler --profile "$PROFILE" --iters 20 --warmup 5 \
    --timeout 60 --out "$OUT/$tag" > "$OUT/$tag.log" 2>&1 || echo "$tag FAILED ($?)"
  grep -E "without per-op|per-op duration" "$OUT/$tag.log"
  rm -f "$OUT/$tag/trace.json"
}
AG="--set world_size=1 --set M=16384"
for c in $CASES; do
  case $c in
    c4|c8|c16) run "ag_$c" "" allgather_mm $AG --set chunks=${c#c} ;;
    c8conn1) run ag_c8conn1 CUDA_DEVICE_MAX_CONNECTIONS=1 allgather_mm $AG --set chunks=8 --max-connections 1 ;;
    ms8) run ms_c8 "" matmul_streams --set chunks=8 ;;
    so_graph) run small_ops_graph "" small_ops_graph --cuda-graph ;;  # its act/join: bytes-only compute ops
    so_eager) run small_ops_eager "" small_ops_graph --eager --measure-host ;;
  esac
done
find "$OUT" -name 'kineto_rank*.json.gz' -size +20M -delete
tar czf "$OUT/runs.tgz" -C "$OUT" $(cd "$OUT" && ls -d */) && rm -rf "$OUT"/*/
echo "=== done ($(date -u +%H:%M:%S))"
