"""The lowering's interning of coded rows (:func:`schedsim.lower.table._intern_codes`) against interning every
row's value in turn (:func:`schedsim.lower.table._intern_all`), and the block path's coded names and batch names
against the rows the general path expands."""

from __future__ import annotations

import numpy as np
import pytest

from schedsim.coded import Codes
from schedsim.lower import lower
from schedsim.lower.table import _intern_all, _intern_codes, _Interner
from schedsim.spec import foreach
from schedsim.spec.loader import _pair_repeats, load_text


def _obj(xs: list[object]) -> np.ndarray:
    out = np.empty(len(xs), object)
    out[:] = xs
    return out


@pytest.mark.parametrize("seed", range(6))
def test_coded_rows_intern_as_their_values_in_turn(seed: int) -> None:
    # a table with repeated values, None, values no row uses; codes in any order; some values already interned
    rng = np.random.default_rng(seed)
    pool = [f"n{k}" for k in range(12)] + [None]
    values = _obj([pool[int(k)] for k in rng.integers(0, len(pool), 20)])
    codes = rng.integers(0, 20, int(rng.integers(0, 60))).astype(np.int64)
    col = Codes(codes, values)
    pre = [f"n{k}" for k in rng.permutation(12)[:4].tolist()]
    a, b = _Interner(), _Interner()
    for x in pre:
        a(x), b(x)
    got = _intern_codes(a, col)
    rows = col.tolist()
    have = np.array([x is not None for x in rows], bool)
    want = np.full(len(rows), -1, np.int32)
    if have.any():
        want[have] = _intern_all(b, [x for x in rows if x is not None])
    assert got.dtype == np.int32
    assert got.tolist() == want.tolist()
    assert a.items == b.items  # the same ids, taken in the same order


def test_codes_first_used_cat_take_where() -> None:
    c = Codes(np.array([3, 1, 3, 0, 1]), _obj(["a", "b", "c", "d", "e"]))
    assert c.first_used().tolist() == [3, 1, 0]  # by first row; 2 and 4 unused
    assert c.tolist() == ["d", "b", "d", "a", "b"]
    d = Codes.cat([c, Codes.of("z", 2), Codes.of(_obj(["x", None]), 2)])
    assert d.tolist() == ["d", "b", "d", "a", "b", "z", "z", "x", None]
    assert d.take(np.array([8, 0, 5])).tolist() == [None, "d", "z"]
    g = Codes.cat([c, Codes(np.array([4, 2]), c.values)])  # one table in both: held once, the same rows
    assert g.values is c.values and g.tolist() == ["d", "b", "d", "a", "b", "e", "c"]
    assert _intern_codes(_Interner(), g).tolist() == _intern_all(_Interner(), g.tolist()).tolist()
    e = Codes.of(_obj([None, "p", None]), 3)
    f = Codes.of("q", 3)
    assert e.where(f, np.array([False, True, False])).tolist() == ["q", "p", "q"]
    k = Codes.of("z", 4).compact()  # one code for every row: held once (a read-only view), the same rows
    assert k.codes.strides == (0,) and k.codes.dtype == np.int32 and k.tolist() == ["z"] * 4
    assert c.compact().codes.dtype == np.int32 and c.compact().tolist() == c.tolist()
    assert _intern_codes(_Interner(), k).tolist() == [0, 0, 0, 0]
    assert _pair_repeats(c, [np.array([0, 1, 1, 0, 0])]) is False  # (d,0) (b,1) (d,1) (a,0) (b,0)
    assert _pair_repeats(c, [np.array([0, 1, 0, 0, 0])]) is True  # (d, 0) twice


RING = """\
schema_version: 1
name: ring
world_size: 4
params: {n: 5}
ops:
  - foreach: {i: range(n)}
    ops:
      - {name: "mm{i}", kind: matmul, m: 64, n: 64, k: 64, dtype: bf16}
  - foreach: {i: range(n)}
    ops:
      - {name: "s{i}", kind: send, peer: "(rank + 1) % world_size", bytes: 64, stream: p2p, p2p_batch: "b{i}",
         when: i != 3TAG}
      - {name: "r{i}", kind: recv, peer: "(rank - 1) % world_size", bytes: 64, stream: p2p, p2p_batch: "b{i}",
         deps: ["mm{i}"], when: i != 3TAG}
"""


@pytest.mark.parametrize("tag", ["", ', tag: "m{i}"'])
def test_block_rows_coded_lower_as_the_general_path(tag: str) -> None:
    # names and batch names without `rank` held once per iteration (Codes), the rows per (iteration, rank), with
    # and without message tags: the same program, op by op and in the tables' id order, as the general path's
    text = RING.replace("TAG", tag)
    blk = load_text(text, "t.yaml").__pydantic_private__["_layout"].items[1]
    assert isinstance(blk.name_codes, Codes) and len(blk.name_codes.values) < blk.rows
    fast = lower(load_text(text, "t.yaml"))
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(foreach, "TEMPLATES", False)
        slow = lower(load_text(text, "t.yaml"))
    finally:
        mp.undo()
    assert fast.ops() == slow.ops()
    assert list(fast.names) == list(slow.names) and list(fast.strs) == list(slow.strs)
    assert [f"{o.name}>{o.peer}:{o.p2p_batch}" for o in fast.ops() if o.rank == 3 and o.kind in ("send", "recv")] == [
        f"{k}{i}>{p}:b{i}" for i in (0, 1, 2, 4) for k, p in (("s", 0), ("r", 2))]
