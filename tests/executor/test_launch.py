"""Issue 32 item 7: ``schedsim execute --nproc-per-node N FILE`` checks the input in the parent, then starts the
ranks through torch's launcher; bad input is one ``error:`` line, a ``fix:`` line and exit 2 with no rank started,
and a failing rank's exit code comes back without torchrun's ``ChildFailedError`` traceback (CPU ranks, gloo)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from exec_helpers import DATA, schedsim, torchrun
from typer.testing import CliRunner

from schedsim.cli import app

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")

SMALL = ["--set", "M=128", "--set", "K=128", "--set", "N=128", "--iters", "2", "--warmup", "1", "--lean-iters", "0",
         "--host-call-iters", "0", "--no-gantt"]


def _clean(r: Any) -> None:
    text = r.stdout + r.stderr
    assert "Traceback" not in text and "ChildFailedError" not in text, text[-3000:]


def test_rank_argv_passes_what_the_user_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import executor.launch as launch

    got: dict[str, Any] = {}

    def fake(nproc: int, argv: list[str], **kw: Any) -> None:
        got.update(nproc=nproc, argv=argv)

    monkeypatch.setattr(launch, "launch_ranks", fake)
    r = CliRunner().invoke(app, ["execute", "--nproc-per-node", "2", "schedules/allgather_mm8.yaml", "--set", "M=8",
                                 "--set", "K=8", "--iters", "3", "--no-gantt", "--eager", "--check", "--out",
                                 str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert got["nproc"] == 2
    assert got["argv"] == ["--set", "M=8", "--set", "K=8", "--out", str(tmp_path / "o"), "--iters", "3", "--check",
                           "--eager", "--no-gantt", "--", "schedules/allgather_mm8.yaml"]


def test_bad_input_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nname: bad\nworld_size: 2\nops:\n  - {name: a, kind: matmal, m: 8, n: 8, k: 8}\n")
    fifo = tmp_path / "fifo"
    import os

    os.mkfifo(fifo)
    cases = [
        ([str(bad)], "ops[0].kind: unknown op kind 'matmal'", "fix: did you mean 'matmul'?"),
        (["--nproc-per-node", "3", "schedules/allgather_mm8.yaml"],
         "the schedule has world_size 2 but --nproc-per-node 3 asks for 3 rank(s)", "--set world_size=3"),
        (["schedules/allgather_mm8.yaml", "--cuda-graph", "--device", "cpu"], "--cuda-graph needs CUDA", "fix:"),
        (["schedules/allgather_mm8.yaml", "--out", str(fifo)], "is a FIFO, not a folder", "fix:"),
        (["schedules/allgather_mm8.yaml", "--compare", "--profile", "nosuch"], "nosuch", "fix"),
    ]
    for args, what, fix in cases:
        if "--nproc-per-node" not in args:
            args = ["--nproc-per-node", "2", *args]
        t0 = time.monotonic()
        r = schedsim(["execute", *args], timeout=60)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert what in r.stderr and fix in r.stderr, (args, r.stderr)
        assert r.stderr.startswith("error: ") and "schedsim execute" not in r.stdout  # no rank's banner: none ran
        _clean(r)
        assert time.monotonic() - t0 < 30
    assert not list(tmp_path.glob("schedsim_out*"))


def test_an_output_folder_of_another_command_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    """``--out`` naming a predict folder (its timeline.json): the ranks ran the whole measurement, rank 0 then
    refused the folder (exit 2) and rank 1, its peer gone, printed "internal error: RuntimeError ... Connection
    closed by peer ... please report this bug". Now the parent refuses it before any rank starts; a user's own
    env.json likewise, and an execute folder is written again."""
    out = tmp_path / "pred"
    assert schedsim(["predict", "schedules/allgather_mm8.yaml", "--no-gantt", "--out", str(out)], timeout=120
                    ).returncode == 0
    user = tmp_path / "user"
    user.mkdir()
    (user / "env.json").write_text("{}")
    for folder, what in ((out, "timeline.json: holds `predict`'s output of that name"),
                         (user, "env.json: exists and schedsim did not record writing it")):
        t0 = time.monotonic()
        r = schedsim(["execute", "--nproc-per-node", "2", "schedules/allgather_mm8.yaml", *SMALL, "--out",
                      str(folder)], timeout=120)
        assert r.returncode == 2 and r.stderr.startswith("error: execute: ") and what in r.stderr, r.stderr[-2000:]
        assert "schedsim execute" not in r.stdout and "internal error" not in r.stderr  # no rank ran
        _clean(r)
        assert time.monotonic() - t0 < 30
    assert (user / "env.json").read_text() == "{}"


def test_a_good_run_and_a_failing_rank(tmp_path: Path) -> None:
    out = tmp_path / "ok"
    r = schedsim(["execute", "--nproc-per-node", "2", "schedules/allgather_mm8.yaml", *SMALL, "--out", str(out)],
                 timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    _clean(r)
    assert "2 rank(s), backend gloo on cpu" in r.stdout
    tl = json.loads((out / "timeline.json").read_text())
    assert tl["world_size"] == 2
    # a rank that fails at run time (an op timeout): its own message, then one summary line, exit 2
    r = schedsim(["execute", "--nproc-per-node", "2", str(DATA / "timeout_demo.yaml"), "--timeout", "2",
                  "--no-gantt", "--out", str(tmp_path / "to")], timeout=90)
    assert r.returncode == 2, r.stderr[-3000:]
    _clean(r)
    assert "error: rank 0: timeout after 2.0 s" in r.stderr
    assert r.stderr.rstrip().splitlines()[-1].startswith(f"error: {DATA / 'timeout_demo.yaml'}: ")
    assert "rank 0 exited with code 2" in r.stderr


def test_nproc_per_node_under_torchrun_is_refused() -> None:
    r = torchrun(1, ["execute", "--nproc-per-node", "1", "schedules/allgather_mm8.yaml", "--set", "world_size=1"],
                 timeout=90)
    assert r.returncode != 0
    assert "this process is already a rank of a torchrun launch" in r.stderr
