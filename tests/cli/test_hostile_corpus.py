"""The hostile-input corpus of issue 32 (``tests/hostile_inputs.py``: every kind of bad input in every
command that reads it), run in CI: in process where it can (CliRunner), as a subprocess where the case is about
the process itself (closed streams, encodings, signals).

Each case must end in one of its right exit codes (2 with ``error:`` and ``fix:`` lines for bad input), with no
traceback, no raw control character on the terminal, a bounded stderr, within its time (a SIGALRM guard in
process, a timeout for subprocesses), and with no file touched outside its output folder.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from test_hostile import hang_guard  # this folder is on the path under pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("hostile_inputs", ROOT / "tests/hostile_inputs.py")
assert _spec is not None and _spec.loader is not None
H = importlib.util.module_from_spec(_spec)
sys.modules["hostile_inputs"] = H
_spec.loader.exec_module(H)

CASES = H.cases()


def test_corpus_covers_every_input_kind_and_command() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) >= 400 and len(set(ids)) == len(ids)
    for slot, (_valid, _name, commands) in H.SLOTS.items():
        for cmd in commands:
            assert any(i.startswith(f"{slot}/fifo/{cmd}") for i in ids), (slot, cmd)
    for kind in ("set/", "env/", "proc/", "data/"):
        assert any(i.startswith(kind) for i in ids), kind


_LIMITS = ("SCHEDSIM_MAX_OPS", "SCHEDSIM_MAX_RANKS", "SCHEDSIM_MAX_CHARS", "SCHEDSIM_MAX_STREAMS",
           "SCHEDSIM_MAX_INPUT_BYTES", "SCHEDSIM_START_MARGIN_S", "SCHEDSIM_TEARDOWN_S", "SCHEDSIM_DEBUG")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_case(case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                      request: pytest.FixtureRequest) -> None:
    if case.id in H.TRACE_READER_OWNED:
        request.applymarker(pytest.mark.xfail(reason="the Kineto/nsys reader's own message", strict=False))
    ind, out = H.make_inputs(case, tmp_path)
    before = H.snapshot(tmp_path)
    if case.proc:
        rc, so, se = H.run_subprocess(case, ind, out)
    else:
        from schedsim.cli import app

        for k in _LIMITS:
            monkeypatch.delenv(k, raising=False)
        for k, v in case.env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.chdir(tmp_path)
        rc = None
        so = se = ""
        try:
            with hang_guard(H.CASE_TIMEOUT_S):
                res = CliRunner().invoke(app, H.expand(case.args, ind, out))
        except TimeoutError:
            pass
        else:
            rc, so = res.exit_code, res.stdout
            se = res.stderr if res.stderr_bytes is not None else ""
            if res.exception is not None and not isinstance(res.exception, SystemExit):
                import traceback

                se += "Traceback (escaped the CLI):\n" + "".join(traceback.format_exception(res.exception))
        finally:
            os.environ.pop("SCHEDSIM_MAX_OPS", None)
    bad = H.verdict(case, rc, so, se, before, H.snapshot(tmp_path), out)
    assert not bad, f"{case.id}: {'; '.join(bad)}\n--- stderr:\n{se[-2000:]}\n--- stdout:\n{so[-1000:]}"
