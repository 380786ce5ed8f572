"""Replay recorded one-GPU sessions with profiles whose host costs come from calibrate's fresh processes by
several rules, and tabulate the makespan errors per session and rule (CPU, seconds).

``schedsim calibrate`` runs its host loops in several fresh processes (``host_fresh_processes`` of the calibration
JSON) and writes, per field, the median over them (:func:`executor.calibrate_host.median_costs`): on a machine
whose processes ran at different speeds, each field may come from another process. The rules compared here choose
or rescale the processes first, then go through the same code as calibrate (each process's loops settled by
:func:`~executor.calibrate_host.settle_costs`, :func:`~executor.calibrate_host.median_costs`,
:func:`~executor.calibrate_host.launch_fields` and :func:`~executor.calibrate_host.gemm_call_rows`):

``median``
    every process, field by field (calibrate's rule).
``mid_process``
    one process: the one whose ``eager_per_op_us`` is the median (of an even count the faster middle one).
``fastest``
    one process: the lowest ``eager_per_op_us``.
``scaled``
    every process with its µs fields divided by its ``eager_per_op_us`` over the median one (one speed factor
    per process), then field by field; ratios (``call_launch_fraction``, ``gemm_call:*``) not scaled.
``mid_composite``
    one process: the median of the geometric mean of ``eager_per_op_us``, ``eager_per_collective_us``,
    ``elementwise_call_us`` and ``collective_after_kernel_us`` (those it has).
``scaled_composite``
    as ``scaled``, the factor the geometric mean over those four fields of the process's figure over the
    processes' median.

Each session's profile is its calibrated profile with the ``launch:`` fields and ``gemm.call`` rows of the rule
(:func:`rule_profile`); each case is replayed as ``replay_runs.py --profile`` does
(:func:`replay_runs.replay_case`). Usage (repo root)::

    python benchmarks/accuracy/host_rules.py SESSIONS.json [--md OUT.md]

``SESSIONS.json``: ``[{"name": "16:36", "profile": "calibrated.yaml", "runs": ["RUN", ...]}, ...]``, the
calibration JSON next to the profile (same name, ``.json``). Prints per session and rule the median and worst
makespan |error| against the executor and against hand-written PyTorch, then every case whose |error| grows by
more than 2 points against the ``median`` rule. Results: docs/validation.md, "fresh host processes: one rule".
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # replay_runs, next to this file
from replay_runs import cases, replay_case  # noqa: E402

from executor.calibrate_host import gemm_call_rows, launch_fields, median_costs, settle_costs  # noqa: E402
from schedsim.hardware.profile import load_profile  # noqa: E402
from schedsim.io import atomic_write_text  # noqa: E402

Costs = dict[str, float]
#: figures of a process that are ratios, not µs: not rescaled by the ``scaled`` rule
RATIOS = ("call_launch_fraction",)
COMPOSITE = ("eager_per_op_us", "eager_per_collective_us", "elementwise_call_us", "collective_after_kernel_us")


def _mid(procs: Sequence[Costs], key: Callable[[Costs], float]) -> list[Costs]:
    ranked = sorted(procs, key=key)
    return [ranked[(len(ranked) - 1) // 2]]


def _speed(p: Costs) -> float:
    return p["eager_per_op_us"]


def _composite(p: Costs) -> float:
    got = [p[k] for k in COMPOSITE if p.get(k, 0) > 0]
    return math.exp(sum(map(math.log, got)) / len(got))


def _factor(procs: Sequence[Costs], keys: Sequence[str]) -> list[float]:
    """Per process, the geometric mean over ``keys`` (those every process has, > 0) of its figure over the
    processes' median: its speed factor (1 = the median process; > 1 slower)."""
    keys = [k for k in keys if all(p.get(k, 0) > 0 for p in procs)]
    med = {k: statistics.median(p[k] for p in procs) for k in keys}
    return [math.exp(sum(math.log(p[k] / med[k]) for k in keys) / len(keys)) for p in procs]


def _scaled(procs: Sequence[Costs], keys: Sequence[str] = ("eager_per_op_us",)) -> list[Costs]:
    return [{k: (v if k in RATIOS or k.startswith("gemm_call:") else v / f) for k, v in p.items()}
            for p, f in zip(procs, _factor(procs, keys), strict=True)]


#: rule name -> the processes (settled) whose field-by-field median the profile takes
RULES: dict[str, Callable[[Sequence[Costs]], list[Costs]]] = {
    "median": list,
    "mid_process": lambda ps: _mid(ps, _speed),
    "fastest": lambda ps: [min(ps, key=_speed)],
    "scaled": _scaled,
    "mid_composite": lambda ps: _mid(ps, _composite),
    "scaled_composite": lambda ps: _scaled(ps, COMPOSITE),
}


def rule_profile(profile: Path, rule: str, out: Path) -> str:
    """Write ``profile`` (a calibrated profile, its calibration JSON next to it) with the ``launch:`` host fields
    and ``gemm.call`` rows its fresh processes give under ``rule`` (:data:`RULES`) to ``out``; return ``out``."""
    import yaml

    calib = json.loads(profile.with_suffix(".json").read_text())
    procs = [settle_costs(dict(p)) for p in calib["host_fresh_processes"]]
    costs = median_costs(RULES[rule](procs))
    prof = load_profile(str(profile))
    prof = prof.model_copy(update={
        "launch": prof.launch.model_copy(update=launch_fields(costs)),
        "gemm": prof.gemm.model_copy(update={"call": [tuple(r) for r in gemm_call_rows(costs)]})})
    atomic_write_text(out, yaml.safe_dump(prof.model_dump(mode="json"), sort_keys=False, width=200))
    return str(out)


def _stat(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 100:.1f} / {max(xs) * 100:.1f} %" if xs else "n/a"


Rows = dict[str, dict[str, dict[str, dict[str, Any]]]]  # session -> rule -> case -> replay_case's row


def summary(res: Rows) -> tuple[list[str], list[str]]:
    """Markdown lines: per session and rule the median / worst makespan |error| against the executor and against
    hand-written, and the count of cases whose |error| grows by more than 2 points over the ``median`` rule; then
    those cases."""
    out = ["| session | rule | vs execute median / worst | vs hand-written median / worst | cases worse > 2 pt |",
           "|---|---|---:|---:|---:|"]
    worse = ["| session | rule | case | vs | median rule | rule |", "|---|---|---|---|---:|---:|"]
    for name, by_rule in res.items():
        base = by_rule["median"]
        for rule, rows in by_rule.items():
            ex = [abs(r["error"]) for r in rows.values() if r["error"] is not None]
            hw = [abs(r["hw_error"]) for r in rows.values() if r["hw_error"] is not None]
            n = 0
            for case, r in rows.items():
                for key, vs in (("error", "execute"), ("hw_error", "hand-written")):
                    b, c = base[case][key], r[key]
                    if b is not None and c is not None and abs(c) - abs(b) > 0.02:
                        n += 1
                        worse.append(f"| {name} | {rule} | {case} | {vs} | {b * 100:+.1f} % | {c * 100:+.1f} % |")
            out.append(f"| {name} | {rule} | {_stat(ex)} | {_stat(hw)} | {n} |")
    return out, worse


def case_table(res: Rows) -> list[str]:
    """Markdown lines: per session and case, each rule's error against the executor / against hand-written (%)."""
    rules = list(next(iter(res.values())))
    lines = ["| session | case | " + " | ".join(rules) + " |", "|---|---|" + "---:|" * len(rules)]
    for name, by_rule in res.items():
        for case in by_rule["median"]:
            cells = []
            for rule in rules:
                r = by_rule[rule][case]
                hw = "n/a" if r["hw_error"] is None else f"{r['hw_error'] * 100:+.1f}"
                cells.append(f"{r['error'] * 100:+.1f} / {hw}")
            lines.append(f"| {name} | {case} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sessions", type=Path, help="JSON list of {name, profile, runs}")
    ap.add_argument("--work", type=Path, default=Path("host_rules_profiles"), help="where the rules' profiles go")
    ap.add_argument("--md", type=Path, default=None, help="also write the tables as markdown here")
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    res: Rows = {}
    for s in json.loads(a.sessions.read_text()):
        name = s["name"]
        res[name] = {}
        for rule in RULES:
            prof = rule_profile(Path(s["profile"]), rule, a.work / f"{name.replace(':', '')}_{rule}.yaml")
            res[name][rule] = {c.name: replay_case(c, prof) for c in cases([Path(r) for r in s["runs"]])}
    out, worse = summary(res)
    cases_md = case_table(res)
    md = "\n\n".join("\n".join(t) for t in (out, worse, cases_md))
    print(md)
    if a.md:
        atomic_write_text(a.md, md + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
