"""What the CLI's cold start imports: the entry point loads no numpy, networkx or simulator module, and
``predict`` (trace.json included) never imports networkx or numpy.ma; ``check`` never imports the
simulator; the pipeline block's models (and schedsim.graph.info, for ``check``) are loaded only for a schedule
with a ``pipeline:`` block."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "networkx", "schedsim.sim", "schedsim.graph.build", "schedsim.graph.info", "rich", "torch",
         "schedsim.spec.pipeline_block")


def _loaded(code: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout.split("\n")[-2]
    return [m for m in out.split() if m.startswith(HEAVY)]


def test_entry_point_imports_nothing_heavy() -> None:
    assert _loaded("import schedsim.cli") == []


@pytest.mark.parametrize("schedule", ["allgather_mm8", "pipeline_schedules"])  # the second pairs send/recv
def test_check_and_predict_skip_networkx_and_torch(tmp_path: Path, schedule: str) -> None:
    run = ("import sys\nfrom schedsim.cli import main\n"
           f"sys.argv = ['schedsim', {{!r}}, 'schedules/{schedule}.yaml'{{}}]\n"
           "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n")
    checked = _loaded(run.format("check", ""))
    # the static checks may use the compiled cycle sweep (schedsim.sim._cwaves; the package __init__ is lazy)
    light = {"schedsim.sim", "schedsim.sim._cwaves"}
    assert not any(m.startswith(("networkx", "schedsim.sim", "rich", "torch")) and m not in light
                   for m in checked), checked
    predicted = _loaded(run.format("predict", f", '--no-gantt', '--out', {str(tmp_path)!r}"))
    assert (tmp_path / "trace.json").exists()
    assert not any(m.startswith(("networkx", "schedsim.graph.build", "torch")) for m in predicted), predicted
    assert "numpy" in predicted  # the lowering's arrays: the modules above are really what the run loaded
    has_block = "\npipeline:" in (ROOT / "schedules" / f"{schedule}.yaml").read_text()
    assert has_block == (schedule == "pipeline_schedules")
    for loaded in (checked, predicted):
        assert ("schedsim.spec.pipeline_block" in loaded) == has_block, loaded
        assert "numpy.ma" not in loaded  # a plain np.unique imports it (lower.program.unique does not)
    # graph.info's dataclasses (1% of a cold check) only where the block's PipelineInfo is made
    assert ("schedsim.graph.info" in checked) == has_block, checked


@pytest.mark.parametrize("before", [None, "some_plugin"])
def test_own_models_skip_plugin_discovery_and_leave_the_environment(before: str | None) -> None:
    """schedsim's models are built without pydantic's plugin discovery (a scan of every installed
    distribution's entry points) and without importing its plugin loader (which imports importlib.metadata),
    and the process's environment is as it was afterwards: a model of the caller's, built later, is looked up
    for plugins as usual, by pydantic's own loader."""
    code = ("import os, sys\nimport schedsim.spec.model, schedsim.spec.pipeline_block, schedsim.hardware.profile\n"
            "print('importlib.metadata' in sys.modules, os.environ.get('PYDANTIC_DISABLE_PLUGINS'))\n"
            "import pydantic\nclass Mine(pydantic.BaseModel):\n    x: int = 0\n"
            "from pydantic.plugin import _loader\n"
            "print(_loader._plugins is None, _loader is sys.modules['pydantic.plugin._loader'])\n"
            "class Again(pydantic.BaseModel):\n    x: int = 0\n")
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if before is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = before
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == f"False {before}"  # no loader, so no scan, while our models were built; the variable as it was
    assert out[1] == "False True"  # the caller's model: pydantic's loader, in place of the stand-in, scanned


@pytest.mark.parametrize("disable", ["1", "true", "__all__"])
def test_plugin_stand_in_answers_as_pydantic_does(disable: str) -> None:
    """The stand-in for pydantic's plugin loader returns no plugins for the values of PYDANTIC_DISABLE_PLUGINS
    that disable them all (as pydantic.plugin._loader.get_plugins does), without importing the real loader;
    for any other value it is the real loader's answer, and the real loader takes its place."""
    code = ("import os, sys\nfrom schedsim._pydantic import defer_plugin_discovery\ndefer_plugin_discovery()\n"
            "from pydantic.plugin._loader import get_plugins\n"
            f"os.environ['PYDANTIC_DISABLE_PLUGINS'] = {disable!r}\n"
            "print(list(get_plugins()), 'importlib.metadata' in sys.modules)\n"
            "os.environ['PYDANTIC_DISABLE_PLUGINS'] = 'no_such_plugin'\n"
            "print(list(get_plugins()), 'importlib.metadata' in sys.modules)\n"
            "import pydantic.plugin._loader as real\n"
            "print(real._plugins is not None, real.get_plugins is not get_plugins)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:3] == ["[] False", "[] True", "True True"], out


def test_check_skips_importlib_metadata() -> None:
    """A cold ``check`` never imports importlib.metadata (5% of its instructions, through pydantic's plugin
    loader; schedsim._pydantic.defer_plugin_discovery)."""
    code = ("import sys\nfrom schedsim.cli import main\n"
            "sys.argv = ['schedsim', 'check', 'schedules/allgather_mm8.yaml']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('importlib.metadata' in sys.modules, 'pydantic.plugin._loader' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[-2] == "False True"  # the loader's name holds the stand-in, which pydantic did consult


def test_model_default_factories_are_not_builtins() -> None:
    """A builtin default factory (``default_factory=list``) makes pydantic parse the builtin's text signature
    with tokenize when the model is built (1.2% of the instructions of a cold ``predict`` for one such field,
    2026-12-01); the models write ``lambda: []`` instead."""
    from pydantic import BaseModel

    import schedsim.hardware.profile as hp
    import schedsim.spec.model as sm
    import schedsim.spec.pipeline_block as pb

    models = [m for mod in (hp, sm, pb) for m in vars(mod).values()
              if isinstance(m, type) and issubclass(m, BaseModel) and m.__module__ == mod.__name__]
    assert len(models) > 15
    builtin = [(m.__name__, name) for m in models for name, f in m.model_fields.items()
               if f.default_factory in (list, dict, set, tuple)]
    assert builtin == []
