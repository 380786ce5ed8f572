#!/usr/bin/env bash
# One GPU, ~3 min: rule 4c (gpu.wave_tail_us) on short GEMMs, where a fixed tail is a large part of the wave. Times
# the 8-stream probe of executor/calibrate_waves.py at short fp32 and bf16 shapes (OUT/wave_tail_short.json), then
# `schedsim execute --compare` with the shipped h200 of allgather_mm (one rank, M=16384) and matmul_streams at
# chunks 16 and 32. Keeps every run in OUT/runs.tgz to replay offline (benchmarks/accuracy_replay.py).
#   OUT=dir [PROBE=0] [CASES="ag_c16 ag_c32 ms_c16 ms_c32"] bash benchmarks/heldout_wave_tail_short.sh
set -uo pipefail
OUT=${OUT:-heldout_wave_tail_short_out}; W=/tmp/hwts_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=h200
. benchmarks/heldout_one_gpu.sh
echo "=== wave tail at short shapes ($(date -u +%H:%M:%S))"
[ "${PROBE:-1}" = 0 ] || timeout 150 python3 - <<'PY'
import json, torch
from executor.calibrate_waves import measure_wave_tail
dev = torch.device("cuda", 0)
out = []
for shape in [("fp32", 512, 256, 8192), ("fp32", 1024, 256, 8192), ("fp32", 512, 512, 8192), ("fp32", 1024, 512, 8192),
              ("fp32", 2048, 1024, 8192), ("bf16", 1024, 512, 8192), ("bf16", 2048, 2048, 2048),
              ("bf16", 4096, 4096, 1024), ("fp32", 2048, 2048, 1024)]:
    for rep in range(2):
        out.append(measure_wave_tail(torch, dev, shape, None, print, per_stream=8))
json.dump(out, open("/tmp/hwts_work/wave_tail_short.json", "w"), indent=1)
PY
for c in ${CASES:-ag_c16 ag_c32 ms_c16 ms_c32}; do
  case $c in
    ag_c*) run "$c" allgather_mm $AG --set chunks=${c#ag_c} ;;
    ms_c*) run "$c" matmul_streams --set chunks=${c#ms_c} ;;
  esac
done
cp $W/wave_tail_short.json "$OUT/" 2>/dev/null
tar czf "$OUT/runs.tgz" -C $W . 2>/dev/null
echo "=== done ($(date -u +%H:%M:%S))"
