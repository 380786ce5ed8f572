"""memory_over_time on the timeline's columns equals its span-by-span definition (``_reference``): every step,
peak, peak time and peak op, with a Program view, a networkx graph or no graph, on pipelines with activations,
receive buffers and static state, and on a non-pipeline schedule with all_gather buffers."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedsim.graph.build import graph_of
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.lower.program import DagView
from schedsim.report.memory import _reference, memory_over_time, static_memory
from schedsim.sim.engine import simulate
from schedsim.sim.timeline_json import meta_equal
from schedsim.spec.loader import load_schedule
from schedsim.spec.overrides import parse_overrides

ROOT = Path(__file__).resolve().parents[2]
CASES = [("schedules/pipeline_schedules.yaml", ["p=4", "m=8", "schedule=1f1b"]),
         ("schedules/pipeline_schedules.yaml", ["p=2", "m=4", "schedule=zb_h1"]),
         ("schedules/pipeline_schedules.yaml", ["p=4", "m=8", "schedule=interleaved_1f1b"]),
         ("schedules/allgather_mm8.yaml", []), ("schedules/megatron_gpt_pp4_vp2.yaml", [])]


@pytest.mark.parametrize(("path", "sets"), CASES, ids=lambda x: str(x))
def test_columns_equal_the_definition(path, sets):
    spec = load_schedule(ROOT / path, parse_overrides(sets))
    prog = lower(spec)
    tl = simulate(prog, load_profile("h200x2"))
    static = static_memory(prog.pipeline, spec.pipeline, tl.world_size)
    for graph in (DagView(prog), graph_of(prog), None):
        got, ref = memory_over_time(tl, graph, static), _reference(tl, graph, static)
        assert meta_equal(got, ref)
    assert got is not None and any(len(r["steps"]) > 2 for r in got["ranks"].values())


def test_static_only_and_nothing_counted():
    spec = load_schedule(ROOT / "schedules/tp_ffn.yaml")
    prog = lower(spec)
    tl = simulate(prog, load_profile("h200x2"))
    assert memory_over_time(tl, DagView(prog)) is None and _reference(tl, DagView(prog)) is None
    st = {0: {"parameters": 7.0}}
    assert meta_equal(memory_over_time(tl, static=st), _reference(tl, static=st))
    assert memory_over_time(tl, static=st)["ranks"][0]["steps"].tolist() == [[0.0, 7.0]]



@pytest.mark.parametrize("seed", range(6))
def test_a_peak_inside_events_that_tie_is_charged_as_the_definition_charges_it(seed):
    """Events equal in time, order and size (buffers of one size allocated at one instant), in random order in
    the columns: steps, peak and the op the peak is charged to are the definition's, whose (t, order, delta,
    id) order sorts a tie by op id (here against the order the events come in)."""
    import random

    import numpy as np

    from schedsim.report.memory import _curves, _reference_curve
    from schedsim.sim.timeline import Span, Timeline

    rnd = random.Random(seed)
    names = [f"o{k:02d}" for k in range(30)]
    spans = [Span(f"{n}@r{k % 2}", n, k % 2, "s", "k", "compute", 0.0, 1.0) for k, n in enumerate(names)]
    tl = Timeline("ties", "predict", 2, spans=spans)
    ev = []
    for row, sp in enumerate(spans):
        t = rnd.choice([1.0, 2.0, 2.0])
        d = rnd.choice([4096.0, 4096.0, 8192.0])
        ev += [(sp.rank, t, 1, d, row), (sp.rank, t + rnd.choice([0.5, 1.0]), 0, -d, row)]
    rnd.shuffle(ev)
    cols = [np.array([e[k] for e in ev], dt) for k, dt in enumerate((np.int64, float, np.int64, float, np.int64))]
    got = _curves(tl, cols, {})
    assert cols == []  # the columns were handed over
    for r in (0, 1):
        want = _reference_curve([(t, o, d, spans[row].id) for rr, t, o, d, row in ev if rr == r], {})
        assert meta_equal(got[r], want)


def test_steps_are_arrays_written_as_the_pairs_they_hold(tmp_path):
    """Each rank's steps are one float64 (n, 2) array (time s, bytes), not n lists: timeline.json (both layouts),
    the trace's memory counters and the memory chart's data are those of the same curve held as [t, bytes] lists,
    and the timeline read back equals the one written."""
    import copy
    import json

    import numpy as np

    from schedsim.report.chrome import chrome_trace
    from schedsim.sim.timeline import Timeline

    spec = load_schedule(ROOT / "schedules/pipeline_schedules.yaml", parse_overrides(["p=2", "m=4"]))
    prog = lower(spec)
    tl = simulate(prog, load_profile("h200x2"))
    mem = memory_over_time(tl, DagView(prog), static_memory(prog.pipeline, spec.pipeline, tl.world_size))
    assert mem is not None
    steps = mem["ranks"][0]["steps"]
    assert isinstance(steps, np.ndarray) and steps.dtype == np.float64 and steps.shape[1] == 2 and len(steps) > 2
    assert (np.diff(steps[:, 0]) > 0).all() and steps[:, 1].max() == mem["ranks"][0]["peak_bytes"]
    tl.meta["memory"] = mem
    as_lists = copy.deepcopy(mem)
    for d in as_lists["ranks"].values():
        d["steps"] = d["steps"].tolist()
    listed = Timeline(tl.schedule, tl.source, tl.world_size, tl.launch, tl.profile, columns=tl.columns,
                      critical_path=tl.critical_path, meta={**tl.meta, "memory": as_lists})
    assert listed == tl and tl == listed
    for layout in ("columns", "rows"):
        tl.write_json(tmp_path / f"a_{layout}.json", layout=layout)
        listed.write_json(tmp_path / f"b_{layout}.json", layout=layout)
        assert (tmp_path / f"a_{layout}.json").read_bytes() == (tmp_path / f"b_{layout}.json").read_bytes()
        back = Timeline.read_json(tmp_path / f"a_{layout}.json").meta["memory"]["ranks"]  # JSON's keys: strings
        assert meta_equal({int(r): d for r, d in back.items()}, mem["ranks"])
    counters = [json.dumps(e) for e in chrome_trace([("p", tl)])["traceEvents"] if e["ph"] == "C"]
    assert counters == [json.dumps(e) for e in chrome_trace([("p", listed)])["traceEvents"] if e["ph"] == "C"]
    n_steps = sum(len(d["steps"]) for d in mem["ranks"].values())
    assert sum('"memory allocated (bytes)"' in e for e in counters) == n_steps


def test_memory_chart_draws_array_steps_as_it_draws_pairs():
    """draw_memory given each rank's steps as an (n, 2) array draws the lines (envelopes) and legend it draws
    from the same steps as (t, bytes) pairs: with static bytes subtracted, and past max_ranks (ranks by peak)."""
    import numpy as np

    from schedsim.report.memory_chart import draw_memory

    rng = np.random.default_rng(3)
    arrays = {r: np.stack([np.r_[0.0, np.sort(rng.random(40)) * 1e-3], rng.integers(0, 2**30, 41) + 2.0**30], 1)
              for r in range(10)}
    pairs = {r: [(t, b) for t, b in a.tolist()] for r, a in arrays.items()}
    static = {r: 2.0**30 for r in range(10)}
    peaks = {r: (float(a[:, 1].max()), f"op{r}") for r, a in arrays.items()}

    def drawn(curves):  # type: ignore[no-untyped-def]
        ax = draw_memory(curves, 1e-3, "t", peaks, max_ranks=4, static=static).axes[0]
        return [ln.get_xydata().tolist() for ln in ax.lines], [t.get_text() for t in ax.get_legend().get_texts()]

    got, want = drawn(arrays), drawn(pairs)
    assert got == want and len(got[1]) == 4  # four ranks drawn (legend), the same lines


@pytest.mark.parametrize("seed", range(8))
def test_event_order_is_lexsorts(seed):
    # the curve's event order against np.lexsort of (rank, time, order, delta): allocations positive and frees
    # negative (the deltas alone order them), and not (a zero, a NaN, an allocation of a negative delta), ranks
    # below 2**15 and past it, times and deltas that tie
    import numpy as np

    from schedsim.report.memory import _event_order

    rng = np.random.default_rng(seed)
    n = 400
    rk = rng.integers(0, 5, n) + (2**16 if seed % 4 == 3 else 0)
    tt = rng.integers(0, 6, n) / 4
    od = rng.integers(0, 2, n)
    dd = np.where(od == 1, 1.0, -1.0) * rng.integers(1, 4, n)
    if seed % 4 == 1:
        dd[rng.integers(0, n, 3)] = [0.0, -0.0, np.nan]
    if seed % 4 == 2:
        dd[5] = -dd[5]
    assert _event_order(rk, tt, od, dd).tolist() == np.lexsort((dd, od, tt, rk)).tolist()
