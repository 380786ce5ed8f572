"""Review (break2) of the round-2 speed work: inputs that once crashed the compiled helpers or made them differ
from their numpy / Python references, each pinned against an independent path."""

from __future__ import annotations

import functools
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


@functools.cache
def _v3_text() -> str:
    """A version-3 timeline document (a simulated 2-rank pipeline: coded names and tags, based float columns)."""
    from schedsim.hardware.profile import load_profile
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_schedule, parse_overrides
    from tests.conftest import ROOT

    prog = lower(load_schedule(ROOT / "schedules" / "pipeline_schedules.yaml", parse_overrides(["p=2", "m=2"])))
    tl = simulate(prog, load_profile("h200"), gpu_model="waves")
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        tl.write_json(Path(tmp) / "t.json")
        return (Path(tmp) / "t.json").read_text()


@pytest.mark.parametrize("col", ["bytes", "flops", "ready_s", "solo_s", "stream_s"])
@pytest.mark.parametrize("form", ["based", "list"])
def test_an_infinite_float_column_value_is_a_trace_error_naming_the_column(tmp_path, col, form) -> None:  # type: ignore[no-untyped-def]
    """Python's json reads the Infinity token; no schedsim writer makes one (orjson writes inf as null) and the
    row layout refuses it (trace.validate). The column layouts must too, naming the column: an infinite
    ``bytes`` once reached ``schedsim analyze`` as an OverflowError traceback (int(inf))."""
    import json

    from schedsim.errors import TraceError
    from schedsim.sim.timeline import Timeline

    d = json.loads(_v3_text())
    n = d["n_ops"]
    vals = [float("inf") if i == 3 else (1.0 if col in ("bytes", "flops") else 0.5) for i in range(n)]
    d["columns"][col] = {"base": 1.0, "index": [3], "values": [float("inf")]} if form == "based" else vals
    path = tmp_path / "t.json"
    path.write_text(json.dumps(d))  # Infinity, as Python's json writes it
    with pytest.raises(TraceError, match=f"'{col}'"):
        Timeline.read_json(path)
    if col != "bytes":  # the CLI once (the reader is shared)
        return
    r = subprocess.run([sys.executable, "-m", "schedsim", "analyze", str(path)], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and col in r.stderr + r.stdout


def test_the_standard_library_writer_writes_inf_as_null_like_orjson() -> None:
    """dumps_json's fallback (an integer past 64 bits in a tag) writes a float array's NaN and ±inf as null, as
    orjson does, so what it writes the reader takes (it refuses the Infinity token)."""
    import json

    from schedsim.sim.timeline import dumps_json

    doc = {"big": 2**70, "a": np.array([1.5, np.inf, -np.inf, np.nan, -0.0]), "x": np.float64(np.inf)}
    assert json.loads(dumps_json(doc)) == {"big": 2**70, "a": [1.5, None, None, None, -0.0], "x": None}
