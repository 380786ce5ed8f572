# Sourced by the device scripts of benchmarks/ (run from the repository root on the GPU machine): keeps NVLink
# multicast off (the device tool's rule), quiets Python, and installs the carried wheels of .whl/ (pydantic and
# the rest the GPU image lacks; .whl may hold wheels for several Pythons: pip picks by name and tag) into
# /tmp/site when pydantic is missing; puts the checkout on PYTHONPATH.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
if [ -d .whl ] && ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --find-links .whl --no-compile --no-cache-dir --upgrade --target /tmp/site \
    pydantic typer rich orjson nvtx \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD

# Helpers of the one-GPU device runs (benchmarks/accuracy/heldout.sh, benchmarks/probes/run.sh), used after PROF and W are set:
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
# $PROF into $W/TAG/execute (log $W/TAG.log; the layout benchmarks/accuracy/replay_runs.py reads), prints its makespan
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
