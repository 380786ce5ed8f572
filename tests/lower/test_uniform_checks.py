"""The static checks of a Program linked as rank 0's ops on every rank (``check_arrays(prog, uniform=True)``: the
forward dependencies alone) against every rule run on the same arrays (``check_arrays(prog)``), on the shipped
schedules and the benchmark input that link that way and on hand-written ones (lazy and eager communicator
creation, several collective kinds, one rank, a dependency written after its user); and the verdict without the
"may hang" cases that only a worded warning reads (``hangs=False``) against every rule's."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedsim.errors import SchedsimError
from schedsim.lower import link as link_module
from schedsim.lower import lower
from schedsim.lower.checks import Verdict, check_arrays
from schedsim.spec.loader import load_schedule, load_text

ROOT = Path(__file__).resolve().parents[2]


def _lowered(load, monkeypatch):  # type: ignore[no-untyped-def]
    """``(program, uniform)``: ``load()``'s schedule lowered unchecked, and whether it was linked uniformly."""
    seen: list[bool] = []
    real = link_module.link

    def spy(*a, **k):  # type: ignore[no-untyped-def]
        cols, linked = real(*a, **k)
        seen.append("uniform" in linked)
        return cols, linked

    monkeypatch.setattr(link_module, "link", spy)
    prog = lower(load(), check=False)
    return prog, seen[-1]


SHIPPED = sorted(ROOT.glob("schedules/*.yaml"))


def test_the_uniform_verdict_is_every_rules_on_the_shipped_schedules(monkeypatch):
    uniform = 0
    for path in [*SHIPPED, ROOT / "benchmarks/data/overlap_gen.yaml"]:
        prog, u = _lowered(lambda path=path: load_schedule(path), monkeypatch)
        if u:
            uniform += 1
            assert check_arrays(prog, uniform=True) == check_arrays(prog) == Verdict(False, False, False, False,
                                                                                       None), path
    assert uniform >= 3  # allgather_mm8, tp_ffn, the benchmark, ... link this way


BODY = """\
schema_version: 1
name: u
world_size: {w}
nccl_init: {init}
ops:
  - {{name: a, kind: matmul, m: 64, n: 64, k: 64, dtype: bf16, stream: compute}}
  - {{name: r, kind: all_reduce, bytes: 4096, stream: comm, deps: [a]}}
  - {{name: g, kind: all_gather, bytes: 4096, stream: comm2, deps: [{dep}]}}
  - {{name: b, kind: matmul, m: 64, n: 64, k: 64, dtype: bf16, stream: compute, deps: [r]}}
  - {{name: s, kind: reduce_scatter, bytes: 4096, stream: comm}}
"""


@pytest.mark.parametrize("w", [1, 2, 8])
@pytest.mark.parametrize("init", ["lazy", "eager"])
@pytest.mark.parametrize("dep", ["a", "b"])  # b: written after its user g, on every rank
def test_the_uniform_verdict_is_every_rules_on_written_schedules(monkeypatch, w, init, dep):
    text = BODY.format(w=w, init=init, dep=dep)
    prog, u = _lowered(lambda: load_text(text, "u.yaml"), monkeypatch)
    assert u
    got = check_arrays(prog, uniform=True)
    assert got == check_arrays(prog)
    assert got.fault == (dep == "b")
    if dep == "b":  # worded as the general path words it
        with pytest.raises(SchedsimError, match="g"):
            lower(load_text(text, "u.yaml"))
    else:
        assert lower(load_text(text, "u.yaml")).warnings == ()


CYCLIC = """\
schema_version: 1
name: x
world_size: 3
nccl_init: eager
ops:
  - {name: c1, kind: all_reduce, bytes: 4096, stream: s1, ranks: [0], group: [0, 1]}
  - {name: c3, kind: all_reduce, bytes: 4096, stream: s3, ranks: [0], group: [0, 2]}
  - {name: c2, kind: all_reduce, bytes: 4096, stream: s2, ranks: [1], group: [1, 2]}
  - {name: c1, kind: all_reduce, bytes: 4096, stream: s1, ranks: [1], group: [0, 1]}
  - {name: c3, kind: all_reduce, bytes: 4096, stream: s3, ranks: [2], group: [0, 2]}
  - {name: c2, kind: all_reduce, bytes: 4096, stream: s2, ranks: [2], group: [1, 2]}
"""


def test_without_hang_warnings_the_verdict_is_every_rules_but_the_unworded_cases() -> None:
    """``check_arrays(prog, hangs=False)`` (what ``lower(..., warn=False)`` runs: the search's points) leaves out
    the "may hang" cases only a worded warning reads (collectives of three communicators issued in a cyclic order
    here: cross), and finds the rest as every rule does, on the shipped schedules too; ``warn=False`` lowers the
    same Program but for the unworded warning."""
    prog = lower(load_text(CYCLIC, "x.yaml"), check=False)
    assert check_arrays(prog) == Verdict(False, True, False, False, None)
    assert check_arrays(prog, hangs=False) == Verdict(False, False, False, False, None)
    assert len(lower(load_text(CYCLIC, "x.yaml")).warnings) == 1
    assert lower(load_text(CYCLIC, "x.yaml"), warn=False).warnings == ()
    for path in SHIPPED:
        p = lower(load_schedule(path), check=False)
        assert check_arrays(p, hangs=False) == check_arrays(p)._replace(cross=False, eager=False), path


@pytest.mark.parametrize("w", [1, 3, 8])
def test_uniform_collective_keys_are_made_on_first_read_as_the_general_links(monkeypatch, w):
    """A uniformly linked Program's collective keys (``name#0,1,...`` of each collective, in program order) are not
    made until read; read, they equal the keys the general link builds for the same schedule (``UNIFORM`` off), compare
    equal to that tuple, and pickle as it."""
    import pickle

    from schedsim.lower.link import CollectiveKeys

    text = BODY.format(w=w, init="lazy", dep="a")
    prog, u = _lowered(lambda: load_text(text, "u.yaml"), monkeypatch)
    assert u
    keys = prog.coll_keys
    assert isinstance(keys, CollectiveKeys) and keys._keys is None and len(keys) == 3 and keys._keys is None
    monkeypatch.setattr(link_module, "UNIFORM", False)
    general, u = _lowered(lambda: load_text(text, "u.yaml"), monkeypatch)
    assert not u
    every = ",".join(map(str, range(w)))
    want = (f"r#{every}", f"g#{every}", f"s#{every}")
    assert tuple(general.coll_keys) == want
    assert keys == want and tuple(keys) == want and keys[1] == want[1]
    assert pickle.loads(pickle.dumps(keys)) == want and type(pickle.loads(pickle.dumps(keys))) is tuple
    assert list(prog.collectives()) == list(want)
