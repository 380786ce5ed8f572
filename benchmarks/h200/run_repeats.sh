#!/usr/bin/env bash
# Third H200 call: run-to-run spread of the measured makespans (three separate processes each), the
# generic compute kernels against their requested durations, and --check under --cuda-graph.
# Uses the calibrated profile shipped in schedsim/hardware/profiles/h200_calibrated.yaml.
set -uo pipefail
OUT=${OUT:-benchmarks/h200/out}
W=$OUT/work
mkdir -p "$W"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
if [ -d .whl ] && ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
TR="torchrun --nproc-per-node 1 -m schedsim"
P=h200_calibrated
run() { timeout 200 "$@" || echo "FAILED ($?): $*"; }
for k in 1 2 3; do
  for s in offload small_ops_graph; do
    echo "=== $s eager, repeat $k"
    run $TR execute schedules/$s.yaml --eager --out "$W/rep$k/$s" --compare --profile $P --no-gantt --iters 20 --warmup 5
  done
  echo "=== small_ops_graph graph, repeat $k"
  run $TR execute schedules/small_ops_graph.yaml --cuda-graph --out "$W/rep$k/small_ops_graph_graph" --compare \
      --profile $P --no-gantt --iters 20 --warmup 5
done
echo "=== hand-written, twice"
run python3 benchmarks/h200/handwritten.py --out "$W/handwritten_a.json"
run python3 benchmarks/h200/handwritten.py --out "$W/handwritten_b.json"
echo "=== busy kernels vs requested durations"
run $TR execute tests/executor/data/busy_demo.yaml --out "$W/busy_demo" --compare --profile $P --no-gantt --iters 10
echo "=== --check under --cuda-graph"
run $TR execute schedules/allgather_mm.yaml --set world_size=1 --set chunks=4 --set M=4096 --check --cuda-graph \
    --out "$W/check_graph" --compare --profile $P --no-gantt --iters 5 --warmup 2
tar czf "$OUT/results.tgz" -C "$W" . && ls -la "$OUT"
