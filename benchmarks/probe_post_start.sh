#!/usr/bin/env bash
# Kernel and all_reduce spans vs time since the executor's aligned start, on 2 ranks (~30 s on 2xH200; runs on
# CPU/gloo as a smoke test). See benchmarks/probe_post_start.py and benchmarks/accuracy.md ("Host-bound cases").
#   bash benchmarks/probe_post_start.sh      # writes OUT (default probe_post_start.json)
set -euo pipefail
export NCCL_NVLS_ENABLE=0
export PYTHONPATH="${PYTHONPATH:-$PWD}"
${TORCHRUN:-torchrun} --standalone --nproc_per_node 2 benchmarks/probe_post_start.py --out "${OUT:-probe_post_start.json}" "$@"
