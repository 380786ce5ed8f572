#!/usr/bin/env bash
# Follow-up probes of the 2xH200 accuracy pass (one GPU, plain PyTorch, ~1 min): host cost of set_stream vs
# `with torch.cuda.stream`, a mixed small_ops-like sequence vs looped calls, fp32 GEMM co-residence on 1/2/8
# streams, and a Kineto trace of that GEMM (grid, registers, shared memory). See benchmarks/probe_host_calls.py.
#   bash benchmarks/probe_host_calls.sh      # writes OUT (default probe_host_calls.json) and KINETO
set -euo pipefail
export NCCL_NVLS_ENABLE=0
${PYTHON:-python3} benchmarks/probe_host_calls.py --out "${OUT:-probe_host_calls.json}" \
  --kineto "${KINETO:-probe_host_calls_kineto.json}"
