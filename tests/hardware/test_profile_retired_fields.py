"""Profile fields of the retired ``sharing`` model (``contention.compute_slowdown_with_comm``,
``contention.comm_slowdown_with_compute``): no model reads them, no shipped profile has them, and a user's profile
that still has them loads as before with one warning line naming the file and the fields, the file untouched."""

from __future__ import annotations

from pathlib import Path

import yaml

from schedsim.hardware.profile import (
    RETIRED_FIELDS,
    Contention,
    HardwareProfile,
    _builtin_dir,
    list_profiles,
    load_profile,
)
from tests.cli.test_cli import run

ROOT = Path(__file__).resolve().parents[2]


def _user_profile(tmp_path: Path, **retired: float) -> Path:
    """The shipped ``pcie2`` profile as a user's file, with ``retired`` added to its ``contention`` section."""
    d = yaml.safe_load((_builtin_dir() / "pcie2.yaml").read_text(encoding="utf-8"))
    d["contention"].update(retired)
    p = tmp_path / "mine.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False), encoding="utf-8")
    return p


def test_a_profile_with_the_retired_fields_loads_with_one_warning_and_is_left_as_written(tmp_path, capsys) -> None:
    p = _user_profile(tmp_path, compute_slowdown_with_comm=0.189, comm_slowdown_with_compute=0.0)
    before = p.read_bytes()
    prof = load_profile(str(p))
    err = capsys.readouterr().err.splitlines()
    assert err == [f"warning: {p}: contention.compute_slowdown_with_comm, contention.comm_slowdown_with_compute: "
                   "deprecated and unused since the sharing model was retired (the waves model reads "
                   "nccl.gemm_slowdown_beside_nccl, nccl.slowdown_beside_gemm); delete them from the profile"]
    assert p.read_bytes() == before
    assert prof.model_dump() == load_profile("pcie2").model_dump()  # the fields change nothing


def test_one_retired_field_is_named_alone(tmp_path, capsys) -> None:
    p = _user_profile(tmp_path, comm_slowdown_with_compute=0.1)
    load_profile(str(p))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ": contention.comm_slowdown_with_compute: deprecated" in err
    assert "delete it from the profile" in err and "compute_slowdown_with_comm" not in err


def test_predict_with_such_a_profile_succeeds_and_says_so_once(tmp_path) -> None:
    """The command line: exit 0, the same makespan as the shipped profile without the fields, one warning."""
    p = _user_profile(tmp_path, compute_slowdown_with_comm=0.3, comm_slowdown_with_compute=0.2)
    sched = str(ROOT / "schedules" / "tp_allreduce_graph.yaml")
    mine = run("predict", sched, "--profile", str(p), "--no-gantt", "--format", "json", "-o", str(tmp_path / "a"))
    shipped = run("predict", sched, "--profile", "pcie2", "--no-gantt", "--format", "json", "-o", str(tmp_path / "b"))
    assert mine.returncode == 0 and shipped.returncode == 0, mine.stderr + shipped.stderr
    assert [ln for ln in mine.stderr.splitlines() if "deprecated" in ln] == [
        f"warning: {p}: contention.compute_slowdown_with_comm, contention.comm_slowdown_with_compute: deprecated "
        "and unused since the sharing model was retired (the waves model reads nccl.gemm_slowdown_beside_nccl, "
        "nccl.slowdown_beside_gemm); delete them from the profile"]
    assert "deprecated" not in shipped.stderr
    assert (tmp_path / "a" / "timeline.json").read_bytes() == (tmp_path / "b" / "timeline.json").read_bytes()


def test_no_shipped_profile_and_no_model_field_holds_them() -> None:
    for name in list_profiles():
        d = yaml.safe_load((_builtin_dir() / f"{name}.yaml").read_text(encoding="utf-8"))
        assert not {f for sec, f in RETIRED_FIELDS if f in (d.get(sec) or {})}, name
    assert not {f for _sec, f in RETIRED_FIELDS} & set(Contention.model_fields)
    schema = str(HardwareProfile.model_json_schema())
    assert not any(f in schema for _sec, f in RETIRED_FIELDS)


def test_the_warning_names_the_file_of_the_chain_that_sets_them(tmp_path, capsys) -> None:
    """A field set in a user's base profile is that file's to delete: the warning names it, not the profile that
    derives from it (which does not set the field); each file of the chain is named for its own fields."""
    base = _user_profile(tmp_path, compute_slowdown_with_comm=0.189)
    child = tmp_path / "child.yaml"
    child.write_text(f"base: {base.name}\nname: child\n", encoding="utf-8")
    load_profile(str(child))
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {base}: contention.compute_slowdown_with_comm: deprecated and unused since the sharing model was "
        "retired (the waves model reads nccl.gemm_slowdown_beside_nccl); delete it from the profile"]
    both = tmp_path / "both.yaml"
    both.write_text(f"base: {base.name}\nname: both\ncontention: {{comm_slowdown_with_compute: 0.1}}\n",
                    encoding="utf-8")
    load_profile(str(both))  # the base's warning was printed above: once per process
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {both}: contention.comm_slowdown_with_compute: deprecated and unused since the sharing model was "
        "retired (the waves model reads nccl.slowdown_beside_gemm); delete it from the profile"]
