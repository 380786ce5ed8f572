# Sourced by the one-GPU held-out scripts (heldout_rule4b.sh, heldout_wave_tail.sh, heldout_new_shapes.sh) after
# PROF and W are set.
# calibrate_one_gpu ARGS... runs `schedsim calibrate` on this GPU (no default grid; ARGS: --dtypes, --gemm, schedules)
# into $PROF (log $W/calibrate.log) and falls back to the shipped h200 when it fails.
calibrate_one_gpu() {
  echo "=== calibrate ($(date -u +%H:%M:%S))"
  timeout 240 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim calibrate --no-grid \
    --iters 10 --max-bytes 67108864 --factor 4 "$@" --host-processes "${HOST_PROCESSES:-3}" \
    --name h200x1_calibrated --base h200 --out "$PROF" > "$W/calibrate.log" 2>&1 \
    || { echo "calibrate failed"; tail -20 "$W/calibrate.log"; }
  [ -f "$PROF" ] || PROF=h200
}
# run TAG SCHEDULE ARGS... executes schedules/SCHEDULE.yaml on one rank with `schedsim execute --compare` against
# $PROF into $W/TAG/execute (log $W/TAG.log; the layout benchmarks/accuracy_replay.py reads), prints its makespan
# and per-op lines and drops the bulky trace.json.
run() {  # run TAG SCHEDULE ARGS...
  local tag=$1 sched=$2; shift 2
  echo "=== $tag ($(date -u +%H:%M:%S))"
  timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute \
    "schedules/$sched.yaml" "$@" --no-gantt --compare --profile "$PROF" --iters 20 --warmup 5 --timeout 60 \
    --out "$W/$tag/execute" > "$W/$tag.log" 2>&1 || echo "$tag FAILED ($?)"
  grep -E "without per-op|per-op duration|events cost the host|host issue of" "$W/$tag.log"
  rm -f "$W/$tag/execute/trace.json"
  [ -z "${OUT:-}" ] || tar czf "$OUT/runs.tgz" -C "$W" . 2>/dev/null  # so far, in case the call runs out of time
}
AG="--set world_size=1 --set M=16384"  # allgather_mm on one rank
