"""The ``replay`` model's recorded tags (``gpu_gap_us``, ``host_wait_before_us``) in a hand-written schedule:
a gap is added to the op's start (10 µs op, 1 µs host call, 5 µs gap: 1 + 10 + 5 + 10 = 26 µs), and a tag that is
not a finite number of µs at least 0 is refused with one ``error:`` line naming the op, a ``fix:`` line and exit
2, not read as no gap (``predict`` ran it silently before; ``schedsim replay`` refused strings only)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim import api
from schedsim.cli import app

_SCHEDULE = """schema_version: 1
name: gaps
world_size: 1
durations: recorded
ops:
  - {{name: a, kind: compute, duration_us: 10, host_us: 1}}
  - {{name: b, kind: compute, duration_us: 10, host_us: 1, deps: [a], tags: {{{tag}: {value}}}}}
"""


def _write(tmp_path: Path, tag: str, value: str) -> Path:
    f = tmp_path / "s.yaml"
    f.write_text(_SCHEDULE.format(tag=tag, value=value))
    return f


def test_a_written_gpu_gap_delays_the_op_by_its_value(tmp_path: Path) -> None:
    for value, makespan_us in (("5", 26.0), ("0", 21.0), ("2.5", 23.5)):
        f = _write(tmp_path, "gpu_gap_us", value)
        tl = api.predict(f).timeline
        assert tl.makespan_s * 1e6 == pytest.approx(makespan_us, abs=1e-9), value


@pytest.mark.parametrize("tag", ["gpu_gap_us", "host_wait_before_us"])
@pytest.mark.parametrize("value", ["-3", "'abc'", ".nan", ".inf", "true"])
def test_predict_refuses_a_recorded_tag_that_is_not_a_non_negative_number(tmp_path: Path, tag: str,
                                                                         value: str) -> None:
    f = _write(tmp_path, tag, value)
    r = CliRunner().invoke(app, ["predict", str(f), "-o", str(tmp_path / "out"), "--no-gantt", "--no-trace"])
    assert r.exit_code == 2, r.output
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), r.exception
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines[0].startswith(f"error: {f}: tags.{tag}: op b@r0: recorded tag {tag} is "), r.output
    assert lines[1].strip().startswith(f"fix: write {tag} as a number"), r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "out").exists()
