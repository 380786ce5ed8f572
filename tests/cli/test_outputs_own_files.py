"""Review 2 of issue 32's discipline: files schedsim keeps for itself in an output folder (the manifest, staging
folders) are never written through a link, never taken from a user, and a run whose staging folder vanished fails
instead of moving in a partial set; input text written into schedule.yaml cannot break its lines; replay's
recorded tags and what-if factors are checked (exit 2, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from schedsim import outdir as od
from schedsim.errors import SchedsimError
from schedsim.io import atomic_write_text
from schedsim.outdir import output_set

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))
from replaygen import rank_doc, write  # noqa: E402


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``schedsim ARGS`` in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "schedsim", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def _import(tmp_path: Path, trace: str = "r0.json") -> Path:
    """``schedsim import kineto`` of replaygen's one-rank trace (with a device sync) saved as ``trace``; returns
    the written schedule.yaml."""
    write(tmp_path / trace, rank_doc(0, 1, sync=True))
    r = _cli("import", "kineto", trace, "--out", "imp", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path / "imp" / "schedule.yaml"


def test_manifest_write_replaces_a_link_itself_not_its_target(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    out = tmp_path / "out"
    out.mkdir()
    (out / od.MANIFEST).symlink_to(notes)
    od.Manifest({"predict": {"a.json": "0" * 64}}).write(out)
    assert notes.read_text() == "my notes"
    assert not (out / od.MANIFEST).is_symlink()
    assert od.Manifest.read(out).sets == {"predict": {"a.json": "0" * 64}}


def test_output_set_refuses_a_folder_whose_manifest_is_a_link(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    out = tmp_path / "out"
    out.mkdir()
    (out / od.MANIFEST).symlink_to(notes)
    with pytest.raises(SchedsimError, match="symbolic link"), output_set(out, "predict") as stage:
        atomic_write_text(stage / "t.json", "{}")
    assert notes.read_text() == "my notes" and (out / od.MANIFEST).is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [od.MANIFEST]


def test_a_file_written_in_a_staging_folder_replaces_a_link_there_not_its_target(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    stage = tmp_path / f"{od.STAGING_PREFIX}1-x"
    stage.mkdir()
    (stage / "t.json").symlink_to(notes)
    atomic_write_text(stage / "t.json", "{}")
    assert notes.read_text() == "my notes" and (stage / "t.json").read_text() == "{}"
    assert not (stage / "t.json").is_symlink()


def test_a_run_whose_staging_folder_was_removed_fails_and_moves_nothing_in(tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "o"
    with pytest.raises(SchedsimError, match="was removed while this run wrote"), output_set(out, "predict") as stage:
        atomic_write_text(stage / "timeline.json", "{}")
        shutil.rmtree(stage)  # another host's cleaner
        atomic_write_text(stage / "gantt.svg", "<svg/>")  # not recreated
    assert list(out.iterdir()) == []
    with pytest.raises(SchedsimError, match="was removed while this run wrote"), output_set(out, "predict") as stage:
        atomic_write_text(stage / "timeline.json", "{}")
        shutil.rmtree(stage)  # removed after the last write: the set is not moved in either
    assert list(out.iterdir()) == []


def test_a_staging_folder_of_this_run_is_marked_and_kept(tmp_path: Path) -> None:
    out = tmp_path / "o"
    with output_set(out, "predict") as stage:
        assert od.staging_owner(stage) == (os.getpid(), od.host_id())
        assert od.clean_stale_staging(out) == []
        atomic_write_text(stage / "timeline.json", "{}")
    assert sorted(p.name for p in out.iterdir()) == [od.MANIFEST, "timeline.json"]


@pytest.mark.parametrize("brk", ["\n", "\r", "\x85", "\u2028", "\u2029"])
def test_every_yaml_line_break_in_an_input_name_is_escaped_in_the_written_schedule(tmp_path: Path, brk: str) -> None:
    import yaml

    from schedsim import api
    from schedsim.errors import printable

    _import(tmp_path, f"t{brk}world_size: 99{brk}#.json")
    text = (tmp_path / "imp" / "schedule.yaml").read_bytes().decode("utf-8")
    assert f"trace: t{printable(brk)}world_size: 99{printable(brk)}#.json." in text.splitlines()[0]
    assert yaml.safe_load(text)["world_size"] == 1
    assert api.load(tmp_path / "imp" / "schedule.yaml").world_size == 1


@pytest.mark.parametrize("tag, value", [("start_us", "abc"), ("end_us", None), ("end_us", True),
                                        ("host_wait_before_us", "3"), ("gpu_gap_us", "1")])
def test_replay_refuses_a_recorded_tag_that_is_not_a_number(tmp_path: Path, tag: str, value: object) -> None:
    import json

    _import(tmp_path)
    ops = json.loads((tmp_path / "imp" / "schedule.ops.json").read_text())
    op = next(o for o in ops if "host_wait_before_us" in o["tags"])  # replaygen's op after the sync
    op["tags"][tag] = value
    (tmp_path / "imp" / "schedule.ops.json").write_text(json.dumps(ops))
    r = _cli("replay", "imp/schedule.yaml", cwd=tmp_path)
    msg = f"recorded tag {tag} is {value!r}"  # the op named as name@rank where the replay model refuses it
    assert r.returncode == 2 and (f"op {op['name']}: {msg}" in r.stderr or f"op {op['name']}@r" in r.stderr
                                  and msg in r.stderr), r.stderr[-400:]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [["--host-gaps", "1e308"], ["--what-if", "nccl*1e308"]])
def test_replay_refuses_a_what_if_factor_that_overflows_an_op(tmp_path: Path, args: list[str]) -> None:
    _import(tmp_path)
    r = _cli("replay", "imp/schedule.yaml", *args, cwd=tmp_path)
    assert r.returncode == 2 and "past an op's limit of 1e+12 µs" in r.stderr and r.stdout == "", r.stderr[-400:]
    assert f"fix: pass a smaller {args[0]} factor" in r.stderr
