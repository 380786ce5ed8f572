"""predict's default output folder names the profile, the launch mode and the --set overrides, so runs with
different settings keep their own outputs, and predict says where it wrote (issue 33)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from schedsim import api
from schedsim.api import default_outdir_name
from tests.cli.test_cli import ROOT, run


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


MM = """\
schema_version: 1
name: mm
world_size: 1
ops:
  - {name: mm, kind: matmul, m: 1024, n: 4096, k: 4096, dtype: bf16}
"""


def test_every_option_that_changes_the_prediction_names_its_own_folder(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """--launch, --gpu-model, --max-connections (and a profile file that keeps a shipped profile's name but not its
    content) change the prediction, so each writes its own folder; the same options write the same one."""
    import copy

    import yaml

    from schedsim.api import predict_to_dir
    from schedsim.hardware.profile import load_profile

    monkeypatch.chdir(tmp_path)
    f = tmp_path / "mm.yaml"
    f.write_text(MM)

    def folder(profile: str = "h200", launch: str | None = None, **sim: object) -> str:
        paths = predict_to_dir(f, None, profile, None, launch, gantt=False, trace=False, **sim)[2]
        return paths[0].parent.as_posix()

    assert folder() == "schedsim_out/mm@h200" == folder()
    assert folder(launch="cuda_graph") == "schedsim_out/mm@h200,--launch=cuda_graph"
    assert folder(gpu_model="replay") == "schedsim_out/mm@h200,--gpu-model=replay"
    assert folder(max_connections=1) == "schedsim_out/mm@h200,--max-connections=1"
    assert folder(launch="eager", max_connections=1) == "schedsim_out/mm@h200,--launch=eager,--max-connections=1"
    d = copy.deepcopy(load_profile("dgx_h100").model_dump(mode="json"))
    same = tmp_path / "same.yaml"
    same.write_text(yaml.safe_dump(d))
    assert folder(str(same)) == "schedsim_out/mm@dgx_h100"  # the shipped content: the shipped folder
    d["topology"]["gpus_per_node"] = 4
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(d))
    other = folder(str(changed))
    assert other.startswith("schedsim_out/mm@dgx_h100-") and len(other) == len("schedsim_out/mm@dgx_h100-") + 8
    assert folder(str(changed)) == other


def test_default_output_folder_differs_by_launch_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "mm.yaml"
    f.write_text("schema_version: 1\nname: mm\nworld_size: 1\nparams: {m: 1024}\n"
                 "ops:\n  - {name: mm, kind: matmul, m: m, n: 4096, k: 4096, dtype: bf16}\n")
    _, _, eager = api.predict_to_dir(f, None, "h200", None, None, gantt=False, trace=False)
    _, _, graph = api.predict_to_dir(f, None, "h200", None, "cuda_graph", gantt=False, trace=False)
    assert eager[0].parent != graph[0].parent
