"""PipelineMetrics computed on the timeline's columns equals its row-by-row definition (``_definition`` below,
the loop the module ran before it was vectorised): bubbles, peaks, memory steps and p2p bytes, float for float,
on the built-in pipeline schedules, Megatron's interleaved example, a DP-replicated pipeline, and timelines whose
tags are per-row dicts (read back from a row-layout file, or built from spans). A rank's busy compute is the union
of its compute intervals (``RankMetrics.busy_compute_s``), here by the list functions of ``schedsim.sim.metrics``."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.sim.metrics import length, merge
from schedsim.sim.pipeline_metrics import Bubble, P2PBytes, PipelineMetrics
from schedsim.sim.timeline import Timeline, _decode
from schedsim.spec.loader import load_schedule
from schedsim.spec.overrides import parse_overrides

ROOT = Path(__file__).resolve().parents[2]
PIPE = "schedules/pipeline_schedules.yaml"
CASES = [(PIPE, [f"schedule={s}", "p=4", "m=8"]) for s in ("gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zbv",
                                                          "dualpipev")]
CASES += [(PIPE, ["schedule=1f1b", "p=2", "m=3"]), ("schedules/megatron_gpt_pp4_vp2.yaml", []),
          ("schedules/megatron_gpt_pp4.yaml", []), ("schedules/pipeline_custom.yaml", []),
          ("benchmarks/data/pp8_dp128.yaml", ["dp=2"])]


def _definition(tl: Timeline) -> PipelineMetrics | None:
    """The metrics row by row, as the module doc defines them."""
    info = tl.pipeline
    if info is None:
        return None
    v = info.v
    unit_bytes = float(info.activation_memory_bytes)
    makespan = tl.makespan_s
    busy_iv: dict[int, list[tuple[float, float]]] = defaultdict(list)  # compute intervals; busy is their union
    fwd_start: dict[tuple[int, int, int], float] = {}
    bwd_end: dict[tuple[int, int, int], float] = {}
    sent: dict[int, float] = defaultdict(float)
    recv: dict[int, float] = defaultdict(float)
    c = tl.columns
    rows = zip(c.rank.tolist(), _decode(c.kind), _decode(c.resource), c.start_s.tolist(), c.end_s.tolist(),
               c.bytes.tolist(), c.tags, strict=True)
    ranks = set()
    for rank, kind, resource, start_s, end_s, nbytes, t in rows:
        ranks.add(rank)
        if not t or "pp_op" not in t:
            if resource == "compute":
                busy_iv[rank].append((start_s, end_s))
            continue
        if kind == "send":
            sent[rank] += nbytes
            continue
        if kind == "recv":
            recv[rank] += nbytes
            continue
        if resource == "compute":
            busy_iv[rank].append((start_s, end_s))
        if "stage" not in t:
            continue
        key = (rank, int(t["stage"]), int(t["mb"]))
        phase = t.get("phase")
        if phase == "F":
            fwd_start[key] = min(fwd_start.get(key, start_s), start_s)
        elif phase == "W":
            bwd_end[key] = max(bwd_end.get(key, end_s), end_s)
    per_stage = info.stage_activation_memory_bytes  # a stage's own bytes where the stages differ
    events: dict[int, list[tuple[float, int, float]]] = defaultdict(list)  # (t, ±1, ± the stage's bytes)
    for key, t0 in fwd_start.items():
        b = float(per_stage.get(key[1], unit_bytes))
        events[key[0]].append((t0, 1, b))
        if key in bwd_end:
            events[key[0]].append((bwd_end[key], -1, -b))
    peak_units: dict[int, float] = {}
    peak_bytes: dict[int, float] = {}
    mem_tl: dict[int, list[tuple[float, float]]] = {}
    for r in sorted(ranks):
        cur = peak = 0
        cur_b = peak_b = 0.0
        steps: list[tuple[float, float]] = [(0.0, 0.0)]
        for t0, d, b in sorted(events.get(r, []), key=lambda e: (e[0], e[1])):  # frees before allocations at a tie
            cur += d
            cur_b += b
            peak = max(peak, cur)
            peak_b = max(peak_b, cur_b)
            steps.append((t0, cur / v))
        peak_units[r] = peak / v
        peak_bytes[r] = peak_b if per_stage else peak_units[r] * v * unit_bytes
        mem_tl[r] = steps
    busy = {r: length(merge(busy_iv[r])) for r in ranks}
    per_ideal = {r: ((makespan - busy[r]) / busy[r] if busy[r] > 0 else 0.0) for r in sorted(ranks)}
    per_mk = {r: (1 - busy[r] / makespan if makespan > 0 else 0.0) for r in sorted(ranks)}
    tot_busy = sum(busy[r] for r in ranks)
    n = len(ranks)
    return PipelineMetrics(
        info=info,
        bubble_of_ideal=Bubble(per_ideal, (n * makespan - tot_busy) / tot_busy if tot_busy > 0 else 0.0),
        bubble_of_makespan=Bubble(per_mk, 1 - tot_busy / (n * makespan) if makespan > 0 else 0.0),
        peak_memory_units=peak_units,
        peak_memory_bytes=peak_bytes,
        memory_timeline=mem_tl,
        p2p_bytes={r: P2PBytes(sent[r], recv[r]) for r in sorted(ranks)},
    )


def _timeline(path: str, sets: list[str]) -> Timeline:
    return simulate(lower(load_schedule(ROOT / path, parse_overrides(sets))), load_profile("h200x2"))


def _same(a: PipelineMetrics, b: PipelineMetrics | None) -> bool:
    """Equal, the bubbles to 1e-12 (a union of intervals summed in another order may differ in the last bit)."""
    def near(x: Bubble, y: Bubble) -> bool:
        return x.per_rank.keys() == y.per_rank.keys() and x.overall == pytest.approx(y.overall, rel=1e-12) and all(
            x.per_rank[r] == pytest.approx(y.per_rank[r], rel=1e-12) for r in x.per_rank)

    return b is not None and near(a.bubble_of_ideal, b.bubble_of_ideal) and \
        near(a.bubble_of_makespan, b.bubble_of_makespan) and \
        replace(a, bubble_of_ideal=b.bubble_of_ideal, bubble_of_makespan=b.bubble_of_makespan) == b


@pytest.mark.parametrize(("path", "sets"), CASES, ids=lambda x: str(x))
def test_columns_equal_the_definition(path, sets):
    tl = _timeline(path, sets)
    got, ref = PipelineMetrics.of(tl), _definition(tl)
    assert got is not None and ref is not None and _same(got, ref)
    assert max(got.peak_memory_units.values()) > 0 and got.bubble_of_makespan.overall > 0
    if "zb_h1" in str(sets) or "1f1b" in str(sets):
        assert any(len(s) > 3 for s in got.memory_timeline.values())
    # predict's form: the memory steps not made (timeline.meta["memory"] holds the curve), the rest the same
    assert PipelineMetrics.of(tl, memory_timeline=False) == replace(got, memory_timeline={})


def test_uneven_stages_equal_the_definition():
    """A training block padded to uneven stages (6 layers over pp 4: 8 with padding, stages (1, 2, 2, 1)), under
    ZB-H1 (W frees): each chunk weighs its own stage's bytes, in the columns as in the definition."""
    from schedsim.api import load_text

    spec = load_text("schema_version: 1\nname: padded\nworld_size: 4\ntraining:\n  num_layers: 6\n"
                     "  hidden_size: 64\n  num_attention_heads: 4\n  seq_length: 32\n  vocab_size: 1000\n"
                     "  micro_batch_size: 1\n  global_batch_size: 8\n  pp: 4\n  fp16: true\n"
                     "  allow_padding_num_layers: true\n  enable_zero_bubble: true\n")
    tl = simulate(lower(spec), load_profile("h200x2"))
    info = tl.pipeline
    assert info is not None and set(info.stage_activation_memory_bytes.values()) == {
        info.activation_memory_bytes, info.activation_memory_bytes // 2}
    got, ref = PipelineMetrics.of(tl), _definition(tl)
    assert got is not None and ref is not None and _same(got, ref)
    # rank 0 holds 1-layer chunks, rank 1 2-layer ones: bytes per unit differ by the stage's layers
    assert got.peak_memory_bytes[0] == got.peak_memory_units[0] * info.activation_memory_bytes / 2
    assert got.peak_memory_bytes[1] == got.peak_memory_units[1] * info.activation_memory_bytes


def test_tags_as_dicts(tmp_path):
    """A timeline read back from a row-layout file (tags as per-row dicts) and one built from spans give the
    metrics of the simulated one."""
    tl = _timeline(PIPE, ["schedule=zb_h1", "p=4", "m=8"])
    ref = PipelineMetrics.of(tl)
    path = tmp_path / "timeline.json"
    tl.write_json(path, layout="rows")
    back = Timeline.read_json(path)
    assert back.columns._tags is not None  # the row layout reads tags as per-row dicts
    assert PipelineMetrics.of(back) == ref and _same(ref, _definition(back))
    again = Timeline(tl.schedule, tl.source, tl.world_size, tl.launch, tl.profile, spans=tl.spans, meta=tl.meta)
    assert again.columns._tags is not None  # the per-row dict path of tag_column
    assert PipelineMetrics.of(again) == ref


def test_hand_computed_memory_steps():
    """gpipe p=2 m=2, v=1: rank 0 runs F0 F1 then B1 B0 (W folded in B: no phase W), so no unit is freed by a
    W; with zb_h1 each W frees one unit. Peaks: gpipe holds every microbatch's unit at once (m = 2)."""
    tl = _timeline(PIPE, ["schedule=gpipe", "p=2", "m=2"])
    pm = PipelineMetrics.of(tl)
    assert pm.peak_memory_units == {0: 2.0, 1: 2.0}
    steps0 = pm.memory_timeline[0]
    assert [u for _t, u in steps0][:3] == [0.0, 1.0, 2.0]
