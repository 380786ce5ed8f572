#!/usr/bin/env bash
# Issue 8, held-out tp_allreduce (world 1, 64 layers, eager): which host-cost loop predicts a host-bound layer of
# matmul + all_reduce. Runs benchmarks/probe_collective_host.py in PROBES fresh processes (hand-written layer
# loop from an idle GPU, and the calibration's busy- and idle-GPU loops, in the same process), then
# `schedsim execute --compare --measure-host` of the same schedule in EXECS fresh processes. ~15 s a process.
#   OUT=dir [PROBES=6] [EXECS=3] [LAYERS=64] [PROFILE=h200x2] bash benchmarks/probe_collective_host.sh
set -uo pipefail
OUT=${OUT:-probe_collective_host_out}; PROBES=${PROBES:-6}; EXECS=${EXECS:-3}; LAYERS=${LAYERS:-64}
PROFILE=${PROFILE:-h200x2}; W=/tmp/pch_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh  # multicast off, carried wheels, PYTHONPATH
for rep in $(seq "$PROBES"); do
  python3 -m torch.distributed.run --standalone --nproc-per-node 1 benchmarks/probe_collective_host.py \
    --layers "$LAYERS" > "$W/probe$rep.log" 2>&1 || { echo "probe $rep failed"; tail -5 "$W/probe$rep.log"; }
  grep '^PROBE ' "$W/probe$rep.log" | tee -a "$OUT/probe_rows.txt"
done
SETS="--set world_size=1 --set layers=$LAYERS --set launch=eager"
for rep in $(seq "$EXECS"); do
  d=$W/x$rep
  # shellcheck disable=SC2086
  python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute schedules/tp_allreduce_graph.yaml \
    $SETS --no-gantt --compare --measure-host --profile "$PROFILE" --iters 20 --warmup 5 --out "$d" \
    > "$W/x$rep.log" 2>&1 || { echo "execute $rep failed"; tail -5 "$W/x$rep.log"; continue; }
  python3 - "$d" "$rep" <<'PY' | tee -a "$OUT/exec_rows.txt"
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
meta = json.loads((d / "timeline.json").read_text())["meta"]
own = json.loads((d / "predicted" / "timeline.json").read_text())["makespan_s"]
print("EXEC " + json.dumps({"process": int(sys.argv[2]), "measured_ms": meta["makespan_uninstrumented_s"] * 1e3,
                            "own_host_pred_ms": own * 1e3, "host_costs_us": meta["host_costs_us"]}), flush=True)
PY
done
tar czf "$OUT/results.tgz" -C $W . 2>/dev/null
