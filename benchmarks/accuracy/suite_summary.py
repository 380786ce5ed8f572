"""Summaries for ``benchmarks/accuracy/two_gpu_suite.sh``: one small JSON + CSV per case, then one table of all cases.

    python3 benchmarks/accuracy/suite_summary.py case DIR NAME [--note TEXT] [--line]
        DIR holds ``execute/`` (``schedsim execute --compare`` output) and ``handwritten.json``
        (a ``benchmarks/accuracy/handwritten`` reference); writes DIR/summary.json and DIR/summary.csv and prints
        the row as JSON (``--line``: one line on its processes, :func:`spread_line`, for a case run in several).
    python3 benchmarks/accuracy/suite_summary.py collect WORK OUT
        gathers WORK/*/summary.json into OUT/summary.csv, OUT/summary.json and OUT/summary.md.
    python3 benchmarks/accuracy/suite_summary.py ab WORK OUT
        gathers WORK/*/ab_<i>.json (``one_gpu_suite.sh`` with ``AB=N``: ``handwritten/harness.py ab``) into
        OUT/ab.json and OUT/ab.md (:func:`ab_table`).

Columns: predicted makespan (the simulator with the fresh profile, plain-PyTorch launch costs);
measured = ``makespan_uninstrumented_s`` of ``schedsim execute`` (and the per-op timed median);
makespan error = (predicted − measured) / measured; per-op median error = median over ops of
|predicted − measured| / measured op duration (``compare.json``); hand-written = the reference's
median makespan, timed by the same method; executor overhead = measured / hand-written − 1;
late starts = iterations in which a rank began after the aligned start (``executor/clock.py``),
``execute/handwritten`` (the execute count includes its warm-up and instrumented iterations).

Host-bound cases run in several fresh processes, alternating execute and reference (``two_gpu_suite.sh``:
``HOST_REPEAT``; ``one_gpu_suite.sh``: ``PROCS``; repeats 2.. in ``DIR/rep<N>/``): a host-bound sub-millisecond
case moves by 5–10 % between processes (small_ops eager on one H200, 2026-12-01 02:53–02:57 UTC,
``benchmarks/probes/run.sh host_spread``) and by up to 2× on some H100 machines, whose processes run in a fast or
a slow mode (docs/validation.md, "the host-bound process spread"), so ``measured_ms`` and ``handwritten_ms`` are
then the medians over the processes' medians, ``processes`` their count (the larger side's; each side's in
``measured_processes`` and ``handwritten_processes``: a process that failed writes nothing) and
``*_min_ms``/``*_max_ms`` their range; the makespan error is against that median. ``*_drift_flagged``: how many
of those processes changed speed while they ran (their timed iterations' quarter medians more than
``schedsim.compare.DRIFT_WARN`` apart, the warning of ``compare``); ``*_slow_processes``: how many ran more than
``DRIFT_WARN`` × the fastest process of their side (the slow mode).
"""

from __future__ import annotations

import csv
import io
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from schedsim.io import atomic_write_text

FIELDS = ["case", "status", "world_size", "launch", "max_connections", "predicted_ms", "measured_ms",
          "measured_per_op_timed_ms", "makespan_error_pct", "per_op_median_error_pct", "handwritten_ms",
          "executor_overhead_pct", "late_starts", "note", "processes", "measured_min_ms", "measured_max_ms",
          "handwritten_min_ms", "handwritten_max_ms", "measured_drift_flagged", "handwritten_drift_flagged",
          "measured_slow_processes", "handwritten_slow_processes", "measured_processes", "handwritten_processes"]


def _load(p: Path) -> Any:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def _ms(s: Any) -> float | None:
    """Seconds as milliseconds (4 decimals); None where the executor wrote none (absent, null or 0), not 0.0."""
    return _r(float(s) * 1e3) if s else None


def _process_dirs(d: Path) -> list[Path]:
    """A case folder's process folders in run order: ``DIR``, then ``DIR/rep2``, ``rep3``, ... ``rep10`` (by number)."""
    return [d, *sorted(d.glob("rep*"), key=lambda p: (len(p.name), p.name))]


def _process_records(d: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A case folder's processes, ``DIR`` and every ``DIR/rep<N>/`` (those that wrote nothing left out):
    ``[{"median_s", "iters_s"}]`` for execute (``meta.makespan_uninstrumented_s`` and
    ``meta.makespan_uninstrumented_iters_s`` of ``execute/timeline.json``) and for the reference
    (``makespan_median_s`` and ``makespans_s`` of ``handwritten.json``); seconds, ``iters_s`` [] when absent."""
    meas: list[dict[str, Any]] = []
    ref: list[dict[str, Any]] = []
    for sub in _process_dirs(d):
        m = ((_load(sub / "execute" / "timeline.json") or {}).get("meta") or {})
        if m.get("makespan_uninstrumented_s"):
            meas.append({"median_s": float(m["makespan_uninstrumented_s"]),
                         "iters_s": list(m.get("makespan_uninstrumented_iters_s") or [])})
        hw = _load(sub / "handwritten.json")
        if hw and hw.get("makespan_median_s"):
            ref.append({"median_s": float(hw["makespan_median_s"]), "iters_s": list(hw.get("makespans_s") or [])})
    return meas, ref


def process_medians(d: Path) -> tuple[list[float], list[float]]:
    """Per-process medians (seconds) of a case folder: execute's uninstrumented makespans and the reference's
    median makespans, from ``DIR`` and every ``DIR/rep<N>/`` (processes that wrote nothing are left out)."""
    meas, ref = _process_records(d)
    return [p["median_s"] for p in meas], [p["median_s"] for p in ref]


def process_spread(procs: list[dict[str, Any]]) -> dict[str, int]:
    """Of one side's processes (:func:`_process_records`): ``drift_flagged``, how many changed speed while they
    ran (:func:`schedsim.compare.iteration_drift` of their timed iterations above
    :data:`schedsim.compare.DRIFT_WARN`, ``compare``'s warning; a process with fewer than 8 iterations is not
    judged), and ``slow``, how many have a median above ``DRIFT_WARN`` × the fastest process's (the slow mode of
    a bimodal machine). Zero each for no process.

    >>> process_spread([{"median_s": 2.0, "iters_s": [2.0] * 8}, {"median_s": 3.3, "iters_s": [2.0] * 4 + [3.3] * 4}])
    {'drift_flagged': 1, 'slow': 1}
    """
    from schedsim.compare import DRIFT_WARN, iteration_drift

    flagged = 0
    for p in procs:
        got = iteration_drift({"makespan_uninstrumented_iters_s": p["iters_s"]})
        flagged += got is not None and got[0] > DRIFT_WARN
    fastest = min((p["median_s"] for p in procs), default=0.0)
    return {"drift_flagged": flagged, "slow": sum(p["median_s"] > DRIFT_WARN * fastest for p in procs)}


def _failure(sub: Path) -> str:
    """Why a process of ``sub`` wrote no timeline: the first ``execute/failure_rank*.json``'s error, else
    "no timeline"."""
    fails = sorted((sub / "execute").glob("failure_rank*.json")) if (sub / "execute").is_dir() else []
    err = (_load(fails[0]) or {}).get("error", "") if fails else ""
    return str(err)[:200] or "no timeline"


def _first_process(d: Path) -> tuple[Any, Any, Any, Path | None]:
    """``(timeline, compare, reference, folder)`` of the case's first process that wrote an execute timeline (``DIR``,
    then ``DIR/rep<N>/`` in order; its ``compare.json`` where it ran ``--compare``), the reference of the first
    process that wrote one; folder None (and timeline, compare None) when no execute process wrote a timeline."""
    subs = _process_dirs(d)
    hw = next((h for h in (_load(s / "handwritten.json") for s in subs) if h is not None), None)
    for sub in subs:
        tl = _load(sub / "execute" / "timeline.json")
        if tl is not None:
            return tl, _load(sub / "execute" / "compare" / "compare.json"), hw, sub
    return None, None, hw, None


def case_summary(d: Path, name: str, note: str = "") -> dict[str, Any]:
    """A case's row (module docstring), written to ``DIR/summary.json`` and ``DIR/summary.csv``.

    Status "ok" when any execute process of the case wrote a timeline: the row's single-process columns
    (world size, launch, prediction, per-op error) are the first such process's, and where the first process
    (``DIR``) failed and a later one did not, ``note`` says so (the medians are over the processes that ran).
    "failed: <error>" only when none did (the first process's error), "skipped" when ``note`` starts so.
    """
    tl, cmp_, hw, first = _first_process(d)
    row: dict[str, Any] = {k: None for k in FIELDS}
    row.update(case=name, note=note)
    if first is not None and first != d:
        row["note"] = "; ".join(x for x in (note, f"first execute process failed: {_failure(d)}; "
                                            f"one-process columns from {first.name}/") if x)
    if tl is None:
        row["status"] = "skipped" if note.startswith("skipped") else f"failed: {_failure(d)}"
    else:
        m = tl.get("meta", {})
        row.update(status="ok", world_size=tl.get("world_size"), launch=tl.get("launch"),
                   max_connections=m.get("max_connections"),
                   measured_ms=_ms(m.get("makespan_uninstrumented_s")),
                   measured_per_op_timed_ms=_ms(m.get("makespan_median_s")))
        if cmp_ is not None:
            ms = cmp_["makespan"]
            unin = ms.get("uninstrumented") or {}
            # a timed CUDA graph's compare.json holds the timed graph's prediction in pred_s, the plain one here
            plain_s = unin.get("pred_s") or ms["pred_s"]
            row["predicted_ms"] = _r(plain_s * 1e3)
            err = unin.get("error", ms.get("error"))
            row["makespan_error_pct"] = _r(err * 100, 2) if err is not None else None
            med = (cmp_.get("ops") or {}).get("median_abs_error")
            row["per_op_median_error_pct"] = _r(med * 100, 2) if med is not None else None
    procs = _process_records(d)
    meas, ref = ([p["median_s"] for p in side] for side in procs)
    if len(meas) > 1 or len(ref) > 1:
        row.update(processes=max(len(meas), len(ref)), measured_processes=len(meas), handwritten_processes=len(ref))
        for side, got in zip(("measured", "handwritten"), procs, strict=True):
            if got:
                spread = process_spread(got)
                row.update({f"{side}_drift_flagged": spread["drift_flagged"],
                            f"{side}_slow_processes": spread["slow"]})
        if meas:
            row.update(measured_ms=_r(statistics.median(meas) * 1e3), measured_min_ms=_r(min(meas) * 1e3),
                       measured_max_ms=_r(max(meas) * 1e3))
            if cmp_ is not None:
                un_ = cmp_["makespan"].get("uninstrumented") or {}
                plain = un_.get("pred_s") or cmp_["makespan"]["pred_s"]
                row["makespan_error_pct"] = _r((plain / statistics.median(meas) - 1) * 100, 2)
        if ref:
            row.update(handwritten_min_ms=_r(min(ref) * 1e3), handwritten_max_ms=_r(max(ref) * 1e3))
    late = [None if x is None else (x.get("meta", {}) if x is tl else x).get("late_starts") for x in (tl, hw)]
    if any(v is not None for v in late):
        row["late_starts"] = "/".join("-" if v is None else str(v) for v in late)
    if ref:
        row["handwritten_ms"] = _r(statistics.median(ref) * 1e3)
        if row["measured_ms"]:
            row["executor_overhead_pct"] = _r((row["measured_ms"] / row["handwritten_ms"] - 1) * 100, 2)
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_text(d / "summary.json", json.dumps(row, indent=1))
    _write_csv(d / "summary.csv", [row])
    return row


def spread_line(row: dict[str, Any]) -> str:
    """One line on a case measured in several processes (:func:`case_summary`'s row; ms): each side's median over
    processes, its min and max, and how many processes the drift warning flagged and ran slow; "" for one process.

    >>> for part in spread_line({"case": "tpa_eager", "processes": 4, "measured_ms": 0.26, "measured_min_ms": 0.237,
    ...     "measured_max_ms": 0.411, "measured_drift_flagged": 1, "measured_slow_processes": 1,
    ...     "handwritten_ms": 0.335, "handwritten_min_ms": 0.238, "handwritten_max_ms": 0.421}).split("; "):
    ...     print(part)
    tpa_eager, 4 processes: execute 0.26 ms [0.237, 0.411], drift-flagged 1, slow 1
    hand-written 0.335 ms [0.238, 0.421], drift-flagged -, slow -
    """
    if not row.get("processes"):
        return ""
    def side(name: str, key: str) -> str:
        def g(k: str) -> Any:
            return "-" if row.get(k) is None else row[k]
        n = row.get(key + "_processes")
        of = "" if n is None or n == row["processes"] else f" (of {n} process{'es' if n != 1 else ''})"
        return (f"{name} {g(key + '_ms' if key == 'handwritten' else 'measured_ms')} ms [{g(key + '_min_ms')}, "
                f"{g(key + '_max_ms')}]{of}, drift-flagged {g(key + '_drift_flagged')}, "
                f"slow {g(key + '_slow_processes')}")
    return (f"{row['case']}, {row['processes']} processes: {side('execute', 'measured')}; "
            f"{side('hand-written', 'handwritten')}")


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """``rows`` as CSV of :data:`FIELDS`, written beside ``path`` and renamed into place (a row that fails leaves
    ``path`` as it was)."""
    f = io.StringIO(newline="")
    w = csv.DictWriter(f, fieldnames=FIELDS)
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, f.getvalue())


def collect(work: Path, out: Path) -> None:
    rows = [_load(p) for p in sorted(work.glob("*/summary.json"))]
    rows = [r for r in rows if r]
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "summary.csv", rows)
    atomic_write_text(out / "summary.json", json.dumps(rows, indent=1))

    def fmt(x: Any) -> str:
        return "" if x is None else str(x)

    lines = ["| " + " | ".join(FIELDS) + " |", "|" + "---|" * len(FIELDS)]
    lines += ["| " + " | ".join(fmt(r.get(k)) for k in FIELDS) + " |" for r in rows]
    atomic_write_text(out / "summary.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def ab_table(work: Path, out: Path) -> list[dict[str, Any]]:
    """The A/B rows of ``one_gpu_suite.sh``'s ``AB=N`` mode: one per ``WORK/<case>/ab_<i>.json``
    (``benchmarks/accuracy/handwritten/harness.py ab``'s output), ms, and per case a row ``process`` "median"
    (medians over its processes); written to ``OUT/ab.json`` and ``OUT/ab.md`` and returned.

    ``executor_vs_handwritten_pct`` is executor / hand-written − 1 of the medians of the blocks' medians (one process,
    both programs); ``blocks_min_pct``/``blocks_max_pct`` the range of the same ratio block by block."""
    rows: list[dict[str, Any]] = []
    for case in sorted(p for p in work.iterdir() if p.is_dir()):
        got = []
        for f in sorted(case.glob("ab_*.json"), key=lambda p: int(p.stem.split("_")[1])):
            d = _load(f)
            if not d:
                continue
            got.append({"case": case.name, "process": f.stem.split("_")[1], "executor_ms": _ms(d["executor_s"]),
                        "handwritten_ms": _ms(d["reference_s"]),
                        "executor_vs_handwritten_pct": _r(d["executor_vs_ref"] * 100, 2),
                        "blocks_min_pct": _r(min(d["pairs"]) * 100, 2), "blocks_max_pct": _r(max(d["pairs"]) * 100, 2)})
        if len(got) > 1:
            got.append({"case": case.name, "process": "median", **{
                k: _r(statistics.median(r[k] for r in got), 4 if k.endswith("_ms") else 2)
                for k in ("executor_ms", "handwritten_ms", "executor_vs_handwritten_pct")},
                "blocks_min_pct": min(r["blocks_min_pct"] for r in got),
                "blocks_max_pct": max(r["blocks_max_pct"] for r in got)})
        rows += got
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "ab.json", json.dumps(rows, indent=1))
    keys = ["case", "process", "executor_ms", "handwritten_ms", "executor_vs_handwritten_pct", "blocks_min_pct",
            "blocks_max_pct"]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join("" if r.get(k) is None else str(r[k]) for k in keys) + " |" for r in rows]
    atomic_write_text(out / "ab.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return rows


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "case" and len(a) >= 3:
        note = a[a.index("--note") + 1] if "--note" in a else ""
        got = case_summary(Path(a[1]), a[2], note)
        print(spread_line(got) if "--line" in a else json.dumps(got))
    elif a and a[0] == "collect" and len(a) == 3:
        collect(Path(a[1]), Path(a[2]))
    elif a and a[0] == "ab" and len(a) == 3:
        ab_table(Path(a[1]), Path(a[2]))
    else:
        sys.exit(__doc__)
