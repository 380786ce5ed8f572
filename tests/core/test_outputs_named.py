"""predict's default output folder names the profile and the --set overrides, so runs with different settings
keep their own outputs, and predict says where it wrote (issue 33)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from schedsim.api import default_outdir_name
from tests.core.test_cli import ROOT, run


def test_two_settings_keep_two_folders_and_the_output_names_them(tmp_path: Path) -> None:
    sched = tmp_path / "allgather_mm8.yaml"
    shutil.copy(ROOT / "schedules" / "allgather_mm8.yaml", sched)
    outs = {}
    for chunks in (1, 8):
        r = run("predict", str(sched), "--set", f"chunks={chunks}", "--no-gantt", "--no-trace", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        folder = tmp_path / "schedsim_out" / f"allgather_mm8@h200,chunks={chunks}"
        assert f"wrote schedsim_out/allgather_mm8@h200,chunks={chunks}/: timeline.json" in r.stdout
        outs[chunks] = json.loads((folder / "timeline.json").read_text())["makespan_s"]
    assert outs[1] != outs[8]  # both runs are still there, each its own
    r = run("predict", str(sched), "--profile", "pcie2", "--no-gantt", "--no-trace", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "schedsim_out" / "allgather_mm8@pcie2" / "timeline.json").exists()


def test_the_folder_name_is_stable_and_safe() -> None:
    assert default_outdir_name("s", "h200", {"b": 2, "a": "x"}) == default_outdir_name("s", "h200", {"a": "x", "b": 2})
    assert default_outdir_name("s", "h200", {}) == "s@h200"
    weird = default_outdir_name("s", "../p", {"k": "a/b,c=d"})
    assert "/" not in weird and weird.startswith("s@_._p,k=a_b_c_d-") and len(weird) == len("s@_._p,k=a_b_c_d-") + 8
    assert weird != default_outdir_name("s", "../p", {"k": "a/b,c_d"})  # shortened names stay distinct
    long = default_outdir_name("s", "h200", {f"k{i}": "v" * 20 for i in range(10)})
    assert len(long) <= len("s@") + 80
