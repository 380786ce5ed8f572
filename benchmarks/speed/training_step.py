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

Usage: python benchmarks/speed/training_step.py [--cases step search] [--full] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed_goals import run, schedsim, search_schedule  # noqa: E402

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


def row(label: str, r: tuple[float, float, float, str], extra: str = "") -> str:
    return f"| {label} | {r[1]:.2f} | {r[0]:.2f} | {r[2]:,.0f} | {extra} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=["step", "search"], choices=["step", "search"])
    ap.add_argument("--full", action="store_true", help="step: also simulate every rank (--full-ranks)")
    ap.add_argument("--jobs", type=int, default=2, help="search: worker processes (-j)")
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


if __name__ == "__main__":
    main()
