"""execute's per-rank files (``failure_rank<r>.json``, ``partial_rank<r>.json``, ``kineto_rank<r>.json.gz``) are
written into ``--out`` like its other outputs: through the folder's manifest, replacing only execute's own earlier
file, never a user's file of that name (break17b). No torchrun: the failure path is called directly."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from executor import ExecError
from executor import execute as ex


class _Exit(Exception):
    pass


def _fail(monkeypatch, out: Path, rank: int, msg: str = "boom") -> int:
    def fake_exit(code: int) -> None:
        raise _Exit(code)

    monkeypatch.setattr(ex.os, "_exit", fake_exit)
    with pytest.raises(_Exit) as e:
        ex._fail(ExecError(msg), rank, out, None, SimpleNamespace(name="s"), None, "eager")
    return int(e.value.args[0])


def test_a_users_failure_rank_file_is_kept_and_said(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "failure_rank0.json").write_text("my notes")
    assert _fail(monkeypatch, out, 0) == 2
    assert (out / "failure_rank0.json").read_text() == "my notes"  # was overwritten before the fix
    err = capsys.readouterr().err
    assert "failure_rank0.json" in err and "not replaced" in err and "fix:" in err and "error: rank 0: boom" in err


def test_its_own_failure_files_are_replaced_and_every_ranks_kept(tmp_path, monkeypatch) -> None:
    out = tmp_path / "out"
    out.mkdir()
    _fail(monkeypatch, out, 0, "first")
    _fail(monkeypatch, out, 1, "rank one")
    _fail(monkeypatch, out, 0, "second")  # a re-run's failure replaces its own earlier file ...
    assert json.loads((out / "failure_rank0.json").read_text())["error"] == "second"
    assert json.loads((out / "failure_rank1.json").read_text())["error"] == "rank one"  # ... and keeps rank 1's
    from schedsim.outdir import Manifest

    assert sorted(Manifest.read(out).sets[ex.FAILURE_SET]) == ["failure_rank0.json", "failure_rank1.json"]
    # a user's edit of an own file makes it the user's: kept
    (out / "failure_rank1.json").write_text("edited")
    _fail(monkeypatch, out, 1)
    assert (out / "failure_rank1.json").read_text() == "edited"
    assert not [p for p in out.iterdir() if p.name.startswith(".schedsim-staging")]


def test_profiler_refuses_a_users_kineto_file_before_the_run(tmp_path) -> None:
    from schedsim.errors import SchedsimError

    out = tmp_path / "out"
    out.mkdir()
    (out / "kineto_rank1.json.gz").write_bytes(b"mine")
    opts = SimpleNamespace(profiler=True)
    root = Path(__file__).resolve().parents[2]
    with pytest.raises(SchedsimError, match=r"kineto_rank1\.json\.gz: exists and schedsim did not record"):
        ex._precheck(root / "schedules/allgather_mm8.yaml", ["world_size=2"], opts, compare=False, profile="h100",
                     device="cpu", cuda_graph=None, rank=0, world=2, out=out, parent=True)
    assert (out / "kineto_rank1.json.gz").read_bytes() == b"mine"


def test_rank_file_writes_through_the_manifest(tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "kineto_rank0.json.gz").write_bytes(b"mine")
    from schedsim.errors import SchedsimError

    with pytest.raises(SchedsimError, match="not replaced"):
        ex._rank_file(out, ex.PROFILER_SET, "kineto_rank0.json.gz", lambda p: p.write_bytes(b"trace"))
    assert (out / "kineto_rank0.json.gz").read_bytes() == b"mine"
    assert ex._rank_file(out, ex.PROFILER_SET, "kineto_rank1.json.gz", lambda p: p.write_bytes(b"t1") and 7) == 7
    assert ex._rank_file(out, ex.PROFILER_SET, "kineto_rank1.json.gz", lambda p: p.write_bytes(b"t2")) == 2
    assert (out / "kineto_rank1.json.gz").read_bytes() == b"t2"


@pytest.mark.slow
def test_a_run_that_succeeds_retires_the_earlier_failure_files_only(tmp_path) -> None:
    # break17b: a failed run's failure_rank0.json stayed beside the next, successful run's timeline.json
    from exec_helpers import schedsim

    out = tmp_path / "out"
    out.mkdir()
    ex._rank_file(out, ex.FAILURE_SET, "failure_rank0.json", lambda p: p.write_text('{"error": "old"}'))
    (out / "failure_rank1.json").write_text("mine")  # a user's file of a rank-file name: kept
    r = schedsim(["execute", "schedules/matmul_streams.yaml", "--set", "M=16", "--set", "K=16", "--set", "N=16",
                  "--iters", "1", "--warmup", "1", "--no-gantt", "--out", str(out)], timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "timeline.json").exists() and not (out / "failure_rank0.json").exists()
    assert (out / "failure_rank1.json").read_text() == "mine"
