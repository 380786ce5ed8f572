"""Review (break2) of the round-2 speed work: inputs that once crashed the compiled helpers or made them differ
from their numpy / Python references, each pinned against an independent path."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from schedsim.lower.pipeline import compiled


def _survives(code: str) -> subprocess.CompletedProcess[str]:
    """Run code in a fresh interpreter: a compiled helper that writes out of bounds kills it (a crash is a
    failure of this test, not of the whole run)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(compiled("torch_rows") is None, reason="compiled extension not built")
def test_torch_rows_refuses_negative_counts_and_adjustments() -> None:
    """counts [5, -3] sum to n = 2 but give rank 0 steps 0..4 (past the arrays); an adjustment past the steps
    overflows the sweep numbers. Both are bad input: ValueError, no heap corruption."""
    r = _survives(
        """
        import numpy as np
        from schedsim.sim import _cwaves as C
        i64 = np.int64
        z = lambda n: np.zeros(n, i64)
        for counts, prod, adj in (([5, -3], [-1, -1], [0, 0]), ([2], [-1, 0], [0, 2**63 - 1]),
                                  ([1, 1], [-1, 0], [0, -1])):
            try:
                C.torch_rows(np.array(counts, i64), z(2), z(2), z(2), np.array(prod, i64), np.array(adj, i64),
                             z(2), z(2), z(2), z(2), z(2), z(2), z(2), z(2), z(2))
                print("accepted")
            except ValueError as e:
                print("ValueError", e)
        """
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["ValueError torch_rows: inconsistent counts, lengths or indices"] * 3
