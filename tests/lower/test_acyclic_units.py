"""The static checks' sweep over the wait-for graph's edge parts (``_cwaves.acyclic_units``: each unit's
posted -> done implied, parts read where they lie) against the Python sweep and networkx."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedsim.lower.program import required
from tests.oracle.numpy_helpers import acyclic as _acyclic_python

acyclic_units = required("acyclic_units")


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 5), st.integers(0, 4), st.lists(st.tuples(st.integers(0, 13), st.integers(0, 13)),
                                                      max_size=30), st.integers(0, 3))
def test_parts_sweep_matches_python_and_networkx(units, extra, pairs, cuts):
    n = 2 * units + extra
    if not n:
        return
    e = np.array([(a % n, b % n) for a, b in pairs], np.int32).reshape(-1, 2)
    implied = np.array([(2 * u, 2 * u + 1) for u in range(units)], np.int32).reshape(-1, 2)
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from(np.concatenate([implied, e]).tolist())
    want = nx.is_directed_acyclic_graph(G)
    bounds = sorted({0, len(e), *(min(len(e), 7 * k + 3) for k in range(cuts))})  # split into parts, some empty
    parts = [(np.ascontiguousarray(e[a:b, 0]), np.ascontiguousarray(e[a:b, 1]))
             for a, b in zip(bounds, bounds[1:], strict=False)]
    assert acyclic_units(n, units, parts + [(e[:0, 0].copy(), e[:0, 1].copy())]) is want
    assert _acyclic_python(n, np.concatenate([implied, e]).astype(np.int64)) is want


def test_a_unit_edge_closes_a_cycle_and_bad_parts_raise():
    one = np.array([1], np.int32), np.array([0], np.int32)
    assert acyclic_units(2, 0, [one]) is True  # 1 -> 0 alone
    assert acyclic_units(2, 1, [one]) is False  # with the implied 0 -> 1
    with pytest.raises(TypeError, match="int32"):
        acyclic_units(2, 1, [(np.array([1]), np.array([0]))])
    with pytest.raises(ValueError, match="outside"):
        acyclic_units(2, 1, [(np.array([2], np.int32), np.array([0], np.int32))])
    with pytest.raises(ValueError):
        acyclic_units(2, 2, [])  # 2 units need 4 nodes
    with pytest.raises(TypeError, match="differ in length"):
        acyclic_units(2, 0, [(np.array([1, 0], np.int32), np.array([0], np.int32))])


CROSSED = """\
schema_version: 1
name: crossed
world_size: 2
ops:
  - {name: a, kind: all_reduce, bytes: 1048576, ranks: [0]}
  - {name: b, kind: all_reduce, bytes: 1048576, ranks: [0], deps: [a]}
  - {name: b, kind: all_reduce, bytes: 1048576, ranks: [1]}
  - {name: a, kind: all_reduce, bytes: 1048576, ranks: [1], deps: [b]}
"""


def test_the_wait_for_sweep_missing_from_the_build_is_a_build_error(monkeypatch):
    """Two all-reduces in opposite orders on the two ranks: not ordered by position, so the checks sweep the
    wait-for graph, a cycle in the package's compiled sweep; a build without ``acyclic_units`` (one from an older
    ``_cwaves.c``) stops with a BuildError naming it rather than falling back."""
    import sys
    import types

    import schedsim.sim
    from schedsim.api import load_text
    from schedsim.errors import BuildError
    from schedsim.lower import lower
    from schedsim.lower.checks import _no_hang, _Templates, launch_heads

    prog = lower(load_text(CROSSED, "crossed.yaml"), check=False)
    tc = _Templates.of(prog)
    comm, head = launch_heads(prog, tc)
    assert _no_hang(prog, comm, head, tc) is False
    stale = types.ModuleType("schedsim.sim._cwaves")
    monkeypatch.setitem(sys.modules, "schedsim.sim._cwaves", stale)
    monkeypatch.setattr(schedsim.sim, "_cwaves", stale, raising=False)
    with pytest.raises(BuildError, match="lack acyclic_units") as e:
        _no_hang(prog, comm, head, tc)
    assert "pip install -e ." in (e.value.fix or "")
