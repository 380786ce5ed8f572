#!/usr/bin/env bash
# One GPU, ~5 min: the host cost of a bytes-only compute op (an elementwise torch.add in execute) by kind, then
# held-out host-bound and GPU-bound one-rank cases executed with --measure-host against the shipped h200 (each
# process's own host costs, elementwise_call_us among them, drive its prediction). Keeps OUT/runs.tgz (replay:
# python benchmarks/accuracy_replay.py DIR --profile h200).
#   OUT=dir [CASES="..."] bash benchmarks/probe_elementwise_host.sh
set -uo pipefail
OUT=${OUT:-probe_elementwise_host_out}; W=/tmp/peh_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "=== probe ($(date -u +%H:%M:%S))"
timeout 200 python3 benchmarks/probe_elementwise_host.py --processes 6 --out "$OUT/probe_elementwise_host.json"
. benchmarks/heldout_one_gpu.sh
CASES=${CASES:-"ag_bf16_c16 ag_bf16_c16_b ms_bf16_c8 ms_bf16_c8_b ag_c16 ms_c16 ag_c4 so_eager"}
for c in $CASES; do
  case $c in
    ag_bf16_c16*) run "$c" allgather_mm $AG --set dtype=bf16 --set chunks=16 --measure-host ;;
    ms_bf16_c8*) run "$c" matmul_streams --set dtype=bf16 --set chunks=8 --measure-host ;;
    ag_c*) run "$c" allgather_mm $AG --set chunks=${c#ag_c} --measure-host ;;
    ms_c*) run "$c" matmul_streams --set chunks=${c#ms_c} --measure-host ;;
    so_eager) run so_eager small_ops_graph --eager --measure-host ;;
  esac
done
tar czf "$OUT/runs.tgz" -C $W . 2>/dev/null
echo "=== done ($(date -u +%H:%M:%S))"
