"""The hostile corpus (tests/data/hostile/, one small file per kind of issue 12's bad inputs), run in process.

Every file must end in exit 2 with ``error: <the file> ...`` and a ``fix:`` line, no traceback. A SIGALRM
hang guard (generous: 30 s) stops a case that hangs; it is not a performance assertion, the timings are in
``tests/hostile_inputs.py``. Valid-but-large inputs of the corpus (``LEGIT``) are timed there, not here.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app

HOSTILE = Path(__file__).resolve().parents[1] / "data" / "hostile"
#: Valid inputs that must be fast rather than refused (timed in tests/hostile_inputs.py).
LEGIT = {"world_100000_allreduce.yaml", "long_op_name_150k.yaml", "timeline_ok.json"}
HANG_GUARD_S = 30


@contextmanager
def hang_guard(seconds: int = HANG_GUARD_S):  # type: ignore[no-untyped-def]
    def on_alarm(signum, frame):  # type: ignore[no-untyped-def]
        raise TimeoutError(f"hang guard: still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def command_for(path: Path, tmp: Path) -> list[str]:
    """The CLI command a user would point at this kind of file."""
    n = path.name
    if n.endswith(".yaml"):
        return ["check", str(path)]
    if n.startswith("kineto_"):
        return ["import", "kineto", str(path), "--out", str(tmp / "imp")]
    if n.startswith("nccl_"):
        return ["calibrate", "--from-nccl-tests", str(path), "--out", str(tmp / "p.yaml")]
    if n.startswith("timeline_"):
        return ["compare", str(HOSTILE / "timeline_ok.json"), str(path), "--out", str(tmp / "cmp")]
    raise AssertionError(f"no command for {n}")


CASES = sorted(p.name for p in HOSTILE.iterdir() if p.name not in LEGIT)


def test_corpus_has_every_kind() -> None:
    kinds = {"foreach_", "pipeline_", "expr_", "yaml_nested", "kineto_nested", "kineto_ts_nan", "kineto_dur_",
             "kineto_rank_outside", "kineto_gzip_bomb", "nccl_nan", "nccl_inf", "nccl_negative", "nccl_wrong",
             "timeline_version", "timeline_end_before", "timeline_nan", "timeline_duplicate"}
    for k in kinds:
        assert any(c.startswith(k) for c in CASES), k


@pytest.mark.parametrize("name", CASES)
def test_hostile_input_exits_2_naming_file_and_fix(name: str, tmp_path: Path) -> None:
    path = HOSTILE / name
    with hang_guard():
        res = CliRunner().invoke(app, command_for(path, tmp_path))
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in out
    assert res.exit_code == 2, out[-1000:]
    err = out[out.index("error: "):]
    assert str(path) in err, err
    assert "fix:" in err, err
    assert not (tmp_path / "imp").exists() and not (tmp_path / "p.yaml").exists()
