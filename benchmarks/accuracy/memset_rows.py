"""A profile's ``gemm.memset`` rows from measured runs' Kineto kernel lists, on CPU.

Per case folder ``<run>/<case>/execute/`` (and its ``rep<N>/execute/`` processes) written with ``execute
--profiler``, ``profiler_ops.json`` lists each op's kernels and its Kineto span (first start, last end, busy
time). A GEMM op whose first kernel is a memset (``Memset (Device)``: cuBLAS's split-K kernels zero a workspace)
launches one at its shape (dtype, m·batch, n, k, read from the lowered schedule). Where it started on an idle GPU
(its host call returned after every earlier op of its rank had ended on the GPU: nothing was queued ahead of its
kernels), its span less its busy time is the gap
from the memset's end to the main kernel's start, the figure ``schedsim calibrate`` takes from one call of the shape
(``executor/calibrate_gemm.py``, ``memset_gap_us``). Per shape the median of its idle gaps; a shape that launched a
memset but never on an idle GPU takes the median over every idle gap measured (the host's second launch inside
the call, not the shape's kernel, sets it), and the table says so.

Usage (repo root)::

    python benchmarks/accuracy/memset_rows.py RUN_DIR [RUN_DIR ...] --profile P.yaml --out P_memset.yaml

prints a table of the shapes and writes ``P`` with ``gemm.memset`` set to the rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from schedsim.hardware.profile import load_profile
from schedsim.sim.timeline import Timeline, atomic_write_text

def op_records(ex: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(op id, record)`` of one ``execute`` folder's ``profiler_ops.json`` (id ``NAME@rRANK``), empty without one."""
    f = ex / "profiler_ops.json"
    if not f.is_file():
        return []
    d = json.loads(f.read_text())
    return [(f"{name}@r{rank}", rec) for rank, r in d.items() for name, rec in r.get("ops", {}).items()]


def idle_memset_gaps(recs: list[tuple[str, dict[str, Any]]]) -> dict[str, float | None]:
    """Per op id whose first kernel is a memset: its span less its busy time (µs) when it started on an idle GPU
    (its call, ``cpu_start_us`` + ``cpu_dur_us``, returned after every earlier op of its rank had ended on the
    GPU; Kineto's one clock), else None (queued behind them).

    >>> r = [("a@r0", {"gpu_start_us": 0.0, "gpu_end_us": 180.0, "gpu_busy_us": 170.0, "cpu_start_us": -40.0,
    ...               "cpu_dur_us": 60.0, "kernels": ["Memset (Device)", "nvjet_coopA"]}),
    ...      ("b@r0", {"gpu_start_us": 181.5, "gpu_end_us": 345.0, "gpu_busy_us": 162.0, "cpu_start_us": 30.0,
    ...               "cpu_dur_us": 40.0,
    ...               "kernels": ["Memset (Device)", "nvjet_coopA"]}),
    ...      ("c@r0", {"gpu_start_us": 100.0, "gpu_end_us": 120.0, "gpu_busy_us": 20.0, "kernels": ["nvjet"]})]
    >>> idle_memset_gaps(r)
    {'a@r0': 10.0, 'b@r0': None}
    """
    timed = sorted(((rec["gpu_start_us"], op, rec) for op, rec in recs if rec.get("gpu_start_us") is not None),
                   key=lambda t: t[0])
    out: dict[str, float | None] = {}
    busy_until: dict[str, float] = {}
    for start, op, rec in timed:
        rank = op.rsplit("@r", 1)[1]
        idle = rec.get("cpu_start_us", start) + rec.get("cpu_dur_us", 0.0) > busy_until.get(rank, float("-inf"))
        ks = rec.get("kernels") or []
        if ks and str(ks[0]).startswith("Memset") and len(ks) >= 2:
            out[op] = rec["gpu_end_us"] - start - rec["gpu_busy_us"] if idle else None
        busy_until[rank] = max(busy_until.get(rank, float("-inf")), rec["gpu_end_us"])
    return out


def shapes_of(case: Path) -> dict[str, tuple[str, int, int, int]]:
    """GEMM shape ``(dtype, m·batch, n, k)`` per op id of a case's measured schedule (its ``meta`` file and sets)."""
    from schedsim.api import lower_spec
    from schedsim.clicore import load as _load
    from schedsim.graph.build import graph_of
    from schedsim.gpu.gemm import shape_key
    from schedsim.kinds import KINDS

    meta = Timeline.read_json(case / "execute" / "timeline.json").meta
    file = Path(meta["file"])
    G = graph_of(lower_spec(_load(file, list(meta.get("set") or [])), file))
    return {n: shape_key(d["op"]) for n, d in G.nodes(data=True) if KINDS[d["op"].kind].cost == "gemm"}


def collect(runs: list[Path]) -> dict[tuple[str, int, int, int], list[float | None]]:
    """Per GEMM shape that launched a memset, its gaps over every process of every case (None: not idle)."""
    out: dict[tuple[str, int, int, int], list[float | None]] = {}
    for run in runs:
        for case in sorted(p.parent.parent for p in run.glob("*/execute/timeline.json")):
            shapes = None
            for ex in [case / "execute", *sorted(case.glob("rep*/execute"))]:
                gaps = idle_memset_gaps(op_records(ex))
                if not gaps:
                    continue
                shapes = shapes if shapes is not None else shapes_of(case)
                for op, g in gaps.items():
                    if op in shapes:
                        out.setdefault(shapes[op], []).append(g)
    return out


def rows(found: dict[tuple[str, int, int, int], list[float | None]]) -> tuple[list[list[Any]], list[str]]:
    """``gemm.memset`` rows ``[dtype, m, n, k, gap_us]`` (sorted) and one table line per shape."""
    every = [g for gs in found.values() for g in gs if g is not None]
    if not every:
        return [], []
    pooled = statistics.median(every)
    out, lines = [], []
    for key in sorted(found):
        idle = [g for g in found[key] if g is not None]
        gap = statistics.median(idle) if idle else pooled
        out.append([*key, round(gap, 3)])
        how = f"{len(idle)} idle: " + ", ".join(f"{g:.1f}" for g in idle) if idle else "never idle: pooled median"
        lines.append(f"| {key[0]} {key[1]}x{key[2]}x{key[3]} | {len(found[key])} | {gap:.2f} | {how} |")
    return out, lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (<run>/<case>/execute/profiler_ops.json)")
    ap.add_argument("--profile", required=True, help="profile name or path to copy the rows into")
    ap.add_argument("--out", type=Path, required=True, help="where to write the profile with gemm.memset")
    a = ap.parse_args(argv)
    got, lines = rows(collect(a.runs))
    print("| shape | ops with a memset | gap µs | idle gaps µs |\n|---|---:|---:|---|")
    print("\n".join(lines))
    prof = load_profile(a.profile)
    prof = prof.model_copy(update={"gemm": prof.gemm.model_copy(update={"memset": [tuple(r) for r in got]})})
    import yaml

    atomic_write_text(a.out, yaml.safe_dump(prof.model_dump(mode="json"), sort_keys=False, width=200))
    print(f"wrote {a.out}: {len(got)} gemm.memset rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
