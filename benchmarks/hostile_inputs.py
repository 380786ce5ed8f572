"""Time every input of tests/data/hostile/ through the CLI (one subprocess each) and print a table.

Issue 12's goal: 0 tracebacks, 0 runs past 20 s on inputs under 1 MB. Refused inputs must exit 2;
the valid-but-large ones (a 100,000-rank all_reduce, a 150,000-character op name) must succeed.

    python benchmarks/hostile_inputs.py            # all cases
    python benchmarks/hostile_inputs.py world      # cases whose file name contains "world"
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "data" / "hostile"
sys.path.insert(0, str(ROOT / "tests" / "core"))

from test_hostile import LEGIT, command_for  # noqa: E402

LIMIT_S = 20.0


def cases() -> list[tuple[str, list[str], int]]:
    tmp = Path(tempfile.mkdtemp(prefix="hostile-"))
    out = []
    for p in sorted(HOSTILE.iterdir()):
        if p.name == "timeline_ok.json":
            continue
        if p.name in LEGIT:
            out.append((p.name + " (check)", ["check", str(p)], 0))
            out.append((p.name + " (predict)", ["predict", str(p), "--out", str(tmp / p.stem)], 0))
        else:
            out.append((p.name, command_for(p, tmp), 2))
    return out


def main() -> None:
    pat = sys.argv[1] if len(sys.argv) > 1 else ""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"{'input':48s} {'size':>9s} {'want':>4s} {'rc':>4s} {'time (s)':>9s}  verdict")
    bad = 0
    for name, cmd, want in cases():
        if pat not in name:
            continue
        size = (HOSTILE / name.split(" ")[0]).stat().st_size
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, "-m", "schedsim", *cmd], cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=120)
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired:
            rc, err = -1, "timeout after 120 s"
        dt = time.perf_counter() - t0
        ok = rc == want and "Traceback" not in err and dt <= LIMIT_S
        bad += not ok
        print(f"{name:48s} {size:9d} {want:4d} {rc:4d} {dt:9.2f}  {'ok' if ok else 'FAIL: ' + err.strip()[-200:]}")
    print(f"{bad} failing case(s); limit {LIMIT_S:.0f} s per case")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
