"""Review findings on the columnar ``foreach`` path (schedsim.spec.loader.Block, schedsim.expr.compile_vector):
inputs where the block path and the general path (``loader.TEMPLATES = False``) must agree and a user must get
a clear error or no noise."""

from __future__ import annotations

import warnings

import pytest

from schedsim.spec import loader
from schedsim.spec.loader import load_text

NAN_INF = """\
schema_version: 1
name: t
world_size: 1
ops:
  - foreach: {x: [.nan, 1.0, .inf]}
    ops:
      - {name: "a{x}", kind: compute, duration_us: 1, when: "x * 0 < 1 or x > 0"}
"""


def test_nan_and_inf_loop_values_give_no_numpy_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's float rules: nan * 0 < 1 is False and nan > 0 is False (dropped); inf * 0 is nan, inf > 0 is
    True (kept); 1.0 kept. The block evaluates the ``when`` over object arrays, whose float operations set the
    FPU flags; numpy must not turn those into RuntimeWarnings on the user's terminal (evaluate prints none)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = load_text(NAN_INF, "n.yaml")
        assert spec._layout is not None  # the block path ran
        names = [o.name for o in spec.ops]
    assert [str(w.message) for w in caught] == []
    assert names == ["a1.0", "ainf"]
    monkeypatch.setattr(loader, "TEMPLATES", False)
    assert [o.name for o in load_text(NAN_INF, "n.yaml").ops] == names
