"""The speed goals of issue 11, side by side in one run; wall and CPU seconds and peak RSS of each.

Every case runs in fresh processes (``python -m schedsim ...``), measured with ``os.wait4``: wall
seconds, CPU seconds (user + system of that process alone, so other jobs on a shared machine do not
count) and peak resident memory. Medians over ``--repeat`` runs.

Cases (the inputs are in benchmarks/data/):

Every case but the cold start's first variant runs schedsim from a copy of the package with its bytecode compiled
first, as ``pip install`` leaves an installed package (this VM sets ``PYTHONDONTWRITEBYTECODE=1``: a checkout run
in place compiles every module at every start, ~0.1-0.3 s that no installed copy pays).

* ``million``: ``predict --no-gantt`` of ``overlap_gen.yaml`` (GEMM + all_reduce chunks, the comm of
  one chunk overlapping the next GEMM) at 1,000,000 ops on 8 ranks and 1,000,064 on 64 ranks: YAML to
  timeline.json, whole process. Goal: <= 2 s, <= 400 B/op peak.
* ``pipeline``: ``benchmarks/speed/pipeline_vs_torch.py`` (interleaved 1F1B pp=32 m=512 v=4 on torch's
  order), end to end vs torch's ``_simulate_comms_compute``, CPU seconds. Goal: >= 10x.
* ``cold``: ``check`` and ``predict --no-gantt`` of schedules/allgather_mm8.yaml, run from a copy of the package
  twice: compiling the sources at every start (``PYTHONDONTWRITEBYTECODE=1``, as on the development VM), and
  from bytecode compiled first (as ``pip install`` leaves a package). Goals: 0.25 / 0.4 s.
* ``pp8dp128``: ``predict`` of ``pp8_dp128.yaml`` (1024 ranks, 214,016 ops) with its default outputs
  (tables, timeline.json, Gantt PNG/SVG, pipeline view and memory plot). Goal: <= 5 s.
* ``scaling``: ``overlap_gen.yaml`` on 8 ranks from 10k ops up to ``--max-ops`` (default 1M; 10M takes
  ~2.7 GiB and ~25 CPU s), ``--no-trace`` so every size writes the same outputs.

Usage: python benchmarks/speed/speed_goals.py [--repeat 3] [--cases million pipeline cold pp8dp128 scaling]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GEN = str(ROOT / "benchmarks/data/overlap_gen.yaml")
PP8DP128 = str(ROOT / "benchmarks/data/pp8_dp128.yaml")


def run(args: list[str], root: Path = ROOT, **env_set: str) -> tuple[float, float, float, str]:
    """Run ``args`` in a fresh process, in ``root`` (a package copy, or the checkout: ``python -m`` imports from
    the working directory) with it on PYTHONPATH and ``env_set`` added to the environment; (wall s, CPU s, peak
    RSS MiB, stdout). File arguments must be absolute. Raises on a non-zero exit."""
    env = {**os.environ, "PYTHONPATH": str(root), **env_set}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(args, cwd=root, stdout=out, stderr=err, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode:
            raise RuntimeError(f"{' '.join(args)} exited {p.returncode}:\n{err.read().decode()[-3000:]}")
        return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, out.read().decode()


def median_run(args: list[str], repeat: int, root: Path = ROOT, **env_set: str) -> tuple[float, float, float, str]:
    runs = [run(args, root, **env_set) for _ in range(repeat)]
    return (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
            statistics.median(r[2] for r in runs), runs[-1][3])


def package_copy(dst: Path, bytecode: bool) -> Path:
    """``dst`` holding a copy of schedsim/ and executor/ (the built extension included) without their
    ``__pycache__``, so that a cold start does not depend on what earlier runs left in the tree; with
    ``bytecode``, every module compiled (``compileall``), as an installed package has it."""
    for name in ("schedsim", "executor"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    if bytecode:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(dst / "schedsim"), str(dst / "executor")],
                       check=True)
    return dst


def schedsim(*args: str) -> list[str]:
    return [sys.executable, "-m", "schedsim", *args]


def gen_predict(world: int, chunks: int, out: str) -> list[str]:
    return schedsim("predict", GEN, "--no-gantt", "--set", f"world_size={world}", "--set", f"chunks={chunks}",
                    "--out", out)


def row(label: str, ops: int | None, r: tuple[float, float, float, str], goal: str) -> str:
    per_op = f"{r[2] * 2**20 / ops:,.0f}" if ops else "—"
    return f"| {label} | {r[0]:.2f} | {r[1]:.2f} | {r[2]:,.0f} | {per_op} | {goal} |"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", nargs="*", default=["million", "pipeline", "cold", "pp8dp128", "scaling"])
    ap.add_argument("--max-ops", type=int, default=1_000_000, help="Largest size of the scaling table.")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="schedsim_goals_")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}: {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}; medians of {a.repeat}\n")
    installed = package_copy(Path(tmp) / "installed", bytecode=True)  # what every case but one runs
    print("| case | wall s | CPU s | peak RSS MiB | peak B/op | goal |")
    print("|---|---:|---:|---:|---:|---|")
    if "million" in a.cases:
        for world, chunks in ((8, 62_500), (64, 7_813)):
            ops = 2 * world * chunks
            r = median_run(gen_predict(world, chunks, f"{tmp}/m{world}"), a.repeat, installed)
            print(row(f"`predict --no-gantt`, {ops:,} ops on {world} ranks, YAML → timeline.json", ops, r,
                      "≤ 2 s, ≤ 400 B/op"), flush=True)
    if "cold" in a.cases:
        sched = str(ROOT / "schedules" / "allgather_mm8.yaml")
        for kind in ("source", "bytecode"):
            pkg = package_copy(Path(tmp) / kind, bytecode=False) if kind == "source" else installed
            note = ("sources compiled at every start (PYTHONDONTWRITEBYTECODE=1)" if kind == "source"
                    else "bytecode compiled first, as `pip install` leaves a package")
            for label, args, goal in (
                    ("cold start `check schedules/allgather_mm8.yaml`", schedsim("check", sched), "≤ 0.25 s"),
                    ("cold start `predict --no-gantt schedules/allgather_mm8.yaml`",
                     schedsim("predict", "--no-gantt", sched, "--out", f"{tmp}/cold"), "≤ 0.4 s")):
                r = median_run(args, max(5, a.repeat), pkg, PYTHONDONTWRITEBYTECODE="1")
                print(row(f"{label}, {note}", None, r, goal), flush=True)
    if "pp8dp128" in a.cases:
        r = median_run(schedsim("predict", PP8DP128, "--out", f"{tmp}/pp"), a.repeat, installed)
        print(row("`predict` PP8×DP128, 1024 ranks, 214,016 ops, default outputs (charts included)", 214_016, r,
                  "≤ 5 s"), flush=True)
        r = median_run(schedsim("predict", "--no-gantt", PP8DP128, "--out", f"{tmp}/pp"),
                       a.repeat, installed)
        print(row("the same with `--no-gantt`", 214_016, r, "—"), flush=True)
    if "pipeline" in a.cases:
        runs = [json.loads(run([sys.executable, "benchmarks/speed/pipeline_vs_torch.py", "--json"])[3])
                for _ in range(a.repeat)]
        first = runs[0]["sharing"]
        print(f"\ninterleaved 1F1B pp=32 m=512 v=4, {first['ops']:,} ops, {runs[0]['actions']:,} torch actions "
              "(CPU s, medians; `benchmarks/speed/pipeline_vs_torch.py`; gpu_model sharing = the unit profile's, "
              "Python loop; waves = the default, compiled loop):\n")
        print("| gpu_model | torch `_simulate_comms_compute` | schedsim expand | build DAG | checks | simulate | "
              "metrics + timeline.json | schedsim end to end | torch / schedsim end to end | simulate alone |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        torch_s = statistics.median(r["torch"][1] for r in runs)
        for model in ("sharing", "waves"):
            med = {k: statistics.median(r[model][k][1] for r in runs) for k in
                   ("expand", "build", "checks", "simulate", "timeline", "total")}
            print(f"| {model} | {torch_s:.2f} | {med['expand']:.2f} | {med['build']:.2f} | {med['checks']:.2f} | "
                  f"{med['simulate']:.2f} | {med['timeline']:.2f} | {med['total']:.2f} | "
                  f"{torch_s / med['total']:.2f}× (goal ≥ 10×) | {torch_s / med['simulate']:.2f}× |", flush=True)
    if "scaling" in a.cases:
        print("\nscaling, `overlap_gen.yaml` on 8 ranks, `predict --no-gantt --no-trace` whole process:\n")
        print("| ops | wall s | CPU s | CPU µs/op | peak RSS MiB | peak B/op |")
        print("|---:|---:|---:|---:|---:|---:|")
        n = 10_000
        while n <= a.max_ops:
            # the same outputs at every size (trace.json is written by default only up to 100k ops)
            args = gen_predict(8, n // 16, f"{tmp}/s{n}") + ["--no-trace", "--max-ops", str(max(n, 2_000_000))]
            r = median_run(args, a.repeat if n < 1_000_000 else 1, installed)
            print(f"| {n:,} | {r[0]:.2f} | {r[1]:.2f} | {r[1] / n * 1e6:.1f} | {r[2]:,.0f} | "
                  f"{r[2] * 2**20 / n:,.0f} |", flush=True)
            n *= 10


if __name__ == "__main__":
    main()
