"""Per-rank metrics held as columns (:class:`schedsim.sim.metrics.RankColumns`): each rank's
:class:`RankMetrics` the one computed rank by rank, a mapping equal to the dict of them, and the summary the
same whichever form the metrics hold."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest
from rich.console import Console

from schedsim.report.summary import print_summary
from schedsim.sim.metrics import Metrics, RankColumns, RankMetrics
from schedsim.sim.timeline import Span, Timeline


def timeline(n_ranks: int) -> Timeline:
    spans = []
    for r in range(n_ranks):
        t = r * 1e-6
        spans += [Span(f"mm@r{r}", "mm", r, "c", "matmul", "compute", t, t + 4e-6),
                  Span(f"ar@r{r}", "ar", r, "n", "all_reduce", "comm", t + 2e-6, t + 7e-6, ready_s=t + 1e-6)]
        if r % 2:
            spans.append(Span(f"cp@r{r}", "cp", r, "x", "copy", "copy", t + 3e-6, t + 9e-6))
    return Timeline("t", "predict", n_ranks, spans=spans)


def test_each_rank_is_its_hand_computed_metrics():
    m = Metrics.of(timeline(12))
    assert isinstance(m.ranks, RankColumns) and len(m.ranks) == 12 and list(m.ranks) == list(range(12))
    # rank 1: compute [1, 5) µs, comm [3, 8) (kernel view from 2), copy [4, 10); makespan 11 + 9 - ... = 20 µs
    d = m.ranks[1]
    ms = m.makespan_s
    assert ms == pytest.approx(20e-6)
    assert d.busy_compute_s == pytest.approx(4e-6) and d.busy_comm_s == pytest.approx(5e-6)
    assert d.busy_copy_s == pytest.approx(6e-6) and d.idle_s == pytest.approx(ms - 9e-6)
    assert d.exposed_comm_s == pytest.approx(3e-6) and d.overlap_ratio == pytest.approx(2 / 5)
    assert d.comm_share_kernel_view == pytest.approx(6e-6 / ms) and d.copy_overlap_ratio == pytest.approx(1 / 6)
    assert m.ranks[0].copy_overlap_ratio is None  # no copies on rank 0
    assert 12 not in m.ranks and -1 not in m.ranks and "1" not in m.ranks
    with pytest.raises(KeyError):
        m.ranks[12]


def test_columns_equal_the_dict_of_their_ranks_and_read_back():
    m = Metrics.of(timeline(10))
    as_dict = {r: m.ranks[r] for r in m.ranks}
    assert m.ranks == as_dict and as_dict == m.ranks
    assert m.to_dict()["ranks"] == {r: d.to_dict() for r, d in as_dict.items()}
    back = Metrics.from_dict(m.to_dict())
    assert back == m and back.ranks == m.ranks


def test_columns_of_a_mapping_keep_its_order():
    a = RankMetrics(1.0, 2.0, 0.0, 3.0, 1.5, 0.25, 0.5, 0.6)
    b = RankMetrics(4.0, 1.0, 2.0, 0.0, 0.5, 0.5, 0.1, 0.2, 0.75)
    rc = RankColumns.of({7: a, 2: b})
    assert list(rc) == [7, 2] and rc[2] == b and rc[7] == a and math.isnan(rc.cols["copy_overlap_ratio"][0])
    assert rc.to_dict() == {7: a.to_dict(), 2: b.to_dict()} and list(rc.to_dict()) == [7, 2]
    assert RankColumns.of(rc) is rc
    assert np.array_equal(rc.cols["idle_s"], [3.0, 0.0])


def test_summary_is_the_same_for_columns_and_dict():
    m = Metrics.of(timeline(12))  # past the 8 ranks of a full table: totals row, 3 worst and 3 best
    out = []
    for metrics in (m, Metrics.from_dict(m.to_dict())):
        buf = io.StringIO()
        print_summary(timeline(12), metrics, Console(file=buf, width=200))
        out.append(buf.getvalue())
    assert out[0] == out[1] and "mean of 12" in out[0] and "worst" in out[0]


def test_to_dict_spells_the_fields_of_rank_metrics():
    # RankColumns.to_dict writes each rank's dict with its keys spelled out: the fields, in their order
    rc = RankColumns.of({3: RankMetrics(*[float(k) for k in range(8)], 8.0)})
    assert rc.to_dict() == {3: RankMetrics(*[float(k) for k in range(8)], 8.0).to_dict()}
    assert list(rc.to_dict()[3]) == [f.name for f in dataclasses.fields(RankMetrics)]


def test_repr_is_that_of_the_dict_of_its_ranks() -> None:
    """A Metrics' repr names its values, not an address: two runs of one schedule print the same."""
    from schedsim.sim.metrics import RankColumns, RankMetrics

    rm = RankMetrics(busy_compute_s=1.0, busy_comm_s=0.5, busy_copy_s=0.0, idle_s=0.25, exposed_comm_s=0.125,
                     overlap_ratio=0.75, comm_share=0.5, comm_share_kernel_view=0.5, copy_overlap_ratio=None)
    cols = RankColumns.of({3: rm})
    assert repr(cols) == repr({3: rm})
    assert "0x" not in repr(cols)


def _columns(rows: np.ndarray, ranks: np.ndarray) -> RankColumns:
    from schedsim.sim.metrics import _RANK_FIELDS

    return RankColumns(ranks, {f: rows[:, j].copy() for j, f in enumerate(_RANK_FIELDS)})


@pytest.mark.parametrize("seed", range(6))
def test_the_ranks_json_is_the_dicts_json_whatever_the_runs(seed):
    # json_bytes joins each run of equal rows around one object: the bytes dumps_json writes for to_dict(), for runs
    # long and short, 0.0 beside -0.0 (equal floats, other text), NaNs of other bit patterns (null alike), ranks out
    # of order and past 2**31, and rows all different (then the dicts themselves)
    from schedsim.io import dumps_json

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    pool = np.array([[1.5e-6, 0.0, -0.0, 3.0, np.nan, 0.25, 1.0, 1e-300, np.nan],
                     [1.5e-6, -0.0, 0.0, 3.0, np.nan, 0.25, 1.0, 1e-300, 0.5],
                     [2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, np.float64(np.nan) * -1]])
    rows = pool[rng.integers(0, 3, n) if seed % 3 else np.repeat(rng.integers(0, 3, 8), n // 8 + 1)[:n]]
    if seed == 5:
        rows = rng.random((n, 9))  # no two rows alike
    ranks = rng.permutation(n).astype(np.int64) + (2**33 if seed == 4 else 0)
    rc = _columns(rows, ranks)
    assert rc.json_bytes() == dumps_json(rc.to_dict())
    assert _columns(rows[:0], ranks[:0]).json_bytes() == dumps_json({}) == b"{}"


def test_timeline_json_writes_the_rank_columns_as_their_dicts(tmp_path):
    # predict hands write_json the metrics with their RankColumns (ranks_as_columns): the same file as the dicts, by
    # orjson and by the standard library's writer
    import schedsim.io as sio

    tl = timeline(40)
    m = Metrics.of(tl)
    tl.write_json(tmp_path / "a.json", m.to_dict())
    tl.write_json(tmp_path / "b.json", m.to_dict(ranks_as_columns=True))
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    d = m.to_dict(ranks_as_columns=True)
    assert d["ranks"] is m.ranks and m.to_dict()["ranks"] == m.ranks.to_dict()
    sio_orjson = sio._orjson
    try:
        sio._orjson = None  # the standard library's writer
        assert sio.dumps_json(d) == sio.dumps_json(m.to_dict())
    finally:
        sio._orjson = sio_orjson


@pytest.mark.parametrize("runs", [1, 3, 200])
def test_the_ranks_json_in_pieces_is_the_dicts_json(runs, monkeypatch):
    # timeline.json writes the metrics key by key and the ranks' text piece by piece (100,000 ranks' text is
    # 31 MB), a few ranks a piece here: the pieces joined are dumps_json of the dicts, runs split across pieces
    from schedsim.io import dumps_json
    from schedsim.sim import metrics as sm
    from schedsim.sim.timeline import _dict_pieces

    monkeypatch.setattr(sm, "_KEYS_PIECE", 7)
    rng = np.random.default_rng(runs)
    n = 600
    pool = rng.random((runs, 9))
    pool[0, 2] = -0.0
    rows = pool[np.sort(rng.integers(0, runs, n))]
    rc = _columns(rows, np.arange(n, dtype=np.int64))
    pieces = list(rc.json_pieces())
    assert b"".join(pieces) == rc.json_bytes() == dumps_json(rc.to_dict())
    assert max(map(len, pieces)) < 7 * 400 or runs == 200  # a few ranks a piece (many runs: the dicts whole)
    d = {"makespan_s": 1.5, "ranks": rc, "pipeline": None, "copy_overlap_ratio": float("nan")}
    assert b"".join(_dict_pieces(d)) == dumps_json(d)
    assert b"".join(_dict_pieces({})) == b"{}" and b"".join(_dict_pieces({1: 2})) == dumps_json({1: 2})
