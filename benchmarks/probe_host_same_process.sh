#!/usr/bin/env bash
# Does the model predict each process right once it knows that process's host speed? (issue 8, host-bound
# cases.) Runs small_ops eager in REPS fresh processes, each `schedsim execute --compare --measure-host`:
# the comparison predicts with the profile's host costs replaced by those measured in the same process after
# its timed iterations. Prints, per process, the uninstrumented makespan, the prediction with its own host
# costs and with the profile's, and the measured matmul launch cost. ~25 s per process on one H200.
#   OUT=dir REPS=6 [PROFILE=h200x2] [SCHEDULE=small_ops_graph] [XFLAGS=--eager] [SETS="--set k=v ..."] \
#     [TAG=name] bash benchmarks/probe_host_same_process.sh
set -uo pipefail
OUT=${OUT:-probe_host_same_process_out}; REPS=${REPS:-6}; PROFILE=${PROFILE:-h200x2}; W=/tmp/hsp_work
SCHEDULE=${SCHEDULE:-small_ops_graph}; XFLAGS=${XFLAGS:---eager}; SETS=${SETS:-}; TAG=${TAG:-$SCHEDULE}
W=$W/$TAG; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh  # multicast off, carried wheels, PYTHONPATH
for rep in $(seq "$REPS"); do
  d=$W/p$rep
  # shellcheck disable=SC2086
  python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute "schedules/$SCHEDULE.yaml" \
    $SETS $XFLAGS --no-gantt --compare --measure-host --profile "$PROFILE" --iters 20 --warmup 5 --out "$d" \
    > "$W/p$rep.log" 2>&1 || { echo "process $rep failed"; tail -5 "$W/p$rep.log"; continue; }
  # shellcheck disable=SC2086
  python3 -m schedsim predict "schedules/$SCHEDULE.yaml" $SETS --profile "$PROFILE" --no-gantt --out "$d/plain" \
    ${XFLAGS/--eager/} > /dev/null 2>&1
  python3 - "$d" "$rep" "$TAG" <<'PY' | tee -a "$OUT/rows.txt"
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
meta = json.loads((d / "timeline.json").read_text())["meta"]
own = json.loads((d / "predicted" / "timeline.json").read_text())["makespan_s"]
plain = json.loads((d / "plain" / "timeline.json").read_text())["makespan_s"]
m = meta["makespan_uninstrumented_s"]
h = meta["host_costs_us"]
print(f"ROW case={sys.argv[3]} process={sys.argv[2]} measured_ms={m*1e3:.4f} own_host_pred_ms={own*1e3:.4f} "
      f"own_err_pct={(own/m-1)*100:+.1f} profile_pred_ms={plain*1e3:.4f} profile_err_pct={(plain/m-1)*100:+.1f} "
      f"matmul_call_us={h['eager_per_op_us']:.2f} event_wait_us={h.get('event_wait_us', float('nan')):.2f} "
      f"switch_us={h.get('stream_switch_us', float('nan')):.2f}", flush=True)
PY
done
tar czf "$OUT/results_$TAG.tgz" -C $W . 2>/dev/null
