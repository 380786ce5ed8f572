"""validate(): each invalid / hanging kind raises PipelineScheduleError with the grid."""

from __future__ import annotations

import re

import pytest

from schedsim.pipeline import (
    DeadlockError,
    InsufficientMicrobatchesError,
    PipelineScheduleError,
    format_pipeline_order,
    generate,
    parse_order,
    stage_to_rank,
    validate,
)

MARK = "<-- ERROR HERE"
PLACE2 = {0: 0, 1: 1}


def marked_step(message: str) -> int:
    """Step number of the row carrying ``<-- ERROR HERE`` (exactly one)."""
    rows = [line for line in message.splitlines() if line.endswith(MARK)]
    assert len(rows) == 1, message
    match = re.match(r"Step (\d+):", rows[0])
    assert match, rows[0]
    return int(match.group(1))


def check_grid(message: str, ranks: int) -> None:
    header = next(line for line in message.splitlines() if line.startswith(" ") and "Rank 0" in line)
    assert all(f"Rank {r}" in header for r in range(ranks))


class TestMicrobatchMissingOrTwice:
    def test_missing_microbatch(self):
        order = parse_order({0: "0F0 0F1 0B0 0B1", 1: "1F0 1B0"})
        with pytest.raises(PipelineScheduleError, match=r"never runs 1F1: microbatch 1 is missing") as e:
            validate(order, 2, 2, 2, PLACE2)
        check_grid(str(e.value), 2)
        assert marked_step(str(e.value)) == 1  # last action of stage 1 on rank 1
        assert e.value.rank == 1

    def test_missing_backward(self):
        order = parse_order({0: "0F0 0F1 0B0", 1: "1F0 1B0 1F1 1B1"})
        with pytest.raises(PipelineScheduleError, match=r"stage 0 \(rank 0\) never runs a backward for microbatch 1"):
            validate(order, 2, 2, 2, PLACE2)

    def test_forward_twice(self):
        order = parse_order({0: "0F0 0F0 0B0", 1: "1F0 1B0"})
        with pytest.raises(PipelineScheduleError, match=r"Rank 0, step 1: 0F0 runs twice \(first at step 0\)") as e:
            validate(order, 2, 1, 2, PLACE2)
        assert marked_step(str(e.value)) == 1
        assert [str(a) for a in e.value.actions] == ["0F0"]

    def test_b_and_i_for_the_same_microbatch(self):
        order = parse_order({0: "0F0 0I0 0B0 0W0"})
        with pytest.raises(PipelineScheduleError, match=r"0B0 runs a second backward .*already ran 0I0"):
            validate(order, 1, 1, 1, {0: 0})

    def test_microbatch_out_of_range(self):
        order = parse_order({0: "0F0 0B0 0F2 0B2"})
        with pytest.raises(PipelineScheduleError, match=r"names microbatch 2, but microbatches are 0..1") as e:
            validate(order, 1, 2, 1, {0: 0})
        assert marked_step(str(e.value)) == 2


class TestOrdering:
    def test_w_before_its_i(self):
        order = parse_order({0: "0F0 0W0 0I0", 1: "1F0 1I0 1W0"})
        with pytest.raises(PipelineScheduleError, match=r"Rank 0, step 1: 0W0 runs before its 0I0") as e:
            validate(order, 2, 1, 2, PLACE2)
        check_grid(str(e.value), 2)
        assert marked_step(str(e.value)) == 1

    def test_w_after_full_backward(self):
        order = parse_order({0: "0F0 0B0 0W0"})
        with pytest.raises(PipelineScheduleError, match=r"0W0 runs after the full backward 0B0"):
            validate(order, 1, 1, 1, {0: 0})

    @pytest.mark.parametrize("bwd", ["B", "I"])
    def test_backward_before_forward(self, bwd):
        order = parse_order({0: "0F0 0B0", 1: f"_ 1{bwd}0 1F0" + (" 1W0" if bwd == "I" else "")})
        with pytest.raises(PipelineScheduleError, match=rf"Rank 1, step 1: 1{bwd}0 runs before its forward 1F0") as e:
            validate(order, 2, 1, 2, PLACE2)
        assert marked_step(str(e.value)) == 1  # idle slots count as steps


class TestPlacement:
    def test_stage_on_two_ranks_in_the_order(self):
        order = parse_order({0: "0F0 0F1 0B0 0B1", 1: "1F0 1B0 0F1"})
        with pytest.raises(
            PipelineScheduleError, match=r"Rank 1, step 2: 0F1 puts stage 0 on rank 1, but rank 0 already runs it"
        ) as e:
            validate(order, 2, 2, 2, PLACE2)
        assert marked_step(str(e.value)) == 2

    def test_stage_against_stage_to_rank(self):
        order = generate("1f1b", 2, 2)
        with pytest.raises(
            PipelineScheduleError, match=r"runs stage 0 on rank 0, but stage_to_rank places stage 0 on rank 1"
        ) as e:
            validate(order, 2, 2, 2, {0: 1, 1: 0})
        assert marked_step(str(e.value)) == 0

    def test_unparsed_text_is_rejected(self):
        with pytest.raises(PipelineScheduleError, match=r"Rank 0, step 1: got '0B0' \(str\), expected an Action") as e:
            validate({0: [generate("1f1b", 1, 1)[0][0], "0B0"]}, 1, 1, 1)
        assert marked_step(str(e.value)) == 1

    def test_wrong_rank_count(self):
        with pytest.raises(PipelineScheduleError, match=r"expected 0..2 \(p=3\); missing \[2\]") as e:
            validate(generate("1f1b", 2, 2), 3, 2, 3)
        assert MARK in str(e.value)

    def test_interleaved_order_checked_against_v_placement(self):
        # torchtitan#774: ZB-V needs V placement, not loop placement
        with pytest.raises(
            PipelineScheduleError,
            match=r"Rank 0, step 7: 7F0 runs stage 7 on rank 0, but stage_to_rank places stage 7 on rank 3",
        ) as e:
            validate(generate("zbv", 4, 8), 4, 8, 8, stage_to_rank("loop", 4, 2))
        assert e.value.rank == 0 and marked_step(str(e.value)) == 7


class TestTooFewMicrobatches:
    def test_1f1b(self):
        order = generate("1f1b", 4, 2, check_microbatches=False)
        with pytest.raises(
            InsufficientMicrobatchesError,
            match=r"1f1b with p=4 needs at least 4 microbatches \(m >= p: torchtitan#775.*\), got m=2",
        ) as e:
            validate(order, 4, 2, 4, stage_to_rank("1f1b", 4), schedule="1f1b")
        assert isinstance(e.value, PipelineScheduleError)
        check_grid(str(e.value), 4)
        assert marked_step(str(e.value)) == 2  # rank 0: 0F0 0F1 then 0B0
        assert "raise m to 4" in str(e.value)
        # the same order is otherwise fine
        validate(order, 4, 2, 4, stage_to_rank("1f1b", 4))

    def test_dualpipev(self):
        order = generate("dualpipev", 4, 6, check_microbatches=False)
        with pytest.raises(
            InsufficientMicrobatchesError, match=r"dualpipev with p=4 needs at least 8 microbatches \(m >= 2p: DeepSeek"
        ) as e:
            validate(order, 4, 6, 8, stage_to_rank("dualpipev", 4), schedule="DualPipeV")
        assert MARK in str(e.value)
        # without the schedule name the broken order is still caught
        with pytest.raises(PipelineScheduleError):
            validate(order, 4, 6, 8, stage_to_rank("dualpipev", 4))


class TestWaitCycle:
    def test_two_rank_cycle(self):
        # rank 0 skips the warmup: it waits for 1B0, which rank 1 runs only
        # after 1F1, whose input rank 0 sends only after 0B0
        order = parse_order({0: "0F0 0B0 0F1 0B1", 1: "1F0 1F1 1B0 1B1"})
        with pytest.raises(DeadlockError, match=r"cross-rank wait cycle") as e:
            validate(order, 2, 2, 2, PLACE2)
        msg = str(e.value)
        assert e.value.cycle == (0, 1)
        assert "rank 0 waits in 0RECV_B0 for 1SEND_B0 from rank 1" in msg
        assert "rank 1 waits in 1RECV_F1 for 0SEND_F1 from rank 0" in msg
        check_grid(msg, 2)
        assert marked_step(msg) == 4
        row = next(line for line in msg.splitlines() if line.endswith(MARK))
        assert "0RECV_B0" in row and "1RECV_F1" in row

    def test_three_rank_cycle_from_bad_warmup(self):
        # 1F1B p=3 with rank 0's warmup removed
        good = generate("1f1b", 3, 4)
        bad = parse_order({0: "0F0 0B0 0F1 0B1 0F2 0B2 0F3 0B3"})
        order = {0: bad[0], 1: good[1], 2: good[2]}
        validate(good, 3, 4, 3)  # sanity: the real 1F1B passes
        with pytest.raises(DeadlockError) as e:
            validate(order, 3, 4, 3, stage_to_rank("1f1b", 3))
        assert 0 in e.value.cycle and 1 in e.value.cycle
        assert MARK in str(e.value)

    def test_p2p_check_can_be_skipped(self):
        order = parse_order({0: "0F0 0B0 0F1 0B1", 1: "1F0 1F1 1B0 1B1"})
        assert validate(order, 2, 2, 2, PLACE2, check_p2p=False) == PLACE2


def test_format_grid_layout():
    grid = format_pipeline_order(parse_order({0: "0F0 0B0", 1: "_ 1F0 1B0"}), error_step=1)
    assert grid.splitlines() == [
        "        Rank 0 Rank 1",
        "Step 0: 0F0",
        "Step 1: 0B0    1F0    <-- ERROR HERE",
        "Step 2:        1B0",
    ]
