"""Issue 32 item 5: ``compare`` and ``analyze`` of a 1M-op timeline, before and after they worked on columns.

Every case runs in a fresh process (``python -m schedsim ...``), measured with ``os.wait4``: wall seconds, CPU
seconds (user + system of that process alone, so other jobs on a shared machine do not count) and peak resident
memory. The package runs from a copy (``benchmarks/speed/speed_goals.py``'s :func:`package_copy`, bytecode compiled):
this checkout's, and with ``--before REF`` also the one of git revision ``REF`` (``git archive``), so both columns
come from the same machine in the same run.

Inputs (made once, by this checkout, into a temporary folder):

* ``P``: ``predict --no-gantt`` of ``benchmarks/data/overlap_gen.yaml`` at ``--ops`` ops on 8 ranks (1M: 62,500
  chunks): timeline.json;
* ``Q``: ``P`` with its rows in a random order (seed 0) and every op 10 % longer: a "measured" timeline whose
  ops match ``P``'s by id but not row by row.

Cases: ``predict`` (making ``P``, for scale), ``compare P P --no-gantt``, ``compare P Q --no-gantt``,
``compare P Q`` (with the stacked Gantt chart), ``analyze P``. Goal (issue 32): compare of 1M ops <= 5 s, <= 1 GB.

Usage: python benchmarks/speed/compare_scale.py [--ops 1000000] [--before 57a1fa8] [--cases ...] [--timeout 600]
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed_goals import GEN, ROOT, package_copy, run  # noqa: E402  (run: inputs, timed: the cases)

CASES = ("predict", "compare_same", "compare_shuffled", "compare_gantt", "analyze")


def make_inputs(tmp: Path, ops: int, pkg: Path) -> tuple[Path, Path]:
    """``P`` (predicted) and ``Q`` (shuffled, stretched) timelines of ``ops`` ops."""
    p = tmp / "P"
    run([sys.executable, "-m", "schedsim", "predict", GEN, "--no-gantt", "--set", "world_size=8", "--set",
         f"chunks={ops // 16}", "--out", str(p)], pkg)
    q = tmp / "Q"
    code = f"""
import numpy as np
from schedsim.sim.timeline import SpanColumns, Timeline
tl = Timeline.read_json({str(p / 'timeline.json')!r})
c = tl.columns
o = np.random.default_rng(0).permutation(len(c))
ol = o.tolist()
cat = lambda col: (col[0], col[1][o])
st = c.start_s[o]
cols = SpanColumns([c.id[i] for i in ol], [c.name[i] for i in ol], c.rank[o], cat(c.stream), cat(c.kind),
                   cat(c.resource), st, st + (c.end_s[o] - st) * 1.1, c.solo_s[o], c.ready_s[o], c.bytes[o],
                   c.flops[o], c.tags_of(ol))
out = Timeline(tl.schedule, "execute", tl.world_size, tl.launch, columns=cols, meta={{}})
out.write_json({str(q)!r} + "/timeline.json")
"""
    q.mkdir()
    run([sys.executable, "-c", code], pkg)
    return p, q


def cmd(case: str, p: Path, q: Path, out: Path) -> list[str]:
    s = [sys.executable, "-m", "schedsim"]
    return {"predict": [*s, "predict", GEN, "--no-gantt", "--set", "world_size=8", "--set",
                        f"chunks={ARGS.ops // 16}", "--out", str(out)],
            "compare_same": [*s, "compare", str(p), str(p), "--no-gantt", "--out", str(out)],
            "compare_shuffled": [*s, "compare", str(p), str(q), "--no-gantt", "--out", str(out)],
            "compare_gantt": [*s, "compare", str(p), str(q), "--out", str(out)],
            "analyze": [*s, "analyze", str(p / "timeline.json")]}[case]


def checkout(ref: str, dst: Path) -> Path:
    """The package of git revision ``ref`` in ``dst`` (schedsim/ and executor/, bytecode compiled), with this
    checkout's built extension (the ``waves`` event loop, ``schedsim/sim/_cwaves*.so``) when ``ref`` has the same
    C source: git holds no build."""
    data = subprocess.run(["git", "archive", ref, "schedsim", "executor"], cwd=ROOT, capture_output=True,
                          check=True).stdout
    src = dst / "src"
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        t.extractall(src, filter="data")
    c = "schedsim/sim/_cwaves.c"
    if (src / c).is_file() and (src / c).read_bytes() == (ROOT / c).read_bytes():
        for so in (ROOT / "schedsim" / "sim").glob("_cwaves*.so"):
            shutil.copy2(so, src / "schedsim" / "sim" / so.name)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True)
    return src


def timed(args: list[str], pkg: Path, timeout: float) -> str:
    """``wall | CPU s | peak MiB`` cells of one run in a fresh process (as :func:`speed_goals.run` measures it);
    a run still going after ``timeout`` wall seconds is killed: ``> timeout | > CPU so far | > peak so far``."""
    env = {**os.environ, "PYTHONPATH": str(pkg)}
    t0 = time.perf_counter()
    p = subprocess.Popen(args, cwd=pkg, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - t0 > timeout:
            p.kill()
            _, status, ru = os.wait4(p.pid, 0)
            return f"> {timeout:.0f} | > {ru.ru_utime + ru.ru_stime:.1f} | > {ru.ru_maxrss / 1024:,.0f} "
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        err = (p.stderr.read() if p.stderr else b"").decode(errors="replace").strip().splitlines()
        return f"failed: {(err[-1] if err else '?')[:60]} | — | — "
    return f"{wall:.2f} | {ru.ru_utime + ru.ru_stime:.2f} | {ru.ru_maxrss / 1024:,.0f} "


def main() -> None:
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--before", default=None, help="git revision to measure too (e.g. 57a1fa8)")
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    ap.add_argument("--skip-after", action="store_true", help="measure only --before")
    ap.add_argument("--timeout", type=float, default=600.0, help="wall seconds one run may take")
    ARGS = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="schedsim_cmp_"))
    after = package_copy(tmp / "after", bytecode=True)
    before = checkout(ARGS.before, tmp / "before") if ARGS.before else None
    p, q = make_inputs(tmp, ARGS.ops, after)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}: {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}; {ARGS.ops:,} ops\n")
    head = "| case | " + ("before wall s | before CPU s | before peak MiB | " if before else "")
    print(head + "wall s | CPU s | peak MiB |")
    print("|---|" + "---:|" * (6 if before else 3))
    for case in ARGS.cases:
        cells = [f"`{' '.join(cmd(case, Path('P'), Path('Q'), Path('out'))[3:]).replace(GEN, 'overlap_gen.yaml')}`"]
        for pkg in ([before] if before else []) + ([] if ARGS.skip_after else [after]):
            out = Path(tempfile.mkdtemp(dir=tmp))
            cells.append(timed(cmd(case, p, q, out), pkg, ARGS.timeout))
        print("| " + " | ".join(cells) + "|", flush=True)


ARGS: argparse.Namespace

if __name__ == "__main__":
    main()
