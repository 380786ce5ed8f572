""":class:`schedsim.sim.path_ids.PathIds`: the critical path as rows, its ids and its JSON text, against the list of
ids made one by one (``format_op_id``) and the text timeline.json's writer gave that list (``_json_pieces``)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from schedsim.graph.ops import format_op_id
from schedsim.io import dumps_json
from schedsim.sim.path_ids import PathIds
from schedsim.sim.timeline_json import _json_pieces


class _Names:
    """The fields of an OpNames that PathIds reads: a name table, each row's name id and rank."""

    def __init__(self, table: list[str], name_id: list[int], rank: list[int]) -> None:
        self.table, self.name_id, self.rank = table, np.array(name_id, np.int64), np.array(rank, np.int32)

    def op_names(self, rows: np.ndarray) -> list[str]:
        return [self.table[k] for k in self.name_id[np.asarray(rows, np.int64)].tolist()]


def _want(p: _Names, rows: list[int]) -> list[str]:
    return [format_op_id(p.table[p.name_id[i]], int(p.rank[i])) for i in rows]


@pytest.mark.parametrize("table", [
    ["mm", "ag", "rs"],
    ["mm é", 'quote " and \\ back', "tab\t", "ünï", ""],  # escaped and non-ASCII text
    ["mm", "lone \ud800 surrogate", "é"],  # no valid UTF-8: the standard library escapes all non-ASCII text
])
@pytest.mark.parametrize("n", [0, 1, 7, 9001])  # 9001 > _LIST_PIECE: the list's text was written in pieces
def test_ids_and_text_are_the_lists(table: list[str], n: int) -> None:
    rng = np.random.default_rng(n + len(table))
    N = 20_000
    p = _Names(table, rng.integers(0, len(table), N).tolist(), rng.integers(0, 300, N).tolist())
    rows = rng.permutation(N)[:n].astype(np.int64)
    cp = PathIds(p, rows)  # type: ignore[arg-type]
    want = _want(p, rows.tolist())
    assert len(cp) == n and list(cp) == want and cp == want and want == cp and bool(cp) == bool(want)
    assert cp != [*want, "x"] and cp != tuple(want)  # a list's equality: not a tuple's
    assert b"".join(cp.json_pieces()) == b"".join(_json_pieces(want))
    assert dumps_json({"p": cp}) == dumps_json({"p": want})  # dumps_json writes it where a dict holds it
    assert cp.rank_list() == [int(x.rsplit("@r", 1)[1]) for x in want]
    if n:
        assert cp[0] == want[0] and cp[-1] == want[-1] and cp[1:4] == want[1:4] and cp[-3:] == want[-3:]
        with pytest.raises(IndexError):
            cp[n]  # noqa: B018
    assert pickle.loads(pickle.dumps(cp)) == want
