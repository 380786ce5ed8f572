"""The aligned start shared by the executor and the hand-written references (executor/clock.py)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from executor.clock import IterationClock, aligned_start_ns

torch = pytest.importorskip("torch")


def test_aligned_start_is_the_latest_clock_plus_the_margin() -> None:
    assert aligned_start_ns([5_000, 9_000, 7_000], 1e-6) == 10_000
    assert aligned_start_ns([0], 0.0) == 0


def _clock_with_peer(peer_offset_ns: int, margin_s: float) -> IterationClock:
    """A 2-rank CPU clock whose all-gather reports the peer's clock ``peer_offset_ns`` after ours."""
    c = IterationClock(torch.device("cpu"), 2, margin_s=margin_s)

    def all_gather(out, mine, group=None):  # type: ignore[no-untyped-def]
        out[0].copy_(mine)
        out[1].fill_(int(mine[0]) + peer_offset_ns)

    c.dist = SimpleNamespace(all_gather=all_gather)
    return c


def test_start_waits_for_the_latest_rank_plus_the_margin() -> None:
    c = _clock_with_peer(3_000_000, 0.001)  # the peer read its clock 3 ms after us
    t0 = time.time_ns()
    anchor = c.start()
    # we leave no earlier than the peer's read + 1 ms, i.e. ≥ 4 ms after our own read
    assert anchor - t0 >= 4_000_000
    assert anchor - t0 < 200_000_000 and c.late_starts == 0


def test_a_rank_past_the_agreed_instant_starts_at_once_and_is_counted_late() -> None:
    c = _clock_with_peer(0, 0.001)
    gather = c.dist.all_gather

    def slow_gather(out, mine, group=None):  # type: ignore[no-untyped-def]
        gather(out, mine)
        time.sleep(0.01)  # the all-gather returned 10 ms after our read: the agreed instant (1 ms) has passed

    c.dist = SimpleNamespace(all_gather=slow_gather)
    t0 = time.time_ns()
    c.start()
    assert time.time_ns() - t0 < 9_000_000 + 10_000_000
    assert c.late_starts == 1


def test_a_start_far_ahead_unsynchronised_clocks_is_capped_and_counted() -> None:
    c = _clock_with_peer(10_000_000_000, 0.001)  # the peer's clock reads 10 s ahead of ours
    t0 = time.time_ns()
    c.start()
    assert time.time_ns() - t0 < 1_000_000_000  # spun at most margin + 50 ms, not 10 s
    assert c.late_starts == 1
