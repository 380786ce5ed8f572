"""Review findings on the columnar ``foreach`` path (schedsim.spec.block.Block, schedsim.expr.compile_vector):
inputs where the block path and the general path (``foreach.TEMPLATES = False``) must agree and a user must get
a clear error or no noise."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.errors import SpecError
from schedsim.expr import _Vec
from schedsim.lower import lower
from schedsim.spec import block, foreach
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
    monkeypatch.setattr(foreach, "TEMPLATES", False)
    assert [o.name for o in load_text(NAN_INF, "n.yaml").ops] == names


TAGS = """\
schema_version: 1
name: t
world_size: 2
ops:
  - {name: pre, kind: compute, duration_us: 1}
  - foreach: {i: range(3)}
    ops:
      - {name: "a{i}", kind: compute, duration_us: 1, tags: {mb: "{i}", span: VALUE}}
"""


@pytest.mark.parametrize(("value", "typ"), [("[1, 2]", "list"), ('"{[i, i + 1]}"', "list"), ("{x: 1}", "dict")])
@pytest.mark.parametrize("blocks", [True, False])
def test_a_tag_value_that_is_a_list_or_mapping_is_refused_with_its_line(
        value: str, typ: str, blocks: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A list or mapping as a tag value reached the lowering's tag interning and crashed there (TypeError:
    unhashable type, a traceback from `schedsim check`); it is a schema error naming the line, field and tag."""
    monkeypatch.setattr(foreach, "TEMPLATES", blocks)
    text = TAGS.replace("VALUE", value)
    with pytest.raises(SpecError) as e:
        lower(load_text(text, "t.yaml"))
    assert (e.value.line, e.value.path) == (8, "ops[1].ops[0].tags")
    assert f"tag 'span' holds a {typ}" in str(e.value)
    path = tmp_path / "t.yaml"
    path.write_text(text)
    r = CliRunner().invoke(app, ["check", str(path)])
    assert r.exit_code == 2 and "Traceback" not in r.output and f"{path}:8:" in r.output


def test_scalar_tag_values_and_null_still_load() -> None:
    spec = load_text(TAGS.replace("VALUE", "null").replace('"{i}"', '"{i > 0}"'), "t.yaml")
    assert [o.tags for o in spec.ops[1:]] == [{"mb": False, "span": None}, {"mb": True, "span": None},
                                              {"mb": True, "span": None}]
    assert lower(spec).N == 2 * 4


NESTED_SMALL = """\
schema_version: 1
name: small_inner
world_size: 2
ops: [{foreach: {i: range(5)}, ops: [
  {foreach: {j: range(2)}, ops: [{name: "mm{i}_{j}", kind: compute, duration_us: "{j + 1}"}]},
  {foreach: {j: range(8)}, ops: [{name: "big{i}_{j}", kind: compute, duration_us: 1}]}]}]
"""


def test_a_small_inner_loop_stops_being_a_block_after_a_few(monkeypatch: pytest.MonkeyPatch) -> None:
    """An inner loop of 2 iterations (small) is built as a block for its first SMALL_BLOCKS_KEPT outer
    iterations, then per iteration; an inner loop of 8 (not small) stays a block every time. The spec is the
    general path's either way."""
    from schedsim.spec.block import Block

    monkeypatch.setattr(block, "SMALL_BLOCKS_KEPT", 2)
    monkeypatch.setattr(block, "SMALL_BLOCK", 8)
    spec = load_text(NESTED_SMALL, "n.yaml")
    items = spec._layout.items
    kinds = [(type(x).__name__, x.rows if isinstance(x, Block) else 1) for x in items]
    # by hand: i = 0, 1: a block of 2 rows then a block of 8; i = 2, 3, 4: two plain ops then a block of 8
    assert kinds == [("Block", 2), ("Block", 8)] * 2 + [("ComputeOp", 1), ("ComputeOp", 1), ("Block", 8)] * 3
    monkeypatch.setattr(foreach, "TEMPLATES", False)
    assert spec.ops == load_text(NESTED_SMALL, "n.yaml").ops


def test_block_name_check_is_the_name_pattern_per_line():
    # The block path checks its rows' names (and p2p_batch names) by byte passes over them joined, not a regex
    # over megabytes: the same verdict as NAME_PATTERN on each name, for names valid and not.
    import random
    import re

    from schedsim.spec.block import _names_ok
    from schedsim.spec.model import NAME_PATTERN

    one = re.compile(NAME_PATTERN)
    rng = random.Random(7)
    alphabet = "aZ_09.-[]x \t/é\n"
    cases = [[], [""], ["a"], ["9a"], ["a", ""], ["_x.y-z[0]"], ["-a"], ["a b"], ["é"], ["a\nb"], ["[0]"], ["A9"]]
    cases += [["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(0, 5))]
              for _ in range(3000)]
    for names in cases:
        joined = "\n".join(names) + "\n"
        want = bool(names) and joined.count("\n") == len(names) and all(one.match(n) for n in names)
        assert _names_ok(joined, len(names)) == want, names


def test_a_name_twice_on_a_rank_among_per_rank_rows_is_refused():
    # Entries written with `rank` run as rows of one rank each; a (name, rank) pair that repeats among them is
    # found by integer keys (not a set of tuples) and the general path words the error.
    import numpy as np
    import pytest

    from schedsim.errors import SpecError
    from schedsim.spec.loader import _pair_repeats, load_text

    assert _pair_repeats(["a", "b", "a"], [np.array([0, 0]), np.array([1])]) is False
    assert _pair_repeats(["a", "b", "a"], [np.array([0, 0, 0])]) is True
    assert _pair_repeats([], []) is False
    text = ("schema_version: 1\nname: dup\nworld_size: 4\nops:\n  - foreach: {i: range(3)}\n    ops:\n"
            "      - {name: 's{i // 2}', kind: send, peer: '(rank + 1) % world_size', bytes: 64, stream: p2p, "
            "p2p_batch: 'b{i}'}\n"
            "      - {name: 'r{i}', kind: recv, peer: '(rank - 1) % world_size', bytes: 64, stream: p2p, "
            "p2p_batch: 'b{i}'}\n")
    with pytest.raises(SpecError, match="'s0' is used twice on rank 0"):
        load_text(text, "dup.yaml")
    load_text(text.replace("s{i // 2}", "s{i}"), "dup.yaml")  # distinct: loads


PER_RANK = """\
schema_version: 1
name: t
world_size: 4
params: {names: ["a", "b c", "d"]}
ops:
  - foreach: {i: range(3)}
    ops:
      - {name: "{names[i]}", kind: send, peer: "(rank + 1) % world_size", bytes: 64, stream: p2p, p2p_batch: "b{i}"WHEN}
      - {name: "r{i}", kind: recv, peer: "(rank - 1) % world_size", bytes: 64, stream: p2p, p2p_batch: "b{i}"WHEN}
"""


def test_per_rank_rows_check_each_iterations_names_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Entries written with `rank` run as one row per (iteration, rank); their names and batch names, the same on
    # every rank, are checked once per iteration that some row takes: iteration 1's name "b c" fails the pattern
    # on every rank (the general path's error), and dropped by `when` it is not checked at all (16 ops load)
    checked: list[list[str]] = []
    row_names = block._row_names

    def spy(nm, nk, sp=None):  # type: ignore[no-untyped-def]
        checked.append(sorted((nm if sp is None else block._used(sp)).tolist()))
        return row_names(nm, nk, sp)

    monkeypatch.setattr(block, "_row_names", spy)
    with pytest.raises(SpecError, match=r"name: String should match pattern .*\(got 'b c'\)"):
        load_text(PER_RANK.replace("WHEN", ""), "t.yaml")
    assert checked == [["a", "b c", "d"]]  # the first entry abandons the block: once per iteration, not rank
    checked.clear()
    text = PER_RANK.replace("WHEN", ", when: i != 1")
    ops = lower(load_text(text, "t.yaml")).ops()
    assert checked == [["a", "d"], ["r0", "r2"]]
    assert sorted(f"{o.name}@r{o.rank}>{o.peer}" for o in ops if o.kind == "send") == [
        f"{n}@r{r}>{(r + 1) % 4}" for n in ("a", "d") for r in range(4)]
    monkeypatch.setattr(foreach, "TEMPLATES", False)
    assert lower(load_text(text, "t.yaml")).ops() == ops


def test_characters_of_spread_values_are_those_of_the_rows() -> None:
    # _chars from the values per iteration (each counted as often as rows take it) against the rows themselves:
    # strings, None and ints mixed, iterations taken 0 to 3 times
    import numpy as np

    per_it = np.empty(5, object)
    per_it[:] = ["ab", None, "cdef", 7, ""]
    rows = np.array([0, 0, 2, 2, 2, 3, 1, 4])
    spread = per_it[rows]
    nums = np.arange(8)
    want = block._chars({"name": spread, "n": nums, "s": "xyz"}, 8)
    assert want == 2 * 2 + 3 * 4 + 3 * 8
    assert block._chars({"name": spread, "n": nums, "s": "xyz"}, 8, {"name": (per_it, rows)}) == want


#: sends on ranks 0..2 and recvs on ranks 1..3, in iterations 0 and 2; `PEER` the recvs' peer
RANK_ONLY = """\
{schema_version: 1, name: t, world_size: 4, params: {n: 3, i: 2}, ops: [{foreach: {i: range(n)}, ops: [
  {name: "x{i}", kind: send, peer: "(rank + 1) % world_size", bytes: "64 * (rank % 2 + 1)", stream: p2p,
   p2p_batch: "b{i}", when: "rank != 3 and i != 1"},
  {name: "y{i}", kind: recv, peer: "PEER", bytes: "64 * ((rank - 1) % world_size % 2 + 1)", stream: p2p,
   p2p_batch: "b{i}", when: "rank != 0 and i != 1"}]}]}
"""


@pytest.mark.parametrize(("peer", "per_rank"), [("(rank - 1) % world_size", 4),
                                              ("12 // rank - 12 // rank + rank - 1", 4),
                                              ("(rank - 1 + i - i) % world_size", 3)])
def test_fields_with_rank_and_no_loop_variable_are_evaluated_per_rank(
        monkeypatch: pytest.MonkeyPatch, peer: str, per_rank: int) -> None:
    # `peer` and `bytes` with `rank` but no loop variable, evaluated once per rank that a row takes (not per
    # row): `12 // rank` would fail on rank 0, which `when` drops; with the loop variable `i` (which the params'
    # `i` must not stand for) evaluated per row: each the general path's program, op by op
    text = RANK_ONLY.replace("PEER", peer)
    calls: list[int] = []
    real = block._per_rank

    def spy(*a):  # type: ignore[no-untyped-def]
        calls.append(len(a[6]))
        return real(*a)

    monkeypatch.setattr(block, "_per_rank", spy)
    spec = load_text(text, "t.yaml")
    assert spec.__pydantic_private__["_layout"] is not None  # kept as a block (rank 0's `12 // rank` not run)
    fast = lower(spec)
    assert calls[:per_rank] == [4] * per_rank  # peer and bytes of each entry (or all but y's peer), over the 4 ranks
    monkeypatch.setattr(foreach, "TEMPLATES", False)
    slow = lower(load_text(text, "t.yaml"))
    assert fast.ops() == slow.ops()
    assert sorted(f"{o.name}@r{o.rank}>{o.peer}:{o.nbytes:g}" for o in fast.ops()) == sorted(
        [f"x{i}@r{r}>{r + 1}:{64 * (r % 2 + 1)}" for i in (0, 2) for r in (0, 1, 2)]
        + [f"y{i}@r{r}>{r - 1}:{64 * ((r - 1) % 2 + 1)}" for i in (0, 2) for r in (1, 2, 3)])


def test_loop_values_per_row_are_made_on_first_read() -> None:
    # an entry instanced per rank has a row per (iteration, rank): its loop columns (`_Lazy`) are made when a
    # field, `when` or an environment reads them, once; membership and the names do not make them
    made: list[str] = []
    lz = block._Lazy({"i": lambda: made.append("i") or 1, "rank": lambda: made.append("rank") or 2})
    assert "i" in lz and "x" not in lz and list(lz) == ["i", "rank"] and len(lz) == 2 and made == []
    assert lz["rank"] == 2 and lz["rank"] == 2 and made == ["rank"]
    envs = block._envs({"w": 4}, {"i": _Vec(np.array([5, 6, 7], object), True)}, np.array([0, 2]))
    assert list(envs()) == [{"w": 4, "i": 5}, {"w": 4, "i": 7}]


@pytest.mark.parametrize("seed", range(4))
def test_combos_number_rows_by_first_seen_values(seed: int) -> None:
    # per row, the id of its values of the varying fields in first-seen order, and each id's first row: by the
    # table of small key ranges and by np.unique for wide ones (three columns of up to 40 values each on 30
    # rows span 64,000 keys), against a dict of the value tuples
    rng = np.random.default_rng(seed)
    nk = 30
    hi = 3 if seed % 2 else 40
    cols = {k: rng.integers(0, hi, nk).astype(object) for k in ("peer", "bytes", "m")}
    first: dict[tuple[int, ...], int] = {}
    want = [first.setdefault(t, len(first)) for t in zip(*(c.tolist() for c in cols.values()), strict=True)]
    combo, firsts = block._combos({"name": "x", **cols}, nk)
    assert combo.tolist() == want
    assert firsts.tolist() == [want.index(c) for c in range(len(first))]


#: an entry instanced per rank whose `peer` (ints per rank) and ranks the block holds once per rank, beside a
#: field that varies by iteration as a string (`stream`: the combinations by values, not by int codes), one that
#: varies by rank as a string (`tag`), and a `when` that keeps as many rows as there are ranks (4)
PER_RANK_HELD = """\
{schema_version: 1, name: t, world_size: 4, params: {n: 3}, ops: [{foreach: {i: range(n)}, ops: [
  {name: "x{i}", kind: send, peer: "(rank + 1) % world_size", bytes: 64, stream: "q{i % 2}",
   p2p_batch: "b{i}", tag: "t{rank % 2}", when: "(rank + i) % 3 == 0 or i == 1"},
  {name: "y{i}", kind: recv, peer: "(rank - 1) % world_size", bytes: 64, stream: "q{i % 2}",
   p2p_batch: "b{i}", tag: "t{(rank - 1) % world_size % 2}",
   when: "((rank - 1) % world_size + i) % 3 == 0 or i == 1"}]}]}
"""


def test_per_rank_values_held_once_per_rank_give_the_general_paths_program(monkeypatch: pytest.MonkeyPatch) -> None:
    # the block keeps `peer` and the ranks as their values per rank and each row's position (no column per row);
    # the representatives, the combinations (by string values here) and the rows must be the general path's
    spec = load_text(PER_RANK_HELD, "t.yaml")
    assert spec.__pydantic_private__["_layout"] is not None  # kept as a block
    fast = lower(spec)
    monkeypatch.setattr(foreach, "TEMPLATES", False)
    slow = lower(load_text(PER_RANK_HELD, "t.yaml"))
    assert fast.ops() == slow.ops()
    got = sorted(f"{o.name}@r{o.rank}>{o.peer}:{o.stream}" for o in fast.ops() if o.name.startswith("x"))
    assert got == sorted(f"x{i}@r{r}>{(r + 1) % 4}:q{i % 2}" for i in range(3) for r in range(4)
                         if (r + i) % 3 == 0 or i == 1)
