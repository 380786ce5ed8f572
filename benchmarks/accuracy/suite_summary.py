"""Summaries for ``benchmarks/accuracy/two_gpu_suite.sh``: one small JSON + CSV per case, then one table of all cases.

    python3 benchmarks/accuracy/suite_summary.py case DIR NAME [--note TEXT]
        DIR holds ``execute/`` (``schedsim execute --compare`` output) and ``handwritten.json``
        (a ``benchmarks/accuracy/handwritten`` reference); writes DIR/summary.json and DIR/summary.csv.
    python3 benchmarks/accuracy/suite_summary.py collect WORK OUT
        gathers WORK/*/summary.json into OUT/summary.csv, OUT/summary.json and OUT/summary.md.

Columns: predicted makespan (the simulator with the fresh profile, plain-PyTorch launch costs);
measured = ``makespan_uninstrumented_s`` of ``schedsim execute`` (and the per-op timed median);
makespan error = (predicted − measured) / measured; per-op median error = median over ops of
|predicted − measured| / measured op duration (``compare.json``); hand-written = the reference's
median makespan, timed by the same method; executor overhead = measured / hand-written − 1;
late starts = iterations in which a rank began after the aligned start (``executor/clock.py``),
``execute/handwritten`` (the execute count includes its warm-up and instrumented iterations).

Host-bound cases run in several fresh processes, alternating execute and reference (``two_gpu_suite.sh``:
``HOST_REPEAT``; repeats 2.. in ``DIR/rep<N>/``): a host-bound sub-millisecond case moves by 5–10 % between
processes (small_ops eager on one H200, 2026-12-01 02:53–02:57 UTC, ``benchmarks/probes/run.sh host_spread``), so
``measured_ms`` and ``handwritten_ms`` are then the medians over the processes' medians, ``processes`` their
count and ``*_min_ms``/``*_max_ms`` their range; the makespan error is against that median.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any

FIELDS = ["case", "status", "world_size", "launch", "max_connections", "predicted_ms", "measured_ms",
          "measured_per_op_timed_ms", "makespan_error_pct", "per_op_median_error_pct", "handwritten_ms",
          "executor_overhead_pct", "late_starts", "note", "processes", "measured_min_ms", "measured_max_ms",
          "handwritten_min_ms", "handwritten_max_ms"]


def _load(p: Path) -> Any:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def process_medians(d: Path) -> tuple[list[float], list[float]]:
    """Per-process medians (seconds) of a case folder: execute's uninstrumented makespans and the reference's
    median makespans, from ``DIR`` and every ``DIR/rep<N>/`` (processes that wrote nothing are left out)."""
    meas: list[float] = []
    ref: list[float] = []
    for sub in [d, *sorted(d.glob("rep*"))]:
        tl = _load(sub / "execute" / "timeline.json")
        v = ((tl or {}).get("meta") or {}).get("makespan_uninstrumented_s")
        if v:
            meas.append(float(v))
        hw = _load(sub / "handwritten.json")
        if hw and hw.get("makespan_median_s"):
            ref.append(float(hw["makespan_median_s"]))
    return meas, ref


def case_summary(d: Path, name: str, note: str = "") -> dict[str, Any]:
    tl = _load(d / "execute" / "timeline.json")
    cmp_ = _load(d / "execute" / "compare" / "compare.json")
    hw = _load(d / "handwritten.json")
    row: dict[str, Any] = {k: None for k in FIELDS}
    row.update(case=name, note=note)
    if tl is None:
        fails = sorted((d / "execute").glob("failure_rank*.json")) if (d / "execute").is_dir() else []
        err = (_load(fails[0]) or {}).get("error", "") if fails else ""
        row["status"] = "skipped" if note.startswith("skipped") else f"failed: {str(err)[:200] or 'no timeline'}"
    else:
        m = tl.get("meta", {})
        row.update(status="ok", world_size=tl.get("world_size"), launch=tl.get("launch"),
                   max_connections=m.get("max_connections"),
                   measured_ms=_r((m.get("makespan_uninstrumented_s") or 0) * 1e3),
                   measured_per_op_timed_ms=_r((m.get("makespan_median_s") or 0) * 1e3))
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
    meas, ref = process_medians(d)
    if len(meas) > 1 or len(ref) > 1:
        row["processes"] = max(len(meas), len(ref))
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
    (d / "summary.json").write_text(json.dumps(row, indent=1))
    _write_csv(d / "summary.csv", [row])
    return row


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)


def collect(work: Path, out: Path) -> None:
    rows = [_load(p) for p in sorted(work.glob("*/summary.json"))]
    rows = [r for r in rows if r]
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "summary.csv", rows)
    (out / "summary.json").write_text(json.dumps(rows, indent=1))
    fmt = lambda x: "" if x is None else str(x)
    lines = ["| " + " | ".join(FIELDS) + " |", "|" + "---|" * len(FIELDS)]
    lines += ["| " + " | ".join(fmt(r.get(k)) for k in FIELDS) + " |" for r in rows]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "case" and len(a) >= 3:
        note = a[a.index("--note") + 1] if "--note" in a else ""
        print(json.dumps(case_summary(Path(a[1]), a[2], note)))
    elif a and a[0] == "collect" and len(a) == 3:
        collect(Path(a[1]), Path(a[2]))
    else:
        sys.exit(__doc__)
