"""``load_profile`` of a profile file edited since it was loaded in this process (a notebook's second
``api.predict``, a library caller's second ``search``) reads the file again, as does an edit of a ``base:`` it
derives from; an unchanged file gives the same object back (the search's per-profile caches key on it)
(break17b: the cache was keyed by the path string alone, so the edit was ignored and the old figures printed)."""

from __future__ import annotations

import os
from pathlib import Path

import schedsim
from schedsim.hardware.profile import load_profile

H200 = (Path(schedsim.__file__).parent / "hardware/profiles/h200.yaml").read_text()


def _floor(text: str, us: float) -> str:
    assert "kernel_floor_us: 1.88 " in text  # the shipped value, read by hand from h200.yaml
    return text.replace("kernel_floor_us: 1.88 ", f"kernel_floor_us: {us} ")


def test_an_edited_profile_file_is_read_again(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "p.yaml"
    p.write_text(H200)
    a = load_profile("p.yaml")
    assert a.gpu.kernel_floor_us == 1.88 and load_profile("p.yaml") is a  # unchanged: the same object
    p.write_text(_floor(H200, 50.0))
    os.utime(p, ns=(p.stat().st_atime_ns, a_mtime := p.stat().st_mtime_ns))  # noqa: F841 - same size, same mtime
    b = load_profile("p.yaml")
    assert b.gpu.kernel_floor_us == 50.0  # was 1.88: the edit ignored


def test_an_edited_base_is_read_again(tmp_path) -> None:
    base, top = tmp_path / "base.yaml", tmp_path / "top.yaml"
    base.write_text(H200)
    top.write_text("base: base.yaml\nname: top\n")
    assert load_profile(str(top)).gpu.kernel_floor_us == 1.88
    base.write_text(_floor(H200, 9.5))
    assert load_profile(str(top)).gpu.kernel_floor_us == 9.5
