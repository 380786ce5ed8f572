"""What shared links (schedsim.network.share) cost `predict`, against a commit before them (issue 35).

Cases, each `predict --no-gantt --no-trace` in a fresh process (wall and CPU seconds of that process,
os.wait4; medians over --repeat):

* ``dp100k``: 100,000 ranks, a GEMM then two data-parallel gradient all_reduces of 256 MiB over all ranks
  (two buckets on two streams; NCCL runs one communicator's calls in order, so they follow each other), on
  ``dgx_h100`` (8 GPUs and 8 NICs a node: 12,500 nodes, 100,000 NIC links). Issue 35's goal: <= 10 s.
* ``dp100k_2comm``: the same with the second bucket on ranks 0..99,998 (a communicator of its own), so the two
  all_reduces run at once and share 99,999 NICs: their starts and ends refill max-min over those links.
* ``pp8dp128``: benchmarks/data/pp8_dp128.yaml (1,024 ranks, 214,016 ops) on ``h200`` (8 GPUs a node): its
  pipeline sends and DP all_reduces across nodes are flows. Issue 35's goal for a 1,024-rank 3D step: <= 5 s.

The commit before (``--before``, default the branch's merge base with main) is exported with ``git archive``
into a temporary folder and its extension built there; the makespans of both are printed, equal where no two
transfers share a link.

Usage: python benchmarks/speed/shared_links_cost.py [--before REV] [--repeat 3] [--cases dp100k dp100k_2comm pp8dp128]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DP = """schema_version: 1
name: {name}
world_size: 100000
ops:
  - {{name: bwd, kind: matmul, m: 4096, n: 4096, k: 4096, dtype: bf16, stream: compute}}
  - {{name: ar0, kind: all_reduce, bytes: 268435456, deps: [bwd], stream: dp}}
  - {{name: ar1, kind: all_reduce, bytes: 268435456, deps: [bwd], stream: dp2{group}}}
"""


def cases(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Case name -> (schedule file, profile)."""
    one = tmp / "dp100k.yaml"
    one.write_text(DP.format(name="dp100k", group=""))
    two = tmp / "dp100k_2comm.yaml"
    two.write_text(DP.format(name="dp100k_2comm", group=", ranks: \"range(99999)\", group: \"range(99999)\""))
    return {"dp100k": (one, "dgx_h100"), "dp100k_2comm": (two, "dgx_h100"),
            "pp8dp128": (ROOT / "benchmarks/data/pp8_dp128.yaml", "h200")}


def run(root: Path, sched: Path, prof: str, out: Path) -> tuple[float, float, float]:
    """(wall s, CPU s, makespan s) of one predict in a fresh process importing schedsim from ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    args = [sys.executable, "-m", "schedsim", "predict", str(sched), "--profile", prof, "--no-gantt", "--no-trace",
            "-o", str(out)]
    t0 = time.perf_counter()
    p = subprocess.Popen(args, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"{' '.join(args)} failed:\n{p.stderr.read().decode()[-2000:] if p.stderr else ''}")
    tl = json.loads((out / "timeline.json").read_text())
    return wall, ru.ru_utime + ru.ru_stime, float(tl["metrics"]["makespan_s"])


def export(rev: str, dst: Path) -> Path:
    """``rev`` of this repository in ``dst`` with its extension built in place."""
    dst.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dst)], input=archive, check=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=dst, check=True,
                   capture_output=True)
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default=None, help="commit before shared links (default: merge base with main)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", nargs="*", default=["dp100k", "dp100k_2comm", "pp8dp128"])
    a = ap.parse_args()
    before = a.before or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, check=True,
                                        capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        old = export(before, tmp / "before")
        known = cases(tmp)
        print(f"| case | profile | before ({before[:7]}) wall / CPU s | after wall / CPU s | makespan before | after |")
        print("|---|---|---|---|---|---|")
        for name in a.cases:
            sched, prof = known[name]
            got = {}
            for label, root in (("before", old), ("after", ROOT)):
                runs = [run(root, sched, prof, tmp / f"o-{label}-{name}") for _ in range(a.repeat)]
                got[label] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
                              runs[-1][2])
            b, f = got["before"], got["after"]
            print(f"| {name} | {prof} | {b[0]:.2f} / {b[1]:.2f} | {f[0]:.2f} / {f[1]:.2f} | {b[2] * 1e3:.4f} ms | "
                  f"{f[2] * 1e3:.4f} ms |", flush=True)


if __name__ == "__main__":
    main()
