"""One definition of each metric (docs/metrics.md): the critical path's segments are contiguous and sum to the
makespan, and the summary table, timeline.json and the pipeline table agree with ``Metrics``, on every shipped
schedule; plus hand-computed cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedsim import api
from schedsim.report.summary import fmt_time, print_summary
from schedsim.sim.metrics import SEGMENT_KINDS, Metrics, critical_path_host, critical_path_segments
from schedsim.sim.timeline import Span, Timeline

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.name for p in (ROOT / "schedules").glob("*.yaml"))


@pytest.fixture(scope="module", params=SHIPPED)
def predicted(request, tmp_path_factory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp(request.param.replace(".", "_"))
    tl, metrics, _paths = api.predict_to_dir(ROOT / "schedules" / request.param, [], "h200", out, None, gantt=False,
                                             trace=False)
    return tl, metrics, out


def test_the_critical_path_sums_to_the_makespan_in_contiguous_segments(predicted) -> None:  # type: ignore[no-untyped-def]
    tl, metrics, _out = predicted
    segs = critical_path_segments(tl)
    assert segs and segs[0].start_s == pytest.approx(min(0.0, float(tl.columns.start_s.min())), abs=1e-15)
    assert all(a.end_s == b.start_s for a, b in zip(segs, segs[1:], strict=False))  # no gap, no overlap
    assert segs[-1].end_s == pytest.approx(float(tl.columns.end_s.max()), rel=1e-12)
    assert sum(s.end_s - s.start_s for s in segs) == pytest.approx(tl.makespan_s, rel=1e-9)
    assert sum(metrics.critical_path_s.values()) == pytest.approx(tl.makespan_s, rel=1e-9)
    assert set(metrics.critical_path_s) <= set(SEGMENT_KINDS)
    on_path = set(tl.critical_path)
    calls = [s for s in segs if s.kind == "host_issue" and s.op != tl.critical_path[0]]  # before the first op
    assert [s.op for s in calls] == critical_path_host(tl)
    assert segs[:len(calls)] == calls  # they open the path, from its start
    assert {s.op for s in segs if s not in calls} <= on_path  # every other segment runs or waits for a path op


def test_summary_json_and_pipeline_table_agree(predicted) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console

    tl, metrics, out = predicted
    stored = Metrics.from_dict(json.loads((out / "timeline.json").read_text())["metrics"])
    assert stored == Metrics.from_dict(json.loads(json.dumps(metrics.to_dict())))  # the file holds what was printed
    con = Console(record=True, width=400, emoji=False)
    print_summary(tl, metrics, console=con, all_ranks=True)
    text = con.export_text()
    ms = metrics.makespan_s
    for r, d in metrics.ranks.items():
        row = next(line for line in text.splitlines() if line.split("│")[1:2] and line.split("│")[1].strip() == str(r))
        cells = [c.strip() for c in row.split("│")[1:-1]]
        assert cells[1:7] == [fmt_time(x) for x in (d.busy_compute_s, d.busy_comm_s, d.busy_copy_s, d.idle_s,
                                                    d.compute_idle_s(ms), d.exposed_comm_s)]
        assert cells[7] == ("–" if d.busy_comm_s == 0 else f"{d.overlap_ratio:.3f}")
        if metrics.copy_overlap_ratio is not None:
            assert cells[8] == ("–" if d.copy_overlap_ratio is None else f"{d.copy_overlap_ratio:.3f}")
    assert f"sum {fmt_time(sum(metrics.critical_path_s.values()))} = makespan" in text
    assert fmt_time(sum(metrics.critical_path_s.values())) == fmt_time(ms)
    if metrics.pipeline is not None:  # the bubble is compute idle / makespan, rank by rank
        for r, b in metrics.pipeline.bubble_of_makespan.per_rank.items():
            assert b == pytest.approx(metrics.ranks[r].compute_idle_s(ms) / ms, rel=1e-12, abs=1e-15)


def test_critical_path_segments_by_hand() -> None:
    """Rank 0 host-launches a at 1 µs; a (compute) waits 1 µs for SMs, runs 3 µs; b on another stream is ready
    0.5 µs after a ends (its event wait), waits 0.5 µs for its peer, runs 2 µs; c (a copy) waits 1 µs for its engine
    and runs 1 µs. Makespan 10 µs = 1 + 1 + 3 + 0.5 + 0.5 + 2 + 1 + 1."""
    us = 1e-6
    spans = [Span("a@r0", "a", 0, "s0", "matmul", "compute", 2 * us, 5 * us, ready_s=1 * us),
             Span("b@r0", "b", 0, "nccl", "all_reduce", "comm", 6 * us, 8 * us, ready_s=5.5 * us),
             Span("x@r1", "x", 1, "s0", "matmul", "compute", 0.0, 4 * us, ready_s=0.0),
             Span("c@r0", "c", 0, "cp", "memcpy", "copy", 9 * us, 10 * us, ready_s=8 * us)]
    tl = Timeline("hand", "predict", 2, spans=spans, critical_path=["a@r0", "b@r0", "c@r0"])
    got = [(s.kind, round(s.start_s / us, 9), round(s.end_s / us, 9), s.op) for s in critical_path_segments(tl)]
    assert got == [("host_issue", 0.0, 1.0, "a@r0"), ("wait_sms", 1.0, 2.0, "a@r0"), ("compute", 2.0, 5.0, "a@r0"),
                   ("wait_dependency", 5.0, 5.5, "b@r0"), ("wait_peer", 5.5, 6.0, "b@r0"), ("comm", 6.0, 8.0, "b@r0"),
                   ("wait_copy_engine", 8.0, 9.0, "c@r0"), ("copy", 9.0, 10.0, "c@r0")]
    cp = Metrics.of(tl).critical_path_s
    assert {k: round(v / us, 9) for k, v in cp.items()} == {
        "compute": 3.0, "comm": 2.0, "copy": 1.0, "host_issue": 1.0, "wait_dependency": 0.5, "wait_sms": 1.0,
        "wait_peer": 0.5, "wait_copy_engine": 1.0}


def test_an_imported_chain_without_ready_times_is_gaps_up_to_the_makespan() -> None:
    spans = [Span("a@r0", "a", 0, "s0", "k", "compute", 1.0, 2.0), Span("b@r0", "b", 0, "s0", "k", "compute", 3.0, 4.0),
             Span("z@r1", "z", 1, "s0", "k", "compute", 0.0, 5.0)]
    tl = Timeline("imp", "import", 2, spans=spans, critical_path=["a@r0", "b@r0"])
    got = [(s.kind, s.start_s, s.end_s) for s in critical_path_segments(tl)]
    assert got == [("gap", 0.0, 1.0), ("compute", 1.0, 2.0), ("gap", 2.0, 3.0), ("compute", 3.0, 4.0),
                   ("gap", 4.0, 5.0)]


def test_tp_ffn_critical_path_is_more_than_its_one_op() -> None:
    """The issue's case: tp_ffn's path printed one all-reduce of 53.5 µs against a 113 µs makespan; the host issue
    before it is now on the path."""
    run = api.predict(api.load(ROOT / "schedules" / "tp_ffn.yaml"))
    cp = run.metrics.critical_path_s
    assert cp.get("host_issue", 0.0) > 0 and sum(cp.values()) == pytest.approx(run.metrics.makespan_s, rel=1e-9)


def test_overlap_of_copies_is_reported_apart_from_communication() -> None:
    """offload has no communication (overlap ratio undefined, printed "–") and copies that run under its GEMMs:
    copy overlap = |copy ∩ compute| / |copy|, by hand on a small case."""
    spans = [Span("mm@r0", "mm", 0, "s0", "matmul", "compute", 0.0, 4.0),
             Span("h2d@r0", "h2d", 0, "cp", "memcpy", "copy", 3.0, 5.0)]
    m = Metrics.of(Timeline("o", "predict", 1, spans=spans))
    assert m.ranks[0].copy_overlap_ratio == 0.5 and m.copy_overlap_ratio == 0.5 and m.ranks[0].overlap_ratio == 0.0
    assert m.ranks[0].idle_s == 0.0 and m.ranks[0].compute_idle_s(m.makespan_s) == 1.0
    off = api.predict(api.load(ROOT / "schedules" / "offload.yaml")).metrics
    assert off.busy_comm_s == 0.0 and off.copy_overlap_ratio is not None and off.copy_overlap_ratio > 0.1


def test_the_gantt_exposed_bands_are_the_exposed_communication(predicted) -> None:  # type: ignore[no-untyped-def]
    """The red bands of the Gantt, per rank, cover exactly ``exposed_comm_s`` (docs/metrics.md)."""
    import numpy as np

    from schedsim.report.gantt import EXPOSED_GID, draw_gantt
    from schedsim.sim.metrics import union_length

    tl, metrics, _out = predicted
    fig = draw_gantt([("predicted", tl)], max_lanes=10_000)
    bands: dict[int, list[np.ndarray]] = {}
    for col in fig.axes[0].collections:
        gid = col.get_gid() or ""
        if gid.startswith(EXPOSED_GID):
            xs = np.array([p.vertices[:, 0] for p in col.get_paths()])  # ms
            bands.setdefault(int(gid[len(EXPOSED_GID):].split("_")[0]), []).append(xs)
    for raster in (a for a in fig.axes[0].get_children() if hasattr(a, "gids")):  # past RASTER_MIN_BOXES ops
        for gid, (x0, x1) in raster.gids.items():
            if gid.startswith(EXPOSED_GID):
                bands.setdefault(int(gid[len(EXPOSED_GID):].split("_")[0]), []).append(np.stack([x0, x1], 1))
    # a rank with several comm lanes draws a band under each: the rank's exposed time is their union
    got = {r: union_length(np.concatenate([x.min(1) for x in v]), np.concatenate([x.max(1) for x in v]))
           for r, v in bands.items()}
    drawn = set(tl.meta["represented"]["ranks"]) if "represented" in tl.meta else set(metrics.ranks)  # a symmetric
    # lowering's timeline holds its representative ranks only (the metrics give every rank their figures)
    want = {r: d.exposed_comm_s * 1e3 for r, d in metrics.ranks.items() if d.exposed_comm_s > 1e-15 and r in drawn}
    assert got.keys() == want.keys()
    assert all(got[r] == pytest.approx(want[r], rel=1e-9, abs=1e-12) for r in want)


def _per_rank_reference(tl: Timeline) -> dict[int, tuple]:  # type: ignore[type-arg]
    """Each rank's metrics (and its comm and copy overlap, s) by the piece functions, one rank at a time (the
    loop ``Metrics.of`` ran before it computed every rank at once)."""
    import numpy as np

    from schedsim.sim.metrics import merged, pieces_intersection, union_length

    c = tl.columns
    vals, codes = c.resource
    res = np.array(vals, object)[codes] if len(codes) else np.zeros(0, object)
    out = {}
    mk = tl.makespan_s
    for r in sorted(set(c.rank.tolist())):
        def sel(name, r=r):  # type: ignore[no-untyped-def]
            m = (c.rank == r) & (res == name)
            o = np.argsort(c.start_s[m], kind="stable")
            return c.start_s[m][o], c.end_s[m][o], c.ready_s[m][o]
        (s0, e0, _), (s1, e1, rd), (s2, e2, _) = sel("compute"), sel("comm"), sel("copy")
        comp, comm, copy = (merged(a, b, presorted=True) for a, b in ((s0, e0), (s1, e1), (s2, e2)))
        lc, lcp = float((comm[1] - comm[0]).sum()), float((copy[1] - copy[0]).sum())
        ov = pieces_intersection(comm, comp)
        ovc = pieces_intersection(copy, comp) if lcp > 0 else 0.0
        ps, pe = (np.concatenate(x) for x in zip(comp, comm, copy, strict=True))
        busy = union_length(ps, pe) if len(comm[0]) + len(copy[0]) else float((comp[1] - comp[0]).sum())
        kv = union_length(np.where(np.isnan(rd), s1, rd), e1)
        out[r] = ((float((comp[1] - comp[0]).sum()), lc, lcp, mk - busy, lc - ov, ov / lc if lc > 0 else 0.0,
                   lc / mk if mk > 0 else 0.0, kv / mk if mk > 0 else 0.0, ovc / lcp if lcp > 0 else None), ov, ovc)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_every_rank_at_once_gives_the_per_rank_metrics_bit_for_bit(seed: int) -> None:
    """Random timelines (overlapping and touching intervals, several streams per resource, ops out of start
    order, ranks without comm or copy, empty intervals, ranks absent): ``Metrics.of`` computing all ranks at
    once gives each rank's figures and the totals exactly as the per-rank loop over ``merged``,
    ``pieces_intersection`` and ``union_length`` does."""
    import random

    rnd = random.Random(seed)
    spans = []
    ranks = rnd.sample(range(40), rnd.randint(1, 30))
    for r in ranks:
        for k in range(rnd.randint(0, 60)):
            resource = rnd.choice(["compute", "comm", "copy", "comm", "compute", "host"])
            a = rnd.choice([rnd.random() * 1e-3, round(rnd.random() * 20) * 1e-5])
            b = a + rnd.choice([0.0, rnd.random() * 1e-4, 1e-5, round(rnd.random() * 10) * 1e-5])
            ready = rnd.choice([None, a - rnd.random() * 1e-5, a])
            spans.append(Span(f"o{k}@r{r}", f"o{k}", r, rnd.choice(["s0", "s1", "s2"]), "k", resource, a, b,
                              ready_s=ready))
    rnd.shuffle(spans)
    if not spans:
        spans = [Span("x@r0", "x", 0, "s0", "k", "compute", 0.0, 1.0)]
    tl = Timeline("rand", "predict", 40, spans=spans)
    m = Metrics.of(tl)
    want = _per_rank_reference(tl)
    got = {r: (x.busy_compute_s, x.busy_comm_s, x.busy_copy_s, x.idle_s, x.exposed_comm_s, x.overlap_ratio,
               x.comm_share, x.comm_share_kernel_view, x.copy_overlap_ratio) for r, x in m.ranks.items()}
    assert got == {r: v[0] for r, v in want.items()}
    tot = ov = ex = cp = cpo = 0.0
    for v, o, oc in want.values():
        tot, ov, ex, cp, cpo = tot + v[1], ov + o, ex + v[4], cp + v[2], cpo + oc
    assert m.busy_comm_s == tot and m.exposed_comm_s == ex and m.overlap_ratio == (ov / tot if tot > 0 else 0.0)
    assert m.copy_overlap_ratio == (cpo / cp if cp > 0 else None)
    from schedsim.results import to_dict
    fast, generic = m.to_dict()["ranks"], {r: to_dict(x) for r, x in m.ranks.items()}  # the JSON form, in order
    assert fast == generic and [list(v) for v in fast.values()] == [list(v) for v in generic.values()]


@pytest.mark.parametrize("seed", range(8))
def test_the_running_maximum_of_every_group_at_once_gives_the_groupwise_pieces(seed: int) -> None:
    """``_merged_by`` (one running maximum over the (group, end) pairs) against the loop over the groups it
    replaced (tests/oracle/merged_pieces.py): random intervals in many groups, nested ones (ends going down),
    touching and empty ones, times from a few values (ties), groups absent: the same pieces, bit for bit."""
    import numpy as np

    from schedsim.sim.metrics import _merged_by
    from tests.oracle.merged_pieces import merged_by_groupwise

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 4000))
    group = np.sort(rng.choice(rng.integers(1, 600), n) * int(rng.integers(1, 5)))
    start = np.where(rng.random(n) < 0.5, rng.integers(0, 50, n) * 1e-5, rng.random(n) * 5e-4)
    end = start + np.where(rng.random(n) < 0.1, 0.0, rng.choice([1e-5, 3e-5, 1e-4, 2e-4], n) * rng.random(n))
    o = np.lexsort((start, group))
    group, start, end = group[o].astype(np.int64), start[o], end[o]
    got, want = _merged_by(group, start, end), merged_by_groupwise(group, start, end)
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    assert bool((end[1:] < end[:-1]).any())  # the case the running maximum is for


def test_pieces_of_nested_intervals_by_hand() -> None:
    """Group 0: [0, 10] holds [1, 2] and [3, 4] (ends go down), then [10, 12] touches it: one piece [0, 12];
    group 2: [5, 9] then [6, 7] then [9.5, 11]: pieces [5, 9] and [9.5, 11]; group 3: empty [1, 1]: none."""
    import numpy as np

    from schedsim.sim.metrics import _merged_by

    g, s, e = _merged_by(np.array([0, 0, 0, 0, 2, 2, 2, 3]), np.array([0.0, 1, 3, 10, 5, 6, 9.5, 1]),
                         np.array([10.0, 2, 4, 12, 9, 7, 11, 1]))
    assert g.tolist() == [0, 2, 2] and s.tolist() == [0.0, 5.0, 9.5] and e.tolist() == [12.0, 9.0, 11.0]


@pytest.mark.parametrize("seed", range(8))
def test_the_sweep_over_both_pieces_gives_the_searched_overlaps(seed: int) -> None:
    """``_overlap_by`` (one sweep, ``_cwaves.overlaps``) against the two searches of (group, time) pairs it
    replaced (tests/oracle/merged_pieces.py): pieces of random intervals in many groups, groups of x without y and
    of y without x, touching and nested intervals, times from a few values (ties): the same sums, bit for bit."""
    import numpy as np

    from schedsim.sim.metrics import _merged_by, _overlap_by
    from tests.oracle.merged_pieces import overlap_by

    rng = np.random.default_rng(100 + seed)

    def pieces(n: int, groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        group = np.sort(rng.integers(0, groups, n))
        start = np.where(rng.random(n) < 0.5, rng.integers(0, 50, n) * 1e-5, rng.random(n) * 5e-4)
        end = start + np.where(rng.random(n) < 0.1, 0.0, rng.choice([1e-5, 3e-5, 1e-4, 2e-4], n) * rng.random(n))
        o = np.lexsort((start, group))
        return _merged_by(group[o].astype(np.int64), start[o], end[o])

    groups = int(rng.integers(1, 300))
    x, y = pieces(int(rng.integers(1, 3000)), groups), pieces(int(rng.integers(1, 3000)), groups)
    got, want = _overlap_by(x, y, groups), overlap_by(x, y, groups)
    assert got.dtype == want.dtype and np.array_equal(got, want) and bool((want > 0).any())
    assert np.array_equal(_overlap_by(y, x, groups), overlap_by(y, x, groups))
    empty = (x[0][:0], x[1][:0], x[2][:0])
    assert np.array_equal(_overlap_by(empty, y, groups), np.zeros(groups))


@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_pieces_are_the_running_maximum_pieces(seed: int) -> None:
    """``_merged_by`` (``_cwaves.merge_pieces``) against its numpy form, the running maximum over (group, end)
    pairs (tests/oracle/merged_pieces.py), on one sorted run and on three runs merged, as the union of a rank's
    compute, comm and copy pieces takes them, against the stable sort of the (group, start) pairs it replaced:
    nested, touching, empty and NaN intervals, ties, the same pieces bit for bit."""
    import numpy as np

    from schedsim.sim.metrics import _merged_by, _pairs
    from tests.oracle.merged_pieces import merged_by_pairs

    rng = np.random.default_rng(200 + seed)

    def intervals(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        group = rng.integers(0, 200, n)
        start = np.where(rng.random(n) < 0.5, rng.integers(0, 50, n) * 1e-5, rng.random(n) * 5e-4)
        end = start + np.where(rng.random(n) < 0.1, 0.0, rng.choice([1e-5, 3e-5, 1e-4, 2e-4], n) * rng.random(n))
        end[rng.random(n) < 0.02] = np.nan
        o = np.lexsort((start, group))
        return group[o].astype(np.int64), start[o], end[o]

    g, s, e = intervals(int(rng.integers(1, 4000)))
    got, want = _merged_by(g, s, e), merged_by_pairs(g, s, e)
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    parts = [intervals(int(rng.integers(0, 1500))) for _ in range(3)]
    ag, as_, ae = (np.concatenate(x) for x in zip(*parts, strict=True))
    runs = np.cumsum([0, *(len(p[0]) for p in parts)]).tolist()
    o = np.argsort(_pairs(ag, as_), kind="stable")
    got, want = _merged_by(ag, as_, ae, runs), merged_by_pairs(ag[o], as_[o], ae[o])
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    assert len(got[0]) and _merged_by(g[:0], s[:0], e[:0])[0].tolist() == []


@pytest.mark.parametrize("seed", range(6))
def test_the_pieces_written_over_their_intervals_are_the_pieces_made_apart(seed: int) -> None:
    """``_merged_by(..., into=True)`` writes the pieces over the three arrays it is given (the metrics' peak at
    1M ops): the same pieces, bit for bit, as into fresh arrays (tests/oracle/merged_pieces.py's running maximum),
    for nested, touching, empty and NaN intervals and ties; arrays it may not write (read-only, another dtype)
    are left alone."""
    import numpy as np

    from schedsim.sim.metrics import _merged_by
    from tests.oracle.merged_pieces import merged_by_pairs

    rng = np.random.default_rng(300 + seed)
    n = int(rng.integers(1, 5000))
    group = rng.integers(0, 100, n)
    start = np.where(rng.random(n) < 0.5, rng.integers(0, 50, n) * 1e-5, rng.random(n) * 5e-4)
    end = start + np.where(rng.random(n) < 0.1, 0.0, rng.choice([1e-5, 3e-5, 1e-4, 2e-4], n) * rng.random(n))
    end[rng.random(n) < 0.02] = np.nan
    o = np.lexsort((start, group))
    g, s, e = group[o].astype(np.int64), start[o], end[o]
    want = merged_by_pairs(g, s, e)
    ro = [x.copy() for x in (g, s, e)]
    for x in ro:
        x.flags.writeable = False
    assert all(np.array_equal(a, b) for a, b in zip(_merged_by(*ro, into=True), want, strict=True))
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ro, (g, s, e), strict=True))  # not written
    got = _merged_by(g, s, e, into=True)
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    assert all(np.shares_memory(a, b) for a, b in zip(got, (g, s, e), strict=True))  # written over


def test_low2_is_the_low_two_bits_of_int64_keys() -> None:
    """``_low2`` (the int8 resource class of a ``rank * 4 + class`` key) equals ``g & 3``, keys past 2**31 and
    2**40 included: rank 2**38 + 5 with class 2 is key 4 * (2**38 + 5) + 2, whose low two bits are 2."""
    import numpy as np

    from schedsim.sim.metrics import _low2

    g = np.array([0, 1, 2, 3, 4 * 7 + 1, 4 * (2**38 + 5) + 2, 2**62 + 3], np.int64)
    got = _low2(g)
    assert got.dtype == np.int8
    assert got.tolist() == [0, 1, 2, 3, 1, 2, 3]
