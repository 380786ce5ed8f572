"""Generated hostile inputs too big or too slow for the unit tests (issue 12, second review), timed through
the CLI, one subprocess each (hang guard 60 s), as a table: case, exit code, seconds, traceback?, message.

Kinds: a 1M-event Kineto trace (128 MB; time it), a literal schedule of 400,000 written ops (25 MB), a GEMM of
m = n = k = 2**40 (the documented maximum), 10,000 literal streams and 20,000 templated streams on one
rank (Gantt lane folding), a 900 kB stream name and a 400 kB schedule/op name (label cutting), a 1M-rank
all_reduce at the rank limit, foreach loops with a `when:` that filters every iteration (the expander's own
speed), a loop range depending on the outer variable at full size, a 1 MB parameter string in 3000 op names.

    python benchmarks/speed/hostile_generated.py            # all cases
    python benchmarks/speed/hostile_generated.py stream     # cases whose name contains "stream"

Goal (issue 12): 0 tracebacks; refused inputs exit 2; inputs under 1 MB finish within 20 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
H = "schema_version: 1\nname: h\n"
HANG_S = 60


def _yaml(tmp: Path) -> dict[str, tuple[str, int]]:
    """name -> (YAML text, expected exit code)."""
    ops10k = "".join(f"  - {{name: o{i}, kind: compute, duration_us: 1, stream: s{i}}}\n" for i in range(10_000))
    return {
        "streams_10k_literal": (H + "world_size: 1\nops:\n" + ops10k, 0),
        "streams_20k_templated": (H + "world_size: 1\nops:\n  - foreach: {i: range(20000)}\n    ops:\n"
                                  "      - {name: 'o{i}', kind: compute, duration_us: 1, stream: 's{i}'}\n", 0),
        "stream_name_900kB": (H + "world_size: 1\nops:\n  - {name: o, kind: compute, duration_us: 1, stream: "
                              + "s" * 900_000 + "}\n", 0),
        "schedule_and_op_name_400kB": ("schema_version: 1\nname: " + "n" * 400_000 + "\nworld_size: 1\nops:\n"
                                       "  - {name: " + "o" * 400_000 + ", kind: compute, duration_us: 1}\n", 0),
        # refused: past the 100,000-rank default (SCHEDSIM_MAX_RANKS)
        "world_1M_allreduce": (H + "world_size: 1000000\nops:\n  - {name: ar, kind: all_reduce, bytes: 1024}\n", 2),
        "foreach_1M_when_false": (H + "world_size: 1\nparams:\n  r: \"{range(1000000)}\"\nops:\n"
                                  "  - foreach: {i: r}\n    ops:\n"
                                  "      - {name: 'x{i}', kind: compute, duration_us: 1, when: 'i < 0'}\n"
                                  "  - {name: y, kind: compute, duration_us: 1}\n", 0),
        "foreach_inner_range_of_outer_2000x2000": (
            H + "world_size: 1\nops:\n  - foreach: {i: range(2000)}\n    ops:\n      - foreach: {j: range(i*0+2000)}"
            "\n        ops:\n          - {name: 'a{i}_{j}', kind: compute, duration_us: 1}\n", 2),
        # issue 32: a literal schedule is no alias bomb, however long (before: refused after 16.6 s at 400k ops)
        "literal_400k_ops": (H + "world_size: 1\nops:\n" + "".join(
            f"  - {{name: o{i}, kind: compute, duration_us: 1, stream: s{i % 4}}}\n" for i in range(400_000)), 0),
        # issue 32: the documented maximum of a GEMM dimension, all three at once (before: int64 overflow)
        "matmul_mnk_2p40": (H + "world_size: 1\nops:\n  - {name: mm, kind: matmul, m: 1099511627776, "
                            "n: 1099511627776, k: 1099511627776, dtype: bf16}\n", 0),
        "param_1MB_string_in_3000_names": (
            H + "world_size: 1\nparams:\n  big: \"{'a'*1000000}\"\nops:\n  - foreach: {i: range(3000)}\n    ops:\n"
            "      - {name: '{big}{i}', kind: compute, duration_us: 1}\n", 2),
    }


def _kineto_1m(path: Path) -> None:
    ev = ('{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":%d,"ts":%d.0,"dur":1.0,'
          '"args":{"device":0,"stream":%d}}')
    with open(path, "w") as f:
        f.write('{"schemaVersion":1,"distributedInfo":{"rank":0,"world_size":1},"traceEvents":[')
        f.write(",".join(ev % (7 + i % 4, 2 * i, 7 + i % 4) for i in range(1_000_000)))
        f.write("]}")


def cases(tmp: Path) -> list[tuple[str, list[str], int, int]]:
    """(name, CLI args, expected exit code, input bytes)."""
    out = []
    for name, (text, rc) in _yaml(tmp).items():
        p = tmp / f"{name}.yaml"
        p.write_text(text)
        out.append((name + " (predict)", ["predict", str(p), "--out", str(tmp / name)], rc, p.stat().st_size))
    k = tmp / "kineto_1M_events.json"
    _kineto_1m(k)
    out.append(("kineto_1M_events (import)", ["import", "kineto", str(k), "--out", str(tmp / "k")], 0,
                k.stat().st_size))
    return out


def main() -> None:
    pat = sys.argv[1] if len(sys.argv) > 1 else ""
    tmp = Path(tempfile.mkdtemp(prefix="hostile-gen-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"{'case':48s} {'bytes':>11s} {'rc':>4s} {'want':>4s} {'s':>6s}  tb  message")
    bad = 0
    for name, args, want, size in cases(tmp):
        if pat not in name:
            continue
        t0 = time.perf_counter()
        try:
            r = subprocess.run([sys.executable, "-m", "schedsim", *args], capture_output=True, text=True,
                               timeout=HANG_S, env=env, cwd=ROOT)
            rc, err = r.returncode, r.stderr
        except subprocess.TimeoutExpired:
            rc, err = -1, f"HUNG past {HANG_S} s"
        dt = time.perf_counter() - t0
        tb = "Traceback" in err
        slow = size < 1_000_000 and dt > 20.0
        bad += tb or rc != want or slow
        msg = next((ln for ln in err.splitlines() if ln.startswith("error:")), err.strip().splitlines()[-1:] or [""])
        msg = msg if isinstance(msg, str) else msg[0]
        print(f"{name:48s} {size:11,d} {rc:4d} {want:4d} {dt:6.1f}  {'YES' if tb else 'no ':3s} "
              f"{'SLOW ' if slow else ''}{msg[:110]}")
    print(json.dumps({"failures": bad}))


if __name__ == "__main__":
    main()
