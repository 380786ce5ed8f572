#!/usr/bin/env bash
# Assumption (1) of the waves model: an NCCL kernel waiting for a slower peer does not hold its SMs.
# Needs 2 GPUs. Output: benchmarks/h200/peer_wait.json (rank 0) and a printed table.
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
torchrun --nproc-per-node 2 benchmarks/probe_scenarios_peer_wait.py --out benchmarks/h200/peer_wait.json "$@"
