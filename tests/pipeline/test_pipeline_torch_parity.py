"""Parity with PyTorch's pipelining schedules (torch 2.13, CPU).

Compares the generators with ``_schedule_visualizer.get_schedule_ops`` after
dropping idle slots (``None``) and non-compute actions (torch's single-stage
schedules append ``REDUCE_GRAD``), and checks the CSV and p2p lowering
against torch's ``_dump_csv`` / ``_load_csv`` / ``_add_send_recv``.

1F1B is compared against the rule of pipelines.md §1 instead: torch 2.13's
``Schedule1F1B._get_pipeline_order`` (what ``get_schedule_ops('1F1B', ...)``
returns) numbers the last rank's forwards 1..m instead of 0..m-1 (its runtime
``_step_microbatches`` is right). ``test_torch_1f1b_defect`` pins that down.
"""

from __future__ import annotations

import warnings
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from torch.distributed.pipelining import schedules as ts
from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

from schedsim.pipeline import (
    Action,
    ComputationType,
    PipelineScheduleError,
    add_p2p,
    dumps_csv,
    generate,
    get_schedule,
    parse_action,
    read_csv,
    stage_to_rank,
    torch_group_size,
    unit_time_makespan,
    validate,
    write_csv,
)

CT = ComputationType

pytestmark = pytest.mark.filterwarnings("ignore")


def _ours(order):
    return {r: [a for a in order[r] if a is not None] for r in order}


def _from_torch(rows, *, compute_only=True):
    """torch list-of-lists (or dict) of _Action -> our order, via the text form."""
    items = rows.items() if isinstance(rows, dict) else enumerate(rows)
    out = {}
    for r, acts in items:
        parsed = [parse_action(str(a)) for a in acts if a is not None]
        out[r] = [a for a in parsed if a.is_compute or (not compute_only and a.is_comm)]
    return out


def _to_torch(order):
    return {r: [None if a is None else ts._Action.from_str(str(a)) for a in order[r]] for r in order}


def _mock_stages(pp, v):
    from unittest import mock

    from torch.distributed.pipelining.stage import PipelineStage

    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank = 0
    stage.group_size = pp
    stage.submod = None
    stage.num_stages = pp * v
    return [stage for _ in range(v)]


def _torch_ops(name, pp, m, v=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return get_schedule_ops(name, pp, m, num_stages_per_rank=v, **kw)


GRID = [(p, m) for p in (1, 2, 3, 4, 5, 8) for m in (1, 2, 3, 4, 5, 6, 8, 10, 12, 17)]


@pytest.mark.parametrize(("p", "m"), GRID)
@pytest.mark.parametrize(
    ("torch_name", "v"),
    [
        ("GPipe", None),
        ("Interleaved1F1B", 2),
        ("Interleaved1F1B", 3),
        ("LoopedBFS", 2),
        ("LoopedBFS", 3),
        ("InterleavedZeroBubble", 2),
        ("InterleavedZeroBubble", 3),
        ("ZBVZeroBubble", 2),
        ("DualPipeV", 2),
    ],
)
def test_orders_equal_torch(torch_name, v, p, m):
    info = get_schedule(torch_name)
    try:
        theirs = _torch_ops(torch_name, p, m, v)
    except ValueError as exc:  # torch's own limits: mirror them
        if torch_name == "DualPipeV":
            assert m < 2 * p and "at least as many microbatches as stages" in str(exc)
        else:
            assert "multiple of the number of rounds" in str(exc)
            with pytest.raises(ValueError, match="multiple of rounds"):
                torch_group_size(p, m)
        return
    kwargs = {}
    if info.takes_group_size:
        kwargs["group_size"] = torch_group_size(p, m)
    if m < info.min_microbatches(p, v):
        # torch builds these; schedsim refuses unless asked (torchtitan#775)
        kwargs["check_microbatches"] = False
    ours = generate(info.name, p, m, v, **kwargs)
    assert _ours(ours) == _from_torch(theirs)


@pytest.mark.parametrize(("p", "m"), [(p, m) for p, m in GRID if m >= p])
def test_1f1b_matches_torch_except_its_last_rank_numbering(p, m):
    ours = generate("1f1b", p, m)
    theirs = _from_torch(_torch_ops("1F1B", p, m))
    for r in range(p - 1):
        assert ours[r] == theirs[r]
    # ranks below the last agree; the last rank is the known defect
    last = p - 1
    assert [a for a in ours[last] if a.type is CT.B] == [a for a in theirs[last] if a.type is CT.B]
    assert [a.microbatch for a in theirs[last] if a.type is CT.F] == list(range(1, m + 1))
    assert [a.microbatch for a in ours[last] if a.type is CT.F] == list(range(m))


def test_torch_1f1b_defect():
    """torch 2.13 get_schedule_ops('1F1B', 4, 8): rank 3 runs 3F1..3F8 (no 3F0)."""
    last = [str(a) for a in _torch_ops("1F1B", 4, 8)[3] if a is not None]
    assert last[:4] == ["3F1", "3B0", "3F2", "3B1"]
    assert "3F8" in last and "3F0" not in last
    # torch's own validator rejects it
    torch_order = {r: [a for a in row if a is not None] for r, row in enumerate(_torch_ops("1F1B", 4, 8))}
    with pytest.raises(AssertionError, match="Rank 3, step 1: Running Full Backward for stage 3, microbatch 0"):
        ts._validate_schedule(torch_order, 4, 4, 8)
    # and so does ours, marking the same step
    with pytest.raises(PipelineScheduleError, match=r"Rank 3, step 1: 3B0 runs before its forward 3F0") as e:
        validate(_from_torch(torch_order), 4, 8, 4, stage_to_rank("1f1b", 4))
    assert "Step 01: 0F1" in str(e.value) and str(e.value).count("<-- ERROR HERE") == 1


@pytest.mark.parametrize(("p", "m"), [(p, m) for p, m in GRID if m >= p])
def test_zb_h1_equals_torch_zero_bubble_helper_on_one_chunk(p, m):
    """ZB-H1 = torch ``_get_1f1b_rank_ops(enable_zero_bubble=True)`` with one local stage."""
    ours = generate("zb_h1", p, m)
    for r in range(p):
        warmup = ts._get_warmup_ops(
            r, 1, torch_group_size(p, m) if m % max(1, m // p) == 0 else p, p, m, multiply_factor=1
        )
        ops = ts._get_1f1b_rank_ops(
            1,
            p,
            warmup,
            m - warmup,
            warmup,
            r,
            lambda step, r=r: r,
            lambda step, r=r: r,
            num_1f1b_microbatches=r,
            enable_zero_bubble=True,
        )
        assert ours[r] == [parse_action(str(a)) for a in ops if a is not None]


@pytest.mark.parametrize(
    ("name", "p", "m", "v"),
    [
        ("gpipe", 4, 8, None),
        ("1f1b", 4, 8, None),
        ("interleaved_1f1b", 4, 8, 2),
        ("interleaved_1f1b", 3, 9, 3),
        ("looped_bfs", 4, 5, 2),
        ("zb_h1", 4, 8, None),
        ("interleaved_zb", 4, 8, 2),
        ("zbv", 4, 8, None),
        ("dualpipev", 4, 10, None),
    ],
)
def test_torch_validate_schedule_accepts_ours(name, p, m, v):
    info = get_schedule(name)
    order = generate(name, p, m, v)
    mapping = ts._validate_schedule(_to_torch(order), p, info.num_stages(p, v), m)
    assert mapping == stage_to_rank(name, p, v)


class TestCsvWithTorch:
    @pytest.mark.parametrize(
        ("name", "cls", "p", "m"),
        [
            ("interleaved_1f1b", "ScheduleInterleaved1F1B", 4, 8),
            ("interleaved_zb", "ScheduleInterleavedZeroBubble", 2, 4),
            ("zbv", "ScheduleZBVZeroBubble", 4, 6),
            ("dualpipev", "ScheduleDualPipeV", 4, 10),
        ],
    )
    def test_torch_dump_reads_back(self, tmp_path, name, cls, p, m):
        sched = getattr(ts, cls)(_mock_stages(p, 2), m)
        path = tmp_path / "torch.csv"
        sched._dump_csv(str(path), format="compute_only")
        got = read_csv(path)
        assert _ours(got) == generate(name, p, m)
        # torch pads with idle cells; they come back as None in the same columns
        for r, row in sched.pipeline_order.items():
            assert [a is None for a in row] == [a is None for a in got[r]]

    @pytest.mark.parametrize(("name", "p", "m"), [("dualpipev", 4, 10), ("interleaved_1f1b", 3, 6)])
    def test_ours_loads_in_torch(self, tmp_path, name, p, m):
        order = generate(name, p, m)
        path = tmp_path / "ours.csv"
        write_csv(order, path)
        runtime = ts._PipelineScheduleRuntime(_mock_stages(p, 2), m)
        runtime._load_csv(str(path), format="compute_only")
        assert _from_torch(runtime.pipeline_order) == order
        assert runtime.stage_index_to_group_rank == stage_to_rank(name, p)

    def test_text_matches_torch_writer(self, tmp_path):
        sched = ts.ScheduleDualPipeV(_mock_stages(4, 2), 10)
        path = tmp_path / "t.csv"
        sched._dump_csv(str(path), format="compute_only")
        with open(path, newline="") as fh:
            assert dumps_csv(generate("dualpipev", 4, 10)) == fh.read()


@pytest.mark.parametrize(
    ("name", "torch_name", "p", "m", "v"),
    [
        ("interleaved_1f1b", "Interleaved1F1B", 4, 8, 2),
        ("interleaved_1f1b", "Interleaved1F1B", 3, 6, 3),
        ("interleaved_zb", "InterleavedZeroBubble", 4, 8, 2),
        ("looped_bfs", "LoopedBFS", 2, 4, 2),
        ("zbv", "ZBVZeroBubble", 4, 8, None),
        ("dualpipev", "DualPipeV", 4, 10, None),
    ],
)
def test_p2p_lowering_has_torch_sends_and_recvs(name, torch_name, p, m, v):
    """Same SEND/RECV actions per rank as torch's ``_add_send_recv``; ours sit next to their compute."""
    kwargs = {"group_size": torch_group_size(p, m)} if name == "interleaved_1f1b" else {}
    order = generate(name, p, m, v, **kwargs)
    ours = add_p2p(order, stage_to_rank(name, p, v))
    theirs = _from_torch(_torch_ops(torch_name, p, m, v, with_comms=True), compute_only=False)
    for r in range(p):
        assert Counter(a for a in ours[r] if a.is_comm) == Counter(a for a in theirs[r] if a.is_comm)
        assert [a for a in ours[r] if a.is_compute] == order[r]


@pytest.mark.parametrize(
    ("name", "p", "m", "v"),
    [("interleaved_1f1b", 4, 8, 2), ("zbv", 4, 8, None), ("zb_h1", 4, 8, None), ("1f1b", 5, 7, None)],
)
def test_torch_simulator_runs_our_lowering(name, p, m, v):
    """torch's ``_simulate_comms_compute`` finds no deadlock in add_p2p's output."""
    lowered = add_p2p(generate(name, p, m, v), stage_to_rank(name, p, v))
    mapping = stage_to_rank(name, p, v)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        timeline = ts._simulate_comms_compute(_to_torch(lowered), lambda s: mapping[s], len(mapping))
    assert sum(a is not None for row in timeline.values() for a in row) == sum(map(len, lowered.values()))


@pytest.mark.parametrize(
    ("torch_name", "name", "p", "m", "makespan", "bubble"),
    [
        ("Interleaved1F1B", "interleaved_1f1b", 4, 8, 57, 0.1579),
        ("Interleaved1F1B", "interleaved_1f1b", 8, 16, 117, 0.1795),
        ("Interleaved1F1B", "interleaved_1f1b", 8, 32, 213, 0.0986),
        ("ZBVZeroBubble", "zbv", 4, 8, 51, 0.0588),
        ("ZBVZeroBubble", "zbv", 8, 16, 103, 0.0680),
        ("ZBVZeroBubble", "zbv", 8, 32, 199, 0.0352),
        ("DualPipeV", "dualpipev", 4, 8, 54, 0.1111),
        ("DualPipeV", "dualpipev", 8, 16, 110, 0.1273),
        ("DualPipeV", "dualpipev", 8, 32, 206, 0.0680),
    ],
)
def test_reference_table_from_torch_orders(torch_name, name, p, m, makespan, bubble):
    """pipelines.md §4: these cells were re-checked on torch 2.13's own orders."""
    order = _from_torch(_torch_ops(torch_name, p, m, 2))
    res = unit_time_makespan(order, stage_to_rank(name, p, 2))
    assert res.makespan == makespan
    assert round(res.bubble, 4) == bubble


def test_torch_action_text_round_trip():
    for text in ["2F0", "1B3", "3SEND_F1", "0RECV_B4", "5I2", "5W2", "0UNSHARD", "(0F7;7B3)OVERLAP_F_B"]:
        theirs = ts._Action.from_str(text)
        assert str(theirs) == text
        assert str(parse_action(str(theirs))) == text
    assert parse_action("2F0") == Action(2, CT.F, 0)


@pytest.mark.parametrize(
    ("name", "p", "m", "v"),
    [("gpipe", 3, 5, None), ("zb_h1", 4, 8, None), ("zbv", 2, 4, None), ("zbv", 4, 8, None), ("dualpipev", 4, 10, None),
     ("interleaved_zb", 4, 8, 2), ("looped_bfs", 2, 4, 2), ("1f1b", 4, 6, None)],
)
def test_torch_lowering_matches_add_send_recv_op_for_op(name, p, m, v):
    """``torch_add_send_recv`` (used for torch-run and custom schedules) issues torch's order exactly."""
    from schedsim.pipeline.comms import torch_add_send_recv

    order = generate(name, p, m, v)
    mapping = stage_to_rank(name, p, v)
    ours = torch_add_send_recv(order, mapping, len(mapping))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = ts._add_send_recv({r: list(a) for r, a in _to_torch(order).items()}, lambda s: mapping[s], len(mapping))
    assert {r: [str(a) for a in acts] for r, acts in ours.items()} == \
        {r: [str(a) for a in theirs[r]] for r in sorted(theirs)}


def _block_order(schedule: str, p: int, m: int) -> dict[int, list[str]]:
    """Per rank, the compute and p2p ops a ``pipeline:`` block lowers to, in program order, in torch's notation
    (``2F0``, ``2B0``, ``2SEND_F0``, ``6RECV_B1``)."""
    import re

    from schedsim.api import load_text, lower_spec

    text = (f"schema_version: 1\nname: il\nworld_size: {p}\npipeline:\n  schedule: {schedule}\n  p: {p}\n  m: {m}\n"
            "  stage:\n    forward: [{kind: compute, duration_us: 1}]\n"
            "    backward_input: [{kind: compute, duration_us: 1}]\n"
            "    backward_weight: [{kind: compute, duration_us: 1}]\n")
    out: dict[int, list[str]] = {r: [] for r in range(p)}
    for op in lower_spec(load_text(text)).ops():
        if x := re.fullmatch(r"(F|B)(\d+)\.(\d+)\.(?:I\.)?0", op.name):  # a full B's I part opens it
            out[op.rank].append(f"{x[2]}{x[1]}{x[3]}")
        elif y := re.fullmatch(r"(send|recv)(F|B)(\d+)\.(\d+)", op.name):
            out[op.rank].append(f"{y[3]}{y[1].upper()}_{y[2]}{y[4]}")
    return out


@pytest.mark.parametrize("m", [3, 6, 10, 8])
def test_a_block_named_interleaved1f1b_runs_what_torch_runs(m):
    """pytorch PR 129597: torch's ScheduleInterleaved1F1B runs m = 10, 6 and 3 on 4 ranks (rounds = max(1, m // p)
    groups of m // rounds), which the block refused under torch's own name (Megatron's m mod group_size and
    m >= p rules). Named as torch names it, the block runs torch's compute order, and its sends and recvs are
    torch's ``_add_send_recv`` of that order, op for op."""
    theirs = {r: [a for a in acts if a is not None] for r, acts in enumerate(_torch_ops("Interleaved1F1B", 4, m, 2))}
    mapping = stage_to_rank("loop", 4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = ts._add_send_recv({r: list(a) for r, a in theirs.items()}, lambda s: mapping[s], len(mapping))
    ours = _block_order("Interleaved1F1B", 4, m)
    assert ours == {r: [str(a) for a in lowered[r]] for r in sorted(lowered)}
    assert {r: [a for a in acts if "_" not in a] for r, acts in ours.items()} == \
        {r: [str(a) for a in acts] for r, acts in theirs.items()}


def test_a_block_named_interleaved1f1b_refuses_what_torch_refuses():
    # m = 9 on 4 ranks: rounds 2 does not divide 9; torch raises "multiple of the number of rounds"
    with pytest.raises(ValueError, match="multiple of the number of rounds"):
        _torch_ops("Interleaved1F1B", 4, 9, 2)
    with pytest.raises(PipelineScheduleError, match="multiple of rounds") as e:
        _block_order("Interleaved1F1B", 4, 9)
    assert "m=8 or m=10" in str(e.value)
    # Megatron's name keeps Megatron's rules (its group size p: m mod p must be 0 or >= p)
    with pytest.raises(PipelineScheduleError, match="m mod group_size"):
        _block_order("interleaved_1f1b", 4, 10)
