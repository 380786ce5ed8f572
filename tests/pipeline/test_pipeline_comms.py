"""p2p lowering (add_p2p) and the lock-step deadlock dry run (simulate_p2p)."""

from __future__ import annotations

import pytest

from schedsim.pipeline import (
    DeadlockError,
    PipelineScheduleError,
    add_p2p,
    compute_only,
    format_order,
    generate,
    get_schedule,
    infer_stage_to_rank,
    parse_order,
    simulate_p2p,
    stage_to_rank,
)


class TestAddP2P:
    def test_1f1b_megatron_call_order(self):
        # recv input just before, send output just after (Megatron p2p order)
        lowered = add_p2p(generate("1f1b", 2, 2), {0: 0, 1: 1})
        assert format_order(lowered) == {
            0: "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
            1: "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1",
        }

    def test_1f1b_steady_state_is_send_forward_recv_backward(self):
        lowered = format_order(add_p2p(generate("1f1b", 3, 4), stage_to_rank("1f1b", 3)))
        # rank 1 steady step: F, SEND_F, RECV_B, B, SEND_B, RECV_F, F ...
        assert "1F1 1SEND_F1 1RECV_B0 1B0 1SEND_B0 1RECV_F2 1F2 1SEND_F2 1RECV_B1" in lowered[1]

    def test_v_placement_skips_same_rank_neighbours(self):
        # zbv p=2: stages 1 and 2 both live on rank 1, so 1F -> 2F needs no p2p
        lowered = add_p2p(generate("zbv", 2, 3), stage_to_rank("zbv", 2))
        assert "1SEND_F" not in format_order(lowered)[1]
        assert "2RECV_F" not in format_order(lowered)[1]
        assert format_order(lowered)[1].startswith("1RECV_F0 1F0 2F0 2SEND_F0 ")

    def test_overlapped_pair(self):
        # V placement p=2: rank 0 holds stages 0 and 3
        order = parse_order({0: "(0F1;3B0)OVERLAP_F_B (3F1;0B0)OVERLAP_F_B", 1: ""})
        lowered = add_p2p(order, stage_to_rank("v", 2))
        assert format_order(lowered)[0] == (
            "(0F1;3B0)OVERLAP_F_B 0SEND_F1 3SEND_B0 3RECV_F1 0RECV_B0 (3F1;0B0)OVERLAP_F_B"
        )

    def test_single_rank_has_no_p2p(self):
        lowered = add_p2p(generate("interleaved_1f1b", 1, 2, 3), stage_to_rank("interleaved_1f1b", 1, 3))
        assert lowered == compute_only(generate("interleaved_1f1b", 1, 2, 3))

    def test_rejects_orders_with_comms(self):
        lowered = add_p2p(generate("1f1b", 2, 2), {0: 0, 1: 1})
        with pytest.raises(PipelineScheduleError, match=r"0SEND_F0 is a p2p action; add_p2p takes a compute-only"):
            add_p2p(lowered, {0: 0, 1: 1})

    def test_unplaced_stage(self):
        with pytest.raises(PipelineScheduleError, match=r"stage 1 is not in stage_to_rank"):
            add_p2p(generate("1f1b", 2, 2), {0: 0})


class TestSimulateP2P:
    def test_golden_lockstep_timeline(self):
        timeline = simulate_p2p(add_p2p(generate("1f1b", 2, 2), {0: 0, 1: 1}))
        assert format_order(timeline) == {
            0: "0F0 0SEND_F0 0F1 0SEND_F1 _ _ 0RECV_B0 0B0 _ _ 0RECV_B1 0B1",
            1: "_ _ 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1",
        }

    @pytest.mark.parametrize(
        ("name", "p", "m", "v"),
        [
            ("gpipe", 4, 8, None),
            ("1f1b", 4, 8, None),
            ("interleaved_1f1b", 4, 8, 2),
            ("interleaved_1f1b", 3, 9, 3),
            ("looped_bfs", 3, 4, 2),
            ("zb_h1", 5, 9, None),
            ("interleaved_zb", 4, 8, 2),
            ("zbv", 4, 3, None),
            ("dualpipev", 4, 10, None),
        ],
    )
    def test_generated_schedules_do_not_hang(self, name, p, m, v):
        info = get_schedule(name)
        lowered = add_p2p(generate(name, p, m, v), stage_to_rank(name, p, v))
        timeline = simulate_p2p(lowered, stage_to_rank(name, p, v), info.num_stages(p, v))
        for r in lowered:
            assert [a for a in timeline[r] if a is not None] == lowered[r]

    def test_cross_rank_cycle(self):
        lowered = add_p2p(parse_order({0: "0F0 0B0 0F1 0B1", 1: "1F0 1F1 1B0 1B1"}), {0: 0, 1: 1})
        with pytest.raises(DeadlockError, match=r"over ranks 0 -> 1 -> 0") as e:
            simulate_p2p(lowered)
        assert e.value.cycle == (0, 1)
        assert "which rank 1 only issues after its stalled 1RECV_F1" in str(e.value)
        assert [str(a) for a in e.value.actions] == ["0RECV_B0", "1RECV_F1"]
        assert "Step 4: 0RECV_B0 1RECV_F1 <-- ERROR HERE" in str(e.value)

    def test_recv_without_send_is_not_a_cycle(self):
        order = parse_order({0: "0F0 0SEND_F0", 1: "1RECV_F0 1F0 1RECV_F1 1F1"})
        with pytest.raises(
            PipelineScheduleError, match=r"waits in 1RECV_F1 for 0SEND_F1 on rank 0, which is never issued"
        ) as e:
            simulate_p2p(order, {0: 0, 1: 1})
        assert not isinstance(e.value, DeadlockError)
        assert "<-- ERROR HERE" in str(e.value)

    def test_rank_waiting_for_itself(self):
        order = parse_order({0: "0F0 0SEND_F0 0B0 0RECV_B0", 1: "1RECV_F0 1F0 1B0 1SEND_B0"})
        with pytest.raises(DeadlockError, match=r"rank 0 waits for itself: rank 0 waits in 0B0 for 0RECV_B0") as e:
            simulate_p2p(order, {0: 0, 1: 1})
        assert e.value.cycle == (0,)


def test_infer_stage_to_rank():
    assert infer_stage_to_rank(generate("dualpipev", 2, 4)) == {0: 0, 3: 0, 1: 1, 2: 1}
    with pytest.raises(PipelineScheduleError, match=r"rank 0 also runs stage 0"):
        infer_stage_to_rank(parse_order({0: "0F0", 1: "0B0"}))
