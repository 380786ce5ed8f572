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


def test_a_link_pointed_at_another_profile_is_read_anew(tmp_path, monkeypatch) -> None:
    # break18: `current.yaml -> a.yaml`, then `ln -sf b.yaml current.yaml`: the stamp held the resolved a.yaml,
    # unchanged, so the second load gave a.yaml's figures (1.88 µs) for b.yaml's (7.0)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.yaml").write_text(H200)
    (tmp_path / "b.yaml").write_text(_floor(H200, 7.0))
    link = tmp_path / "current.yaml"
    link.symlink_to("a.yaml")
    assert load_profile("current.yaml").gpu.kernel_floor_us == 1.88
    link.unlink()
    link.symlink_to("b.yaml")
    assert load_profile("current.yaml").gpu.kernel_floor_us == 7.0


def test_one_relative_path_from_two_folders_is_two_profiles(tmp_path, monkeypatch) -> None:
    # break18: a library caller in folder x loads "p.yaml", changes folder to y and loads "p.yaml" again: the cache
    # keyed on the string "p.yaml" gave x's profile (1.88 µs) for y's (3.5)
    for sub, us in (("x", None), ("y", 3.5)):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "p.yaml").write_text(H200 if us is None else _floor(H200, us))
    monkeypatch.chdir(tmp_path / "x")
    assert load_profile("p.yaml").gpu.kernel_floor_us == 1.88
    monkeypatch.chdir(tmp_path / "y")
    assert load_profile("p.yaml").gpu.kernel_floor_us == 3.5
