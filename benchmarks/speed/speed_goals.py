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
  from bytecode compiled first (as ``pip install`` leaves a package); medians of ``max(7, --repeat)``. Goals (issue
  38): 0.2 / 0.3 s.
* ``pp8dp128``: ``predict`` of ``pp8_dp128.yaml`` (1024 ranks, 214,016 ops) with its default outputs
  (tables, timeline.json, Gantt PNG/SVG, pipeline view and memory plot). Goal: <= 5 s.
* ``scaling``: ``overlap_gen.yaml`` on 8 ranks from 10k ops up to ``--max-ops`` (default 1M; 10M takes
  ~2.7 GiB and ~25 CPU s), ``--no-trace`` so every size writes the same outputs.
* ``tenm`` (not run by default; issue 38): ``predict --no-gantt --no-trace`` of ``overlap_gen.yaml`` on 8 ranks at
  1M and 10M ops (``--max-ops 10000000``), whole processes, with user and system CPU s, minor page faults and peak
  RSS apart, and CPU µs per op at each size: whether the time per op stays flat to 10M ops. Goal: 10M ops
  <= 10 s. With ``--base``, before and after run by run (~2.3 GiB and ~15-20 CPU s a 10M-op process; each run's
  output folder, ~1 GB at 10M ops, is removed after it).
* ``throughput`` (not run by default): simulator throughput, ``simulate()`` alone (preparation + event loop +
  timeline) in ops per second, of ``overlap_gen.yaml`` on 8 ranks lowered to a Program, at the sizes of
  ``scaling``, for each GPU model of ``--gpu-model`` (default ``waves replay``), with the time to lower it; one
  fresh process per size (:data:`THROUGHPUT`), wall seconds of the calls, medians of ``--repeat``. The cold start
  of ``predict`` and ``check`` is the ``cold`` case.
* ``shapes`` (issue 38: the shapes users write besides the benchmark's; the inputs are written by this script,
  :data:`SHAPES`): a ring of batched send/recv written with ``rank`` (``peer: (rank + 1) % world_size``, a batch
  per iteration) at 1M ops on 8 ranks; ``check`` of sends and recvs whose names do not pair (``s{k}`` /
  ``r{k}``) at 96k ops; a GEMM and an all_reduce per chunk over 100,000 ranks at 1M ops; ``predict`` of 100k
  ops with its default trace.json; interleaved 1F1B pp=32 m=512 v=4 with charts (``predict`` whole process)
  beside torch's dry run as a whole process (``python -c``: import torch, ScheduleInterleaved1F1B, its
  lowering with comms, ``_simulate_comms_compute``, as ``benchmarks/speed/pipeline_vs_torch.py``'s ``torch_side``).
  Goals: <= 2 µs and <= 200 B per op; 100,000 ranks at 1M ops <= 2 s; unpaired ``check`` <= 1 s; the
  pipeline with charts >= 10x faster than torch's dry run. ``pp32`` (not run by default) runs that last pair alone,
  ``trace`` (not run by default) the 100k-op trace.json row alone (goal 0.2 s: 2 µs per op), ``ring`` (not run by
  default) the `rank` ring's row alone (goal 2 s).

* ``search`` (issue 36): ``schedsim search -j 2`` of the 1.3B model of ``schedules/megatron_gpt_train.yaml`` on
  64 GPUs (global batch 256, ``dgx_h100``) over :data:`SEARCH_GRID` (256 configurations, 182 simulated; the others
  refused with Megatron's reason), whole process with its two workers; CPU ms per simulated configuration, and
  what 1,000 configurations would take on 2 cores at that rate (CPU s / 2). Goal: 1,000 configurations in
  <= 60 s on 2 cores.

* ``same`` (not run by default; needs ``--base``): the outputs of ``predict --no-gantt`` (timeline.json, and
  trace.json where written) of every ``schedules/*.yaml`` and of the 1M-op benchmark on 8 and 64 ranks, from
  ``--base`` and from this tree, compared byte for byte (the output manifest, which names the folder, left out): a
  row per schedule; exit status 1 if any file differs. For a change that must keep every prediction's bytes.

``--base DIR`` (a checkout of another commit, its extension built: ``python setup.py build_ext --inplace``): the
``million``, ``cold``, ``shapes``, ``pp32``, ``trace``, ``ring``, ``tenm`` and ``search`` cases run from a copy of it
and from this tree in turn, run by run (so the load of a shared machine falls on both alike), a row for each (``before``
and ``after``). The order alternates round by round (before first, then after first: ABBA): the second process of a
pair finds guest memory the first one touched, which on this VM is worth ~1-3 CPU s at 10M ops (docs/validation.md).

Usage: python benchmarks/speed/speed_goals.py [--repeat 3] [--cases million pipeline cold pp8dp128 scaling shapes
       pp32 trace ring tenm search same] [--base DIR] [--max-ops N]
       python benchmarks/speed/speed_goals.py --cases throughput [--max-ops 1000000] [--gpu-model waves replay]
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GEN = str(ROOT / "benchmarks/data/overlap_gen.yaml")
PP8DP128 = str(ROOT / "benchmarks/data/pp8_dp128.yaml")


def run(args: list[str], root: Path = ROOT, **env_set: str) -> tuple[float, float, float, str]:
    """Run ``args`` in a fresh process, in ``root`` (a package copy, or the checkout: ``python -m`` imports from
    the working directory) with it on PYTHONPATH and ``env_set`` added to the environment; (wall s, CPU s, peak
    RSS MiB, stdout). File arguments must be absolute. Raises on a non-zero exit."""
    wall, ru, out = run_usage(args, root, **env_set)
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, out


def run_usage(args: list[str], root: Path = ROOT, **env_set: str) -> tuple[float, Any, str]:
    """:func:`run`'s process, with its whole ``os.wait4`` resource usage (user and system CPU s, minor page
    faults, peak RSS KiB): (wall s, rusage, stdout)."""
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
        return wall, ru, out.read().decode()


def median_run(args: list[str], repeat: int, root: Path = ROOT, **env_set: str) -> tuple[float, float, float, str]:
    runs = [run(args, root, **env_set) for _ in range(repeat)]
    return (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
            statistics.median(r[2] for r in runs), runs[-1][3])


def abba(i: int, roots: list[tuple[str, Path]]) -> list[tuple[int, tuple[str, Path]]]:
    """The roots of the ``i``-th round of a before/after comparison, with their indices: in the order of ``roots``
    in even rounds and reversed in odd ones (ABBA), so that neither copy always runs first. On a shared VM the
    second process of a pair finds guest memory the first one touched (fewer fresh pages to zero), which favoured
    whichever ran second when "before" always ran first (docs/validation.md, fast38n)."""
    order = list(enumerate(roots))
    return order[::-1] if i % 2 else order


def median_runs(make: Callable[[str], list[str]], repeat: int, roots: list[tuple[str, Path]]
                ) -> list[tuple[float, float, float, str]]:
    """``make(tag)`` (the command, with its output folder named after ``tag``) run ``repeat`` times from each of
    ``roots`` (``(tag, package copy)``) in turn, the order alternated round by round (:func:`abba`);
    :func:`median_run`'s medians per root, in the order of ``roots``."""
    runs: list[list[tuple[float, float, float, str]]] = [[] for _ in roots]
    for i in range(repeat):
        for k, (tag, root) in abba(i, roots):
            runs[k].append(run(make(tag), root))
    return [(statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs),
             statistics.median(r[2] for r in rs), rs[-1][3]) for rs in runs]


def cold_runs(args: list[str], repeat: int, roots: list[tuple[str, Path]]) -> list[tuple[float, float, float, str]]:
    """``args`` run ``repeat`` times from each of ``roots`` in turn (alternated, so that the load of a shared machine
    falls on each alike, the order reversed every other round: :func:`abba`), with ``PYTHONDONTWRITEBYTECODE=1``
    (a copy without bytecode compiles its sources at every start); :func:`median_run`'s medians per root, in the
    order of ``roots``."""
    runs: list[list[tuple[float, float, float, str]]] = [[] for _ in roots]
    for i in range(repeat):
        for k, (_tag, root) in abba(i, roots):
            runs[k].append(run(args, root, PYTHONDONTWRITEBYTECODE="1"))
    return [(statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs),
             statistics.median(r[2] for r in rs), rs[-1][3]) for rs in runs]


def package_copy(dst: Path, bytecode: bool, src: Path = ROOT) -> Path:
    """``dst`` holding a copy of ``src``'s schedsim/ and executor/ (the built extension included) without their
    ``__pycache__``, so that a cold start does not depend on what earlier runs left in the tree; with
    ``bytecode``, every module compiled (``compileall``), as an installed package has it."""
    for name in ("schedsim", "executor"):
        shutil.copytree(src / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    if bytecode:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(dst / "schedsim"), str(dst / "executor")],
                       check=True)
    return dst


def schedsim(*args: str) -> list[str]:
    return [sys.executable, "-m", "schedsim", *args]


def gen_predict(world: int, chunks: int, out: str) -> list[str]:
    return schedsim("predict", GEN, "--no-gantt", "--set", f"world_size={world}", "--set", f"chunks={chunks}",
                    "--out", out)


#: The inputs of the ``shapes`` case: (file name, YAML text); ``{...}`` in the text stay for the schedule's
#: own expressions, sizes come from ``--set``.
SHAPES = {
    "ring_rank.yaml": """\
schema_version: 1
name: ring_rank
world_size: "{world_size}"
params: {world_size: 8, chunks: 64}
ops:
  - foreach: {i: range(chunks)}
    ops:
      - {name: "s{i}", kind: send, peer: "(rank + 1) % world_size", bytes: 1048576, stream: p2p, p2p_batch: "b{i}"}
      - {name: "r{i}", kind: recv, peer: "(rank - 1) % world_size", bytes: 1048576, stream: p2p, p2p_batch: "b{i}"}
""",
    "unpaired_names.yaml": """\
schema_version: 1
name: unpaired_names
world_size: 2
params: {n: 48000}
ops:
  - foreach: {k: range(n)}
    ops:
      - {name: "s{k}", kind: send, peer: 1, bytes: 64, ranks: [0]}
      - {name: "r{k}", kind: recv, peer: 0, bytes: 64, ranks: [1]}
""",
    "dp_ranks.yaml": """\
schema_version: 1
name: dp_ranks
world_size: "{world_size}"
params: {world_size: 100000, chunks: 5}
ops:
  - foreach: {i: range(chunks)}
    ops:
      - {name: "mm{i}", kind: matmul, m: 4096, n: 4096, k: 4096, dtype: bf16, stream: compute}
      - {name: "ar{i}", kind: all_reduce, bytes: 64*2**20, stream: comm, deps: ["mm{i}"]}
""",
    "interleaved.yaml": """\
schema_version: 1
name: interleaved
world_size: "{p}"
params: {p: 32, m: 512, v: 4}
pipeline:
  schedule: interleaved_1f1b
  p: p
  m: m
  v: v
  p2p: overlapped
  stage:
    forward: [{kind: compute, duration_us: 1}]
    backward_input: [{kind: compute, duration_us: 1}]
    backward_weight: [{kind: compute, duration_us: 1}]
""",
}

#: torch's dry run of interleaved 1F1B as one process, from its imports (``benchmarks/speed/pipeline_vs_torch.py``'s
#: ``torch_side``, which this mirrors, times the simulation alone).
TORCH_DRY_RUN = """\
import gc
from unittest import mock
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (ScheduleInterleaved1F1B, _ComputationType as CT,
                                                    _PipelineScheduleRuntime, _simulate_comms_compute)
pp, m, v = 32, 512, 4
gc.disable()
stage = mock.create_autospec(PipelineStage, instance=True)
stage.group_rank, stage.group_size, stage.submod, stage.num_stages = 0, pp, None, v * pp
stages = [stage] * v
sched = ScheduleInterleaved1F1B(stages, m)
rt = _PipelineScheduleRuntime(stages, m)
rt._prepare_schedule_with_comms(sched.pipeline_order)
keep = {CT.FORWARD, CT.FULL_BACKWARD, CT.BACKWARD_INPUT, CT.BACKWARD_WEIGHT, CT.SEND_F, CT.RECV_F, CT.SEND_B,
        CT.RECV_B}
order = {r: [a for a in acts if a is None or a.computation_type in keep]
         for r, acts in rt.pipeline_order_with_comms.items()}
_simulate_comms_compute(order, lambda s: s % pp, pp * v)
print(sum(len([a for a in acts if a is not None]) for acts in order.values()))
"""


#: The ``throughput`` case in one process: ``argv`` = schedule, world size, chunks, repeat, GPU models; prints
#: one JSON line: ops, lower seconds, and per model the median wall seconds of ``simulate``.
THROUGHPUT = """\
import gc, json, statistics, sys, time
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_schedule
path, world, chunks, repeat, models = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
prof = load_profile("h200")
t0 = time.perf_counter()
gc.disable()
prog = lower(load_schedule(path, {"world_size": world, "chunks": chunks}))
gc.enable()
out = {"ops": prog.N, "lower_s": time.perf_counter() - t0}
for model in models:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        tl = simulate(prog, prof, gpu_model=model)
        ts.append(time.perf_counter() - t0)
        del tl
    out[model] = statistics.median(ts)
print(json.dumps(out))
"""


#: The ``search`` case's axes (``schedsim search`` options): tp 1,2,4,8 × pp 1,2,4,8 × cp 1,2 × micro batch 2,8 ×
#: no / full recomputation × virtual stages none / 2 layers.
SEARCH_GRID = ["--tp", "1,2,4,8", "--pp", "1,2,4,8", "--cp", "1,2", "--micro-batch-size", "2,8", "--recompute",
               "none,full", "--vpp-layers", "2"]


def search_schedule(tmp: str, world: int = 64, gbs: int = 256) -> str:
    """``schedules/megatron_gpt_train.yaml`` on ``world`` GPUs with global batch ``gbs``, written under ``tmp``;
    its path."""
    text = (ROOT / "schedules/megatron_gpt_train.yaml").read_text()
    f = Path(tmp) / f"search{world}.yaml"
    f.write_text(text.replace("params: {world_size: 8, tp: 2, pp: 2, gbs: 16}",
                              f"params: {{world_size: {world}, tp: 2, pp: 2, gbs: {gbs}}}"))
    return str(f)


def search_case(tmp: str, roots: list[tuple[str, Path]], repeat: int) -> None:
    """The ``search`` case (module docstring): a row per package copy of ``roots``."""
    f = search_schedule(tmp)
    rs = median_runs(lambda tag: schedsim("search", f, "-p", "dgx_h100", *SEARCH_GRID, "-j", "2", "--format",
                                          "json", "--out", f"{tmp}/{tag}search"), repeat, roots)
    for (tag, _root), r in zip(roots, rs, strict=True):
        rows = json.loads(r[3])
        n = sum(x["status"] == "simulated" for x in rows)
        print(f"| {tag + ': ' if tag else ''}`search -j 2`, 64 GPUs, {len(rows)} configurations, {n} simulated "
              f"({1e3 * r[1] / n:.0f} CPU ms each; 1,000 on 2 cores: {r[1] / n * 1000 / 2:.0f} s) | {r[0]:.2f} | "
              f"{r[1]:.2f} | {r[2]:,.0f} | — | 1,000 in ≤ 60 s on 2 cores |", flush=True)


def row(label: str, ops: int | None, r: tuple[float, float, float, str], goal: str) -> str:
    per_op = f"{r[2] * 2**20 / ops:,.0f}" if ops else "—"
    return f"| {label} | {r[0]:.2f} | {r[1]:.2f} | {r[2]:,.0f} | {per_op} | {goal} |"



def _before_after_cases(cases: list[str], tmp: str, roots: list[tuple[str, Path]], repeat: int) -> None:
    """The shapes (ending with pp32's rows), pp32 alone and search cases: a table each, before and after with
    ``--base``."""
    if {"shapes", "pp32"} & set(cases):
        (shapes if "shapes" in cases else pp32)(tmp, roots, repeat)
    if "ring" in cases and "shapes" not in cases:
        print("\nthe `rank` ring of batched p2p, whole processes:\n")
        print("| case | ops | wall s | CPU s | CPU µs/op | peak RSS MiB | peak B/op | goal |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        _ring_rows(tmp, roots, repeat)
    if "trace" in cases and "shapes" not in cases:
        print("\n`predict --no-gantt` of 100k ops with its default trace.json, whole processes:\n")
        print("| case | ops | wall s | CPU s | CPU µs/op | peak RSS MiB | peak B/op | goal |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        _trace_rows(tmp, roots, repeat)
    if "tenm" in cases:
        tenm(tmp, roots, repeat)
    if "search" in cases:
        search_case(tmp, roots, repeat)
    if "same" in cases:
        if len(roots) != 2:
            sys.exit("--cases same compares two trees: pass --base DIR")
        if not same_case(tmp, roots):
            sys.exit(1)


def tenm(tmp: str, roots: list[tuple[str, Path]], repeat: int) -> None:
    """The ``tenm`` case (module docstring): a table, a row per size and package copy of ``roots``, run by run
    alternated; medians of ``repeat``."""
    print("\n`predict --no-gantt --no-trace` of `overlap_gen.yaml` on 8 ranks, whole processes (user + system CPU s; "
          "minor page faults):\n")
    print("| case | ops | wall s | CPU s | user s | system s | CPU µs/op | minor faults | peak RSS MiB | peak B/op | "
          "goal |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for ops in (1_000_000, 10_000_000):
        runs: list[list[tuple[float, Any, str]]] = [[] for _ in roots]
        for i in range(repeat):
            for k, (tag, root) in abba(i, roots):
                out = f"{tmp}/{tag}tenm{ops}"
                runs[k].append(run_usage(gen_predict(8, ops // 16, out) + ["--no-trace", "--max-ops", str(ops)], root))
                shutil.rmtree(out)  # ~1 GB of timeline.json at 10M ops: not left for the next run to replace
        for (tag, _root), rs in zip(roots, runs, strict=True):
            med = {k: statistics.median(getattr(r[1], k) for r in rs) for k in ("ru_utime", "ru_stime", "ru_minflt",
                                                                                "ru_maxrss")}
            cpu = statistics.median(r[1].ru_utime + r[1].ru_stime for r in rs)
            wall = statistics.median(r[0] for r in rs)
            print(f"| {tag + ': ' if tag else ''}`overlap_gen.yaml` | {ops:,} | {wall:.2f} | {cpu:.2f} | "
                  f"{med['ru_utime']:.2f} | {med['ru_stime']:.2f} | {cpu / ops * 1e6:.2f} | {med['ru_minflt']:,.0f} | "
                  f"{med['ru_maxrss'] / 1024:,.0f} | {med['ru_maxrss'] * 1024 / ops:,.0f} | "
                  f"{'≤ 10 s' if ops == 10_000_000 else '≤ 1 s'} |", flush=True)


def same_case(tmp: str, roots: list[tuple[str, Path]]) -> bool:
    """The ``same`` case (module docstring): a row per schedule, whether every output file of ``roots``' two copies
    is the same bytes; returns whether all are."""
    print("\n`predict --no-gantt` outputs of before and after, byte for byte (the manifest left out):\n")
    print("| schedule | files | same bytes? |")
    print("|---|---:|---|")
    cases = [(p.stem, schedsim("predict", "--no-gantt", str(p))) for p in sorted((ROOT / "schedules").glob("*.yaml"))]
    cases += [(f"overlap_gen.yaml, {2 * w * c:,} ops on {w} ranks", gen_predict(w, c, "")[:-2])  # without its --out
              for w, c in ((8, 62_500), (64, 7_813))]
    ok = True
    for k, (name, args) in enumerate(cases):
        outs = [Path(tmp) / f"same{tag}{k}" for tag, _root in roots]
        for (_tag, root), out in zip(roots, outs, strict=True):
            run(args + ["--out", str(out)], root)
        files = sorted(f.name for f in outs[0].iterdir() if not f.name.startswith("."))
        same = files == sorted(f.name for f in outs[1].iterdir() if not f.name.startswith(".")) and all(
            (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes() for f in files)
        ok &= same
        print(f"| {name} | {len(files)} | {'yes' if same else '**no**'} |", flush=True)
        for out in outs:
            shutil.rmtree(out)
    return ok


def cold_case(tmp: str, roots: list[tuple[str, Path]], base: Path | None, repeat: int) -> None:
    """The ``cold`` case (see the module's docstring): rows for each root of ``roots`` (bytecode) and for copies of
    ``base`` and this tree without bytecode."""
    sched = str(ROOT / "schedules" / "allgather_mm8.yaml")
    for kind in ("source", "bytecode"):
        if kind == "source":
            pkgs = [(tag, package_copy(Path(tmp) / f"source{tag}", bytecode=False, src=src))
                    for tag, src in ([("before", base.resolve()), ("after", ROOT)] if base else [("", ROOT)])]
        else:
            pkgs = roots
        note = ("sources compiled at every start (PYTHONDONTWRITEBYTECODE=1)" if kind == "source"
                else "bytecode compiled first, as `pip install` leaves a package")
        for label, args, goal in (
                ("cold start `check schedules/allgather_mm8.yaml`", schedsim("check", sched), "≤ 0.2 s"),
                ("cold start `predict --no-gantt schedules/allgather_mm8.yaml`",
                 schedsim("predict", "--no-gantt", sched, "--out", f"{tmp}/cold"), "≤ 0.3 s")):
            rs = cold_runs(args, max(7, repeat), pkgs)
            for (tag, _root), r in zip(pkgs, rs, strict=True):
                print(row(f"{tag + ': ' if tag else ''}{label}, {note}", None, r, goal), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", nargs="*", default=["million", "pipeline", "cold", "pp8dp128", "scaling", "shapes"])
    ap.add_argument("--max-ops", type=int, default=1_000_000,
                    help="Largest size of the scaling and throughput tables.")
    ap.add_argument("--gpu-model", nargs="+", default=["waves", "replay"], choices=["waves", "replay"],
                    help="GPU models of the throughput case.")
    ap.add_argument("--base", type=Path, default=None,
                    help="A checkout of another commit (extension built): million, cold, shapes, pp32, trace, ring "
                    "and search run from it too.")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="schedsim_goals_")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}: {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}; medians of {a.repeat}\n")
    installed = package_copy(Path(tmp) / "installed", bytecode=True)  # what every case but one runs
    roots = [("", installed)]
    if a.base is not None:
        roots = [("before", package_copy(Path(tmp) / "base", bytecode=True, src=a.base.resolve())),
                 ("after", installed)]
    if a.base is not None:
        print("before/after: each round runs both copies, the order alternated round by round (before first, then "
              "after first: ABBA), so that neither always finds the memory the other touched\n")
    print("| case | wall s | CPU s | peak RSS MiB | peak B/op | goal |")
    print("|---|---:|---:|---:|---:|---|")
    if "million" in a.cases:
        for world, chunks in ((8, 62_500), (64, 7_813)):
            ops = 2 * world * chunks
            rs = median_runs(lambda tag, w=world, c=chunks: gen_predict(w, c, f"{tmp}/{tag}m{w}"), a.repeat, roots)
            for (tag, _root), r in zip(roots, rs, strict=True):
                print(row(f"{tag + ': ' if tag else ''}`predict --no-gantt`, {ops:,} ops on {world} ranks, YAML → "
                          "timeline.json", ops, r, "≤ 1 s, ≤ 200 B/op"), flush=True)
    if "cold" in a.cases:
        cold_case(tmp, roots, a.base, a.repeat)
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
        first = runs[0]["replay"]
        print(f"\ninterleaved 1F1B pp=32 m=512 v=4, {first['ops']:,} ops, {runs[0]['actions']:,} torch actions "
              "(CPU s, medians; `benchmarks/speed/pipeline_vs_torch.py`; gpu_model replay = the unit profile's, "
              "Python loop; waves = the default, compiled loop):\n")
        print("| gpu_model | torch `_simulate_comms_compute` | schedsim expand | build DAG | checks | simulate | "
              "metrics + timeline.json | schedsim end to end | torch / schedsim end to end | simulate alone |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        torch_s = statistics.median(r["torch"][1] for r in runs)
        for model in ("replay", "waves"):
            med = {k: statistics.median(r[model][k][1] for r in runs) for k in
                   ("expand", "build", "checks", "simulate", "timeline", "total")}
            print(f"| {model} | {torch_s:.2f} | {med['expand']:.2f} | {med['build']:.2f} | {med['checks']:.2f} | "
                  f"{med['simulate']:.2f} | {med['timeline']:.2f} | {med['total']:.2f} | "
                  f"{torch_s / med['total']:.2f}× (goal ≥ 10×) | {torch_s / med['simulate']:.2f}× |", flush=True)
    _before_after_cases(a.cases, tmp, roots, a.repeat)
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
    if "throughput" in a.cases:
        throughput(installed, a.max_ops, a.repeat, a.gpu_model)


def throughput(root: Path, max_ops: int, repeat: int, models: list[str]) -> None:
    """The ``throughput`` case (module docstring): a row per size (10k ops, ×10 up to ``max_ops``) and GPU model,
    each size in one fresh process from the package copy ``root``."""
    print("\nsimulator throughput, `overlap_gen.yaml` on 8 ranks, `simulate()` alone (wall s, median):\n")
    print("| ops | gpu_model | lower s | simulate s | ops/s |")
    print("|---:|---|---:|---:|---:|")
    n = 10_000
    while n <= max_ops:
        got = json.loads(run([sys.executable, "-c", THROUGHPUT, GEN, "8", str(max(1, n // 16)), str(repeat), *models],
                             root)[3])
        for model in models:
            print(f"| {got['ops']:,} | {model} | {got['lower_s']:.2f} | {got[model]:.2f} | "
                  f"{got['ops'] / got[model]:,.0f} |", flush=True)
        n *= 10


def shapes(tmp: str, roots: list[tuple[str, Path]], repeat: int) -> None:
    """The ``shapes`` case (module docstring): one table, CPU µs and peak bytes per op, and torch's dry run
    beside the pipeline in the same run; a row per package copy of ``roots`` (``(tag, copy)``)."""
    files = {}
    for name, text in SHAPES.items():
        files[name] = f"{tmp}/{name}"
        Path(files[name]).write_text(text)
    print("\nshapes (issue 38), whole processes:\n")
    print("| shape | ops | wall s | CPU s | CPU µs/op | peak RSS MiB | peak B/op | goal |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")

    def lines(label: str, ops: int, make: Callable[[str], list[str]], goal: str) -> None:
        for (tag, _root), r in zip(roots, median_runs(make, repeat, roots), strict=True):
            print(f"| {tag + ': ' if tag else ''}{label} | {ops:,} | {r[0]:.2f} | {r[1]:.2f} | "
                  f"{r[1] / ops * 1e6:.2f} | {r[2]:,.0f} | {r[2] * 2**20 / ops:,.0f} | {goal} |", flush=True)

    _ring_rows(tmp, roots, repeat, files["ring_rank.yaml"])
    lines("send/recv whose names don't pair (`s{k}` / `r{k}`), `check`", 96_000,
          lambda tag: schedsim("check", files["unpaired_names.yaml"]), "≤ 1 s")
    lines("GEMM + all_reduce per chunk over 100,000 ranks, `predict --no-gantt`", 1_000_000,
          lambda tag: schedsim("predict", files["dp_ranks.yaml"], "--no-gantt", "--out", f"{tmp}/{tag}dp"), "≤ 2 s")
    _trace_rows(tmp, roots, repeat)
    pp32(tmp, roots, repeat, files)


def _ring_rows(tmp: str, roots: list[tuple[str, Path]], repeat: int, path: str | None = None) -> None:
    """The ``shapes`` case's `rank` ring rows (``ring`` runs them alone): a row per root of ``roots``, run by run
    alternated; ``path`` the ring's YAML (written under ``tmp`` when None)."""
    if path is None:
        path = f"{tmp}/ring_rank.yaml"
        Path(path).write_text(SHAPES["ring_rank.yaml"])
    rs = median_runs(lambda tag: schedsim("predict", path, "--no-gantt", "--set", "chunks=62500", "--out",
                                          f"{tmp}/{tag}ring"), repeat, roots)
    for (tag, _root), r in zip(roots, rs, strict=True):
        print(f"| {tag + ': ' if tag else ''}ring of batched p2p written with `rank`, 8 ranks, `predict --no-gantt` | "
              f"1,000,000 | {r[0]:.2f} | {r[1]:.2f} | {r[1]:.2f} | {r[2]:,.0f} | {r[2] * 2**20 / 1e6:,.0f} | "
              "≤ 2 µs, ≤ 200 B per op |", flush=True)


def _trace_rows(tmp: str, roots: list[tuple[str, Path]], repeat: int) -> None:
    """The ``shapes`` case's 100k-op trace.json rows (``trace`` runs them alone): a row per root of ``roots``."""
    for (tag, _root), r in zip(roots, median_runs(lambda tag: gen_predict(8, 6_250, f"{tmp}/{tag}t100k"), repeat,
                                                  roots), strict=True):
        print(f"| {tag + ': ' if tag else ''}`predict --no-gantt` of `overlap_gen.yaml` with its default trace.json | "
              f"100,000 | {r[0]:.2f} | {r[1]:.2f} | {r[1] / 100_000 * 1e6:.2f} | {r[2]:,.0f} | "
              f"{r[2] * 2**20 / 100_000:,.0f} | ≤ 2 µs, ≤ 200 B per op |", flush=True)


def pp32(tmp: str, roots: list[tuple[str, Path]], repeat: int, files: dict[str, str] | None = None) -> None:
    """The ``shapes`` case's last rows (``pp32`` runs them alone, under a header of its own): interleaved 1F1B
    pp=32 m=512 v=4 ``predict`` with charts beside torch's dry run, whole processes, from each root in turn."""
    if files is None:
        files = {"interleaved.yaml": f"{tmp}/interleaved.yaml"}
        Path(files["interleaved.yaml"]).write_text(SHAPES["interleaved.yaml"])
        print("\ninterleaved 1F1B pp=32 m=512 v=4 with charts, whole processes:\n")
        print("| shape | ops | wall s | CPU s | CPU µs/op | peak RSS MiB | peak B/op | goal |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
    runs = []
    for i in range(repeat):  # side by side: torch's process, then ours (from each root, order alternated), each time
        t = run([sys.executable, "-c", TORCH_DRY_RUN])
        ours = sorted((k, run(schedsim("predict", files["interleaved.yaml"], "--out", f"{tmp}/{tag}pp32"), root))
                      for k, (tag, root) in abba(i, roots))
        runs.append((t, [r for _k, r in ours]))
    t = tuple(statistics.median(x[0][k] for x in runs) for k in range(3))
    actions = int(runs[-1][0][3].strip().splitlines()[-1])
    print(f"| torch's dry run of interleaved 1F1B pp=32 m=512 v=4, whole process ({actions:,} actions) | — | "
          f"{t[0]:.2f} | {t[1]:.2f} | — | {t[2]:,.0f} | — | — |")
    for j, (tag, _root) in enumerate(roots):
        o = tuple(statistics.median(x[1][j][k] for x in runs) for k in range(3))
        ratio = statistics.median(x[0][1] / x[1][j][1] for x in runs)
        print(f"| {tag + ': ' if tag else ''}`predict` of the same schedule (schedsim's interleaved 1F1B), charts "
              f"included | — | {o[0]:.2f} | {o[1]:.2f} | — | {o[2]:,.0f} | — | torch / schedsim CPU s "
              f"{ratio:.2f}× (same-run ratio, median; goal ≥ 10×) |", flush=True)


if __name__ == "__main__":
    main()
