"""Issue keep17 (hostile review): a single-file output (``schema -o``, ``calibrate --out`` and its raw ``.json``,
``analyze --chrome``) replaced whatever file was there. Now a file there is replaced only when it is that command's
own earlier output (:func:`schedsim.io.is_own_file`); a user's file is refused with exit 2 and kept byte for byte,
as a user's file in an output folder is (:mod:`schedsim.outdir`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.errors import SchedsimError
from schedsim.io import atomic_write_text, claim_file, is_own_file

ROOT = Path(__file__).resolve().parents[2]
TL = ROOT / "tests" / "data" / "kineto_execute_offload_h200_predicted_timeline.json"
NCCL_LOG = ROOT / "tests" / "data" / "hostile" / "nccl_nan_busbw.log"
CALIBRATED = ROOT / "tests" / "data" / "h100_calibrated_0429.yaml"
USER = "my notes, not schedsim's\n"


def run(args: list[str]):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, args)


def _log(tmp: Path) -> Path:
    good = tmp / "ok.log"
    good.write_text(NCCL_LOG.read_text().replace(" nan ", " 0.20 "))
    return good


def _writers(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """Each single-file output: its command line with ``{o}`` for the file, and the file's suffix."""
    return {"schema": (["schema", "-o", "{o}"], ".json"),
            "schema_expanded": (["schema", "--expanded", "-o", "{o}"], ".json"),
            "calibrate": (["calibrate", "--from-nccl-tests", str(_log(tmp)), "-o", "{o}"], ".yaml"),
            "analyze_chrome": (["analyze", str(TL), "--chrome", "{o}"], ".json")}


@pytest.mark.parametrize("cmd", ["schema", "schema_expanded", "calibrate", "analyze_chrome"])
def test_a_users_file_is_refused_and_kept_and_its_own_output_is_replaced(tmp_path: Path, cmd: str) -> None:
    # before: each of these replaced the user's file with exit 0
    argv, suffix = _writers(tmp_path)[cmd]
    o = tmp_path / f"out{suffix}"
    o.write_text(USER)
    r = run([a.replace("{o}", str(o)) for a in argv])
    assert r.exit_code == 2, r.output
    assert f"{o}: exists and is not schedsim's output" in r.output and "fix: move or rename it" in r.output
    assert o.read_text() == USER
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left
    o.unlink()
    r = run([a.replace("{o}", str(o)) for a in argv])  # a new name: written
    assert r.exit_code == 0, r.output
    first = o.read_bytes()
    os.utime(o, (1, 1))
    r = run([a.replace("{o}", str(o)) for a in argv])  # its own earlier output: replaced
    assert r.exit_code == 0, r.output
    assert o.read_bytes() == first and o.stat().st_mtime > 1


def test_a_link_to_a_users_file_is_refused_and_an_empty_file_is_written(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text(USER)
    (tmp_path / "link.json").symlink_to(target)
    r = run(["schema", "-o", str(tmp_path / "link.json")])
    assert r.exit_code == 2 and target.read_text() == USER
    target.write_text("")  # nothing to lose (mktemp's file)
    assert run(["schema", "-o", str(tmp_path / "link.json")]).exit_code == 0
    assert (tmp_path / "link.json").is_symlink() and json.loads(target.read_text())["$id"].startswith(
        "https://schedsim.dev/schema/")


def test_calibrate_marks_are_those_its_writers_give() -> None:
    # a profile written by an earlier calibrate (its shipped test copy) is calibrate's own
    assert is_own_file(CALIBRATED, "profile")
    assert not is_own_file(ROOT / "schedsim" / "hardware" / "profiles" / "h200.yaml", "profile")
    assert not is_own_file(CALIBRATED, "chrome") and not is_own_file(CALIBRATED, "calibration")


def test_calibrate_refuses_a_users_raw_json_before_measuring(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(USER)  # where calibrate's raw measurements go beside p.yaml
    r = run(["calibrate", "-o", str(tmp_path / "p.yaml"), "--quick"])
    assert r.exit_code == 2 and "p.json: exists and is not schedsim's output" in r.output, r.output
    assert (tmp_path / "p.json").read_text() == USER and not (tmp_path / "p.yaml").exists()
    raw = tmp_path / "q.json"
    raw.write_text(json.dumps({"generator": "schedsim calibrate", "date": "2026-12-07"}, indent=1))
    assert is_own_file(raw, "calibration")
    raw.write_text(json.dumps({"date": "2026-12-07", "generator": "schedsim calibrate"}, indent=1))
    assert not is_own_file(raw, "calibration")


def test_a_users_file_put_there_while_writing_is_kept(tmp_path: Path) -> None:
    o = tmp_path / "s.json"
    assert claim_file(o, "schema") == o
    from schedsim.io import atomic_writer

    with pytest.raises(SchedsimError, match="not schedsim's output"), atomic_writer(o, kind="schema") as f:
        f.write("{}")
        o.write_text(USER)  # a user's file appears between the check and the rename
    assert o.read_text() == USER and [p.name for p in tmp_path.iterdir()] == ["s.json"]
    atomic_write_text(tmp_path / "t.json", "x")  # without a kind: the library writer as before
    atomic_write_text(tmp_path / "t.json", "y")
    assert (tmp_path / "t.json").read_text() == "y"


def test_a_calibrated_profile_the_user_edited_is_theirs(tmp_path: Path) -> None:
    # break17b: a profile calibrate wrote and the user then edited (a profile is made to be edited: its topology,
    # a figure of their own) kept calibrate's header line, so the next calibrate to that path replaced the edits
    argv, _suffix = _writers(tmp_path)["calibrate"]
    o = tmp_path / "p.yaml"
    assert run([a.replace("{o}", str(o)) for a in argv]).exit_code == 0
    assert is_own_file(o, "profile")
    o.write_text(o.read_text().replace("name:", "# my edit\nname:", 1))
    assert not is_own_file(o, "profile")
    edited = o.read_bytes()
    r = run([a.replace("{o}", str(o)) for a in argv])
    assert r.exit_code == 2 and f"{o}: exists and is not schedsim's output" in r.output, r.output
    assert o.read_bytes() == edited


def test_lines_the_user_added_after_a_calibrated_profiles_seal_are_theirs(tmp_path: Path) -> None:
    # break18: a field appended at the end of a sealed profile (below the seal line, where an editor's cursor ends)
    # left a last line that is no seal, so the profile was judged by its header alone, as an older unsealed one:
    # calibrate's, and the next calibrate replaced the user's lines
    argv, _suffix = _writers(tmp_path)["calibrate"]
    o = tmp_path / "p.yaml"
    assert run([a.replace("{o}", str(o)) for a in argv]).exit_code == 0
    assert is_own_file(o, "profile")
    with open(o, "a") as f:
        f.write("# my note: GPU 3 runs hot\n")
    assert not is_own_file(o, "profile")
    edited = o.read_bytes()
    r = run([a.replace("{o}", str(o)) for a in argv])
    assert r.exit_code == 2 and f"{o}: exists and is not schedsim's output" in r.output, r.output
    assert o.read_bytes() == edited
