#!/usr/bin/env bash
# One GPU, ~3 min: GEMM co-residence on several streams (probe_coresidence.py), then allgather_mm's GEMM pattern
# measured by schedsim execute on one rank (world_size=1, M=16384: the 2-rank run's GEMM shapes), chunks
# 1 2 4 8 16 and chunks 8 with CUDA_DEVICE_MAX_CONNECTIONS=1: cases to replay offline with
# benchmarks/accuracy_replay.py (OUT/<case>/execute/timeline.json).
#   OUT=dir bash benchmarks/probe_coresidence.sh
set -uo pipefail
OUT=${OUT:-probe_coresidence_out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
if [ -d .whl ] && ! $PY -c "import pydantic" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
echo "=== probe ($(date -u +%H:%M:%S))"
timeout 200 $PY benchmarks/probe_coresidence.py ${PROBE_FLAGS:-} --out "$OUT/probe_coresidence.json" || echo "probe FAILED ($?)"
for c in 1 2 4 8 16; do
  echo "=== allgather_mm c$c on one rank ($(date -u +%H:%M:%S))"
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute schedules/allgather_mm.yaml \
    --set world_size=1 --set M=16384 --set chunks=$c --no-gantt --profile h200x2 --iters 20 --warmup 5 --timeout 60 \
    --out "$OUT/allgather_mm_x1_c$c/execute" > "$OUT/allgather_mm_x1_c$c.log" 2>&1 || echo "execute c$c FAILED ($?)"
  rm -f "$OUT/allgather_mm_x1_c$c/execute/trace.json"
done
echo "=== allgather_mm c8 conn=1 on one rank ($(date -u +%H:%M:%S))"
CUDA_DEVICE_MAX_CONNECTIONS=1 timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute \
  schedules/allgather_mm.yaml --set world_size=1 --set M=16384 --set chunks=8 --max-connections 1 --no-gantt \
  --profile h200x2 --iters 20 --warmup 5 --timeout 60 --out "$OUT/allgather_mm_x1_c8_conn1/execute" \
  > "$OUT/allgather_mm_x1_c8_conn1.log" 2>&1 || echo "execute conn1 FAILED ($?)"
rm -f "$OUT"/*/execute/trace.json
for f in "$OUT"/*.log; do echo "--- $f"; tail -3 "$f"; done
tar czf "$OUT/runs.tgz" -C "$OUT" $(cd "$OUT" && ls -d allgather_mm_x1_* 2>/dev/null | grep -v '\.log$') && rm -rf "$OUT"/allgather_mm_x1_*/
echo "=== done ($(date -u +%H:%M:%S))"
