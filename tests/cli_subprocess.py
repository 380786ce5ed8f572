"""``python -m schedsim ARGS`` in a subprocess with a timeout, for tests where a hang must fail the test
instead of stalling the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_cli(*args: object, cwd: Path, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """``schedsim ARGS`` in ``cwd``; a run past ``timeout`` comes back with returncode -9 and its output so far."""
    try:
        return subprocess.run([sys.executable, "-m", "schedsim", *map(str, args)], cwd=cwd, capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, "SCHEDSIM_DEBUG": ""})
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return subprocess.CompletedProcess(e.cmd, -9, out, err)
