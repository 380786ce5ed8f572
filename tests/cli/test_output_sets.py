"""Output sets (schedsim.outdir.output_set): a staging folder removed mid-run fails the run or keeps the set, a
folder schedsim did not make is never removed as staging, and a manifest name that is a link never
overwrites the link's target."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_a_staging_folder_removed_mid_run_fails_the_run_or_keeps_the_set(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from schedsim import outdir as od
    from schedsim.io import atomic_write_text
    from schedsim.outdir import output_set

    out = tmp_path / "o"
    try:
        with output_set(out, "predict") as stage:
            atomic_write_text(stage / "timeline.json", "{}")
            with monkeypatch.context() as m:  # another machine's schedsim, writing into the same folder
                m.setattr(od.os, "getpid", lambda: 1)
                m.setattr(od, "_alive", lambda pid: False)
                od.clean_stale_staging(out)
            atomic_write_text(stage / "gantt.svg", "<svg/>")
    except Exception:
        return  # failing the run is an honest answer
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["gantt.svg", "timeline.json"]


def test_a_folder_schedsim_did_not_make_is_not_removed_as_staging(tmp_path: Path) -> None:
    from schedsim.outdir import clean_stale_staging

    mine = tmp_path / ".schedsim-staging-999999-mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    clean_stale_staging(tmp_path)
    assert (mine / "notes.txt").read_text() == "precious"


def test_a_manifest_name_that_is_a_link_never_overwrites_the_link_target(tmp_path: Path) -> None:
    from schedsim.outdir import output_set

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".schedsim-outputs.json").symlink_to(notes)
    try:
        with output_set(out, "search") as stage:
            (stage / "search.json").write_text("[]")
    except Exception:
        pass  # refusing the folder is fine
    assert notes.read_text() == "my notes"
