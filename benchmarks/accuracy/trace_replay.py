"""Replay error of imported traces (issue 37): import -> schedule.yaml -> ``replay`` model -> held against the trace.

    python benchmarks/accuracy/trace_replay.py [--layers N]

For each real trace in ``../shared/data/traces`` (next to the repository) and ``tests/data``, and the synthetic
multi-stream and CUDA-graph traces of ``tests/trace/replaygen.py``, predicted as ``schedsim predict`` does
(``durations: recorded``): the trace's makespan (last GPU end − first GPU start), the replay's, the
error, and the median over ops of |replay start − recorded start| as a share of the makespan. The last
columns say what the schedule rests on: guessed dependencies, and how NCCL ops were handled (a real trace of
one rank of a multi-rank run keeps each collective's recorded duration with its peers absent, so their
timing is inside that duration). ``--layers N`` adds a synthetic trace of 3·N ops and times import, load and
replay.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TRACES = (REPO / ".." / "shared" / "data" / "traces").resolve()
#: A real Kineto trace shipped with the tests (one H200, ``schedsim execute`` of an offload schedule).
SHIPPED = REPO / "tests" / "data" / "kineto_execute_offload_h200_rank0.json.gz"
sys.path.insert(0, str(REPO / "tests" / "trace"))


def _import(files: list[Path], kind: str) -> Any:
    if kind == "nsys":
        from schedsim.trace.nsys import import_nsys

        return import_nsys(files, keep_runtime=True, keep_kernel_rows=False)
    from schedsim.trace.kineto import import_kineto

    return import_kineto(files, keep_runtime=True, keep_kernel_rows=False)


def row(label: str, files: list[Path], kind: str) -> dict[str, Any]:
    """Import, write the schedule, replay it; the table row (and timings in s)."""
    from schedsim import api
    from schedsim.hardware.profile import load_profile
    from schedsim.trace.replay import replay_report
    from schedsim.trace.to_schedule import write_replay_schedule

    t0 = time.perf_counter()
    res = _import(files, kind)
    with tempfile.TemporaryDirectory() as d:
        got = write_replay_schedule(res.replay, Path(d) / "schedule.yaml", name=label)
        t1 = time.perf_counter()
        spec = api.load(Path(d) / "schedule.yaml")
        t2 = time.perf_counter()
        tl = api.simulate_spec(spec, load_profile("h200")).timeline  # durations: recorded: the replay model
        t3 = time.perf_counter()
    rep = replay_report(tl)
    return {"trace": label, "ops": got.n_ops, "waits": got.n_deps, "trace_ms": rep.trace_makespan_s * 1e3,
            "replay_ms": rep.replay_makespan_s * 1e3, "error": rep.error, "start_med": rep.start_error_median,
            "guessed": "; ".join(got.guesses) or "-", "notes": "; ".join(got.notes) or "-",
            "import_s": t1 - t0, "load_s": t2 - t1, "replay_s": t3 - t2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=0, help="also a synthetic trace of 3*N ops, timed")
    args = ap.parse_args()
    from replaygen import graph_doc, layers_doc, rank_doc, write

    rows = []
    real = [("kineto all_reduce, rank 0 of 2", "kineto_nccl_allreduce_rank0_of2.json.gz", "kineto"),
            ("kineto send/recv, rank 0 of 128", "kineto_sendrecv_rank0_of128.json.gz", "kineto"),
            ("nsys saxpy (sqlite)", "nsys_saxpy_mpi_perlmutter_rank0.sqlite", "nsys")]
    for label, name, kind in real:
        if (TRACES / name).exists():
            rows.append(row(label, [TRACES / name], kind))
        else:
            print(f"skipped {label}: {TRACES / name} not found", file=sys.stderr)
    rows.append(row("kineto H200 offload, 3 streams (tests/data)", [SHIPPED], "kineto"))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        synth = [("synthetic 2 streams, event wait (1 rank)", [rank_doc(0)]),
                 ("synthetic, wait without cuda_sync rows", [rank_doc(0, cuda_sync=False)]),
                 ("synthetic + device sync, host-bound tail", [rank_doc(0, sync=True)]),
                 ("synthetic 2 ranks, matched all_reduce", [rank_doc(0), rank_doc(1, b_us=40, ar_start=1150,
                                                                                  ar_us=50)]),
                 ("synthetic 2 streams x 200 layers", [layers_doc(200)]),
                 ("synthetic CUDA-graph launch, 2 graph streams", [graph_doc()])]
        if args.layers:
            synth.append((f"synthetic 2 streams x {args.layers} layers", [layers_doc(args.layers)]))
        for label, docs in synth:
            files = [write(tmp / f"{abs(hash(label))}_{i}.json", doc) for i, doc in enumerate(docs)]
            rows.append(row(label, files, "kineto"))
    print("| trace | ops | waits | trace makespan | replay makespan | error | op start error median "
          "(share of makespan) | import / load / replay s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['trace']} | {r['ops']} | {r['waits']} | {r['trace_ms']:.3f} ms | {r['replay_ms']:.3f} ms | "
              f"{r['error']:+.4%} | {r['start_med']:.4%} | {r['import_s']:.1f} / {r['load_s']:.1f} / "
              f"{r['replay_s']:.1f} |")
    errs = [abs(r["error"]) for r in rows]
    print(f"\nmakespan error: median {statistics.median(errs):.4%}, worst {max(errs):.4%}; op start error "
          f"median of medians {statistics.median(r['start_med'] for r in rows):.4%}")
    print("\nWhat each schedule rests on:")
    for r in rows:
        print(f"- {r['trace']}: guessed: {r['guessed']}; notes: {r['notes']}")


if __name__ == "__main__":
    main()
