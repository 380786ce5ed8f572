#!/usr/bin/env bash
# One GPU, ~4 min: which queued kernel gets the SMs a finishing kernel frees (rule 3), in a plain-PyTorch probe
# (benchmarks/probe_dispatch_order.py: Kineto kernel spans of queued GEMMs and adds) and in two GPU-bound
# schedules run by `schedsim execute --compare --measure-host` against the shipped h200 (meta.host_call_end_s:
# when each op's call returned on the host): allgather_mm bf16 chunks 4 and fp16 chunks 8 (one rank),
# matmul_streams bf16 chunks 8 (GPU-bound), small_ops_graph eager T=128 (host-bound). PROFILER=--profiler adds
# Kineto kernel spans (timeline_kernels.json) of two profiled iterations, whose host the profiler slows.
#   OUT=dir bash benchmarks/probe_dispatch_order.sh
set -uo pipefail
OUT=${OUT:-probe_dispatch_order_out}; W=/tmp/pdo_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=${PROF:-h200}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "=== probe ($(date -u +%H:%M:%S))"
timeout 200 python3 benchmarks/probe_dispatch_order.py --out "$OUT/probe_dispatch_order.json" || echo "probe FAILED"
. benchmarks/heldout_one_gpu.sh
run ag_bf16_c4 allgather_mm $AG --set dtype=bf16 --set chunks=4 --measure-host ${PROFILER:-}
run ms_bf16_c8 matmul_streams --set dtype=bf16 --set chunks=8 --measure-host ${PROFILER:-}
run ag_fp16_c8 allgather_mm $AG --set dtype=fp16 --set chunks=8 --measure-host
run so_T128 small_ops_graph --eager --set T=128 --measure-host
find $W -name "kineto_rank*.json.gz" -delete
tar czf "$OUT/runs.tgz" -C "$W" .
echo "=== done ($(date -u +%H:%M:%S))"
