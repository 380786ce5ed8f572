"""Shared fixtures: a toy hardware profile with round numbers for hand-computed timelines."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = (ROOT / ".." / "shared").resolve()


def accuracy_script(name: str) -> ModuleType:
    """``benchmarks/accuracy/NAME.py`` loaded afresh as module ``NAME`` (registered in ``sys.modules``: dataclasses
    resolve a module's annotations through it)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "accuracy" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def toy_profile_dict(**contention: float) -> dict:
    """No launch overhead, no kernel floor; NVLink 100 GB/s with 1 µs latency; given contention."""
    c = {"compute_slowdown_with_copy": 0.0, "copy_slowdown_with_compute": 0.0, "source": "test"}
    c.update(contention)
    return {
        "name": "toy",
        "gpu": {"name": "toy", "hbm_GBps": 1000.0, "peak_tflops": {"fp32": 100.0, "fp16": 400.0},
                "gemm_efficiency": 1.0, "kernel_floor_us": 0.0, "source": "test"},
        "launch": {"eager_per_op_us": 0.0, "eager_per_collective_us": 0.0, "graph_launch_us": 0.0,
                   "graph_per_op_us": 0.0, "source": "test"},
        "topology": {"gpus_per_node": 8},
        "links": {"nvlink": {"bandwidth_GBps": 100.0, "latency_us": 1.0, "source": "test"},
                  "network": {"bandwidth_GBps": 10.0, "latency_us": 5.0, "source": "test"}},
        "memcpy": {"h2d_GBps": 10.0, "d2h_GBps": 10.0, "d2d_GBps": 1000.0, "latency_us": 0.0, "source": "test"},
        "gemm": {"source": "test", "entries": [["fp32", 1000, 1000, 1000, 1.0]]},
        "collectives": {"source": "test", "tables": {}},
        "contention": c,
    }


@pytest.fixture
def toy_profile():
    from schedsim.hardware.profile import HardwareProfile

    return HardwareProfile.model_validate(toy_profile_dict())


@pytest.fixture
def make_profile():
    from schedsim.hardware.profile import HardwareProfile

    def make(**contention: float):
        return HardwareProfile.model_validate(toy_profile_dict(**contention))

    return make


@pytest.fixture
def sim_text():
    """Load YAML text, build, simulate on a profile; return {op_id: (start_us, end_us)} and the timeline."""
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    def run(text: str, profile, launch=None, model_executor=False):
        tl = simulate(lower(load_text(text, "t.yaml")), profile, launch=launch, model_executor=model_executor)
        return {s.id: (round(s.start_s * 1e6, 6), round(s.end_s * 1e6, 6)) for s in tl.spans}, tl

    return run


def _exec_helpers():  # a plain module beside the executor tests (not a conftest: see its docstring)
    import sys

    d = str(Path(__file__).resolve().parent / "executor")
    if d not in sys.path:
        sys.path.insert(0, d)
    import exec_helpers

    return exec_helpers


def _shared_launch(tmp_path_factory, name: str, nproc: int):
    pytest.importorskip("torch")
    h = _exec_helpers()
    base = tmp_path_factory.mktemp(name)
    return h.launch(nproc, base, getattr(h, f"{name}_jobs")(base))


@pytest.fixture(scope="session")
def gloo2(tmp_path_factory):
    """The 2-rank commands of ``exec_helpers.gloo2_jobs``, run in one torchrun launch: name → (Job, base folder)."""
    return _shared_launch(tmp_path_factory, "gloo2", 2)


@pytest.fixture(scope="session")
def gloo3(tmp_path_factory):
    """The 3-rank commands of ``exec_helpers.gloo3_jobs``, run in one torchrun launch: name → (Job, base folder)."""
    return _shared_launch(tmp_path_factory, "gloo3", 3)


@pytest.fixture(autouse=True)
def _schedsim_environment_restored():  # type: ignore[no-untyped-def]
    """Every test leaves the ``SCHEDSIM_*`` environment as it found it: a CLI run in process applies
    ``--max-ops`` through ``SCHEDSIM_MAX_OPS`` (so that executor ranks see it), which would otherwise hold for
    every later test of the session."""
    before = {k: v for k, v in os.environ.items() if k.startswith("SCHEDSIM_")}
    yield
    for k in [k for k in os.environ if k.startswith("SCHEDSIM_") and k not in before]:
        del os.environ[k]
    os.environ.update(before)

