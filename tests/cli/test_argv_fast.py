"""A plain ``check`` or ``predict`` command line runs without typer (:func:`schedsim.clicore.fast_command`): the
arguments it parses are the ones typer parses from the same words, the lines it leaves to typer are the ones
with anything else, and ``python -m schedsim`` prints and exits the same either way."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from schedsim import cli, clicore

ROOT = Path(__file__).resolve().parents[2]

PLAIN = [
    ["check", "a.yaml"],
    ["check", "dir with space/ü.yaml", "--set", "chunks=4", "--set", "x=a,b", "--max-ops", "12"],
    ["check", "--max-ops", "007", "a.yaml"],
    ["check", ""],
    ["predict", "a.yaml"],
    ["predict", "--no-gantt", "a.yaml", "--out", "o"],
    ["predict", "a.yaml", "-o", "o1", "--out", "o2", "-p", "pcie2", "--profile", "h100"],
    ["predict", "a.yaml", "--format", "json", "--launch", "cuda_graph", "--durations", "recorded", "--gantt",
     "--no-gantt", "--gantt", "--all-ranks", "--gpu-model", "replay", "--model-executor", "--max-ops", "5",
     "--trace", "--no-trace", "--timed-graph", "--explain", "--full-ranks", "--set", "a=1"],
    ["predict", "a.yaml", "--format", "table", "--launch", "eager", "--durations", "modeled", "--trace"],
    ["predict", "a.yaml", "--gpu-model", "nonsense", "--profile", "x/y.yaml"],
    ["predict", "a.yaml", "--svg"], ["predict", "a.yaml", "--no-svg", "--trace"],
]

TYPER_ONLY = [
    [], ["--debug", "check", "a.yaml"], ["check"], ["check", "a.yaml", "b.yaml"], ["check", "--help"],
    ["check", "a.yaml", "--set=a=1"], ["check", "a.yaml", "--set"], ["check", "a.yaml", "--set", "-1"],
    ["check", "a.yaml", "--max-ops", "0"], ["check", "a.yaml", "--max-ops", "1e3"],
    ["check", "a.yaml", "--max-ops", "²"], ["check", "a.yaml", "--max-ops", "1" + "0" * 4300],
    ["check", "a.yaml", "--max-ops", "1" + "0" * 18],
    ["check", "--", "a.yaml"], ["check", "-"], ["check", "a.yaml", "--no-gantt"], ["predict", "a.yaml", "-oout"],
    ["predict", "a.yaml", "--format", "JSON"], ["predict", "a.yaml", "--iteration-gap-ms", "1"],
    ["predict", "a.yaml", "--max-connections", "4"], ["predict", "a.yaml", "--out"], ["predict", "a.yaml", "--gant"],
    ["sweep", "a.yaml"], ["schema"],
]


def _typer_arguments(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, Any]]:
    """The command and every argument (defaults included) that typer's app passes to :mod:`schedsim.clicore`."""
    got: dict[str, Any] = {}
    for name in ("check", "predict"):
        fn = getattr(clicore, name)

        def capture(*a: Any, _name: str = name, _fn: Any = fn, **kw: Any) -> None:
            bound = inspect.signature(_fn).bind(*a, **kw)
            bound.apply_defaults()
            got[_name] = dict(bound.arguments)

        monkeypatch.setattr(clicore, name, capture)
    rc = cli.app(argv, standalone_mode=False)
    assert rc in (None, 0)
    ((name, arguments),) = got.items()
    return name, arguments


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_plain_lines_parse_as_typer_parses_them(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = clicore.parse_plain(argv)
    assert parsed is not None
    fn, kw = parsed
    bound = inspect.signature(fn).bind(**kw)
    bound.apply_defaults()
    name, typer_args = _typer_arguments(argv, monkeypatch)
    assert fn.__name__ == name == argv[0]
    assert dict(bound.arguments) == typer_args
    assert [type(v) for v in bound.arguments.values()] == [type(v) for v in typer_args.values()]


@pytest.mark.parametrize("argv", TYPER_ONLY, ids=lambda a: " ".join(a)[:60])
def test_other_lines_are_left_to_typer(argv: list[str]) -> None:
    assert clicore.parse_plain(argv) is None


def test_completion_requests_are_left_to_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    assert clicore.fast_command(["check", "a.yaml"]) is not None
    monkeypatch.setenv("_SCHEDSIM_COMPLETE", "bash_complete")
    assert clicore.fast_command(["check", "a.yaml"]) is None


def _run(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = f"import sys, runpy\nsys.argv[0] = 'schedsim'\nrunpy.run_module({module!r}, run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("case", ["ok", "warning", "bad_field", "missing", "set", "huge_max_ops", "predict",
                                  "predict_bad"])
def test_entry_point_prints_and_exits_as_typer_does(case: str, tmp_path: Path) -> None:
    """``python -m schedsim`` (no typer: checked by what it imports) against ``python -m schedsim.cli`` (typer)
    on the same command lines: stdout, stderr, exit code and the files written, byte for byte."""
    (tmp_path / "bad.yaml").write_text("schema_version: 1\nname: b\nworld_size: 2\n"
                                       "ops:\n  - {name: a, kind: gemm, m: 8, n: 8, k: 8, dtyp: bf16}\n")
    args = {"ok": ["check", str(ROOT / "schedules/tp_ffn.yaml")],
            "warning": ["check", str(ROOT / "schedules/allgather_mm8.yaml")],
            "bad_field": ["check", "bad.yaml"],
            "missing": ["check", "missing.yaml"],
            "set": ["check", str(ROOT / "schedules/allgather_mm8.yaml"), "--set", "nope=1"],
            "huge_max_ops": ["check", str(ROOT / "schedules/tp_ffn.yaml"), "--max-ops", "1" + "0" * 4300],
            "predict": ["predict", str(ROOT / "schedules/tp_ffn.yaml"), "--no-gantt", "--out", "{out}"],
            "predict_bad": ["predict", "bad.yaml", "--no-gantt", "--out", "{out}"]}[case]
    results = []
    for module in ("schedsim.cli", "schedsim"):
        out = tmp_path / module
        p = _run(module, *[a.replace("{out}", str(out)) for a in args], cwd=tmp_path)
        # the outputs (not the folder's manifest, which holds their inodes and times)
        files = {f.name: f.read_bytes() for f in sorted(out.glob("*")) if not f.name.startswith(".")}
        results.append((p.returncode, p.stdout.replace(str(out), "OUT"), p.stderr.replace(str(out), "OUT"), files))
    assert results[0] == results[1]
    assert results[0][0] == (0 if case in ("ok", "warning", "predict") else 2)
    assert set(results[0][3]) == ({"timeline.json", "trace.json"} if case == "predict" else set())


def test_plain_check_imports_no_typer() -> None:
    code = ("import sys, runpy\nsys.argv = ['schedsim', 'check', 'schedules/tp_ffn.yaml']\n"
            "try:\n    runpy.run_module('schedsim', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\nprint(sorted(m for m in sys.modules if m.startswith(('typer', 'click'))))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.stdout.splitlines()[-1] == "[]"
