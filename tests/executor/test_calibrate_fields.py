"""Profile fields calibrate derives from its sweeps (issue 8 §3): nccl.p2p_one_way_speedup."""

from __future__ import annotations

from executor.calibrate import p2p_one_way_speedup


def test_one_way_speedup_is_exchange_over_one_way_at_the_largest_common_size() -> None:
    one_way = {1024: 8.0, 2**20: 10.0, 2**26: 200.0}  # the one-way sweep went further
    exchange = {1024: 9.0, 2**20: 16.0}
    assert p2p_one_way_speedup(one_way, exchange) == (1.6, 2**20)


def test_one_way_speedup_is_at_least_one_and_none_without_a_common_size() -> None:
    assert p2p_one_way_speedup({4096: 12.0}, {4096: 10.0}) == (1.0, 4096)  # a slower one-way run is not < 1
    assert p2p_one_way_speedup({4096: 12.0}, {8192: 10.0}) is None
    assert p2p_one_way_speedup({4096: 0.0}, {4096: 10.0}) is None
