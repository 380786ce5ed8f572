"""Schedule generators, registry, placement and constraint errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedsim.pipeline import (
    Action,
    ComputationType,
    InsufficientMicrobatchesError,
    OverlapAction,
    ScheduleConfigError,
    format_order,
    generate,
    get_schedule,
    interleaved_1f1b,
    megatron_schedule_table,
    min_microbatches,
    parse_order,
    schedule_names,
    stage_to_rank,
    torch_group_size,
    validate,
)

CT = ComputationType


def row(order, rank):
    return " ".join(str(a) for a in order[rank])


def kinds(order, rank, *types):
    return [a for a in order[rank] if a.type in types]


# --------------------------------------------------------------------------- golden orders


class TestGoldenOrders:
    def test_gpipe(self):
        o = generate("gpipe", 2, 3)
        assert row(o, 1) == "1F0 1F1 1F2 1B0 1B1 1B2"

    def test_1f1b_rule(self):
        # w = min(p-1-r, m) forwards, then F(w+i) B(i), then the last w B's
        o = generate("1f1b", 4, 8)
        assert row(o, 0) == "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7"
        assert row(o, 3) == "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7"

    def test_1f1b_below_minimum_with_check_off_uses_w_capped_at_m(self):
        o = generate("1f1b", 4, 2, check_microbatches=False)
        assert row(o, 0) == "0F0 0F1 0B0 0B1"
        assert row(o, 3) == "3F0 3B0 3F1 3B1"

    def test_zb_h1_rank3_matches_reference(self):
        # pipelines.md §1: rank 3 runs 3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 ...
        o = generate("zb_h1", 4, 8)
        assert row(o, 3).startswith("3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 ")
        assert row(o, 0).startswith("0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1")

    @pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (5, 7), (8, 16)])
    def test_zb_h1_rank_r_holds_back_r_weights(self, p, m):
        o = generate("zb_h1", p, m)
        for r in range(p):
            pending = max_pending = 0
            for a in o[r]:
                pending += {CT.I: 1, CT.W: -1}.get(a.type, 0)
                max_pending = max(max_pending, pending)
            # during steady state r W's stay pending before each I;
            # the steady I itself makes it r+1 at the peak
            assert max_pending == min(r + 1, m)

    def test_interleaved_megatron_worked_example(self):
        # Megatron docstring: PP=2, VP=2, g=3, m=5
        table = megatron_schedule_table(5, 2, 3)
        assert [mb for mb, _ in table] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
        assert [c for _, c in table] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
        o = generate("interleaved_1f1b", 2, 5, 2, group_size=3)
        for r in range(2):
            fwd = kinds(o, r, CT.F)
            assert [a.microbatch for a in fwd] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
            assert [a.stage // 2 for a in fwd] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
            bwd = kinds(o, r, CT.B)
            assert [a.microbatch for a in bwd] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
            assert [a.stage // 2 for a in bwd] == [1, 1, 1, 0, 0, 0, 1, 1, 0, 0]
        # warmup w = min(2(p-r-1) + (v-1)g, v*m): rank 0 -> 5, rank 1 -> 3,
        # then forward w+k before backward k
        assert row(o, 0).startswith("0F0 0F1 0F2 2F0 2F1 2F2 2B0 0F3 2B1 ")
        assert row(o, 1).startswith("1F0 1F1 1F2 3F0 3B0 ")

    def test_interleaved_moe_overlap_adds_one_warmup(self):
        plain = generate("interleaved_1f1b", 4, 8, 2)
        moe = interleaved_1f1b(4, 8, 2, overlap_moe_comm=True)
        for r in range(4):
            first_b = next(i for i, a in enumerate(plain[r]) if a.type is CT.B)
            first_b_moe = next(i for i, a in enumerate(moe[r]) if a.type is CT.B)
            assert first_b_moe == first_b + 1

    def test_looped_bfs(self):
        o = generate("looped_bfs", 2, 2, 2)
        assert row(o, 0) == "0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0"

    def test_zbv_row0_p4_m8(self):
        o = generate("zbv", 4, 8)
        assert row(o, 0).startswith(
            "0F0 0F1 0F2 0F3 0F4 0F5 0F6 7F0 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 7I3 7W3 0F7 0I0 0W0"
        )

    def test_dualpipev_row0_matches_torch_artifact_prefix(self):
        # pipelines.md §1: dualpipev_4rank_10mb.csv row 0 starts
        # 0F0,...,0F6,7F0,7I0,7W0,...,(0F7;7B3)OVERLAP_F_B
        o = generate("dualpipev", 4, 10)
        text = row(o, 0)
        assert text.startswith(
            "0F0 0F1 0F2 0F3 0F4 0F5 0F6 7F0 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 "
            "(0F7;7B3)OVERLAP_F_B (7F4;0B0)OVERLAP_F_B"
        )
        assert text.endswith("0I6 0W6 0I7 0W7 0I8 0W8 0I9 0W9")
        # last rank: first F(s0), B(s1) pair is not overlapped
        assert row(o, 3).startswith("3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 3F4 4B0 (4F4;3B0)OVERLAP_F_B")
        assert all(isinstance(a, OverlapAction) for a in o[1][14:22])


# --------------------------------------------------------------------------- validity grid


SCHEDULE_CASES = [
    ("gpipe", None),
    ("1f1b", None),
    ("interleaved_1f1b", 2),
    ("interleaved_1f1b", 3),
    ("looped_bfs", 2),
    ("zb_h1", None),
    ("interleaved_zb", 2),
    ("zbv", None),
    ("dualpipev", None),
]


@settings(max_examples=60, deadline=None)
@given(
    case=st.sampled_from(SCHEDULE_CASES),
    p=st.integers(1, 6),
    extra=st.integers(0, 12),
)
def test_every_generated_order_validates(case, p, extra):
    name, v = case
    info = get_schedule(name)
    m = info.min_microbatches(p, v) + extra
    if name in ("interleaved_1f1b", "interleaved_zb"):
        # default group sizes: Megatron's p needs m % p == 0 (or >= p), torch's
        # rounds = m // p must divide m; multiples of p satisfy both
        m = max(m // p, 1) * p
    order = generate(name, p, m, v)
    chunks = info.chunks(v)
    mapping = stage_to_rank(name, p, v)
    assert validate(order, p, m, p * chunks, mapping, schedule=name) == mapping
    # each rank runs only its own stages, every (stage, mb) forward exactly once
    fwd = sorted((s.stage, s.microbatch) for r in order for a in order[r] for s in a.sub_actions if s.type is CT.F)
    assert fwd == [(s, j) for s in range(p * chunks) for j in range(m)]


def test_interleaved_at_scale_is_complete():
    # p=32, m=512, v=4 (the benchmark size; its generation time is printed by benchmarks/speed/pipeline_vs_torch.py)
    order = generate("interleaved_1f1b", 32, 512, 4)
    assert len(order) == 32 and all(len(order[r]) == 2 * 4 * 512 for r in order)


# --------------------------------------------------------------------------- constraints


class TestInterleavedConstraints:
    def test_group_size_below_p(self):
        with pytest.raises(ScheduleConfigError, match=r"p <= microbatch_group_size_per_vp_stage <= m") as e:
            generate("interleaved_1f1b", 4, 8, 2, group_size=3)
        assert "group_size=3" in str(e.value) and "fix: pass group_size between 4 and 8" in str(e.value)

    def test_group_size_above_m(self):
        with pytest.raises(ScheduleConfigError, match=r"got p=4, group_size=9, m=8"):
            generate("interleaved_1f1b", 4, 8, 2, group_size=9)

    def test_remainder_below_p_introduces_dependency_bubbles(self):
        # p=4, m=10, default g=p=4: 10 mod 4 = 2 < 4
        with pytest.raises(ScheduleConfigError, match=r"dependency bubbles") as e:
            generate("interleaved_1f1b", 4, 10, 2)
        msg = str(e.value)
        assert "m mod group_size=2 < p=4" in msg
        assert "group_size=5" in msg  # a divisor of m in [p, m]: torch's choice
        assert torch_group_size(4, 10) == 5
        generate("interleaved_1f1b", 4, 10, 2, group_size=5)  # the fix works

    def test_remainder_at_least_p_is_allowed(self):
        # p=2, g=3, m=5: 5 mod 3 = 2 >= p
        generate("interleaved_1f1b", 2, 5, 2, group_size=3)

    def test_v_must_be_at_least_two(self):
        with pytest.raises(ScheduleConfigError, match=r"v \(chunks per rank\) >= 2.*'1f1b'"):
            generate("interleaved_1f1b", 4, 8, 1)

    def test_torch_group_size_rejects_what_torch_rejects(self):
        with pytest.raises(ScheduleConfigError, match=r"multiple of rounds"):
            torch_group_size(4, 9)


class TestMinimumMicrobatches:
    @pytest.mark.parametrize(
        ("name", "p", "m", "need"),
        [
            ("1f1b", 4, 3, 4),
            ("zb_h1", 4, 1, 4),
            ("interleaved_1f1b", 4, 2, 4),
            ("interleaved_zb", 4, 3, 4),
            ("dualpipev", 4, 7, 8),
        ],
    )
    def test_dedicated_error(self, name, p, m, need):
        assert min_microbatches(name, p) == need
        with pytest.raises(InsufficientMicrobatchesError, match=rf"at least {need} microbatches") as e:
            generate(name, p, m)
        assert f"got m={m}" in str(e.value) and f"raise m to {need}" in str(e.value)

    @pytest.mark.parametrize("name", ["gpipe", "looped_bfs", "zbv"])
    def test_no_minimum(self, name):
        assert min_microbatches(name, 4) == 1
        order = generate(name, 4, 1)
        info = get_schedule(name)
        validate(order, 4, 1, 4 * info.chunks(), stage_to_rank(name, 4))


class TestRegistry:
    def test_names(self):
        assert schedule_names() == [
            "gpipe",
            "1f1b",
            "interleaved_1f1b",
            "looped_bfs",
            "zb_h1",
            "interleaved_zb",
            "zbv",
            "dualpipev",
        ]

    @pytest.mark.parametrize(
        ("alias", "name"),
        [
            ("GPipe", "gpipe"),
            ("1F1B", "1f1b"),
            ("Interleaved1F1B", "interleaved_1f1b"),
            ("interleaved-1f1b", "interleaved_1f1b"),
            ("LoopedBFS", "looped_bfs"),
            ("InterleavedZeroBubble", "interleaved_zb"),
            ("ZBVZeroBubble", "zbv"),
            ("ZB-V", "zbv"),
            ("DualPipeV", "dualpipev"),
            ("ZB1P", "zb_h1"),
        ],
    )
    def test_aliases(self, alias, name):
        assert get_schedule(alias).name == name

    def test_unknown_name_lists_valid(self):
        with pytest.raises(ValueError, match=r"unknown pipeline schedule 'chimera'") as e:
            generate("chimera", 4, 8)
        for name in schedule_names():
            assert name in str(e.value)
        assert "ZBVZeroBubble" in str(e.value)

    def test_fixed_chunks(self):
        with pytest.raises(ScheduleConfigError, match=r"zbv runs exactly 2 chunk\(s\) per rank, got v=3"):
            generate("zbv", 4, 8, 3)
        assert generate("zbv", 4, 8, 2) == generate("zbv", 4, 8)

    def test_group_size_only_for_interleaved(self):
        with pytest.raises(ScheduleConfigError, match=r"1f1b has no microbatch group size"):
            generate("1f1b", 4, 8, group_size=4)

    @pytest.mark.parametrize("bad", [0, -1, 2.5, True])
    def test_bad_p_m(self, bad):
        with pytest.raises(ScheduleConfigError, match=r"must be a positive integer"):
            generate("gpipe", bad, 4)
        with pytest.raises(ScheduleConfigError, match=r"must be a positive integer"):
            generate("gpipe", 4, bad)


class TestPlacement:
    def test_loop(self):
        assert stage_to_rank("interleaved_1f1b", 4, 2) == {
            0: 0,
            1: 1,
            2: 2,
            3: 3,
            4: 0,
            5: 1,
            6: 2,
            7: 3,
        }

    def test_v(self):
        m = stage_to_rank("dualpipev", 4)
        assert all(m[r] == r and m[2 * 4 - 1 - r] == r for r in range(4))
        assert stage_to_rank("zbv", 4) == m == stage_to_rank("v", 4)

    def test_v_zigzag_for_more_chunks(self):
        assert stage_to_rank("v", 2, 4) == {0: 0, 1: 1, 2: 1, 3: 0, 4: 0, 5: 1, 6: 1, 7: 0}

    def test_single_chunk(self):
        assert stage_to_rank("1f1b", 3) == {0: 0, 1: 1, 2: 2}


def test_inline_round_trip_of_generated_order():
    order = generate("dualpipev", 3, 6)
    assert parse_order(format_order(order)) == order
    assert order[0][0] == Action(0, CT.F, 0)
