"""A uniform lowering's linked arrays (edges, dependency CSR, collective members, per-rank order) dropped by
``Program.release_linked`` and made again on read (``Program.remake``): the same dtype, shape and values as the
lowering made them, and as the general link (every rank's ops linked, ``link.UNIFORM`` off) makes them; a Program
that cannot make them again keeps them; a released Program pickles and simulates as the unreleased one."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from schedsim.hardware.profile import load_profile
from schedsim.lower import link as link_module
from schedsim.lower import lower
from schedsim.lower.program import REMADE
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_schedule

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(ROOT.glob("schedules/*.yaml"))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))


def test_released_fields_are_made_again_as_the_lowering_and_the_general_link_make_them(monkeypatch):
    remade = 0
    for path in [*SHIPPED, ROOT / "benchmarks/data/overlap_gen.yaml"]:
        prog = lower(load_schedule(path))
        if prog.remake is None:
            continue
        remade += 1
        kept = {f: np.array(getattr(prog, f)) for f in REMADE}
        prog.release_linked()
        assert not any(f in prog.__dict__ for f in REMADE), path
        for f in REMADE:
            a = getattr(prog, f)
            assert _same(a, kept[f]), (path, f)
            assert not a.flags.writeable, (path, f)
            assert getattr(prog, f) is a  # made once, then kept
        with monkeypatch.context() as m:
            m.setattr(link_module, "UNIFORM", False)
            general = lower(load_schedule(path))
        assert general.remake is None
        for f in REMADE:
            assert _same(getattr(general, f), kept[f]), (path, f)
    assert remade >= 3  # allgather_mm8, tp_ffn, the benchmark, ... link uniformly


def test_a_program_that_cannot_make_them_again_keeps_them(monkeypatch):
    monkeypatch.setattr(link_module, "UNIFORM", False)
    prog = lower(load_schedule(ROOT / "schedules/allgather_mm8.yaml"))
    prog.release_linked()
    assert all(f in prog.__dict__ for f in REMADE)
    try:
        prog.__getattr__("stream_edges")
    except AttributeError as e:
        assert "stream_edges" in str(e)
    else:
        raise AssertionError("a Program without remake made a field")


def test_a_released_program_pickles_and_simulates_as_before():
    spec = load_schedule(ROOT / "benchmarks/data/overlap_gen.yaml")
    prog, ref = lower(spec), lower(spec)
    assert prog.remake is not None
    prog.release_linked()
    back = pickle.loads(pickle.dumps(prog))
    for f in REMADE:
        assert _same(getattr(back, f), getattr(ref, f)), f
    prof = load_profile("h200")
    a, b = simulate(prog, prof), simulate(ref, prof)  # simulate releases them itself
    assert not any(f in prog.__dict__ for f in ("stream_edges", "dep_edges"))
    assert np.array_equal(a.columns.start_s, b.columns.start_s) and np.array_equal(a.columns.end_s, b.columns.end_s)
    assert a.critical_path == b.critical_path
