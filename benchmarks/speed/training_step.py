"""Prediction time of Megatron training steps (issue 36): the 1,024-GPU step and ``schedsim search``.

Every case runs in a fresh process (``python -m schedsim ...``), measured with ``os.wait4`` as
``speed_goals.py`` does: wall seconds, CPU seconds (user + system of that process and the worker processes it
waited for; other jobs on a shared machine do not count) and peak resident memory (of the largest process).

Cases:

* ``step``: ``predict --no-gantt`` of the 1,024-GPU step (TP8 × PP8 × DP16, m = 64, h = 12288, a = 96,
  s = 2048, vocab 51200, 8 layers, sequence parallel, distributed optimizer, overlapped gradient reduction) on
  ``dgx_h100``: by default one representative rank per class of ranks that run alike
  (:func:`schedsim.lower.training.represented_ranks`), with ``--full`` also every rank (``--full-ranks``, which
  needs ``--max-ops 5000000`` and about 2 GB). Goal: <= 5 s.
* ``search``: ``schedsim search`` of the 1.3B model of ``schedules/megatron_gpt_train.yaml`` on 64 GPUs, global
  batch 256, over tp 1,2,4,8 × pp 1,2,4,8 × cp 1,2 × micro batch 1,2,4,8 × none/selective/full × virtual stages
  none,1,2,3,4 (1,920 configurations, of which those Megatron refuses are not simulated), ``-j 2``. Goal:
  1,000 configurations in <= 60 s on 2 cores.
* ``search1000``: the same model over :data:`GRID_1000` (tp 1,2,4,8 × pp 1,2,4,8 × cp 1,2 × micro batch
  2,4,8,16 × none/selective/full × virtual stages none,1,2,3: 1,536 configurations, 1,017 simulated, the others
  refused with Megatron's reason), ``-j 2``, as a user runs it: stderr on a terminal (a pseudo-terminal), so the
  progress bar is drawn. With ``--base DIR`` (a checkout of another commit, its extension built) it runs from
  there and from this tree in turn, ``--repeat`` times each.

Usage: python benchmarks/speed/training_step.py [--cases step search search1000] [--full] [--jobs 2] [--base DIR]
       [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed_goals import ROOT, run, schedsim, search_schedule  # noqa: E402

STEP = """\
schema_version: 1
name: step1024
world_size: 1024
training:
  num_layers: 8
  hidden_size: 12288
  num_attention_heads: 96
  seq_length: 2048
  vocab_size: 51200
  bf16: true
  micro_batch_size: 1
  global_batch_size: 1024
  tp: 8
  pp: 8
  sequence_parallel: true
  use_distributed_optimizer: true
  overlap_grad_reduce: true
"""

GRID = ["--tp", "1,2,4,8", "--pp", "1,2,4,8", "--cp", "1,2", "--micro-batch-size", "1,2,4,8", "--recompute",
        "none,selective,full", "--vpp-layers", "1,2,3,4"]


#: The ``search1000`` case's axes: 1,536 configurations of which 1,017 are simulated (about 49 k op instances each,
#: by the loader's estimate, against 56 k for speed_goals.py's 182).
GRID_1000 = ["--tp", "1,2,4,8", "--pp", "1,2,4,8", "--cp", "1,2", "--micro-batch-size", "2,4,8,16", "--recompute",
             "none,selective,full", "--vpp-layers", "1,2,3"]


def run_tty(args: list[str], root: Path) -> tuple[float, float, float, str]:
    """:func:`speed_goals.run` with stderr on a pseudo-terminal (drained and dropped), so that the command draws
    what it draws for a user at a terminal: (wall s, CPU s of it and the workers it waited for, peak RSS MiB,
    stdout)."""
    import os
    import subprocess
    import threading
    import time

    master, slave = os.openpty()

    def drain() -> None:
        while True:
            try:
                if not os.read(master, 1 << 16):
                    return
            except OSError:
                return

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "120"}
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(args, cwd=root, stdout=out, stderr=slave, env=env)
        os.close(slave)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        t.join(5)
        os.close(master)
        if os.waitstatus_to_exitcode(status):
            raise RuntimeError(f"{' '.join(args)} exited {os.waitstatus_to_exitcode(status)}")
        out.seek(0)
        return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, out.read().decode()


def row(label: str, r: tuple[float, float, float, str], extra: str = "") -> str:
    return f"| {label} | {r[1]:.2f} | {r[0]:.2f} | {r[2]:,.0f} | {extra} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=["step", "search"], choices=["step", "search", "search1000"])
    ap.add_argument("--full", action="store_true", help="step: also simulate every rank (--full-ranks)")
    ap.add_argument("--jobs", type=int, default=2, help="search: worker processes (-j)")
    ap.add_argument("--base", type=Path, help="search1000: also run from this checkout (extension built), in turn")
    ap.add_argument("--repeat", type=int, default=1, help="search1000: runs of each tree")
    args = ap.parse_args()
    print("| case | CPU s | wall s | peak RSS MiB | result |")
    print("|---|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        if "step" in args.cases:
            f = Path(tmp) / "step1024.yaml"
            f.write_text(STEP)
            for full in ([False, True] if args.full else [False]):
                out = Path(tmp) / f"out_{full}"
                cmd = schedsim("predict", str(f), "-p", "dgx_h100", "--no-gantt", "--format", "json", "--out",
                               str(out), *(["--full-ranks", "--max-ops", "5000000"] if full else []))
                r = run(cmd)
                d = json.loads(r[3])
                print(row(f"1,024-GPU step, {'every rank' if full else 'representatives'}", r,
                          f"iteration {1e3 * d['training']['iteration_s']:.3f} ms, {d['metrics']['ops']:,} ops"),
                      flush=True)
        if "search" in args.cases:
            f = search_schedule(tmp)
            cmd = schedsim("search", f, "-p", "dgx_h100", *GRID, "-j", str(args.jobs), "--format", "json",
                           "--out", str(Path(tmp) / "search"))
            r = run(cmd)
            rows = json.loads(r[3])
            ran = [x for x in rows if x["status"] == "simulated"]
            best = ran[0]["setting"] if ran else {}
            print(row(f"search, 64 GPUs, {len(rows):,} configurations, -j {args.jobs}", r,
                      f"{len(ran):,} simulated, {len(rows) - len(ran):,} refused or over limits; best "
                      f"{ran[0]['iteration_s'] * 1e3:.1f} ms ({', '.join(f'{k} {v}' for k, v in best.items())})"
                      if ran else "none simulated"), flush=True)
        if "search1000" in args.cases:
            import time

            f = search_schedule(tmp)
            roots = ([("before", args.base.resolve())] if args.base else []) + [("after", ROOT)]
            for k in range(args.repeat):
                for tag, root in roots:
                    cmd = schedsim("search", f, "-p", "dgx_h100", *GRID_1000, "-j", str(args.jobs), "--format",
                                   "json", "--out", str(Path(tmp) / f"s1000_{tag}_{k}"))
                    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
                    r = run_tty(cmd, root)
                    rows = json.loads(r[3])
                    ran = [x for x in rows if x["status"] == "simulated"]
                    (Path(tmp) / f"rows_{tag}_{k}.json").write_text(r[3])
                    print(row(f"{tag}: search, 64 GPUs, {len(rows):,} configurations, {len(ran):,} simulated, -j "
                              f"{args.jobs}, progress bar on", r,
                              f"{1e3 * r[1] / max(1, len(ran)):.0f} CPU ms a simulated configuration; load average "
                              f"{load} at the start, {time.strftime('%H:%M:%S', time.gmtime())} UTC at the end"),
                          flush=True)
            if args.base:
                same = all((Path(tmp) / f"rows_before_{k}.json").read_text() == (Path(tmp) / f"rows_after_{k}.json")
                           .read_text() for k in range(args.repeat))
                print(f"search.json rows before and after {'identical' if same else 'DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
