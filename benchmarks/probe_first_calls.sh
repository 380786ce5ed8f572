#!/usr/bin/env bash
# One GPU, ~3 min: what the first calls of an iteration cost the host (meta.host_call_end_s of `schedsim
# execute`, against the model's rule 1 with the process's own host costs), by collective size and by whether
# the iteration is GPU-bound (the host waits for the GPU at its end) or host-bound: tp_allreduce world 1 with
# 8 and 8192 tokens (all_reduce of 64 KB and 64 MB), allgather_mm world 1 bf16 chunks 4 at M=K=N=1024 (512 KB
# all_gathers, host-bound) beside the GPU-bound M=16384 runs of benchmarks/heldout_new_shapes.sh SET=f.
#   OUT=dir bash benchmarks/probe_first_calls.sh
set -uo pipefail
OUT=${OUT:-probe_first_calls_out}; W=/tmp/pfc_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=${PROF:-h200}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
. benchmarks/heldout_one_gpu.sh
run tp_ar_t8 tp_allreduce_graph --set world_size=1 --set layers=16 --set tokens=8 --eager --measure-host
run tp_ar_t8192 tp_allreduce_graph --set world_size=1 --set layers=4 --set tokens=8192 --eager --measure-host
run ag_tiny_c4 allgather_mm --set world_size=1 --set M=1024 --set K=1024 --set N=1024 --set dtype=bf16 \
  --set chunks=4 --measure-host
tar czf "$OUT/runs.tgz" -C "$W" .
echo "=== done ($(date -u +%H:%M:%S))"
